//go:build integration

package fairness

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"go.temporal.io/api/enums/v1"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/dev/stack"
	"github.com/fanout/fanout/starter"
)

// TestHighEventPassesTheEventsQueue: every event's workflow tasks share the
// events queue, so a high event carries Temporal's priority key 1
// (vocab.HighPriorityKey) and its tasks pass the backlog of normal ones'.
// With no worker up, the workflows of 40 normal events are started, then
// one high event's, through the bridge's start (starter.StartEvent); then
// one worker starts. Read from the histories, the high event's first
// workflow task started before almost every normal one's. With the default
// key for all (fairness alone, every event a key of its own, taken in
// turn), it started after all of them.
func TestHighEventPassesTheEventsQueue(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const normals = 40
	s, err := stack.Start(ctx, stack.Options{InMemory: true, Log: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	stamp := time.Now().UTC().Format("150405")
	var ids []string
	start := func(id string, p fanout.Priority) {
		env := stack.Event{ID: id, Audience: 5, Priority: p}.Envelope()
		ev := fanout.Event{ID: env.ID, Type: env.Type, Priority: env.Priority, Payload: env.Payload}
		if _, err := starter.StartEvent(ctx, s.TC, ev, false, 0); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	for i := range normals {
		start(fmt.Sprintf("queued-normal-%d-%s", i, stamp), fanout.PriorityNormal)
	}
	high := "queued-high-" + stamp
	start(high, fanout.PriorityHigh)

	if err := s.StartWorker("worker", "events,high,normal,low"); err != nil {
		t.Fatal(err)
	}
	firstTask := map[string]time.Time{}
	for _, id := range ids {
		if _, err := s.Wait(ctx, id); err != nil {
			t.Fatal(err)
		}
		it := s.TC.GetWorkflowHistory(ctx, stack.WorkflowID(id), "", false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		for it.HasNext() {
			ev, err := it.Next()
			if err != nil {
				t.Fatal(err)
			}
			if ev.GetEventType() == enums.EVENT_TYPE_WORKFLOW_TASK_STARTED {
				firstTask[id] = ev.GetEventTime().AsTime()
				break
			}
		}
		if firstTask[id].IsZero() {
			t.Fatalf("%s: no workflow task started", id)
		}
	}
	ahead := 0
	for _, id := range ids[:normals] {
		if firstTask[id].Before(firstTask[high]) {
			ahead++
		}
	}
	t.Logf("%d of %d queued normal events' first workflow tasks started before the high one's", ahead, normals)
	// A few may be in the worker's hands before the high one's is taken:
	// the SDK's pollers each take a task as soon as they are up.
	if ahead > normals/4 {
		t.Errorf("%d of %d queued normal events' first workflow tasks started before the high event's: it did not pass them", ahead, normals)
	}
}
