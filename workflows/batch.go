package workflows

import (
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/activities"
)

// DeliveryBatchInput is one batch of an event's recipients.
type DeliveryBatchInput struct {
	Event     fanout.Event
	Priority  fanout.Priority
	BatchNo   int
	AttemptID string
	// Recipients of this batch (at most fanout.MaxBatchSize), or Ref to
	// the batch staged in Redis by the page activity.
	Recipients  []fanout.Recipient
	Ref         *activities.BatchRef `json:",omitempty"`
	Message     fanout.Message
	MaxAttempts int
	Concurrency int
	Timeout     time.Duration
	// Redrive re-delivers dead-lettered recipients of AttemptID; Round
	// names the redrive.
	Redrive bool   `json:",omitempty"`
	Round   string `json:",omitempty"`
}

// DeliveryBatchResult reports the batch's per-recipient outcomes.
type DeliveryBatchResult = activities.DeliverBatchResult

// DeliveryBatch delivers one batch on a delivery task queue. Its activity
// retries with jittered backoff (the activity chooses each delay); recipients
// still failing after MaxAttempts come back in the result's Failures.
func DeliveryBatch(ctx workflow.Context, in DeliveryBatchInput) (DeliveryBatchResult, error) {
	var res DeliveryBatchResult
	err := workflow.ExecuteActivity(deliverContext(ctx, in.Timeout, ""), a.DeliverBatch, activities.DeliverBatchInput{
		Event:       in.Event,
		Priority:    in.Priority,
		AttemptID:   in.AttemptID,
		Redrive:     in.Redrive,
		Round:       in.Round,
		Recipients:  in.Recipients,
		Ref:         in.Ref,
		Message:     in.Message,
		MaxAttempts: in.MaxAttempts,
		Concurrency: in.Concurrency,
	}).Get(ctx, &res)
	return res, err
}

// deliverContext sets the options of the DeliverBatch activity, on taskQueue
// ("" = the workflow's own).
func deliverContext(ctx workflow.Context, timeout time.Duration, taskQueue string) workflow.Context {
	if timeout <= 0 {
		timeout = fanout.DefaultDeliverTimeout
	}
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:           taskQueue,
		StartToCloseTimeout: timeout,
		HeartbeatTimeout:    15 * time.Second, // a killed worker's batch is retried after this
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
