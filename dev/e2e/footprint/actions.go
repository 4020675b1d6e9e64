// Package footprint counts what Temporal does per small event and per
// delivery batch on the real stack (footprint_test.go, build tag
// integration), and the Temporal Cloud Actions that work would be billed,
// counted from the workflows' histories by the rules below (Actions). The
// integration test writes what it measured as Figures (FOOTPRINT_FIGURES),
// which dev/cmd/pictures renders into docs/performance-figures.md.
package footprint

import (
	"encoding/json"
	"os"
	"slices"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
)

// ActionRule is one Temporal Cloud rule: which history events count as how
// many Actions. The rules are Temporal Cloud's ("Temporal Cloud Actions",
// https://docs.temporal.io/cloud/actions), and they match what the Temporal
// server itself meters as its `action` metric
// (common/rpc/interceptor/telemetry.go in go.temporal.io/server).
type ActionRule struct {
	Kind string `json:"kind"`
	// Events are the history events counted (empty: not in a history).
	Events string `json:"events"`
	Rule   string `json:"rule"`
}

// Kinds of Actions, in the order the docs list them.
const (
	ActWorkflowStarted = "workflow started"
	ActChildWorkflow   = "child workflow started"
	ActActivity        = "activity started or retried"
	ActLocalActivities = "local activities and markers"
	ActTimer           = "timer started"
	ActUpsert          = "search attribute upsert"
	ActSignal          = "signal"
	ActUpdate          = "update accepted"
	ActOptions         = "workflow options updated"
	ActNexus           = "nexus operation"
	ActHeartbeat       = "activity heartbeat"
	ActQuery           = "query"
)

// ActionRules are the rules Actions applies, with the rule each cites; the
// last two are not in a history, and the test counts them from the server's
// `action` metric instead.
var ActionRules = []ActionRule{
	{ActWorkflowStarted, "WorkflowExecutionStarted of a run without a parent, or one continued-as-new",
		"Workflow started: a client start or Continue-As-New (a child's start is counted at its parent); a de-duplicated start is none"},
	{ActChildWorkflow, "StartChildWorkflowExecutionInitiated: 2",
		"Start Child Workflow and Child Workflow Execution: two Actions when the parent records the intent to start a child"},
	{ActActivity, "ActivityTaskScheduled, plus ActivityTaskStarted's attempt − 1",
		"Activity started or retried: each attempt counts"},
	{ActLocalActivities, "MarkerRecorded: 1 per workflow task that recorded any",
		"Local Activity started: all RecordMarker commands of one workflow task count as one Action (local activities, side effects and version markers alike)"},
	{ActTimer, "TimerStarted", "Timer started, including the SDK's implicit timers"},
	{ActUpsert, "UpsertWorkflowSearchAttributes, unless it sets only TemporalChangeVersion",
		"Search Attribute upsert: one per command, whatever it sets; those given at the start and TemporalChangeVersion are exempt"},
	{ActSignal, "WorkflowExecutionSignaled", "Signal sent, from a client or a workflow (counted where it is received)"},
	{ActUpdate, "WorkflowExecutionUpdateAccepted", "Update received by the worker (a rejected update is not in the history)"},
	{ActOptions, "WorkflowExecutionOptionsUpdated", "Workflow Execution Options updated"},
	{ActNexus, "NexusOperationScheduled, NexusOperationCancelRequested", "Nexus Operation scheduled or canceled"},
	{ActHeartbeat, "", "Activity Heartbeat recorded: each heartbeat that reaches the server (the SDK throttles them to 80% of the heartbeat timeout); not in the history"},
	{ActQuery, "", "Query received by the worker; not in the history (the UI's and the CLI's queries count too)"},
}

// Actions counts Actions by kind.
type Actions map[string]float64

// Total is the sum over kinds.
func (a Actions) Total() float64 {
	var n float64
	for _, v := range a {
		n += v
	}
	return n
}

// Add adds b to a.
func (a Actions) Add(b Actions) {
	for k, v := range b {
		a[k] += v
	}
}

// Per is a divided by n.
func (a Actions) Per(n float64) Actions {
	out := Actions{}
	for k, v := range a {
		out[k] = v / n
	}
	return out
}

// changeVersionKey is the SDK's version search attribute, exempt from
// Actions.
const changeVersionKey = "TemporalChangeVersion"

// CountActions counts the Actions in one run's history by ActionRules
// (those in a history: heartbeats and queries are not).
func CountActions(events []*historypb.HistoryEvent) Actions {
	a := Actions{}
	markerTasks := map[int64]bool{}
	for _, e := range events {
		switch e.GetEventType() {
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
			at := e.GetWorkflowExecutionStartedEventAttributes()
			if at.GetParentWorkflowExecution() == nil || at.GetContinuedExecutionRunId() != "" {
				a[ActWorkflowStarted]++
			}
		case enumspb.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED:
			a[ActChildWorkflow] += 2
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
			a[ActActivity]++
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_STARTED:
			if n := e.GetActivityTaskStartedEventAttributes().GetAttempt(); n > 1 {
				a[ActActivity] += float64(n - 1)
			}
		case enumspb.EVENT_TYPE_MARKER_RECORDED:
			markerTasks[e.GetMarkerRecordedEventAttributes().GetWorkflowTaskCompletedEventId()] = true
		case enumspb.EVENT_TYPE_TIMER_STARTED:
			a[ActTimer]++
		case enumspb.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES:
			fields := e.GetUpsertWorkflowSearchAttributesEventAttributes().GetSearchAttributes().GetIndexedFields()
			if _, ok := fields[changeVersionKey]; !ok || len(fields) > 1 {
				a[ActUpsert]++
			}
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
			a[ActSignal]++
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
			a[ActUpdate]++
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_OPTIONS_UPDATED:
			a[ActOptions]++
		case enumspb.EVENT_TYPE_NEXUS_OPERATION_SCHEDULED, enumspb.EVENT_TYPE_NEXUS_OPERATION_CANCEL_REQUESTED:
			a[ActNexus]++
		}
	}
	if len(markerTasks) > 0 {
		a[ActLocalActivities] = float64(len(markerTasks))
	}
	return a
}

// Cost is what Temporal does for one unit of work (a small event, a batch,
// 1,000 deliveries), from the dev server's metrics and the histories.
type Cost struct {
	// Actions are Temporal Cloud Actions by kind (ActionRules), counted
	// from the histories, plus the heartbeats and queries the server
	// metered; ActionsTotal is their sum.
	Actions      Actions `json:"actions"`
	ActionsTotal float64 `json:"actions_total"`
	// ServerActions is what the server's own `action` metric counted
	// over the same work (it also counts TemporalChangeVersion upserts,
	// which Temporal Cloud does not bill).
	ServerActions float64 `json:"server_actions"`
	// Requests are the frontend's requests other than polls, WorkflowTasks
	// the workflow tasks completed, HistoryEvents the events in the
	// histories, VisibilityWrites the visibility records written.
	Requests         float64 `json:"requests"`
	WorkflowTasks    float64 `json:"workflow_tasks"`
	HistoryEvents    float64 `json:"history_events"`
	VisibilityWrites float64 `json:"visibility_writes"`
}

// Figures are what the footprint test measured, written to
// $FOOTPRINT_FIGURES as JSON.
type Figures struct {
	Rules []ActionRule `json:"rules"`
	// Small is per small event on the fast path (SmallAudience recipients,
	// delivered by a local activity in the event's one workflow task).
	Small         *Cost `json:"small,omitempty"`
	SmallAudience int   `json:"small_audience,omitempty"`
	// Batched is per event of BatchedAudience recipients, delivered in
	// BatchedBatches DeliveryBatch children.
	Batched         *Cost `json:"batched,omitempty"`
	BatchedAudience int   `json:"batched_audience,omitempty"`
	BatchedBatches  int   `json:"batched_batches,omitempty"`
	// PerBatch and Per1000 are a big event's (BigAudience recipients in
	// BigBatches batches over BigRuns runs) per batch and per 1,000
	// deliveries.
	PerBatch    *Cost `json:"per_batch,omitempty"`
	Per1000     *Cost `json:"per_1000_deliveries,omitempty"`
	BigAudience int   `json:"big_audience,omitempty"`
	BigBatches  int   `json:"big_batches,omitempty"`
	BigRuns     int   `json:"big_runs,omitempty"`
	// HandCount lists the history events of one small event and of one
	// batch with the Actions each counts, for the docs' hand count.
	HandCount map[string][]HandEvent `json:"hand_count,omitempty"`
}

// HandEvent is one history event and the Actions it counts.
type HandEvent struct {
	Event   string  `json:"event"`
	Actions float64 `json:"actions"`
}

// HandCount lists a history's events with the Actions CountActions gives
// each (the markers of one workflow task: on the first).
func HandCount(events []*historypb.HistoryEvent) []HandEvent {
	out := make([]HandEvent, 0, len(events))
	seen := map[int64]bool{}
	for _, e := range events {
		n := CountActions([]*historypb.HistoryEvent{e}).Total()
		if e.GetEventType() == enumspb.EVENT_TYPE_MARKER_RECORDED {
			wft := e.GetMarkerRecordedEventAttributes().GetWorkflowTaskCompletedEventId()
			if seen[wft] {
				n = 0
			}
			seen[wft] = true
		}
		out = append(out, HandEvent{Event: e.GetEventType().String(), Actions: n})
	}
	return out
}

// Kinds are the kinds of a in ActionRules' order.
func (a Actions) Kinds() []string {
	var out []string
	for _, r := range ActionRules {
		if a[r.Kind] != 0 {
			out = append(out, r.Kind)
		}
	}
	for k := range a {
		if !slices.Contains(out, k) && a[k] != 0 {
			out = append(out, k)
		}
	}
	return out
}

// ReadFigures reads a figures file.
func ReadFigures(path string) (Figures, error) {
	var f Figures
	b, err := os.ReadFile(path)
	if err != nil {
		return f, err
	}
	return f, json.Unmarshal(b, &f)
}

// Write writes f to path as JSON.
func (f Figures) Write(path string) error {
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
