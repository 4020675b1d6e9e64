package starter

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/contrib/envconfig"

	"github.com/fanout/fanout/internal/backoff"
	"github.com/fanout/fanout/workflows/vocab"
)

// setupBackoff spaces the bridge's reads of the namespace's search
// attributes while it waits for `starter setup`: from 1 s up to 15 s, so
// events start within seconds of the registration and a bridge left waiting
// costs one cheap call per 15 s.
var setupBackoff = backoff.Policy{Initial: time.Second, Max: 15 * time.Second, Jitter: 0.5}

// TemporalNamespace is the namespace the TEMPORAL_* environment (or its
// profile file) names, as config.DialTemporal connects to it; "default"
// when none is named.
func TemporalNamespace() (string, error) {
	opts, err := envconfig.LoadDefaultClientOptions()
	if err != nil {
		return "", fmt.Errorf("temporal config (TEMPORAL_*): %w", err)
	}
	return cmp.Or(opts.Namespace, client.DefaultNamespace), nil
}

// MissingSearchAttributes lists fanout's search attributes
// (vocab.SearchAttributes) that namespace lacks, as "Name (Type)", and
// those it holds with another type, as "Name (Type, registered as Other)".
func MissingSearchAttributes(ctx context.Context, op operatorservice.OperatorServiceClient, namespace string) ([]string, error) {
	have, err := op.ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: namespace})
	if err != nil {
		return nil, fmt.Errorf("list search attributes of namespace %q: %w", namespace, err)
	}
	var missing []string
	for _, a := range vocab.SearchAttributes() {
		switch t, ok := have.GetCustomAttributes()[a.Name]; {
		case !ok:
			missing = append(missing, fmt.Sprintf("%s (%s)", a.Name, vocab.TypeName(a.Type)))
		case t != a.Type:
			missing = append(missing, fmt.Sprintf("%s (%s, registered as %s)", a.Name, vocab.TypeName(a.Type), vocab.TypeName(t)))
		}
	}
	return missing, nil
}

// namesSearchAttribute reports whether Temporal refused a start for one of
// fanout's search attributes ("... no mapping defined for search attribute
// FanoutStatus", "search attribute FanoutStatus is not defined"): the
// namespace lacks it (`starter setup` has not run) or the server has not
// seen its registration yet (servers cache them). Either way the start
// succeeds once it does; the event is not bad. Only the server's message
// is read, and "search attribute " and the name must be adjacent: event
// ids and types hold no spaces, so no event can pass for one.
func namesSearchAttribute(err error) bool {
	var ia *serviceerror.InvalidArgument
	if !errors.As(err, &ia) {
		return false
	}
	for _, a := range vocab.SearchAttributes() {
		if strings.Contains(ia.Message, "search attribute "+a.Name) {
			return true
		}
	}
	return false
}

// awaitSetup waits, reading the namespace's search attributes with
// setupBackoff, until it has all of fanout's, logging which are missing. It
// reports whether it had to wait. Lanes wait one at a time, so a namespace
// without them is read by one lane, and logged once per read. It returns
// ctx's error when ctx ends first; an error reading the attributes is
// logged and returned (the caller goes on as if none were missing).
func (b *Bridge) awaitSetup(ctx context.Context) (waited bool, _ error) {
	select {
	case b.setupTurn <- struct{}{}:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	defer func() { <-b.setupTurn }()
	for attempt := 1; ; attempt++ {
		lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		missing, err := MissingSearchAttributes(lctx, b.tc.OperatorService(), b.namespace)
		cancel()
		switch {
		case ctx.Err() != nil:
			return waited, ctx.Err()
		case err != nil:
			b.log.Warn("cannot read the namespace's search attributes; going on without checking them", "namespace", b.namespace, "err", err)
			return waited, err
		case len(missing) == 0:
			if waited {
				b.log.Info("the namespace has fanout's search attributes now; starting events", "namespace", b.namespace)
			}
			return waited, nil
		}
		waited = true
		d := setupBackoff.Delay(attempt, 0, nil)
		b.log.Warn("the namespace lacks fanout's search attributes: not starting events (nothing is dead-lettered or committed) until `starter setup` registers them",
			"namespace", b.namespace, "missing", missing, "retry_in", d)
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return waited, ctx.Err()
		}
	}
}
