// Command histories regenerates the workflow histories the replay tests
// replay (workflows/testdata/histories): it runs the real stack (Temporal dev
// server, Redis, kfake, worker and bridge processes built from this
// repository, the demo source and sink), drives one execution of each kind,
// and exports each with the real CLI:
//
//	temporal workflow show --workflow-id ID --run-id RUN --output json
//
// plus index.json, which gives each file's workflow type, id and run id
// (the replay needs the original workflow id: Fanout's children's ids derive
// from it).
//
//	go run ./dev/cmd/histories [-out DIR] [-keep]
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/dev/demo"
	"github.com/fanout/fanout/dev/stack"
	"github.com/fanout/fanout/starter"
	"github.com/fanout/fanout/workers/webhook"
	"github.com/fanout/fanout/workflows"
	"github.com/fanout/fanout/workflows/replay"
	"github.com/fanout/fanout/workflows/vocab"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "histories:", err)
		os.Exit(1)
	}
}

// gen drives the executions and collects what to export.
type gen struct {
	s       *stack.Stack
	tc      client.Client
	cli     string
	out     string
	entries []replay.IndexEntry
}

func run() error {
	out := flag.String("out", "", "output directory (default: workflows/testdata/histories of the repository)")
	keep := flag.Bool("keep", false, "keep the stack's directory (logs, Temporal database) and print it")
	only := flag.String("only", "", "run only these scenarios (comma-separated: "+strings.Join(scenarioNames, ",")+
		"); the index keeps the other histories as they are")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()

	// Small batches, few attempts and fast retries, so every kind of
	// execution happens within seconds. No destination breaker: the
	// retries scenario's sink fails the same recipients on every try, so a
	// retry's calls fail in a row and would open the sink's breaker, which
	// then dead-letters recipients it never called.
	opts := stack.Options{Log: os.Stderr, Env: []string{
		"FANOUT_BATCH_SIZE=500", "FANOUT_PAGE_SIZE=1500", "FANOUT_MAX_ATTEMPTS=3", "FANOUT_RETRY_INITIAL=100ms", "FANOUT_RETRY_MAX=1s",
		"FANOUT_BREAKER_FAILURES=-1",
	}}
	if *keep {
		dir, err := os.MkdirTemp("", "fanout-histories-")
		if err != nil {
			return err
		}
		opts.Dir = dir
		fmt.Fprintln(os.Stderr, "stack directory:", dir)
	}
	fmt.Fprintln(os.Stderr, "starting the stack (builds the worker and starter binaries)...")
	s, err := stack.Start(ctx, opts)
	if err != nil {
		return err
	}
	defer s.Close()
	g := &gen{s: s, tc: s.TC, cli: filepath.Join(s.Bin, "temporal"), out: *out}
	if g.out == "" {
		g.out = filepath.Join(s.Root, "workflows", "testdata", "histories")
	}
	// The sink fails chosen recipients of the "retries" event: some with
	// 400 (permanent), some with 500 every time (dead-lettered after
	// FANOUT_MAX_ATTEMPTS), some with 500 twice (delivered on a retry).
	s.Sink.Fail = failRetriesEvent()
	for _, w := range []struct{ name, queues string }{{"worker-events", "events"}, {"worker-delivery", "high,normal,low"}} {
		if err := s.StartWorker(w.name, w.queues); err != nil {
			return err
		}
	}
	if err := s.StartBridge("bridge"); err != nil {
		return err
	}

	steps := []struct {
		name string
		fn   func(context.Context) error
	}{
		{"inline", g.inline},
		{"inline-activity", g.inlineActivity},
		{"multi-batch", g.multiBatch},
		{"one-page", g.onePage},
		{"continue-as-new", g.continueAsNew},
		{"retries", g.retries},
		{"pause-resume", g.pauseResume},
		{"cancel", g.cancel},
		{"scheduled", g.scheduled},
		{"occurrence", g.occurrence},
	}
	for _, st := range steps {
		if *only != "" && !slices.Contains(strings.Split(*only, ","), st.name) {
			continue
		}
		fmt.Fprintf(os.Stderr, "scenario %s...\n", st.name)
		sctx, scancel := context.WithTimeout(ctx, 3*time.Minute)
		err := st.fn(sctx)
		scancel()
		if err != nil {
			return fmt.Errorf("scenario %s: %w", st.name, err)
		}
	}
	return g.write(*only != "")
}

// scenarioNames are the names -only takes.
var scenarioNames = []string{"inline", "inline-activity", "multi-batch", "one-page", "continue-as-new", "retries", "pause-resume", "cancel", "scheduled", "occurrence"}

const (
	evInline   = "hist-inline"
	evInlineA  = "hist-inline-activity"
	evMulti    = "hist-multi"
	evOnePage  = "hist-one-page"
	evCAN      = "hist-can"
	evRetries  = "hist-retries"
	evPause    = "hist-pause"
	evCanceled = "hist-cancel"
	evSched    = "hist-scheduled"
	evRecur    = "hist-recurring"
)

func wid(eventID string) string { return stack.WorkflowID(eventID) }

// inline: 20 recipients fit one batch, delivered by one DeliverBatch
// activity without a child.
func (g *gen) inline(ctx context.Context) error {
	if err := g.s.Publish(ctx, stack.Event{ID: evInline, Audience: 20}); err != nil {
		return err
	}
	res, err := g.s.Wait(ctx, evInline)
	if err != nil {
		return err
	}
	if res.Delivered != 20 || res.BatchesStarted != 1 {
		return fmt.Errorf("unexpected result %+v", res.Progress)
	}
	return g.export(ctx, "fanout-inline.json", vocab.FanoutWorkflow, wid(evInline), "",
		"Fanout of 20 recipients: message, first page and delivery in one local activity (Open), no child")
}

// inlineActivity: 200 recipients fit one batch but not the fast path
// (LocalDeliveryMax, 100): Open prepares and pages, and the batch runs as a
// DeliverBatch activity on the delivery queue, without a child.
func (g *gen) inlineActivity(ctx context.Context) error {
	if err := g.s.Publish(ctx, stack.Event{ID: evInlineA, Audience: 200}); err != nil {
		return err
	}
	res, err := g.s.Wait(ctx, evInlineA)
	if err != nil {
		return err
	}
	if res.Delivered != 200 || res.BatchesStarted != 1 {
		return fmt.Errorf("unexpected result %+v", res.Progress)
	}
	return g.export(ctx, "fanout-inline-activity.json", vocab.FanoutWorkflow, wid(evInlineA), "",
		"Fanout of 200 recipients, over LocalDeliveryMax (100): Open prepares and pages, the one batch runs as a DeliverBatch activity on the delivery queue, no child")
}

// multiBatch: 3,000 recipients in six DeliveryBatch children of 500.
func (g *gen) multiBatch(ctx context.Context) error {
	if err := g.s.Publish(ctx, stack.Event{ID: evMulti, Audience: 3000}); err != nil {
		return err
	}
	res, err := g.s.Wait(ctx, evMulti)
	if err != nil {
		return err
	}
	if res.Delivered != 3000 || res.BatchesStarted != 6 {
		return fmt.Errorf("unexpected result %+v", res.Progress)
	}
	if err := g.export(ctx, "fanout-multibatch.json", vocab.FanoutWorkflow, wid(evMulti), "",
		"Fanout of 3,000 recipients in 6 DeliveryBatch children of 500 (staged in Redis), two pages; version 2 of large-after-first-page (small batches until a window of them)"); err != nil {
		return err
	}
	return g.export(ctx, "deliverybatch.json", vocab.DeliveryBatchWorkflow, vocab.BatchWorkflowID(wid(evMulti), 0), "",
		"DeliveryBatch 0 of the multi-batch event: one DeliverBatch activity, all delivered")
}

// onePage: 1,500 recipients, one page (FANOUT_PAGE_SIZE) in three batches
// of 500, run as DeliverBatch activities of the event's own, no child (the
// one-step-batches version).
func (g *gen) onePage(ctx context.Context) error {
	if err := g.s.Publish(ctx, stack.Event{ID: evOnePage, Audience: 1500}); err != nil {
		return err
	}
	res, err := g.s.Wait(ctx, evOnePage)
	if err != nil {
		return err
	}
	if res.Delivered != 1500 || res.BatchesStarted != 3 || res.Pages != 1 {
		return fmt.Errorf("unexpected result %+v", res.Progress)
	}
	return g.export(ctx, "fanout-one-page.json", vocab.FanoutWorkflow, wid(evOnePage), "",
		"Fanout of 1,500 recipients in one page: its 3 batches of 500 run as DeliverBatch activities of its own, no child")
}

// continueAsNew: started directly (as the bridge would) with a small
// MaxHistoryLength, so the first run continues-as-new after its second page
// (the check follows each page; the first comes with the first workflow
// task, when the history is still short).
func (g *gen) continueAsNew(ctx context.Context) error {
	ev := demoEvent(evCAN, 5000)
	we, err := starter.StartFanout(ctx, g.tc, workflows.FanoutInput{Event: ev, MaxHistoryLength: 20}, false)
	if err != nil {
		return err
	}
	res, err := g.s.Wait(ctx, evCAN)
	if err != nil {
		return err
	}
	if res.Delivered != 5000 || res.Runs < 2 {
		return fmt.Errorf("unexpected result %+v", res.Progress)
	}
	// Visibility lags the executions by up to half a second.
	time.Sleep(2 * time.Second / stack.VisibilityPollRPS)
	runs, err := g.runIDs(ctx, wid(evCAN))
	if err != nil {
		return err
	}
	if len(runs) < 2 || runs[0] != we.GetRunID() {
		return fmt.Errorf("runs %v, want the first %s and at least one more", runs, we.GetRunID())
	}
	if err := g.export(ctx, "fanout-continued-as-new.json", vocab.FanoutWorkflow, wid(evCAN), runs[0],
		"first run of a 5,000-recipient Fanout with MaxHistoryLength 20: drains its batches and continues-as-new after its second page"); err != nil {
		return err
	}
	return g.export(ctx, "fanout-after-continue-as-new.json", vocab.FanoutWorkflow, wid(evCAN), runs[len(runs)-1],
		"last run of the same event: starts from the carried cursor and counters, pages the rest, completes")
}

// retries: the sink fails some recipients of the event (see failRetriesEvent).
func (g *gen) retries(ctx context.Context) error {
	if err := g.s.Publish(ctx, stack.Event{ID: evRetries, Audience: 1000}); err != nil {
		return err
	}
	res, err := g.s.Wait(ctx, evRetries)
	if err != nil {
		return err
	}
	// Per 100 recipients: one 400 and one always-500 dead-lettered.
	if res.Delivered != 980 || res.Failed != 20 || res.DeadLettered != 20 {
		return fmt.Errorf("unexpected result %+v", res.Progress)
	}
	if err := g.export(ctx, "deliverybatch-retries-deadletters.json", vocab.DeliveryBatchWorkflow, vocab.BatchWorkflowID(wid(evRetries), 0), "",
		"DeliveryBatch whose activity retried (500s, jittered NextRetryDelay) and dead-lettered 10 recipients (400, and 500 three times)"); err != nil {
		return err
	}
	return g.export(ctx, "fanout-with-failures.json", vocab.FanoutWorkflow, wid(evRetries), "",
		"Fanout of 1,000 recipients, 20 failed and dead-lettered: status completed_with_failures")
}

// pauseResume: paused by the pause update right after the start, capped
// with set-rate, resumed.
func (g *gen) pauseResume(ctx context.Context) error {
	ev := demoEvent(evPause, 3000)
	if _, err := starter.StartFanout(ctx, g.tc, workflows.FanoutInput{Event: ev}, false); err != nil {
		return err
	}
	p, err := g.update(ctx, wid(evPause), vocab.PauseUpdate, "maintenance window")
	if err != nil {
		return err
	}
	if !p.Paused || p.PagingDone {
		return fmt.Errorf("after pause: %+v", p)
	}
	time.Sleep(time.Second)
	if _, err := g.update(ctx, wid(evPause), vocab.SetRateUpdate, 2000.0); err != nil {
		return err
	}
	if _, err := g.update(ctx, wid(evPause), vocab.ResumeUpdate); err != nil {
		return err
	}
	res, err := g.s.Wait(ctx, evPause)
	if err != nil {
		return err
	}
	if res.Delivered != 3000 || res.Paused || res.Rate != 2000 {
		return fmt.Errorf("unexpected result %+v", res.Progress)
	}
	return g.export(ctx, "fanout-paused-resumed.json", vocab.FanoutWorkflow, wid(evPause), "",
		"Fanout of 3,000 recipients paused by the pause update, rate-capped with set-rate (2,000/s), resumed")
}

// cancel: a slow (rate-capped) event canceled mid-way.
func (g *gen) cancel(ctx context.Context) error {
	ev := demoEvent(evCanceled, 20000)
	if _, err := starter.StartFanout(ctx, g.tc, workflows.FanoutInput{Event: ev}, false); err != nil {
		return err
	}
	if _, err := g.update(ctx, wid(evCanceled), vocab.SetRateUpdate, 1000.0); err != nil {
		return err
	}
	time.Sleep(2 * time.Second)
	if err := g.tc.CancelWorkflow(ctx, wid(evCanceled), ""); err != nil {
		return err
	}
	err := g.tc.GetWorkflow(ctx, wid(evCanceled), "").Get(ctx, nil)
	var canceled *temporal.CanceledError
	if !errors.As(err, &canceled) {
		return fmt.Errorf("canceled event ended with %v, want a cancel", err)
	}
	return g.export(ctx, "fanout-canceled.json", vocab.FanoutWorkflow, wid(evCanceled), "",
		"Fanout of 20,000 recipients rate-capped at 1,000/s and canceled after 2s: paging stops, open batches are canceled")
}

// scheduled: published with deliver_at 30 s ahead, moved to 2 s from the
// update with reschedule, delivered then.
func (g *gen) scheduled(ctx context.Context) error {
	env := stack.Event{ID: evSched, Audience: 20}.Envelope()
	env.DeliverAt = time.Now().Add(30 * time.Second)
	if err := g.s.Publisher.Publish(ctx, env); err != nil {
		return err
	}
	var p workflows.Progress
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		var err error
		if p, err = g.update(ctx, wid(evSched), vocab.RescheduleUpdate, "2s"); err == nil {
			break
		} else if time.Now().After(deadline) {
			return err
		}
	}
	res, err := g.s.Wait(ctx, evSched)
	if err != nil {
		return err
	}
	if res.Delivered != 20 || !res.ScheduledFor.Equal(p.ScheduledFor) {
		return fmt.Errorf("unexpected result %+v (rescheduled to %v)", res.Progress, p.ScheduledFor)
	}
	return g.export(ctx, "fanout-scheduled.json", vocab.FanoutWorkflow, wid(evSched), "",
		"Fanout of 20 recipients with deliver_at 30 s ahead (status scheduled, timer), moved 2 s ahead by the reschedule update, then delivered inline")
}

// occurrence: a Temporal Schedule's action starts Fanout (triggered once):
// the event id becomes its occurrence id.
func (g *gen) occurrence(ctx context.Context) error {
	h, err := g.tc.ScheduleClient().Create(ctx, client.ScheduleOptions{
		ID:     evRecur,
		Spec:   client.ScheduleSpec{Intervals: []client.ScheduleIntervalSpec{{Every: 24 * time.Hour}}},
		Paused: true,
		Action: &client.ScheduleWorkflowAction{
			ID: wid(evRecur), Workflow: vocab.FanoutWorkflow, TaskQueue: vocab.EventsTaskQueue,
			Args:                  []any{workflows.FanoutInput{Event: demoEvent(evRecur, 20)}},
			TypedSearchAttributes: temporal.NewSearchAttributes(vocab.EventTypeKey.ValueSet(webhook.EventType), vocab.StatusKey.ValueSet(vocab.StatusRunning)),
		},
	})
	if err != nil {
		return err
	}
	defer func() { _ = h.Delete(context.WithoutCancel(ctx)) }()
	if err := h.Trigger(ctx, client.ScheduleTriggerOptions{}); err != nil {
		return err
	}
	var started string
	for deadline := time.Now().Add(30 * time.Second); started == ""; time.Sleep(200 * time.Millisecond) {
		d, err := h.Describe(ctx)
		if err != nil {
			return err
		}
		if acts := d.Info.RecentActions; len(acts) > 0 && acts[0].StartWorkflowResult != nil {
			started = acts[0].StartWorkflowResult.WorkflowID
		}
		if time.Now().After(deadline) {
			return errors.New("the schedule started nothing in 30 s")
		}
	}
	var res workflows.FanoutResult
	if err := g.tc.GetWorkflow(ctx, started, "").Get(ctx, &res); err != nil {
		return err
	}
	if res.Delivered != 20 {
		return fmt.Errorf("unexpected result %+v", res.Progress)
	}
	return g.export(ctx, "fanout-schedule-occurrence.json", vocab.FanoutWorkflow, started, "",
		"Fanout started by a Temporal Schedule's action: the event id becomes its occurrence id, delivered inline by Open")
}

func demoEvent(id string, audience int) fanout.Event {
	p, _ := json.Marshal(demo.Payload{Audience: audience, Message: json.RawMessage(`{"text":"hi"}`)})
	return fanout.Event{ID: id, Type: webhook.EventType, Payload: p}
}

// update runs a Fanout update and waits for its outcome.
func (g *gen) update(ctx context.Context, workflowID, name string, args ...any) (workflows.Progress, error) {
	var p workflows.Progress
	h, err := g.tc.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID: workflowID, UpdateName: name, Args: args, WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	if err != nil {
		return p, fmt.Errorf("update %s: %w", name, err)
	}
	if err := h.Get(ctx, &p); err != nil {
		return p, fmt.Errorf("update %s: %w", name, err)
	}
	return p, nil
}

// runIDs lists the runs of a workflow id, oldest first.
func (g *gen) runIDs(ctx context.Context, workflowID string) ([]string, error) {
	type run struct {
		id    string
		start time.Time
	}
	var runs []run
	var token []byte
	for {
		resp, err := g.tc.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Query: fmt.Sprintf("WorkflowId = '%s'", workflowID), NextPageToken: token,
		})
		if err != nil {
			return nil, err
		}
		for _, e := range resp.Executions {
			runs = append(runs, run{e.GetExecution().GetRunId(), e.GetStartTime().AsTime()})
		}
		if token = resp.NextPageToken; len(token) == 0 {
			break
		}
	}
	slices.SortFunc(runs, func(a, b run) int { return a.start.Compare(b.start) })
	ids := make([]string, len(runs))
	for i, r := range runs {
		ids[i] = r.id
	}
	return ids, nil
}

// export writes the history of a closed execution with the CLI and adds it
// to the index. runID "" is the latest run.
func (g *gen) export(ctx context.Context, file, workflowType, workflowID, runID, desc string) error {
	if runID == "" {
		d, err := g.tc.DescribeWorkflow(ctx, workflowID, "")
		if err != nil {
			return err
		}
		runID = d.RawResponse.GetWorkflowExecutionInfo().GetExecution().GetRunId()
	}
	if err := g.waitClosed(ctx, workflowID, runID); err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, g.cli, "workflow", "show", "--workflow-id", workflowID, "--run-id", runID,
		"--output", "json", "--address", g.s.TemporalAddr, "--namespace", "default")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("temporal workflow show %s: %w: %s", workflowID, err, stderr.String())
	}
	if err := os.MkdirAll(g.out, 0o755); err != nil {
		return err
	}
	path := filepath.Join(g.out, file)
	if err := os.WriteFile(path, stdout.Bytes(), 0o644); err != nil {
		return err
	}
	// Check it loads and replays against the code that produced it.
	h, err := replay.LoadFile(path, workflowID, runID)
	if err != nil {
		return err
	}
	if _, err := replay.Replay(ctx, nil, h); err != nil {
		return fmt.Errorf("fresh history does not replay: %w", err)
	}
	fmt.Fprintf(os.Stderr, "  %s: %s %s (%d events, %d bytes)\n", file, workflowType, workflowID, len(h.History.Events), stdout.Len())
	g.entries = append(g.entries, replay.IndexEntry{File: file, WorkflowType: workflowType, WorkflowID: workflowID, RunID: runID, Description: desc})
	return nil
}

func (g *gen) waitClosed(ctx context.Context, workflowID, runID string) error {
	for {
		d, err := g.tc.DescribeWorkflow(ctx, workflowID, runID)
		if err != nil {
			return err
		}
		if d.RawResponse.GetWorkflowExecutionInfo().GetStatus() != enums.WORKFLOW_EXECUTION_STATUS_RUNNING {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s/%s still running: %w", workflowID, runID, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// write writes index.json and removes files of the previous index that are
// no longer produced; with partial (-only), it keeps them and their entries.
func (g *gen) write(partial bool) error {
	if old, err := replay.ReadIndex(g.out); err == nil {
		var kept []replay.IndexEntry
		for _, e := range old {
			switch {
			case slices.ContainsFunc(g.entries, func(n replay.IndexEntry) bool { return n.File == e.File }):
			case partial:
				kept = append(kept, e)
			default:
				_ = os.Remove(filepath.Join(g.out, e.File))
			}
		}
		g.entries = append(kept, g.entries...)
	}
	b, err := json.MarshalIndent(g.entries, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(g.out, replay.IndexFile), append(b, '\n'), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "wrote %d histories and %s to %s\n", len(g.entries), replay.IndexFile, g.out)
	return nil
}

// failRetriesEvent fails recipients of the retries event by their number i:
// i%100 == 7 with 400 (permanent), i%100 == 13 with 500 always, i%100 == 21
// with 500 on the first two tries.
func failRetriesEvent() func(eventID, recipientID string) (int, time.Duration) {
	var mu sync.Mutex
	tries := map[string]int{}
	return func(eventID, recipientID string) (int, time.Duration) {
		if eventID != evRetries {
			return 0, 0
		}
		i, err := strconv.Atoi(strings.TrimPrefix(recipientID, "r"))
		if err != nil {
			return 0, 0
		}
		switch i % 100 {
		case 7:
			return 400, 0
		case 13:
			return 500, 0
		case 21:
			mu.Lock()
			defer mu.Unlock()
			tries[recipientID]++
			if tries[recipientID] <= 2 {
				return 500, 0
			}
		}
		return 0, 0
	}
}
