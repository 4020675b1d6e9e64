package fanout

import (
	"context"
	"errors"
)

type notSentError struct{ err error }

func (e *notSentError) Error() string { return "not sent: " + e.err.Error() }
func (e *notSentError) Unwrap() error { return e.err }

// NotSent marks a delivery error that proves the destination never got the
// call (the connection was refused or could not be made; the provider's
// client rejected the call before sending it). It matters only to an
// AtMostOnce type: such a failure is retried like any transient one, while
// every other failure of an at-most-once call is given up at once (the
// destination may have acted on it). An at-least-once type retries either.
func NotSent(err error) error {
	if err == nil {
		return nil
	}
	return &notSentError{err}
}

// IsNotSent reports whether err was marked with NotSent.
func IsNotSent(err error) bool {
	var n *notSentError
	return errors.As(err, &n)
}

type semanticsKey struct{}

// WithSemantics returns ctx carrying the delivery guarantee of the call
// being made; the DeliverBatch activity passes it to Handler.Deliver.
func WithSemantics(ctx context.Context, s Semantics) context.Context {
	return context.WithValue(ctx, semanticsKey{}, s)
}

// SemanticsOf returns the delivery guarantee Deliver is called under:
// AtMostOnce or AtLeastOnce (also when ctx carries none). A handler whose
// client may repeat a call on its own (an HTTP transport replaying a request
// on a reused connection) turns that off under AtMostOnce.
func SemanticsOf(ctx context.Context) Semantics {
	if s, _ := ctx.Value(semanticsKey{}).(Semantics); s == AtMostOnce {
		return AtMostOnce
	}
	return AtLeastOnce
}
