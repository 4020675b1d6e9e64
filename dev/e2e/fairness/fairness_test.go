//go:build integration

// Package fairness checks task-queue fairness on the real stack: two events
// of one priority share one delivery queue, and the server dispatches their
// batches in turn instead of in the order they were queued.
package fairness

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"go.temporal.io/api/enums/v1"

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
	s := startStack(ctx, t)
	stamp := time.Now().UTC().Format("150405")
	a := stack.Event{ID: "fair-a-" + stamp, Audience: batches * batchSize, Priority: fanout.PriorityNormal}
	b := stack.Event{ID: "fair-b-" + stamp, Audience: batches * batchSize, Priority: fanout.PriorityNormal}
	if err := s.Publish(ctx, a); err != nil {
		t.Fatal(err)
	}
	waitProgress(ctx, t, s, stack.WorkflowID(a.ID), func(p workflows.Progress) bool { return p.BatchesStarted >= batches })
	published := time.Now()
	if err := s.Publish(ctx, b); err != nil {
		t.Fatal(err)
	}
	waitDelivered(ctx, t, s, a, b)
	startsA, _ := batchStarts(ctx, t, s, a.ID, batches)
	startsB, _ := batchStarts(ctx, t, s, b.ID, batches)
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

// TestSmallBatchesGoBeforeQueuedLargeOnes publishes event A, big enough to
// fill its window (50 batches of 20, then batches of a page, 200), and
// once its small batches are done and its large ones queued (one batch
// slot: two batches at once per queue, 20 calls; a sink that answers in
// 100 ms), event B of 4 small batches. Read from the histories: A's large
// batches ran on the normal priority's large-batch queue
// (vocab.LargeDeliveryTaskQueue) and B's on the delivery queue, and B's
// batches all started before A's large batches still queued, but for the
// one dispatched while B was paging. On one queue with fairness alone
// they took turns with A's (3 of 8 ahead of B's last).
func TestSmallBatchesGoBeforeQueuedLargeOnes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const small, large, page = 50, 10, 10 * batchSize
	s := startStack(ctx, t, "FANOUT_DELIVER_CONCURRENCY=20")
	stamp := time.Now().UTC().Format("150405")
	a := stack.Event{ID: "prio-a-" + stamp, Audience: small*batchSize + large*page, Priority: fanout.PriorityNormal}
	b := stack.Event{ID: "prio-b-" + stamp, Audience: 4 * batchSize, Priority: fanout.PriorityNormal}
	if err := s.Publish(ctx, a); err != nil {
		t.Fatal(err)
	}
	// A's small batches done, its large ones started (queued).
	waitProgress(ctx, t, s, stack.WorkflowID(a.ID), func(p workflows.Progress) bool {
		return p.BatchesCompleted >= small && p.BatchesStarted >= small+large/2
	})
	published := time.Now()
	if err := s.Publish(ctx, b); err != nil {
		t.Fatal(err)
	}
	waitDelivered(ctx, t, s, a, b)
	startsA, queuesA := batchStarts(ctx, t, s, a.ID, small+large)
	startsB, queuesB := batchStarts(ctx, t, s, b.ID, 4)
	for i, q := range append(queuesA, queuesB...) {
		want := vocab.DeliveryTaskQueue(fanout.PriorityNormal)
		if small <= i && i < small+large {
			want = vocab.LargeDeliveryTaskQueue(fanout.PriorityNormal)
		}
		if q != want {
			t.Errorf("batch %d (A's 0..%d, then B's) ran on %s, want %s", i, small+large-1, q, want)
		}
	}
	lastB := slices.MaxFunc(startsB, func(x, y time.Time) int { return x.Compare(y) })
	queuedA, aheadOfB := 0, 0
	for _, at := range startsA[small:] {
		if at.After(published) {
			queuedA++
			if at.Before(lastB) {
				aheadOfB++
			}
		}
	}
	t.Logf("%d of A's large batches were queued when B was published; %d of them started before B's last batch", queuedA, aheadOfB)
	if queuedA < 3 {
		t.Fatalf("only %d of A's large batches were queued when B was published: the test did not queue B behind them", queuedA)
	}
	if aheadOfB > 1 {
		t.Errorf("%d of A's queued large batches started before B's last small one: small batches did not go first", aheadOfB)
	}
}

// startStack starts the stack with an events worker (the bridge inside)
// and a normal delivery worker of one batch slot (with delivery's extra
// environment), batches of batchSize and pages of ten batches, no fast
// path, and a sink that answers in 100 ms.
func startStack(ctx context.Context, t *testing.T, delivery ...string) *stack.Stack {
	t.Helper()
	s, err := stack.Start(ctx, stack.Options{InMemory: true, Log: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	opts := []string{"FANOUT_BATCH_SIZE=" + strconv.Itoa(batchSize), "FANOUT_PAGE_SIZE=" + strconv.Itoa(10*batchSize), "FANOUT_LOCAL_DELIVERY_MAX=-1"}
	if err := s.StartWorker("events", "events", append(opts, "FANOUT_BRIDGE=true")...); err != nil {
		t.Fatal(err)
	}
	if err := s.StartWorker("delivery", "normal", append(append(opts, "FANOUT_BATCH_SLOTS=1"), delivery...)...); err != nil {
		t.Fatal(err)
	}
	if err := s.SinkClient.SetDelay(ctx, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	return s
}

// waitProgress waits until the event's progress satisfies ok.
func waitProgress(ctx context.Context, t *testing.T, s *stack.Stack, wid string, ok func(workflows.Progress) bool) {
	t.Helper()
	for {
		v, err := s.TC.QueryWorkflow(ctx, wid, "", vocab.ProgressQuery)
		if err == nil {
			var p workflows.Progress
			if err := v.Get(&p); err == nil && ok(p) {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s did not get there: %v", wid, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// batchStarts reads, from each of the event's n batch workflows in order,
// when its first DeliverBatch activity attempt started and the task queue
// it was scheduled on; for an event of one page, whose batches are
// DeliverBatch activities of its own, from the event's history.
func batchStarts(ctx context.Context, t *testing.T, s *stack.Stack, eventID string, n int) ([]time.Time, []string) {
	t.Helper()
	if out, queues := ownBatchStarts(ctx, t, s, eventID); len(out) > 0 {
		if len(out) != n {
			t.Fatalf("%s: %d DeliverBatch activities of its own, want %d", eventID, len(out), n)
		}
		return out, queues
	}
	out, queues := make([]time.Time, n), make([]string, n)
	for i := range n {
		wid := vocab.BatchWorkflowID(stack.WorkflowID(eventID), i)
		it := s.TC.GetWorkflowHistory(ctx, wid, "", false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		for it.HasNext() {
			ev, err := it.Next()
			if err != nil {
				t.Fatal(fmt.Errorf("history of %s: %w", wid, err))
			}
			if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil && queues[i] == "" {
				queues[i] = a.GetTaskQueue().GetName()
			}
			if ev.GetEventType() == enums.EVENT_TYPE_ACTIVITY_TASK_STARTED {
				out[i] = ev.GetEventTime().AsTime()
				break
			}
		}
		if out[i].IsZero() {
			t.Fatalf("%s: no DeliverBatch started", wid)
		}
	}
	return out, queues
}

// waitDelivered waits until each event has completed, every recipient
// delivered.
func waitDelivered(ctx context.Context, t *testing.T, s *stack.Stack, evs ...stack.Event) {
	t.Helper()
	for _, e := range evs {
		res, err := s.Wait(ctx, e.ID)
		if err != nil {
			t.Fatal(err)
		}
		if res.Delivered != int64(e.Audience) {
			t.Fatalf("%s: delivered %d of %d", e.ID, res.Delivered, e.Audience)
		}
	}
}

// ownBatchStarts reads, from the event's own history, when each of its
// DeliverBatch activities started and the queue it was scheduled on, in the
// order they were scheduled (none: its batches are children).
func ownBatchStarts(ctx context.Context, t *testing.T, s *stack.Stack, eventID string) ([]time.Time, []string) {
	t.Helper()
	var out []time.Time
	var queues []string
	at := map[int64]int{} // scheduled event id -> batch
	it := s.TC.GetWorkflowHistory(ctx, stack.WorkflowID(eventID), "", false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatal(fmt.Errorf("history of %s: %w", eventID, err))
		}
		if a := ev.GetActivityTaskScheduledEventAttributes(); a.GetActivityType().GetName() == "DeliverBatch" {
			at[ev.GetEventId()] = len(out)
			out = append(out, time.Time{})
			queues = append(queues, a.GetTaskQueue().GetName())
		}
		if a := ev.GetActivityTaskStartedEventAttributes(); a != nil {
			if i, ok := at[a.GetScheduledEventId()]; ok {
				out[i] = ev.GetEventTime().AsTime()
			}
		}
	}
	for i, x := range out {
		if x.IsZero() {
			t.Fatalf("%s: DeliverBatch %d never started", eventID, i)
		}
	}
	return out, queues
}
