package vocab

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/temporal"
)

// Search attributes: the bridge sets type, priority and status at start; the
// Fanout workflow upserts the rest. The dev stack registers them; a real
// namespace needs them registered once (`starter setup`).
const (
	SearchAttrEventType = "FanoutEventType"
	SearchAttrPriority  = "FanoutPriority"
	SearchAttrStatus    = "FanoutStatus"
	// Int attributes (SQL visibility has three custom Int slots; these are
	// the counts an operator filters on).
	SearchAttrFound     = "FanoutFound"
	SearchAttrDelivered = "FanoutDelivered"
	SearchAttrFailed    = "FanoutFailed"
	// SearchAttrScheduledFor is the time a scheduled event is to be
	// delivered (Datetime; set only on scheduled events).
	SearchAttrScheduledFor = "FanoutScheduledFor"
	// SearchAttrExpired counts the recipients of an expired event that
	// were not delivered (set only on events that expired). Double: SQL
	// visibility's three custom Int slots are the counts above.
	SearchAttrExpired = "FanoutExpired"
)

// Typed keys of the search attributes.
var (
	EventTypeKey    = temporal.NewSearchAttributeKeyKeyword(SearchAttrEventType)
	PriorityKey     = temporal.NewSearchAttributeKeyKeyword(SearchAttrPriority)
	StatusKey       = temporal.NewSearchAttributeKeyKeyword(SearchAttrStatus)
	FoundKey        = temporal.NewSearchAttributeKeyInt64(SearchAttrFound)
	DeliveredKey    = temporal.NewSearchAttributeKeyInt64(SearchAttrDelivered)
	FailedKey       = temporal.NewSearchAttributeKeyInt64(SearchAttrFailed)
	ScheduledForKey = temporal.NewSearchAttributeKeyTime(SearchAttrScheduledFor)
	ExpiredKey      = temporal.NewSearchAttributeKeyFloat64(SearchAttrExpired)
)

// Attribute is a search attribute and its type.
type Attribute struct {
	Name string
	Type enumspb.IndexedValueType
}

// SearchAttributes are the attributes fanout sets, to register once per
// namespace (RegisterSearchAttributes).
func SearchAttributes() []Attribute {
	kw, n := enumspb.INDEXED_VALUE_TYPE_KEYWORD, enumspb.INDEXED_VALUE_TYPE_INT
	return []Attribute{
		{SearchAttrEventType, kw}, {SearchAttrPriority, kw}, {SearchAttrStatus, kw},
		{SearchAttrFound, n}, {SearchAttrDelivered, n}, {SearchAttrFailed, n},
		{SearchAttrScheduledFor, enumspb.INDEXED_VALUE_TYPE_DATETIME},
		{SearchAttrExpired, enumspb.INDEXED_VALUE_TYPE_DOUBLE},
	}
}

// Outcome says what Ensure did with one attribute.
type Outcome struct {
	Attribute
	// Added is true when Ensure registered it, false when it was already
	// registered with this type.
	Added bool
}

// RegisterSearchAttributes registers fanout's SearchAttributes on namespace.
func RegisterSearchAttributes(ctx context.Context, op operatorservice.OperatorServiceClient, namespace string) ([]Outcome, error) {
	return Ensure(ctx, op, namespace, SearchAttributes())
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
