//go:build integration

package e2e

// Runbook tests: the operator commands of docs/runbook.md, run with the real
// temporal CLI (.bin/temporal) against the shared stack.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/dev/demo"
	"github.com/fanout/fanout/dev/stack"
	"github.com/fanout/fanout/workers/webhook"
	"github.com/fanout/fanout/workflows"
	"github.com/fanout/fanout/workflows/replay"
	"github.com/fanout/fanout/workflows/vocab"
)

// temporalCLI runs the real temporal CLI against the shared stack's server
// and returns its stdout; it fails the test on a non-zero exit.
func temporalCLI(t *testing.T, args ...string) string {
	t.Helper()
	out, errOut, err := temporalCLIResult(t, args...)
	if err != nil {
		t.Fatalf("temporal %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, out, errOut)
	}
	return out
}

// temporalCLIResult runs the temporal CLI and returns stdout, stderr and
// the exit error.
func temporalCLIResult(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(st.Bin, "temporal"), append(args, "--address", st.TemporalAddr, "--namespace", "default")...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}

// cliJSON runs a CLI command with --output json and decodes its stdout.
func cliJSON(t *testing.T, v any, args ...string) {
	t.Helper()
	out := temporalCLI(t, append(args, "--output", "json")...)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("temporal %s: output is not the expected JSON: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// cliProgress answers the progress query through the CLI
// (`temporal workflow query --type progress`).
func cliProgress(t *testing.T, wid string, runID ...string) workflows.Progress {
	t.Helper()
	args := []string{"workflow", "query", "--workflow-id", wid, "--type", vocab.ProgressQuery}
	if len(runID) > 0 {
		args = append(args, "--run-id", runID[0])
	}
	var out struct {
		QueryResult json.RawMessage `json:"queryResult"`
	}
	cliJSON(t, &out, args...)
	raw := bytes.TrimSpace(out.QueryResult)
	if len(raw) > 0 && raw[0] == '[' {
		var arr []json.RawMessage
		if err := json.Unmarshal(raw, &arr); err != nil || len(arr) != 1 {
			t.Fatalf("query result %s: %v", raw, err)
		}
		raw = arr[0]
	}
	var p workflows.Progress
	if err := json.Unmarshal(raw, &p); err != nil {
		t.Fatalf("query result %s: %v", raw, err)
	}
	return p
}

// cliUpdate runs `temporal workflow update execute` and returns the
// progress the update answered.
func cliUpdate(t *testing.T, wid, name string, input ...string) workflows.Progress {
	t.Helper()
	args := []string{"workflow", "update", "execute", "--workflow-id", wid, "--name", name}
	for _, in := range input {
		args = append(args, "--input", in)
	}
	var out struct {
		Name   string             `json:"name"`
		Result workflows.Progress `json:"result"`
	}
	cliJSON(t, &out, args...)
	return out.Result
}

// cliCount is `temporal workflow count --query q`.
func cliCount(t *testing.T, q string) int {
	t.Helper()
	var out struct {
		Count string `json:"count"` // absent when 0
	}
	cliJSON(t, &out, "workflow", "count", "--query", q)
	if out.Count == "" {
		return 0
	}
	n, err := strconv.Atoi(out.Count)
	if err != nil {
		t.Fatalf("count %q: %v", out.Count, err)
	}
	return n
}

// cliStatus is the execution status of a workflow's latest run, from
// `temporal workflow describe`.
func cliStatus(t *testing.T, wid string) (status, runID string) {
	t.Helper()
	var d struct {
		WorkflowExecutionInfo struct {
			Execution struct {
				RunID string `json:"runId"`
			} `json:"execution"`
			Status string `json:"status"`
		} `json:"workflowExecutionInfo"`
	}
	cliJSON(t, &d, "workflow", "describe", "--workflow-id", wid)
	return d.WorkflowExecutionInfo.Status, d.WorkflowExecutionInfo.Execution.RunID
}

// eventually polls cond every 200ms until it holds or timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", timeout, what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// ownSink is a recipients source and webhook sink private to one test
// (events name it in their payload's recipients_url), so a test can make
// its deliveries slow without touching the shared sink.
type ownSink struct {
	*demo.Sink
	delay atomic.Int64 // per delivery, ns
	url   string
}

func newOwnSink(t *testing.T, delay time.Duration) *ownSink {
	t.Helper()
	s := &ownSink{Sink: demo.NewSink()}
	s.delay.Store(int64(delay))
	srv := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(srv.Close)
	released := make(chan struct{}) // frees held deliveries before Close waits for them
	t.Cleanup(func() { close(released) })
	mux := http.NewServeMux()
	mux.Handle("POST /recipients", &demo.Source{DeliverURL: srv.URL + "/deliver"})
	mux.HandleFunc("POST /deliver", func(w http.ResponseWriter, r *http.Request) {
		if d := time.Duration(s.delay.Load()); d > 0 {
			select {
			case <-time.After(d):
			case <-r.Context().Done():
				return
			case <-released:
				return
			}
		}
		s.ServeHTTP(w, r)
	})
	srv.Config.Handler = mux
	s.url = st.Route(mux) // recipients on an allowed origin; deliveries to srv
	return s
}

func (s *ownSink) setDelay(d time.Duration) { s.delay.Store(int64(d)) }

// holdBatchOpen makes the event's deliveries hang from now on and waits
// until one of its batches is open with a recipient that cannot arrive, so
// a cancel or terminate that follows is sure to find an open batch: without
// it, the open batches could all finish between the progress query and the
// command while the workflow waited to start the next one.
func holdBatchOpen(t *testing.T, sink *ownSink, id, wid string) {
	t.Helper()
	before := time.Duration(sink.delay.Swap(int64(10 * time.Minute)))
	time.Sleep(before + 500*time.Millisecond) // deliveries already under way arrive
	eventually(t, time.Minute, "no batch held open", func() bool {
		p := cliProgress(t, wid)
		// Batches hold 200 recipients in this stack; a started batch with
		// a recipient the sink never saw is open and stays open.
		return p.PendingBatches > 0 && int64(p.BatchesStarted)*200 > int64(sink.Event(id).Unique)
	})
}

// startEvents publishes events of the given audience through Kafka and the
// bridge, with recipients from sink, and waits until each event's workflow
// answers the progress query. With rate > 0 each is capped at rate
// recipients/s through the CLI (set-rate update).
func startEvents(t *testing.T, sink *ownSink, audience int, rate float64, ids ...string) {
	t.Helper()
	for _, id := range ids {
		st.publish(t, stack.Event{ID: id, Audience: audience, RecipientsURL: sink.url + "/recipients"})
	}
	for _, id := range ids {
		wid := vocab.WorkflowID(webhook.EventType, id)
		eventually(t, 30*time.Second, "workflow "+wid+" never answered the progress query", func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, err := st.TC.QueryWorkflow(ctx, wid, "", vocab.ProgressQuery)
			return err == nil
		})
		if rate > 0 {
			if p := cliUpdate(t, wid, vocab.SetRateUpdate, strconv.FormatFloat(rate, 'f', -1, 64)); p.Rate != rate {
				t.Fatalf("set-rate %v answered %+v", rate, p)
			}
		}
	}
	t.Cleanup(func() {
		// Leave nothing running for the next tests.
		for _, id := range ids {
			wid := vocab.WorkflowID(webhook.EventType, id)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_ = st.TC.TerminateWorkflow(ctx, wid, "", "test cleanup")
			cancel()
		}
	})
}

// batchQuery selects the DeliveryBatch children of an event workflow.
func batchQuery(wid string) string {
	return fmt.Sprintf("WorkflowType = '%s' AND WorkflowId STARTS_WITH '%s/batch/'", vocab.DeliveryBatchWorkflow, wid)
}

// Reading an event's progress, pausing and resuming it with the updates,
// as the runbook says.
func TestCLIQueryPauseResume(t *testing.T) {
	const n = 4000
	id := "cli-pause-" + runID
	wid := vocab.WorkflowID(webhook.EventType, id)
	sink := newOwnSink(t, 20*time.Millisecond)
	startEvents(t, sink, n, 400, id)

	p := cliProgress(t, wid)
	if p.Rate != 400 || p.PagingDone || p.Runs != 1 || p.Found == 0 || p.Found > n {
		t.Fatalf("progress while running: %+v", p)
	}

	paused := cliUpdate(t, wid, vocab.PauseUpdate, `"runbook test"`)
	if !paused.Paused {
		t.Fatalf("pause answered %+v", paused)
	}
	// Open batches finish; no new one starts.
	eventually(t, time.Minute, "batches still open while paused", func() bool {
		p = cliProgress(t, wid)
		return p.Paused && p.PendingBatches == 0
	})
	before, sinkBefore := p, sink.Event(id)
	time.Sleep(2 * time.Second)
	p = cliProgress(t, wid)
	if p.BatchesStarted != before.BatchesStarted || p.Delivered != before.Delivered || sink.Event(id).Deliveries != sinkBefore.Deliveries {
		t.Fatalf("a paused event moved: %+v -> %+v; sink %d -> %d deliveries", before, p, sinkBefore.Deliveries, sink.Event(id).Deliveries)
	}
	if p.Delivered >= n {
		t.Fatalf("the event finished before the pause: %+v", p)
	}
	// The UI's status column and the search for paused events.
	eventually(t, 15*time.Second, "FanoutStatus never became paused", func() bool {
		return cliCount(t, fmt.Sprintf("WorkflowId = '%s' AND FanoutStatus = '%s'", wid, vocab.StatusPaused)) == 1
	})
	// A second pause is rejected by the validator, without a history event.
	if _, errOut, err := temporalCLIResult(t, "workflow", "update", "execute", "--workflow-id", wid, "--name", vocab.PauseUpdate, "--input", `"again"`); err == nil || !strings.Contains(errOut, "already paused") {
		t.Fatalf("second pause: err %v, stderr %s", err, errOut)
	}

	if r := cliUpdate(t, wid, vocab.ResumeUpdate); r.Paused {
		t.Fatalf("resume answered %+v", r)
	}
	if r := cliUpdate(t, wid, vocab.SetRateUpdate, "0"); r.Rate != 0 {
		t.Fatalf("set-rate 0 answered %+v", r)
	}
	res := st.waitResult(t, id, 2*time.Minute)
	if res.Found != n || res.Delivered != n || res.Duplicates != 0 || res.Failed != 0 || res.Paused {
		t.Fatalf("result after resume: %+v", res.Progress)
	}
	if got := sink.Event(id); got.Unique != n || got.Deliveries != n {
		t.Fatalf("sink: %+v, want %d recipients once each", got, n)
	}
	eventually(t, 15*time.Second, "FanoutStatus never became completed", func() bool {
		return cliCount(t, fmt.Sprintf("WorkflowId = '%s' AND FanoutStatus = '%s' AND FanoutDelivered = %d", wid, vocab.StatusCompleted, n)) == 1
	})
}

// `temporal workflow cancel` stops paging and the open batches; the
// progress of the canceled workflow says what was not delivered.
func TestCLICancel(t *testing.T) {
	const n = 20000
	id := "cli-cancel-" + runID
	wid := vocab.WorkflowID(webhook.EventType, id)
	sink := newOwnSink(t, time.Second) // a batch of 200 takes ~4s
	startEvents(t, sink, n, 200, id)
	eventually(t, time.Minute, "no batch open", func() bool {
		p := cliProgress(t, wid)
		return p.PendingBatches > 0 && p.BatchesCompleted > 0
	})
	holdBatchOpen(t, sink, id, wid)

	temporalCLI(t, "workflow", "cancel", "--workflow-id", wid)
	var status string
	eventually(t, time.Minute, "the canceled workflow did not close", func() bool {
		status, _ = cliStatus(t, wid)
		return status != "WORKFLOW_EXECUTION_STATUS_RUNNING"
	})
	if status != "WORKFLOW_EXECUTION_STATUS_CANCELED" {
		t.Fatalf("status after cancel: %s", status)
	}
	closedAt := time.Now()

	// A closed workflow still answers the query (the worker replays it).
	p := cliProgress(t, wid)
	t.Logf("progress after cancel: %+v", p)
	if p.PagingDone || p.Cursor == "" || p.Found >= n {
		t.Errorf("paging did not stop: %+v", p)
	}
	if p.Canceled == 0 || p.PendingBatches != 0 {
		t.Errorf("open batches were not counted as canceled: %+v", p)
	}
	// Every started batch is accounted for (delivered, failed, duplicates,
	// or canceled); the batches hold recipients 0..inBatches-1 in order
	// (batch size 200 in this stack); paging resumes at the cursor, the
	// start of the page in progress when the cancel came.
	cursor, err := strconv.Atoi(p.Cursor)
	if err != nil {
		t.Fatalf("cursor %q: %v", p.Cursor, err)
	}
	inBatches := p.Delivered + p.Duplicates + p.Failed + p.Canceled
	if inBatches != int64(p.BatchesStarted)*200 {
		t.Errorf("delivered %d + duplicates %d + failed %d + canceled %d = %d, want the %d recipients of %d started batches",
			p.Delivered, p.Duplicates, p.Failed, p.Canceled, inBatches, p.BatchesStarted*200, p.BatchesStarted)
	}
	if int64(cursor) > inBatches || inBatches > p.Found {
		t.Errorf("want cursor %d <= recipients in batches %d <= found %d", cursor, inBatches, p.Found)
	}
	t.Logf("not delivered: up to %d in canceled batches, %d paged but never batched, %d never paged",
		p.Canceled, p.Found-inBatches, int64(n)-p.Found)
	eventually(t, 15*time.Second, "FanoutStatus never became canceled", func() bool {
		return cliCount(t, fmt.Sprintf("WorkflowId = '%s' AND FanoutStatus = '%s'", wid, vocab.StatusCanceled)) == 1
	})
	// Visibility lags the executions by up to half a second (see
	// stack.VisibilityPollRPS).
	eventually(t, 15*time.Second, "batches still running after the cancel", func() bool {
		return cliCount(t, batchQuery(wid)+" AND ExecutionStatus = 'Running'") == 0
	})
	if c := cliCount(t, batchQuery(wid)+" AND ExecutionStatus = 'Canceled'"); c == 0 {
		t.Errorf("no batch was canceled")
	}
	// The open batches' activities stop too: deliveries cease, and nothing
	// past the cursor was delivered.
	waitDeliveriesStop(t, sink, id, "deliveries went on after the cancel")
	got := sink.Event(id)
	t.Logf("sink: %d deliveries, the last %v after the workflow closed", got.Deliveries, got.Last.Sub(closedAt).Round(time.Millisecond))
	if int64(got.Unique) > inBatches || got.Duplicated != 0 {
		t.Errorf("sink %+v: more recipients than the %d in started batches, or duplicates", got, inBatches)
	}
	for i := int(inBatches); i < n; i++ {
		if c := sink.Count(id, demo.RecipientID(i)); c != 0 {
			t.Fatalf("recipient %d, in no started batch (%d recipients in batches), got %d deliveries", i, inBatches, c)
		}
	}
	t.Logf("%d of the %d recipients counted as canceled had been delivered before their batch stopped", int64(got.Unique)-p.Delivered, p.Canceled)
	if int64(got.Unique) < p.Delivered {
		t.Errorf("sink saw %d recipients, progress says %d delivered", got.Unique, p.Delivered)
	}
}

// `temporal workflow terminate` leaves no batch of the event running.
func TestCLITerminate(t *testing.T) {
	id := "cli-term-" + runID
	wid := vocab.WorkflowID(webhook.EventType, id)
	sink := newOwnSink(t, time.Second)
	startEvents(t, sink, 20000, 200, id)
	eventually(t, time.Minute, "no batch open", func() bool { return cliProgress(t, wid).PendingBatches > 0 })
	holdBatchOpen(t, sink, id, wid)

	temporalCLI(t, "workflow", "terminate", "--workflow-id", wid, "--reason", "runbook test")
	if status, _ := cliStatus(t, wid); status != "WORKFLOW_EXECUTION_STATUS_TERMINATED" {
		t.Fatalf("status after terminate: %s", status)
	}
	// A terminated workflow cannot update its search attributes: FanoutStatus
	// stays what it was (the runbook says to filter on ExecutionStatus).
	eventually(t, 15*time.Second, "terminated event not found by ExecutionStatus", func() bool {
		return cliCount(t, fmt.Sprintf("WorkflowId = '%s' AND ExecutionStatus = 'Terminated' AND FanoutStatus = '%s'", wid, vocab.StatusRunning)) == 1
	})
	// The parent-close policy terminates the open batches.
	eventually(t, 30*time.Second, "batches still running after terminate", func() bool {
		return cliCount(t, batchQuery(wid)+" AND ExecutionStatus = 'Running'") == 0
	})
	if c := cliCount(t, batchQuery(wid)+" AND ExecutionStatus = 'Terminated'"); c == 0 {
		t.Errorf("no batch was terminated with the event")
	}
	// The batches' activities stop delivering.
	waitDeliveriesStop(t, sink, id, "deliveries went on after terminate")
}

// `temporal workflow reset --type FirstWorkflowTask` re-runs the event from
// its start; the attempt ids and the Redis gate make it deliver only to the
// recipients not yet delivered.
func TestCLIResetRedeliversNothingTwice(t *testing.T) {
	const n = 4000
	id := "cli-reset-" + runID
	wid := vocab.WorkflowID(webhook.EventType, id)
	sink := newOwnSink(t, 20*time.Millisecond)
	startEvents(t, sink, n, 200, id)
	eventually(t, time.Minute, "too few deliveries before the reset", func() bool { return cliProgress(t, wid).Delivered >= 1000 })

	// Pause and let the open batches finish, so nothing is in flight.
	cliUpdate(t, wid, vocab.PauseUpdate, `"before reset"`)
	var before workflows.Progress
	eventually(t, time.Minute, "batches still open while paused", func() bool {
		before = cliProgress(t, wid)
		return before.PendingBatches == 0
	})
	sinkBefore := sink.Event(id)
	if before.Delivered >= n || int64(sinkBefore.Deliveries) != before.Delivered {
		t.Fatalf("before the reset: progress %+v, sink %+v", before, sinkBefore)
	}
	_, oldRun := cliStatus(t, wid)

	var reset struct {
		RunID string `json:"runId"`
	}
	cliJSON(t, &reset, "workflow", "reset", "--workflow-id", wid, "--type", "FirstWorkflowTask", "--reason", "runbook test")
	if reset.RunID == "" || reset.RunID == oldRun {
		t.Fatalf("reset answered run %q (old run %s)", reset.RunID, oldRun)
	}
	// The new run replays the updates that followed the reset point
	// (set-rate and pause): resume it if it came back paused.
	var after workflows.Progress
	eventually(t, 30*time.Second, "the reset run never answered the query", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := st.TC.QueryWorkflow(ctx, wid, reset.RunID, vocab.ProgressQuery)
		return err == nil
	})
	after = cliProgress(t, wid, reset.RunID)
	t.Logf("after the reset: %+v", after)
	if after.Paused {
		cliUpdate(t, wid, vocab.ResumeUpdate)
	}
	cliUpdate(t, wid, vocab.SetRateUpdate, "0")

	res := st.waitResult(t, id, 2*time.Minute)
	if res.Found != n || res.Delivered != n || res.Duplicates != 0 || res.Failed != 0 {
		t.Fatalf("result after reset: %+v", res.Progress)
	}
	got := sink.Event(id)
	if got.Unique != n || got.Deliveries != n || got.Duplicated != 0 {
		t.Fatalf("sink after reset: %+v, want %d recipients exactly once (%d delivered before the reset)", got, n, sinkBefore.Deliveries)
	}
	t.Logf("reset re-drove %d recipients; %d delivered before it were skipped", got.Deliveries-sinkBefore.Deliveries, sinkBefore.Deliveries)
	if status, _ := cliStatus(t, wid); status != "WORKFLOW_EXECUTION_STATUS_COMPLETED" {
		t.Errorf("status: %s", status)
	}
	eventually(t, 15*time.Second, "the reset run is not terminated", func() bool {
		return cliCount(t, fmt.Sprintf("WorkflowId = '%s' AND RunId = '%s' AND ExecutionStatus = 'Terminated'", wid, oldRun)) == 1
	})
}

// Batch terminate by visibility query: the matching events and their
// batches stop; an event outside the query goes on.
func TestCLIBatchTerminateByQuery(t *testing.T) {
	prefix := "cli-bt-" + runID + "-"
	ids := []string{prefix + "0", prefix + "1", prefix + "2"}
	keep := "cli-keep-" + runID
	sink := newOwnSink(t, 500*time.Millisecond)
	startEvents(t, sink, 20000, 200, ids...)
	startEvents(t, sink, 2000, 400, keep)

	scope := fmt.Sprintf("FanoutEventType = '%s' AND ExecutionStatus = 'Running' AND WorkflowId STARTS_WITH '%s'",
		webhook.EventType, vocab.WorkflowID(webhook.EventType, prefix))
	eventually(t, 15*time.Second, "the events are not all visible as running", func() bool { return cliCount(t, scope) == len(ids) })

	out := temporalCLI(t, "workflow", "terminate", "--query", scope, "--reason", "runbook batch test", "--yes")
	if !strings.Contains(out, "Started batch") {
		t.Errorf("terminate --query printed %q", out)
	}
	eventually(t, time.Minute, "events of the query still running", func() bool { return cliCount(t, scope) == 0 })
	for _, id := range ids {
		wid := vocab.WorkflowID(webhook.EventType, id)
		if status, _ := cliStatus(t, wid); status != "WORKFLOW_EXECUTION_STATUS_TERMINATED" {
			t.Errorf("%s: %s", wid, status)
		}
	}
	eventually(t, 30*time.Second, "batches of the terminated events still running", func() bool {
		return cliCount(t, fmt.Sprintf("WorkflowType = '%s' AND ExecutionStatus = 'Running' AND WorkflowId STARTS_WITH '%s'",
			vocab.DeliveryBatchWorkflow, vocab.WorkflowID(webhook.EventType, prefix))) == 0
	})

	// The event outside the query was not touched.
	kwid := vocab.WorkflowID(webhook.EventType, keep)
	if status, _ := cliStatus(t, kwid); status != "WORKFLOW_EXECUTION_STATUS_RUNNING" && status != "WORKFLOW_EXECUTION_STATUS_COMPLETED" {
		t.Fatalf("event outside the query: %s", status)
	}
	sink.setDelay(0)
	if res := st.waitResult(t, keep, 2*time.Minute); res.Delivered != 2000 {
		t.Fatalf("event outside the query: %+v", res.Progress)
	}
}

// `temporal task-queue describe` shows the delivery pool's pollers and its
// backlog (what KEDA's temporal scaler reads).
func TestCLITaskQueueDescribe(t *testing.T) {
	for _, tq := range []string{vocab.DeliveryTaskQueue(fanout.PriorityNormal), vocab.LargeDeliveryTaskQueue(fanout.PriorityNormal), vocab.EventsTaskQueue} {
		var out struct {
			Pollers []struct {
				Identity       string `json:"identity"`
				TaskQueueType  string `json:"taskQueueType"`
				LastAccessTime string `json:"lastAccessTime"`
			} `json:"pollers"`
			Stats []struct {
				TaskQueueType           string `json:"taskQueueType"`
				ApproximateBacklogCount *int64 `json:"approximateBacklogCount"`
			} `json:"stats"`
		}
		cliJSON(t, &out, "task-queue", "describe", "--task-queue", tq)
		types := map[string]bool{}
		for _, p := range out.Pollers {
			if p.Identity == "" {
				t.Errorf("%s: poller without identity: %+v", tq, p)
			}
			types[p.TaskQueueType] = true
		}
		if !types["workflow"] || !types["activity"] {
			t.Errorf("%s: pollers %+v, want workflow and activity pollers", tq, out.Pollers)
		}
		if len(out.Stats) == 0 {
			t.Errorf("%s: no backlog stats", tq)
		}
		for _, s := range out.Stats {
			if s.ApproximateBacklogCount == nil {
				t.Errorf("%s: %s stats without approximateBacklogCount", tq, s.TaskQueueType)
			}
		}
	}
}

// starterBin builds the starter binary into .bin/ (as `task build` does).
func starterBin(t *testing.T) string {
	t.Helper()
	if err := st.Build(context.Background()); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(st.Bin, "starter")
}

// runStarter runs `starter args...` against the shared stack.
func runStarter(t *testing.T, env []string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, starterBin(t), args...)
	cmd.Env = append(append(os.Environ(), "TEMPORAL_ADDRESS="+st.TemporalAddr, "TEMPORAL_NAMESPACE=default"), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// Replay of live executions, by visibility query and by id, and of a
// history exported with the CLI; a tampered history fails with status 1.
func TestReplayLiveExecutions(t *testing.T) {
	prefix := "cli-replay-" + runID
	// tiny takes the fast path (local activities only), small one
	// DeliverBatch activity, big five DeliveryBatch children.
	st.publish(t, stack.Event{ID: prefix + "-tiny", Audience: 30}, stack.Event{ID: prefix + "-small", Audience: 150}, stack.Event{ID: prefix + "-big", Audience: 1000})
	tiny := st.waitResult(t, prefix+"-tiny", time.Minute)
	small := st.waitResult(t, prefix+"-small", time.Minute)
	big := st.waitResult(t, prefix+"-big", time.Minute)
	if tiny.Delivered != 30 || small.Delivered != 150 || big.Delivered != 1000 {
		t.Fatalf("results: %+v, %+v, %+v", tiny.Progress, small.Progress, big.Progress)
	}
	query := fmt.Sprintf("WorkflowId STARTS_WITH '%s'", vocab.WorkflowID(webhook.EventType, prefix))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var hs []replay.History
	eventually(t, 15*time.Second, "the executions are not visible", func() bool {
		var err error
		hs, err = replay.LoadQuery(ctx, st.TC, query+" AND ExecutionStatus = 'Completed'", 0)
		return err == nil && len(hs) == 3+5 // three events, five batches of the big one
	})
	results, err := replay.Replay(ctx, nil, hs...)
	if err != nil {
		t.Fatal(err)
	}
	types := map[string]int{}
	for _, r := range results {
		types[r.WorkflowType]++
	}
	if types[vocab.FanoutWorkflow] != 3 || types[vocab.DeliveryBatchWorkflow] != 5 {
		t.Errorf("replayed %v", types)
	}

	// The starter subcommand: by query, by id.
	out, err := runStarter(t, nil, "replay", "-query", query)
	if err != nil || !strings.Contains(out, "8 histories, 8 OK, 0 failed") {
		t.Fatalf("starter replay -query: %v\n%s", err, out)
	}
	bigWID := vocab.WorkflowID(webhook.EventType, prefix+"-big")
	if out, err := runStarter(t, nil, "replay", "-workflow-id", bigWID); err != nil || !strings.Contains(out, "1 OK") {
		t.Fatalf("starter replay -workflow-id: %v\n%s", err, out)
	}

	// A history exported with the CLI replays from its file (ids inferred);
	// a tampered copy fails with exit status 1.
	dir := t.TempDir()
	exported := temporalCLI(t, "workflow", "show", "--workflow-id", bigWID, "--output", "json")
	good := filepath.Join(dir, "big.json")
	if err := os.WriteFile(good, []byte(exported), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := runStarter(t, nil, "replay", "-file", good); err != nil || !strings.Contains(out, "OK    "+good) || !strings.Contains(out, bigWID) {
		t.Fatalf("starter replay -file: %v\n%s", err, out)
	}
	smallWID := vocab.WorkflowID(webhook.EventType, prefix+"-small")
	bad := filepath.Join(dir, "small-tampered.json")
	if err := os.WriteFile(bad, tamperActivityType(t, temporalCLI(t, "workflow", "show", "--workflow-id", smallWID, "--output", "json")), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = runStarter(t, nil, "replay", "-file", filepath.Join(dir, "*.json"))
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(out, "FAIL  "+bad) || !strings.Contains(out, "TMPRL1100") || !strings.Contains(out, "1 OK, 1 failed") {
		t.Fatalf("starter replay of a tampered history: %v\n%s", err, out)
	}
}

// tamperActivityType renames the activity types in an exported history.
func tamperActivityType(t *testing.T, exported string) []byte {
	t.Helper()
	var h map[string]any
	if err := json.Unmarshal([]byte(exported), &h); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range h["events"].([]any) {
		if a, ok := e.(map[string]any)["activityTaskScheduledEventAttributes"].(map[string]any); ok {
			a["activityType"] = map[string]any{"name": "NotDeliverBatch"}
			n++
		}
	}
	if n == 0 {
		t.Fatal("the exported history schedules no activity")
	}
	b, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// `starter setup` registers the search attributes on a namespace that has
// none, keeps them on a second run, and refuses a clashing type.
func TestSetupSearchAttributes(t *testing.T) {
	fresh := "fanout-setup-" + runID
	clash := "fanout-clash-" + runID
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, ns := range []string{fresh, clash} {
		_, err := st.TC.WorkflowService().RegisterNamespace(ctx, &workflowservice.RegisterNamespaceRequest{
			Namespace: ns, WorkflowExecutionRetentionPeriod: durationpb.New(24 * time.Hour),
		})
		var exists *serviceerror.NamespaceAlreadyExists
		if err != nil && !errors.As(err, &exists) {
			t.Fatal(err)
		}
	}
	op := st.TC.OperatorService()
	// A new namespace is served once the namespace cache has it.
	eventually(t, 60*time.Second, "the clash namespace never accepted a search attribute", func() bool {
		_, err := op.AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{
			Namespace: clash, SearchAttributes: map[string]enums.IndexedValueType{vocab.SearchAttrStatus: enums.INDEXED_VALUE_TYPE_TEXT},
		})
		var exists *serviceerror.AlreadyExists
		return err == nil || errors.As(err, &exists)
	})
	eventually(t, 60*time.Second, "the fresh namespace is not served", func() bool {
		_, err := op.ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: fresh})
		return err == nil
	})

	want := vocab.SearchAttributes()
	if len(want) != 8 {
		t.Fatalf("fanout has %d search attributes, want 8 (3 Keyword, 3 Int, FanoutScheduledFor, FanoutExpired)", len(want))
	}
	first, err := vocab.Ensure(ctx, op, fresh, want)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range first {
		if !o.Added {
			t.Errorf("%s: kept on a fresh namespace", o.Name)
		}
	}
	have, err := op.ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: fresh})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range want {
		if got := have.GetCustomAttributes()[a.Name]; got != a.Type {
			t.Errorf("%s registered as %v, want %v", a.Name, got, a.Type)
		}
	}
	again, err := vocab.Ensure(ctx, op, fresh, want)
	if err != nil {
		t.Fatalf("second run: %v", err)
	}
	if slices.ContainsFunc(again, func(o vocab.Outcome) bool { return o.Added }) || len(again) != len(want) {
		t.Errorf("second run: %+v, want all kept", again)
	}

	// The starter subcommand: on the fresh namespace (all kept), on the
	// dev server's default namespace (registered at start: all kept).
	for _, ns := range []string{fresh, "default"} {
		out, err := runStarter(t, []string{"TEMPORAL_NAMESPACE=" + ns}, "setup")
		if n := len(want); err != nil || strings.Count(out, "kept ") != n || !strings.Contains(out, fmt.Sprintf("(0 added, %d already there)", n)) {
			t.Errorf("starter setup on %s: %v\n%s", ns, err, out)
		}
		// The dev server dispatches by fairness key: setup's check of it
		// says ok.
		if !regexp.MustCompile(`(?m)^\s*ok\s+task-queue fairness `).MatchString(out) {
			t.Errorf("starter setup on %s does not report fairness on:\n%s", ns, out)
		}
	}
	// A third namespace through the subcommand's -namespace flag: adds all.
	third := "fanout-setup2-" + runID
	if _, err := st.TC.WorkflowService().RegisterNamespace(ctx, &workflowservice.RegisterNamespaceRequest{
		Namespace: third, WorkflowExecutionRetentionPeriod: durationpb.New(24 * time.Hour),
	}); err != nil {
		t.Fatal(err)
	}
	var out string
	eventually(t, 60*time.Second, "starter setup never succeeded on a new namespace", func() bool {
		out, err = runStarter(t, nil, "setup", "-namespace", third)
		return err == nil
	})
	if n := len(want); strings.Count(out, "added ") != n || !strings.Contains(out, fmt.Sprintf("(%d added, 0 already there)", n)) {
		t.Errorf("starter setup -namespace %s:\n%s", third, out)
	}

	// A clashing type is an error, and nothing is added.
	if _, err := vocab.Ensure(ctx, op, clash, want); err == nil || !strings.Contains(err.Error(), vocab.SearchAttrStatus+" is registered as Text") {
		t.Errorf("clash: %v", err)
	}
	out, err = runStarter(t, []string{"TEMPORAL_NAMESPACE=" + clash}, "setup")
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(out, vocab.SearchAttrStatus+" is registered as Text") {
		t.Errorf("starter setup on the clash namespace: %v\n%s", err, out)
	}
	have, err = op.ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: clash})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := have.GetCustomAttributes()[vocab.SearchAttrEventType]; ok {
		t.Errorf("setup added attributes to a namespace with a clash")
	}
}

// waitDeliveriesStop waits until the sink's deliveries of an event stop
// changing (two reads 1.5 s apart agree).
func waitDeliveriesStop(t *testing.T, sink *ownSink, id, msg string) {
	t.Helper()
	last := -1
	eventually(t, 30*time.Second, msg, func() bool {
		cur := sink.Event(id).Deliveries
		stable := cur == last
		last = cur
		if !stable {
			time.Sleep(1500 * time.Millisecond)
		}
		return stable
	})
}
