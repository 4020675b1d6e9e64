// Package vocab is the vocabulary of fanout's workflows, defined once and
// shared by the workflows, the activities, the starter, the workers, the
// operator tools and the tests: task queues, workflow, batch and attempt ids,
// workflow type, query and update names, statuses, and the search attributes
// (names, typed keys and their registration on a namespace).
//
// It is a leaf: it imports only the root fanout package and Temporal's, so
// that activities (which need the attempt ids) can import it without a cycle
// through the workflows package.
package vocab

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/fanout/fanout"
)

// Task queues. Event processing (the Fanout workflow and its paging
// activities) runs on EventsTaskQueue; delivery batches run on the task queues
// of their priority, so each pool scales separately. High and normal have
// two: DeliveryTaskQueue for batches of up to a type's BatchSize, and
// LargeDeliveryTaskQueue for the page-sized batches of events that have
// filled their window. The workers of a priority serve both. Low has one:
// its few batch slots are what keeps a huge low event from loading the
// deployment, so its pages share them with its small batches.
const (
	EventsTaskQueue         = "fanout-events"
	deliveryTaskQueuePrefix = "fanout-delivery-"
	largeTaskQueueSuffix    = "-large"
)

// DeliveryTaskQueue is the task queue of delivery batches of priority p.
func DeliveryTaskQueue(p fanout.Priority) string { return deliveryTaskQueuePrefix + string(p) }

// LargeDeliveryTaskQueue is the task queue of the large batches of priority
// p (more recipients than the type's BatchSize, TypeOptions.LargeBatchSize):
// a queue of their own for high and normal, which gives them their own
// batch slots on a worker (a small event's batch, or a big event's first
// ones, never wait for a slot held by a big event's page, however many of
// those are queued); low's delivery queue for low.
func LargeDeliveryTaskQueue(p fanout.Priority) string {
	if p == fanout.PriorityLow {
		return DeliveryTaskQueue(p)
	}
	return DeliveryTaskQueue(p) + largeTaskQueueSuffix
}

// IsLargeDeliveryTaskQueue reports whether tq is a large-batch queue.
func IsLargeDeliveryTaskQueue(tq string) bool {
	return strings.HasPrefix(tq, deliveryTaskQueuePrefix) && strings.HasSuffix(tq, largeTaskQueueSuffix)
}

// Queue names: how operators name the task queues a worker process serves
// (FANOUT_QUEUES, the deployment's one Deployment per queue).
const QueueEvents = "events"

// Queues lists every queue name: events, then each priority.
func Queues() []string {
	out := []string{QueueEvents}
	for _, p := range fanout.Priorities {
		out = append(out, string(p))
	}
	return out
}

// TaskQueues maps a queue name ("events", "high", "normal", "low") to the
// task queues its workers serve: the events queue, or a priority's
// delivery queue and large-batch queue (low: one).
func TaskQueues(queue string) ([]string, error) {
	if queue == QueueEvents {
		return []string{EventsTaskQueue}, nil
	}
	p, err := fanout.ParsePriority(queue)
	if err != nil {
		return nil, fmt.Errorf("queue %q: want %s or a priority: %w", queue, QueueEvents, err)
	}
	if large := LargeDeliveryTaskQueue(p); large != DeliveryTaskQueue(p) {
		return []string{DeliveryTaskQueue(p), large}, nil
	}
	return []string{DeliveryTaskQueue(p)}, nil
}

// WorkflowID is the Fanout workflow id of an event: readable, and the same for
// every delivery of the event so that Temporal rejects a second fan-out.
func WorkflowID(eventType, eventID string) string {
	return fmt.Sprintf("fanout/%s/%s", eventType, eventID)
}

// BatchWorkflowID is the id of the n-th DeliveryBatch child of an event.
func BatchWorkflowID(eventWorkflowID string, n int) string {
	return fmt.Sprintf("%s/batch/%d", eventWorkflowID, n)
}

// RedriveWorkflowID is the id of the n-th DeliveryBatch of a redrive round
// of one batch's dead letters.
func RedriveWorkflowID(eventWorkflowID, attemptID, round string, n int) string {
	return fmt.Sprintf("%s/redrive/%s/%s/%d", eventWorkflowID, round, attemptID, n)
}

// ResendWorkflowID is the id of the DeliveryBatch of the resend named
// name (starter resend) of an event's recipients.
func ResendWorkflowID(eventWorkflowID, name string) string {
	return eventWorkflowID + "/resend/" + name
}

// resendMark starts the batch part of a resend's attempt id.
const resendMark = "resend-"

// ResendAttemptID is the attempt id of the resend named name: its own, so
// the gate tells its deliveries from the event's batches'.
func ResendAttemptID(eventType, eventID, name string) string {
	return EventKey(eventType, eventID) + "#" + resendMark + name
}

// ParseAttemptID reads an attempt id of the event (eventType, eventID):
// the batch number of AttemptID, or the name of ResendAttemptID (batch
// -1). Anything else, another event's attempt included, is an error.
func ParseAttemptID(eventType, eventID, attemptID string) (batch int, resend string, err error) {
	rest, ok := strings.CutPrefix(attemptID, EventKey(eventType, eventID)+"#")
	if !ok {
		return 0, "", fmt.Errorf("attempt id %.80q is not one of event %s", attemptID, EventKey(eventType, eventID))
	}
	if name, isResend := strings.CutPrefix(rest, resendMark); isResend {
		if err := fanout.ValidateID(name); err != nil {
			return 0, "", fmt.Errorf("attempt id %.80q: resend name: %w", attemptID, err)
		}
		return -1, name, nil
	}
	n, err := strconv.Atoi(rest)
	if err != nil || n < 0 || len(rest) > 9 || (len(rest) > 1 && rest[0] == '0') {
		return 0, "", fmt.Errorf("attempt id %.80q: batch %.20q is not a number", attemptID, rest)
	}
	return n, "", nil
}

// OccurrenceID is the event id of one occurrence of a recurring broadcast,
// the Fanout workflow a Temporal Schedule started at nominal time with the
// event eventID: each occurrence is its own event (its own attempt ids, gate
// keys and dead letters), or the gate would skip every recipient of the
// second occurrence as already delivered. The time, UTC to the second, uses
// no character outside the id grammar ("daily-20261224T090000Z").
func OccurrenceID(eventID string, nominal time.Time) string {
	return eventID + "-" + nominal.UTC().Format("20060102T150405Z")
}

// EventKey names an event in every Redis key (gate, staging, failure
// counts) and in its attempt ids: its type and its id. The id grammar
// (fanout.ValidateID) keeps '/' out of both, so two events never share a
// key, even when they share an id.
func EventKey(eventType, eventID string) string { return eventType + "/" + eventID }

// AttemptID is the attempt id of the n-th batch of an event: deterministic
// for (event, batch), so retries and resets of that batch present the same id
// and a different batch holding the same recipient presents another.
func AttemptID(eventType, eventID string, n int) string {
	return fmt.Sprintf("%s#%d", EventKey(eventType, eventID), n)
}

// Workflow type names, as registered on the workers and shown in the UI.
const (
	FanoutWorkflow        = "Fanout"
	DeliveryBatchWorkflow = "DeliveryBatch"
)

// Activity type names of the steps whose results name an event's message
// (the methods of activities.Activities, registered under their names):
// a resend reads them back from the event's history.
const (
	OpenActivity    = "Open"
	PrepareActivity = "Prepare"
)

// The Fanout workflow's query and updates (temporal workflow query/update
// --name ...).
const (
	ProgressQuery = "progress"
	PauseUpdate   = "pause"
	ResumeUpdate  = "resume"
	SetRateUpdate = "set-rate"
	// RescheduleUpdate moves a scheduled event's delivery time (an RFC
	// 3339 time, or a Go duration from now) while it still waits.
	RescheduleUpdate = "reschedule"
)

// Status values of the FanoutStatus search attribute.
const (
	// StatusScheduled: the event waits for its deliver_at (the
	// FanoutScheduledFor attribute) on a durable timer.
	StatusScheduled = "scheduled"
	StatusRunning   = "running"
	StatusPaused    = "paused"
	StatusCompleted = "completed"
	// StatusCompletedWithFailures: paging finished, some recipients failed.
	StatusCompletedWithFailures = "completed_with_failures"
	StatusFailed                = "failed"
	StatusCanceled              = "canceled"
	// StatusExpired: the event's expires_at passed before every recipient
	// was delivered; FanoutExpired counts the ones left.
	StatusExpired = "expired"
)
