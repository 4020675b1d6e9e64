package activities

import (
	"context"
	"errors"
	"fmt"
	"net"

	"go.temporal.io/sdk/temporal"

	"github.com/fanout/fanout"
)

// At-most-once delivery (fanout.AtMostOnce). DeliverBatch follows the type's
// TypeOptions.Semantics, read from the registry at each attempt. At most
// once, the gate (activities/gate) is used like this:
//
//   - right before a recipient's call, its key moves from the attempt id to a
//     sending mark (gate.MarkSending, atomic): no mark, no call. A mark that
//     fails (Redis unreachable) stops the batch; the recipient was not called
//     and the retry calls it.
//   - after a successful call the delivered mark replaces it (the same
//     flusher as at least once);
//   - a failed call is retried only when its error proves the destination
//     never got it (notSent: fanout.NotSent, which includes a delivery its
//     open breaker rejected, or a dial error: no connection was made); its
//     key goes back to the attempt id (gate.Unsend). Any other
//     failure (a timeout, a 5xx, a reset connection, a 429) may have been
//     acted on, so the recipient is given up at once to the deliveries DLQ
//     with ReasonNotRetriedAtMostOnce (a permanent one keeps its own error);
//   - a later try of the batch that finds its own sending mark (the worker
//     died mid-call, or the delivered mark was lost) does not call it again:
//     it counts it Unconfirmed and gives it up to the deliveries DLQ with
//     ReasonUnconfirmedAtMostOnce, marked unconfirmed in the gate. An
//     operator who prefers a possible duplicate to a miss redrives it.
//
// So at most once, a recipient is called at most once per attempt id unless
// an operator redrives it, and what a crash loses is only the calls in flight
// at that moment: at most the worker's budget of calls (activities.Calls).

// Reasons that start the error of an at-most-once recipient given up.
const (
	// ReasonUnconfirmedAtMostOnce: found marked sending by a later try of
	// its batch: called, or maybe called, with no known outcome.
	ReasonUnconfirmedAtMostOnce = "unconfirmed_at_most_once"
	// ReasonNotRetriedAtMostOnce: its call failed in a way that does not
	// prove the destination never got it.
	ReasonNotRetriedAtMostOnce = "not_retried_at_most_once"
)

// errNotCalled is the outcome of a recipient an at-most-once batch did not
// call because its key no longer held the attempt id when the call was due:
// another execution of the same attempt (an activity timed out while its
// first execution still ran) marked it first. Counted as a duplicate.
var errNotCalled = errors.New("not called: another execution of the attempt holds the recipient")

// useSemantics records the type's delivery guarantee in the batch and, at
// most once, in the context its handler's Deliver gets (fanout.SemanticsOf).
// At most once needs the gate.
func (a *Activities) useSemantics(ctx context.Context, in *DeliverBatchInput, opts fanout.TypeOptions) (context.Context, error) {
	if opts.Semantics != fanout.AtMostOnce {
		return ctx, nil
	}
	if a.Gate == nil {
		return ctx, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("event type %q is at-most-once, which needs the Redis gate (FANOUT_DEDUP=true)", in.Event.Type), ErrAtMostOnceNoGate, nil)
	}
	in.semantics = fanout.AtMostOnce
	return fanout.WithSemantics(ctx, fanout.AtMostOnce), nil
}

// ErrAtMostOnceNoGate is the error type of an at-most-once batch on a worker
// without the gate.
const ErrAtMostOnceNoGate = "AtMostOnceWithoutGate"

func (in DeliverBatchInput) atMostOnce() bool { return in.semantics == fanout.AtMostOnce }

// markSending marks the recipient sending before an at-most-once call and
// reports whether to call it; at least once, it always may.
// in is a pointer so that at least once the call copies nothing.
func (a *Activities) markSending(ctx context.Context, in *DeliverBatchInput, recipientID string) (bool, error) {
	if !in.atMostOnce() {
		return true, nil
	}
	return in.gate.markSending(ctx, recipientID)
}

// notSent reports whether a failed call provably never reached the
// destination: marked fanout.NotSent, or a dial error (net/http's client
// returns it when no connection could be made: refused, unreachable, no such
// host, dial timeout).
func notSent(err error) bool {
	if fanout.IsNotSent(err) {
		return true
	}
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// giveUpUnconfirmed dead-letters the recipients an at-most-once batch found
// marked sending by an earlier try, marks them unconfirmed in the gate and
// counts them in res (Failed, DeadLettered when published, Unconfirmed).
func (a *Activities) giveUpUnconfirmed(ctx context.Context, in DeliverBatchInput, rs []fanout.Recipient, res *DeliverBatchResult) error {
	if len(rs) == 0 {
		return nil
	}
	fs := make([]Failure, len(rs))
	for i, r := range rs {
		fs[i] = Failure{Recipient: r, Attempts: 1, Error: ReasonUnconfirmedAtMostOnce +
			": an earlier try of this batch called it, or was about to, and stopped before its outcome was recorded; not called again (at-most-once)"}
	}
	err := a.publishDeadLetters(ctx, in, fs, func(chunk []Failure) error {
		ids := make([]string, len(chunk))
		for i, f := range chunk {
			ids[i] = f.Recipient.ID
		}
		return in.gate.markUnconfirmed(ctx, ids...)
	})
	if err != nil {
		return err
	}
	res.addGivenUp(fs, a.DeadLetters != nil)
	res.Unconfirmed += len(fs)
	if a.Logger != nil {
		a.Logger.WarnContext(ctx, "at-most-once: recipients left unconfirmed by an earlier try are dead-lettered, not called again",
			"event", in.Event.ID, "attempt_id", in.AttemptID, "unconfirmed", len(fs))
	}
	return nil
}

// atMostOnceFailures splits the failed outcomes of an at-most-once batch:
// those whose error proves they were not sent stay to be retried (their
// keys go back to the attempt id first), the others are given up now. At
// least once it returns failed unchanged.
func (a *Activities) atMostOnceFailures(ctx context.Context, in DeliverBatchInput, failed []outcome) (retryable []outcome, spent []Failure, err error) {
	if !in.atMostOnce() || len(failed) == 0 {
		return failed, nil, nil
	}
	var unsend []string
	for _, o := range failed {
		switch {
		case fanout.IsPermanent(o.err):
			retryable = append(retryable, o) // settle gives it up with its own error
		case notSent(o.err):
			retryable = append(retryable, o)
			unsend = append(unsend, o.r.ID)
		default:
			spent = append(spent, Failure{Recipient: o.r, Attempts: o.failures,
				Error: clip(ReasonNotRetriedAtMostOnce+": "+o.err.Error(), 1024)})
		}
	}
	if err := in.gate.unsend(ctx, unsend...); err != nil {
		// Left marked sending: the retry gives them up as unconfirmed.
		return nil, nil, err
	}
	return retryable, spent, nil
}
