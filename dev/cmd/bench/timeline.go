package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/history/v1"
	"go.temporal.io/api/serviceerror"

	"github.com/fanout/fanout/dev/stack"
	"github.com/fanout/fanout/workflows/vocab"
)

// traced is an event whose timeline the scenario prints at its end, once
// its workflows are closed.
type traced struct {
	label, id string
	t0        time.Time
}

// printTimelines prints the timelines of the traced events and forgets them.
func (b *bench) printTimelines(ctx context.Context) {
	for _, t := range b.traced {
		b.timeline(ctx, t.label, t.id, t.t0)
	}
	b.traced = nil
}

// timeline prints where an event's time went, read from its histories: each
// workflow task and activity of the event workflow and of its first batch,
// as milliseconds after t0 (the publish) from scheduled to started to
// closed. A task's wait between scheduled and started is its queue's.
func (b *bench) timeline(ctx context.Context, label, eventID string, t0 time.Time) {
	wid := stack.WorkflowID(eventID)
	for i, id := range []string{wid, vocab.BatchWorkflowID(wid, 0), vocab.BatchWorkflowID(wid, 1)} {
		line, err := b.historyLine(ctx, id, t0)
		var none *serviceerror.NotFound
		if i > 0 && errors.As(err, &none) {
			continue // an event of one page: its batches are its own activities
		}
		if err != nil {
			fmt.Fprintf(b.out, "[bench %s] timeline of %s: %v\n", label, id, err)
			continue
		}
		fmt.Fprintf(b.out, "[bench %s] %s: %s\n", label, id, line)
	}
}

func (b *bench) historyLine(ctx context.Context, id string, t0 time.Time) (string, error) {
	it := b.st.TC.GetWorkflowHistory(ctx, id, "", false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	ms := func(e *history.HistoryEvent) int64 { return e.GetEventTime().AsTime().Sub(t0).Milliseconds() }
	scheduled := map[int64]int64{}
	names := map[int64]string{}
	var parts []string
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			return "", err
		}
		switch e.GetEventType() {
		case enums.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
			parts = append(parts, fmt.Sprintf("started@%d", ms(e)))
		case enums.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED:
			scheduled[e.GetEventId()] = ms(e)
		case enums.EVENT_TYPE_MARKER_RECORDED:
			parts = append(parts, fmt.Sprintf("marker@%d", ms(e)))
		case enums.EVENT_TYPE_WORKFLOW_TASK_STARTED:
			s := e.GetWorkflowTaskStartedEventAttributes().GetScheduledEventId()
			parts = append(parts, fmt.Sprintf("wft %d→%d", scheduled[s], ms(e)))
		case enums.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
			scheduled[e.GetEventId()] = ms(e)
			names[e.GetEventId()] = e.GetActivityTaskScheduledEventAttributes().GetActivityType().GetName()
			parts = append(parts, fmt.Sprintf("sched@%d", ms(e)))
		case enums.EVENT_TYPE_ACTIVITY_TASK_STARTED:
			s := e.GetActivityTaskStartedEventAttributes().GetScheduledEventId()
			parts = append(parts, fmt.Sprintf("%s %d→%d", names[s], scheduled[s], ms(e)))
		case enums.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
			parts = append(parts, fmt.Sprintf("done@%d", ms(e)))
		case enums.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED:
			parts = append(parts, fmt.Sprintf("child@%d", ms(e)))
		case enums.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_STARTED:
			parts = append(parts, fmt.Sprintf("childstarted@%d", ms(e)))
		case enums.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_COMPLETED:
			parts = append(parts, fmt.Sprintf("childdone@%d", ms(e)))
		case enums.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
			parts = append(parts, fmt.Sprintf("completed@%d", ms(e)))
		}
	}
	return strings.Join(parts, " "), nil
}

// deliverStarts returns when each DeliverBatch activity of a workflow was
// scheduled, started and closed, in history order.
func (b *bench) deliverStarts(ctx context.Context, id string) (sched, started, closed []time.Time, err error) {
	it := b.st.TC.GetWorkflowHistory(ctx, id, "", false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			return nil, nil, nil, err
		}
		switch e.GetEventType() {
		case enums.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
			sched = append(sched, e.GetEventTime().AsTime())
		case enums.EVENT_TYPE_ACTIVITY_TASK_STARTED:
			started = append(started, e.GetEventTime().AsTime())
		case enums.EVENT_TYPE_ACTIVITY_TASK_COMPLETED, enums.EVENT_TYPE_ACTIVITY_TASK_FAILED, enums.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT, enums.EVENT_TYPE_ACTIVITY_TASK_CANCELED:
			closed = append(closed, e.GetEventTime().AsTime())
		}
	}
	return sched, started, closed, nil
}

// queueing is when a batch's DeliverBatch was scheduled and started.
type queueing struct{ sched, start time.Time }

// batchQueueings reads when each batch of the event workflow wid was
// queued and started: its child workflows' first DeliverBatch, or (an
// event of one page, whose batches are its own activities) its own.
func (b *bench) batchQueueings(ctx context.Context, wid string) []queueing {
	var qs []queueing
	for n := 0; ; n++ {
		sched, st, _, err := b.deliverStarts(ctx, vocab.BatchWorkflowID(wid, n))
		if err != nil || len(sched) == 0 || len(st) == 0 {
			break
		}
		qs = append(qs, queueing{sched[0], st[0]})
	}
	if len(qs) > 0 {
		return qs
	}
	scheduled := map[int64]time.Time{}
	it := b.st.TC.GetWorkflowHistory(ctx, wid, "", false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			return qs
		}
		switch e.GetEventType() {
		case enums.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
			scheduled[e.GetEventId()] = e.GetEventTime().AsTime()
		case enums.EVENT_TYPE_ACTIVITY_TASK_STARTED:
			if at, ok := scheduled[e.GetActivityTaskStartedEventAttributes().GetScheduledEventId()]; ok {
				qs = append(qs, queueing{at, e.GetEventTime().AsTime()})
			}
		}
	}
	return qs
}

// overtakes reads, for each batch of the small events traced beside the
// big ones, how long it waited on its queue (from its DeliverBatch's
// scheduling to its start) and how many batches of the big events started
// meanwhile, prints them, and sums them up for the row's notes. With fair
// dispatch no more than about one per big event starts ahead of it; a wait
// with none is a wait for a free batch slot.
func (b *bench) overtakes(ctx context.Context, big []string) string {
	var bigStarts, bigEnds []time.Time
	for _, ev := range big {
		wid := stack.WorkflowID(ev)
		for n := 0; ; n++ {
			_, st, cl, err := b.deliverStarts(ctx, vocab.BatchWorkflowID(wid, n))
			if err != nil {
				break // past the last batch
			}
			bigStarts, bigEnds = append(bigStarts, st...), append(bigEnds, cl...)
		}
	}
	// running counts the big batches running at t.
	running := func(t time.Time) int {
		n := 0
		for i, s := range bigStarts {
			if s.Before(t) && (i >= len(bigEnds) || bigEnds[i].After(t)) {
				n++
			}
		}
		return n
	}
	most, waits, sum := 0, 0, time.Duration(0)
	for _, t := range b.traced {
		if t.label != "fairness" {
			continue
		}
		for n, q := range b.batchQueueings(ctx, stack.WorkflowID(t.id)) {
			over := 0
			for _, s := range bigStarts {
				if s.After(q.sched) && s.Before(q.start) {
					over++
				}
			}
			wait := q.start.Sub(q.sched)
			most, waits, sum = max(most, over), waits+1, sum+wait
			fmt.Fprintf(b.out, "[bench %s] %s batch %d waited %v on its queue, overtaken by %d of the big events' %d batches; big batches running when it was queued: %d, when it started: %d\n",
				t.label, t.id, n, wait.Round(time.Millisecond), over, len(bigStarts), running(q.sched), running(q.start))
		}
	}
	if waits == 0 {
		return ""
	}
	return fmt.Sprintf("the small events' batches waited %v on their queues on average, overtaken by at most %d big batches", (sum / time.Duration(waits)).Round(time.Millisecond), most)
}
