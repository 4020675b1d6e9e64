package activities

import (
	"context"
	"time"

	"go.temporal.io/sdk/activity"

	"github.com/fanout/fanout/activities/gate"
)

// batchGate is the gate (activities/gate) as one attempt of a batch uses
// it: every call is about the batch's event and attempt id. DeliverBatch
// picks it once (attemptGate): the Redis gate, or, without one, noGate,
// which admits every recipient, marks nothing and counts failures by the
// activity's attempt.
type batchGate interface {
	// acquire gives each recipient's verdict (deliver, skip, ...).
	acquire(ctx context.Context, ids []string, redrive bool) ([]gate.Verdict, error)
	// markSending marks an at-most-once recipient sending and reports
	// whether to call it.
	markSending(ctx context.Context, id string) (bool, error)
	markDelivered(ctx context.Context, ids ...string) error
	// countFailures counts one more failed try of each and returns the
	// counts (round: a redrive's, counted afresh); with the Redis gate it
	// records each one's last error (errs[i], lastError) in the same
	// pipeline.
	countFailures(ctx context.Context, round string, ids []string, errs []error) ([]int, error)
	// unsend returns at-most-once recipients that were not sent to the
	// attempt id, to be retried.
	unsend(ctx context.Context, ids ...string) error
	markUnconfirmed(ctx context.Context, ids ...string) error
	markDeadLettered(ctx context.Context, ids ...string) error
}

// attemptGate is the gate of in's attempt.
func (a *Activities) attemptGate(in DeliverBatchInput) batchGate {
	if a.Gate == nil {
		return noGate{}
	}
	return &redisGate{g: a.Gate, event: eventKey(in.Event), attempt: in.AttemptID, round: in.Round, resend: in.Resend}
}

// redisGate is the Redis gate, bound to one batch attempt.
type redisGate struct {
	g                     *gate.Gate
	event, attempt, round string
	// resend: the batch is a resend (DeliverBatchInput.Resend), which
	// delivers again what other attempts delivered (gate.AcquireResend).
	resend bool
	// failed are the failed tries counted before this attempt of the
	// recipients it delivers again (set by acquire, read by the flusher
	// after: the delivered mark records the tries). nil on a first try.
	failed map[string]int
}

func (r *redisGate) acquire(ctx context.Context, ids []string, redrive bool) ([]gate.Verdict, error) {
	var vs []gate.Verdict
	var err error
	if r.resend {
		vs, err = r.g.AcquireResend(ctx, r.event, r.attempt, ids)
	} else {
		vs, err = r.g.Acquire(ctx, r.event, r.attempt, ids, redrive)
	}
	if err != nil {
		return nil, err
	}
	// Only a recipient this attempt held before can have failed tries to
	// record: a retry's, never a first try's (no round trip more then).
	var again []string
	for i, v := range vs {
		if v == gate.Redeliver || v == gate.Unconfirmed {
			again = append(again, ids[i])
		}
	}
	if len(again) > 0 {
		counts, err := r.g.FailureCounts(ctx, r.event, r.attempt, r.round, again)
		if err != nil {
			return nil, err
		}
		r.failed = make(map[string]int, len(again))
		for i, n := range counts {
			if n > 0 {
				r.failed[again[i]] = n
			}
		}
	}
	return vs, nil
}

// tries is a delivered recipient's tries, the successful one included.
func (r *redisGate) tries(id string) int { return r.failed[id] + 1 }

func (r *redisGate) markSending(ctx context.Context, id string) (bool, error) {
	return r.g.MarkSending(ctx, r.event, r.attempt, id)
}

func (r *redisGate) markDelivered(ctx context.Context, ids ...string) error {
	var tries func(string) int
	if r.failed != nil {
		tries = r.tries
	}
	return r.g.MarkDeliveredAt(ctx, r.event, r.attempt, time.Now(), tries, ids...)
}

func (r *redisGate) countFailures(ctx context.Context, round string, ids []string, errs []error) ([]int, error) {
	var last []gate.LastError
	if len(errs) == len(ids) {
		now := time.Now()
		last = make([]gate.LastError, len(errs))
		for i, err := range errs {
			last[i] = lastError(err, now)
		}
	}
	return r.g.CountFailed(ctx, r.event, r.attempt, round, ids, last)
}

func (r *redisGate) unsend(ctx context.Context, ids ...string) error {
	return r.g.Unsend(ctx, r.event, r.attempt, ids...)
}

func (r *redisGate) markUnconfirmed(ctx context.Context, ids ...string) error {
	return r.g.MarkUnconfirmed(ctx, r.event, r.attempt, ids...)
}

func (r *redisGate) markDeadLettered(ctx context.Context, ids ...string) error {
	return r.g.MarkDeadLettered(ctx, r.event, r.attempt, ids...)
}

// noGate is a worker without Redis: duplicates are not suppressed (only
// for measuring what the gate costs; at most once refuses it).
type noGate struct{}

func (noGate) acquire(_ context.Context, ids []string, _ bool) ([]gate.Verdict, error) {
	return make([]gate.Verdict, len(ids)), nil // gate.Deliver each
}

func (noGate) markSending(context.Context, string) (bool, error) { return true, nil }

func (noGate) markDelivered(context.Context, ...string) error { return nil }

func (noGate) countFailures(ctx context.Context, _ string, ids []string, _ []error) ([]int, error) {
	counts := make([]int, len(ids))
	attempt := int(activity.GetInfo(ctx).Attempt)
	for i := range counts {
		counts[i] = attempt
	}
	return counts, nil
}

func (noGate) unsend(context.Context, ...string) error { return nil }

func (noGate) markUnconfirmed(context.Context, ...string) error { return nil }

func (noGate) markDeadLettered(context.Context, ...string) error { return nil }
