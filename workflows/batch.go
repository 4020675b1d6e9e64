package workflows

import (
	"cmp"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/activities"
)

// DeliveryBatchInput is one batch of an event's recipients: the input of
// its DeliverBatch activity, numbered, with the activity's timeout (the
// embedded fields are flattened in JSON).
type DeliveryBatchInput struct {
	activities.DeliverBatchInput
	BatchNo int
	Timeout time.Duration
	// CallTimeout is the type's (fanout.TypeOptions.CallTimeout): the
	// activity's heartbeat timeout derives from it. 0 (redrives):
	// fanout.DefaultCallTimeout.
	CallTimeout time.Duration `json:",omitempty"`
}

// DeliveryBatchResult reports the batch's per-recipient outcomes.
type DeliveryBatchResult = activities.DeliverBatchResult

// DeliveryBatch delivers one batch on a delivery task queue. Its activity
// retries with jittered backoff (the activity chooses each delay); recipients
// still failing after MaxAttempts come back in the result's Failures.
func DeliveryBatch(ctx workflow.Context, in DeliveryBatchInput) (DeliveryBatchResult, error) {
	var res DeliveryBatchResult
	err := workflow.ExecuteActivity(deliverContext(ctx, in.Timeout, in.CallTimeout, ""), a.DeliverBatch, in.DeliverBatchInput).Get(ctx, &res)
	return res, err
}

// deliverContext sets the options of the DeliverBatch activity, on taskQueue
// ("" = the workflow's own), with attempts of timeout and calls of
// callTimeout (0: their defaults).
func deliverContext(ctx workflow.Context, timeout, callTimeout time.Duration, taskQueue string) workflow.Context {
	if timeout <= 0 {
		timeout = fanout.DefaultDeliverTimeout
	}
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:           taskQueue,
		StartToCloseTimeout: timeout,
		// The child's run has the same bound; an event's one batch run
		// without a child has only this one.
		ScheduleToCloseTimeout: batchRunTimeout,
		// A killed worker's batch is retried after this. The batch
		// heartbeats between calls, so a call may hold its heartbeat for
		// the call timeout.
		HeartbeatTimeout: cmp.Or(callTimeout, fanout.DefaultCallTimeout) + fanout.CallSlack,
		RetryPolicy: &temporal.RetryPolicy{
			// DeliverBatch sets the next delay itself (backoff with jitter,
			// Retry-After); these apply to crashes and Redis outages, which
			// are retried until they pass.
			InitialInterval:    time.Second,
			BackoffCoefficient: 2,
			MaximumInterval:    30 * time.Second,
			MaximumAttempts:    0,
		},
	})
}

// batchRunTimeout bounds a delivery batch end to end, retries included:
// the DeliveryBatch child's run, and the one batch of an event that runs
// as an activity without a child (its schedule-to-close). A batch still
// retrying then (a destination limit or breaker that never lets it
// finish) fails, and its recipients are dead-lettered with the reason.
const batchRunTimeout = 24 * time.Hour
