package footprint

import (
	"testing"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
)

func ev(t enumspb.EventType) *historypb.HistoryEvent { return &historypb.HistoryEvent{EventType: t} }

func marker(wft int64) *historypb.HistoryEvent {
	return &historypb.HistoryEvent{EventType: enumspb.EVENT_TYPE_MARKER_RECORDED,
		Attributes: &historypb.HistoryEvent_MarkerRecordedEventAttributes{MarkerRecordedEventAttributes: &historypb.MarkerRecordedEventAttributes{WorkflowTaskCompletedEventId: wft}}}
}

func upsert(keys ...string) *historypb.HistoryEvent {
	f := map[string]*commonpb.Payload{}
	for _, k := range keys {
		f[k] = &commonpb.Payload{}
	}
	return &historypb.HistoryEvent{EventType: enumspb.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES,
		Attributes: &historypb.HistoryEvent_UpsertWorkflowSearchAttributesEventAttributes{UpsertWorkflowSearchAttributesEventAttributes: &historypb.UpsertWorkflowSearchAttributesEventAttributes{
			SearchAttributes: &commonpb.SearchAttributes{IndexedFields: f}}}}
}

func started(parent bool, continued string) *historypb.HistoryEvent {
	at := &historypb.WorkflowExecutionStartedEventAttributes{ContinuedExecutionRunId: continued}
	if parent {
		at.ParentWorkflowExecution = &commonpb.WorkflowExecution{WorkflowId: "p"}
	}
	return &historypb.HistoryEvent{EventType: enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED,
		Attributes: &historypb.HistoryEvent_WorkflowExecutionStartedEventAttributes{WorkflowExecutionStartedEventAttributes: at}}
}

func activityStarted(attempt int32) *historypb.HistoryEvent {
	return &historypb.HistoryEvent{EventType: enumspb.EVENT_TYPE_ACTIVITY_TASK_STARTED,
		Attributes: &historypb.HistoryEvent_ActivityTaskStartedEventAttributes{ActivityTaskStartedEventAttributes: &historypb.ActivityTaskStartedEventAttributes{Attempt: attempt}}}
}

func TestCountActions(t *testing.T) {
	wft := []*historypb.HistoryEvent{ev(enumspb.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED), ev(enumspb.EVENT_TYPE_WORKFLOW_TASK_STARTED), ev(enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED)}
	cases := []struct {
		name   string
		events []*historypb.HistoryEvent
		want   Actions
	}{
		{"small event: start, a local activity, the final upsert", append(append([]*historypb.HistoryEvent{started(false, "")}, wft...),
			marker(4), upsert("FanoutStatus"), ev(enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED)),
			Actions{ActWorkflowStarted: 1, ActLocalActivities: 1, ActUpsert: 1}},
		{"markers of one workflow task are one Action, of two are two", []*historypb.HistoryEvent{started(false, ""), marker(4), marker(4), marker(4), marker(9)},
			Actions{ActWorkflowStarted: 1, ActLocalActivities: 2}},
		{"a child is two Actions at its parent and none in its own history", []*historypb.HistoryEvent{
			ev(enumspb.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED), ev(enumspb.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_STARTED),
			ev(enumspb.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_COMPLETED), started(true, "")},
			Actions{ActChildWorkflow: 2}},
		{"a continued run is a start", []*historypb.HistoryEvent{started(false, "run-1"), ev(enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW)},
			Actions{ActWorkflowStarted: 1}},
		{"every attempt of an activity counts", []*historypb.HistoryEvent{ev(enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED), activityStarted(3), ev(enumspb.EVENT_TYPE_ACTIVITY_TASK_COMPLETED),
			ev(enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED), activityStarted(1)},
			Actions{ActActivity: 4}},
		{"TemporalChangeVersion alone is exempt", []*historypb.HistoryEvent{upsert(changeVersionKey), upsert(changeVersionKey, "FanoutStatus")},
			Actions{ActUpsert: 1}},
		{"timers, signals, updates, options", []*historypb.HistoryEvent{ev(enumspb.EVENT_TYPE_TIMER_STARTED), ev(enumspb.EVENT_TYPE_TIMER_FIRED),
			ev(enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED), ev(enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ADMITTED), ev(enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED),
			ev(enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED), ev(enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_OPTIONS_UPDATED)},
			Actions{ActTimer: 1, ActSignal: 1, ActUpdate: 1, ActOptions: 1}},
	}
	for _, c := range cases {
		got := CountActions(c.events)
		if len(got) != len(c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
			continue
		}
		for k, v := range c.want {
			if got[k] != v {
				t.Errorf("%s: %v, want %v", c.name, got, c.want)
			}
		}
	}
	hand := HandCount([]*historypb.HistoryEvent{started(false, ""), marker(4), marker(4), upsert("FanoutStatus")})
	if n := hand[0].Actions + hand[1].Actions + hand[2].Actions + hand[3].Actions; n != 3 || hand[2].Actions != 0 {
		t.Errorf("hand count %v: want 3 in all, the second marker of a task none", hand)
	}
}

// Every kind CountActions can return has a rule.
func TestActionRulesCoverKinds(t *testing.T) {
	kinds := map[string]bool{}
	for _, r := range ActionRules {
		kinds[r.Kind] = true
	}
	for _, k := range []string{ActWorkflowStarted, ActChildWorkflow, ActActivity, ActLocalActivities, ActTimer, ActUpsert, ActSignal, ActUpdate, ActOptions, ActNexus, ActHeartbeat, ActQuery} {
		if !kinds[k] {
			t.Errorf("no rule for %q", k)
		}
	}
}
