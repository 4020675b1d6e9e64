package fanout

import "fmt"

// Task queues. Event processing (the Fanout workflow and its paging
// activities) runs on EventsTaskQueue; delivery batches run on the task queue
// of their priority, so each pool scales separately.
const (
	EventsTaskQueue         = "fanout-events"
	deliveryTaskQueuePrefix = "fanout-delivery-"
)

// DeliveryTaskQueue is the task queue of delivery batches of priority p.
func DeliveryTaskQueue(p Priority) string { return deliveryTaskQueuePrefix + string(p) }

// WorkflowID is the Fanout workflow id of an event: readable, and the same for
// every delivery of the event so that Temporal rejects a second fan-out.
func WorkflowID(eventType, eventID string) string {
	return fmt.Sprintf("fanout/%s/%s", eventType, eventID)
}

// BatchWorkflowID is the id of the n-th DeliveryBatch child of an event.
func BatchWorkflowID(eventWorkflowID string, n int) string {
	return fmt.Sprintf("%s/batch/%d", eventWorkflowID, n)
}

// AttemptID is the attempt id of the n-th batch of an event: deterministic
// for (event, batch), so retries and resets of that batch present the same id
// and a different batch holding the same recipient presents another.
func AttemptID(eventID string, n int) string { return fmt.Sprintf("%s#%d", eventID, n) }

// Kafka topics used by default.
const (
	DefaultEventsTopic    = "fanout-events"
	DefaultEventsDLQTopic = "fanout-events-dlq"
)

// Search attributes the Fanout workflow sets; the dev stack registers them and
// a real cluster needs them registered once (see README).
const (
	SearchAttrEventType = "FanoutEventType"
	SearchAttrPriority  = "FanoutPriority"
	SearchAttrStatus    = "FanoutStatus"
	// Int attributes (SQL visibility has three custom Int slots; these are
	// the counts an operator filters on).
	SearchAttrFound     = "FanoutFound"
	SearchAttrDelivered = "FanoutDelivered"
	SearchAttrFailed    = "FanoutFailed"
)

// SearchAttribute is one of fanout's search attributes and its type (as
// the temporal CLI names it).
type SearchAttribute struct{ Name, Type string }

// SearchAttributes are the attributes fanout sets, to register once per
// namespace (`starter setup`; the dev stack registers them at start).
var SearchAttributes = []SearchAttribute{
	{SearchAttrEventType, "Keyword"}, {SearchAttrPriority, "Keyword"}, {SearchAttrStatus, "Keyword"},
	{SearchAttrFound, "Int"}, {SearchAttrDelivered, "Int"}, {SearchAttrFailed, "Int"},
}

// Workflow status values of SearchAttrStatus.
const (
	StatusRunning   = "running"
	StatusPaused    = "paused"
	StatusCompleted = "completed"
	// StatusCompletedWithFailures: paging finished, some recipients failed.
	StatusCompletedWithFailures = "completed_with_failures"
	StatusFailed                = "failed"
	StatusCanceled              = "canceled"
)

// Names of the workflow query and of the workflow types.
const (
	ProgressQuery         = "progress"
	FanoutWorkflowName    = "Fanout"
	DeliveryBatchWorkflow = "DeliveryBatch"
)

// RedriveWorkflowID is the id of the n-th DeliveryBatch of a redrive round
// of one batch's dead letters.
func RedriveWorkflowID(eventWorkflowID, attemptID, round string, n int) string {
	return fmt.Sprintf("%s/redrive/%s/%s/%d", eventWorkflowID, round, attemptID, n)
}
