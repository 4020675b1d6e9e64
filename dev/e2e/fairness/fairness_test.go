//go:build integration

// Package fairness checks task-queue fairness on the real stack: two events
// of one priority share one delivery queue, and the server dispatches their
// batches in turn instead of in the order they were queued.
package fairness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/dev/stack"
	"github.com/fanout/fanout/workflows"
	"github.com/fanout/fanout/workflows/vocab"
)

const (
	batchSize = 20
	batches   = 40 // per event: under the default window, so all are queued at once
)

// TestBatchesOfTwoEventsInterleave publishes event A, waits until all its
// batches are started (queued on the normal delivery queue, which one
// activity slot serves, against a sink that answers in 100 ms), then
// publishes event B. Read from the batches' histories, the order in which
// their DeliverBatch activities started: B's batches start while A's
// queued ones still wait, instead of after all of them (first in, first
// out, as a server without fairness dispatches).
func TestBatchesOfTwoEventsInterleave(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	s, err := stack.Start(ctx, stack.Options{InMemory: true, Log: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	opts := []string{"FANOUT_BATCH_SIZE=" + strconv.Itoa(batchSize), "FANOUT_PAGE_SIZE=" + strconv.Itoa(10*batchSize), "FANOUT_LOCAL_DELIVERY_MAX=-1"}
	if err := s.StartWorker("events", "events", append(opts, "FANOUT_BRIDGE=true")...); err != nil {
		t.Fatal(err)
	}
	if err := s.StartWorker("delivery", "normal", append(opts, "FANOUT_BATCH_SLOTS=1")...); err != nil {
		t.Fatal(err)
	}
	if err := s.SinkClient.SetDelay(ctx, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	stamp := time.Now().UTC().Format("150405")
	a := stack.Event{ID: "fair-a-" + stamp, Audience: batches * batchSize, Priority: fanout.PriorityNormal}
	b := stack.Event{ID: "fair-b-" + stamp, Audience: batches * batchSize, Priority: fanout.PriorityNormal}
	if err := s.Publish(ctx, a); err != nil {
		t.Fatal(err)
	}
	waitStarted(ctx, t, s, stack.WorkflowID(a.ID), batches)
	published := time.Now()
	if err := s.Publish(ctx, b); err != nil {
		t.Fatal(err)
	}
	for _, e := range []stack.Event{a, b} {
		res, err := s.Wait(ctx, e.ID)
		if err != nil {
			t.Fatal(err)
		}
		if res.Delivered != int64(e.Audience) {
			t.Fatalf("%s: delivered %d of %d", e.ID, res.Delivered, e.Audience)
		}
	}
	startsA, startsB := activityStarts(ctx, t, s, a.ID), activityStarts(ctx, t, s, b.ID)
	firstB := slices.MinFunc(startsB, func(x, y time.Time) int { return x.Compare(y) })
	// A's batches still queued when B was published, and those of them
	// dispatched before B's first.
	queuedA, aheadOfB := 0, 0
	for _, at := range startsA {
		if at.After(published) {
			queuedA++
			if at.Before(firstB) {
				aheadOfB++
			}
		}
	}
	t.Logf("%d of A's batches were queued when B was published; %d of them started before B's first", queuedA, aheadOfB)
	if queuedA < batches/2 {
		t.Fatalf("only %d of A's batches were queued when B was published: the test did not queue B behind A", queuedA)
	}
	// Round-robin between two keys: B's first batch waits for the few of
	// A's dispatched while B pages and starts it; first in, first out makes
	// it wait for every one of them.
	if aheadOfB > queuedA/3 {
		t.Errorf("%d of A's %d queued batches started before B's first: the queue did not interleave the two events", aheadOfB, queuedA)
	}
}

// waitStarted waits until the event's workflow has started n batches.
func waitStarted(ctx context.Context, t *testing.T, s *stack.Stack, wid string, n int) {
	t.Helper()
	for {
		v, err := s.TC.QueryWorkflow(ctx, wid, "", vocab.ProgressQuery)
		if err == nil {
			var p workflows.Progress
			if err := v.Get(&p); err == nil && p.BatchesStarted >= n {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s did not start %d batches: %v", wid, n, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// activityStarts reads, from each batch workflow of the event, when its
// first DeliverBatch activity attempt started (the server's dispatch).
func activityStarts(ctx context.Context, t *testing.T, s *stack.Stack, eventID string) []time.Time {
	t.Helper()
	var out []time.Time
	for n := 0; n <= batches; n++ {
		wid := vocab.BatchWorkflowID(stack.WorkflowID(eventID), n)
		it := s.TC.GetWorkflowHistory(ctx, wid, "", false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		for it.HasNext() {
			ev, err := it.Next()
			var nf *serviceerror.NotFound
			if errors.As(err, &nf) {
				break
			}
			if err != nil {
				t.Fatal(fmt.Errorf("history of %s: %w", wid, err))
			}
			if ev.GetEventType() == enums.EVENT_TYPE_ACTIVITY_TASK_STARTED {
				out = append(out, ev.GetEventTime().AsTime())
				break
			}
		}
	}
	if len(out) != batches {
		t.Fatalf("%s: found %d batches with a started activity, want %d", eventID, len(out), batches)
	}
	return out
}
