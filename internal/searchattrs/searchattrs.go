// Package searchattrs registers the search attributes the Fanout workflow
// sets (FanoutEventType, FanoutPriority, FanoutStatus, FanoutFound,
// FanoutDelivered, FanoutFailed) on a Temporal namespace, idempotently.
package searchattrs

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/serviceerror"

	"github.com/fanout/fanout"
)

// Attribute is a search attribute and its type.
type Attribute struct {
	Name string
	Type enumspb.IndexedValueType
}

// Fanout returns fanout's search attributes (fanout.SearchAttributes).
func Fanout() []Attribute {
	out := make([]Attribute, 0, len(fanout.SearchAttributes))
	for _, sa := range fanout.SearchAttributes {
		t, err := enumspb.IndexedValueTypeFromString(sa.Type)
		if err != nil {
			panic(fmt.Sprintf("search attribute %s: %v", sa.Name, err))
		}
		out = append(out, Attribute{Name: sa.Name, Type: t})
	}
	return out
}

// Outcome says what Ensure did with one attribute.
type Outcome struct {
	Attribute
	// Added is true when Ensure registered it, false when it was already
	// registered with this type.
	Added bool
}

// Ensure registers the attributes missing from namespace and keeps the
// ones already registered with the same type. An attribute registered with
// another type, or clashing with a system attribute, is an error (nothing is
// added then).
func Ensure(ctx context.Context, op operatorservice.OperatorServiceClient, namespace string, attrs []Attribute) ([]Outcome, error) {
	have, err := op.ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: namespace})
	if err != nil {
		return nil, fmt.Errorf("list search attributes of namespace %q: %w", namespace, err)
	}
	var conflicts []error
	missing := map[string]enumspb.IndexedValueType{}
	out := make([]Outcome, 0, len(attrs))
	for _, a := range attrs {
		if t, ok := have.GetSystemAttributes()[a.Name]; ok {
			conflicts = append(conflicts, fmt.Errorf("%s is a system search attribute (%s)", a.Name, TypeName(t)))
			continue
		}
		t, ok := have.GetCustomAttributes()[a.Name]
		switch {
		case !ok:
			missing[a.Name] = a.Type
			out = append(out, Outcome{Attribute: a, Added: true})
		case t != a.Type:
			conflicts = append(conflicts, fmt.Errorf("%s is registered as %s, fanout needs %s (remove it with `temporal operator search-attribute remove` first)", a.Name, TypeName(t), TypeName(a.Type)))
		default:
			out = append(out, Outcome{Attribute: a})
		}
	}
	if len(conflicts) > 0 {
		return nil, fmt.Errorf("namespace %q: %w", namespace, errors.Join(conflicts...))
	}
	if len(missing) == 0 {
		return out, nil
	}
	_, err = op.AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{Namespace: namespace, SearchAttributes: missing})
	var exists *serviceerror.AlreadyExists
	if err != nil && !errors.As(err, &exists) {
		return nil, fmt.Errorf("add search attributes %v to namespace %q: %w", names(missing), namespace, err)
	}
	// Someone may have added some meanwhile (AlreadyExists); either way,
	// check that every attribute is now there with its type.
	return out, verify(ctx, op, namespace, attrs)
}

func verify(ctx context.Context, op operatorservice.OperatorServiceClient, namespace string, attrs []Attribute) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		have, err := op.ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: namespace})
		if err != nil {
			return fmt.Errorf("list search attributes of namespace %q: %w", namespace, err)
		}
		var bad []string
		for _, a := range attrs {
			if t, ok := have.GetCustomAttributes()[a.Name]; !ok || t != a.Type {
				bad = append(bad, fmt.Sprintf("%s (%s)", a.Name, TypeName(a.Type)))
			}
		}
		if len(bad) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("namespace %q: still missing after adding: %v", namespace, bad)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// TypeName is the short name of a type ("Keyword" for
// INDEXED_VALUE_TYPE_KEYWORD), as `temporal operator search-attribute create
// --type` takes it.
func TypeName(t enumspb.IndexedValueType) string {
	for k, v := range enumspb.IndexedValueType_shorthandValue {
		if v == int32(t) {
			return k
		}
	}
	return t.String()
}

func names(m map[string]enumspb.IndexedValueType) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
