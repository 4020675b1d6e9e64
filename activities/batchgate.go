package activities

import (
	"context"

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
	// counts (round: a redrive's, counted afresh).
	countFailures(ctx context.Context, round string, ids []string) ([]int, error)
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
	return redisGate{g: a.Gate, event: eventKey(in.Event), attempt: in.AttemptID}
}

// redisGate is the Redis gate, bound to one batch attempt.
type redisGate struct {
	g              *gate.Gate
	event, attempt string
}

func (r redisGate) acquire(ctx context.Context, ids []string, redrive bool) ([]gate.Verdict, error) {
	return r.g.Acquire(ctx, r.event, r.attempt, ids, redrive)
}

func (r redisGate) markSending(ctx context.Context, id string) (bool, error) {
	return r.g.MarkSending(ctx, r.event, r.attempt, id)
}

func (r redisGate) markDelivered(ctx context.Context, ids ...string) error {
	return r.g.MarkDelivered(ctx, r.event, r.attempt, ids...)
}

func (r redisGate) countFailures(ctx context.Context, round string, ids []string) ([]int, error) {
	return r.g.CountFailures(ctx, r.event, r.attempt, round, ids)
}

func (r redisGate) unsend(ctx context.Context, ids ...string) error {
	return r.g.Unsend(ctx, r.event, r.attempt, ids...)
}

func (r redisGate) markUnconfirmed(ctx context.Context, ids ...string) error {
	return r.g.MarkUnconfirmed(ctx, r.event, r.attempt, ids...)
}

func (r redisGate) markDeadLettered(ctx context.Context, ids ...string) error {
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

func (noGate) countFailures(ctx context.Context, _ string, ids []string) ([]int, error) {
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
