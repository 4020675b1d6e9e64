package workflows_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/fanout/fanout/activities"
	"github.com/fanout/fanout/workflows"
	"github.com/fanout/fanout/workflows/replay"
	"github.com/fanout/fanout/workflows/vocab"
)

// historiesDir holds histories exported from the real stack with
// `temporal workflow show --output json` by `go run ./dev/cmd/histories`.
const historiesDir = "testdata/histories"

func loadHistories(t *testing.T) []replay.History {
	t.Helper()
	hs, err := replay.LoadDir(historiesDir)
	if err != nil {
		t.Fatal(err)
	}
	return hs
}

func historyNamed(t *testing.T, file string) replay.History {
	t.Helper()
	for _, h := range loadHistories(t) {
		if filepath.Base(h.Name) == file {
			return h
		}
	}
	t.Fatalf("no history %s in %s", file, historiesDir)
	return replay.History{}
}

// Every saved history replays against the current workflow code. A failure
// here means a change would break running events: version it
// (workflow.GetVersion) instead of weakening this test.
func TestReplaySavedHistories(t *testing.T) {
	hs := loadHistories(t)
	results, err := replay.Replay(context.Background(), nil, hs...)
	for _, r := range results {
		t.Run(filepath.Base(r.Name), func(t *testing.T) {
			if r.Err != nil {
				t.Fatalf("%s %s (run %s) does not replay: %v", r.WorkflowType, r.WorkflowID, r.RunID, r.Err)
			}
		})
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != len(hs) {
		t.Fatalf("%d results for %d histories", len(results), len(hs))
	}
}

// The saved set covers every workflow type and the paths that matter:
// inline delivery, children, continue-as-new, retries with dead letters,
// pause/resume updates and cancel.
func TestSavedHistoriesCoverEveryPath(t *testing.T) {
	idx, err := replay.ReadIndex(historiesDir)
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(historiesDir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != len(idx)+1 {
		t.Errorf("%d files beside index.json, %d index entries", len(files)-1, len(idx))
	}
	var total int64
	for _, f := range files {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		total += fi.Size()
	}
	if total > 1<<20 {
		t.Errorf("histories take %d bytes; keep them under 1 MB", total)
	}

	types := map[string]bool{}
	has := map[string]bool{}
	for _, h := range loadHistories(t) {
		types[h.WorkflowType] = true
		if !slices.ContainsFunc(idx, func(e replay.IndexEntry) bool {
			return e.File == filepath.Base(h.Name) && e.WorkflowID == h.WorkflowID && e.RunID == h.RunID && e.WorkflowType == h.WorkflowType
		}) {
			t.Errorf("%s: not in the index as %s %s/%s", h.Name, h.WorkflowType, h.WorkflowID, h.RunID)
		}
		evs := h.History.Events
		last := evs[len(evs)-1].GetEventType()
		for _, e := range evs {
			switch {
			case e.GetMarkerRecordedEventAttributes() != nil:
				has["local activity"] = true
			case e.GetStartChildWorkflowExecutionInitiatedEventAttributes() != nil:
				has["child"] = true
			case e.GetWorkflowExecutionUpdateAcceptedEventAttributes() != nil:
				has["update:"+e.GetWorkflowExecutionUpdateAcceptedEventAttributes().GetAcceptedRequest().GetInput().GetName()] = true
			case e.GetActivityTaskScheduledEventAttributes() != nil && h.WorkflowType == vocab.FanoutWorkflow &&
				e.GetActivityTaskScheduledEventAttributes().GetActivityType().GetName() == "DeliverBatch":
				has["inline delivery"] = true
			case e.GetActivityTaskStartedEventAttributes().GetAttempt() > 1:
				has["activity retry"] = true
			}
		}
		switch last {
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
			has["continued-as-new"] = true
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED:
			has["canceled"] = true
		}
		if start := evs[0].GetWorkflowExecutionStartedEventAttributes(); start.GetContinuedExecutionRunId() != "" {
			has["run after continue-as-new"] = true
		}
	}
	for _, typ := range []string{vocab.FanoutWorkflow, vocab.DeliveryBatchWorkflow} {
		if !types[typ] {
			t.Errorf("no %s history", typ)
		}
	}
	for _, want := range []string{"local activity", "child", "inline delivery", "activity retry", "continued-as-new",
		"run after continue-as-new", "canceled", "update:" + vocab.PauseUpdate, "update:" + vocab.ResumeUpdate, "update:" + vocab.SetRateUpdate} {
		if !has[want] {
			t.Errorf("no saved history has %s", want)
		}
	}
}

// LoadFile finds the original execution without the index too: from the
// children's ids or the event in the input.
func TestLoadFileWithoutIndex(t *testing.T) {
	idx, err := replay.ReadIndex(historiesDir)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, e := range idx {
		b, err := os.ReadFile(filepath.Join(historiesDir, e.File))
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, e.File)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		h, err := replay.LoadFile(p, "", "")
		if err != nil {
			t.Fatal(err)
		}
		if h.WorkflowID != e.WorkflowID || h.RunID != e.RunID || h.WorkflowType != e.WorkflowType {
			t.Errorf("%s: loaded as %s %s/%s, want %s %s/%s", e.File, h.WorkflowType, h.WorkflowID, h.RunID, e.WorkflowType, e.WorkflowID, e.RunID)
		}
	}
}

// The replayer catches non-deterministic changes: modified copies of the
// workflows registered under the real names must fail to replay the saved
// histories.
func TestReplayCatchesNonDeterministicChanges(t *testing.T) {
	cases := []struct {
		name     string
		file     string
		register func(worker.WorkflowReplayer)
	}{
		{
			// A new step before the fan-out (e.g. someone adds a delay).
			name: "Fanout with a timer added first",
			file: "fanout-multibatch.json",
			register: func(r worker.WorkflowReplayer) {
				r.RegisterWorkflowWithOptions(fanoutWithTimerFirst, workflow.RegisterOptions{Name: vocab.FanoutWorkflow})
			},
		},
		{
			// The message fetched by a regular activity instead of a local one.
			name: "Fanout without the local activities",
			file: "fanout-inline.json",
			register: func(r worker.WorkflowReplayer) {
				r.RegisterWorkflowWithOptions(fanoutWithoutLocalActivities, workflow.RegisterOptions{Name: vocab.FanoutWorkflow})
			},
		},
		{
			// The batch's activity renamed.
			name: "DeliveryBatch scheduling another activity",
			file: "deliverybatch.json",
			register: func(r worker.WorkflowReplayer) {
				r.RegisterWorkflowWithOptions(deliveryBatchRenamedActivity, workflow.RegisterOptions{Name: vocab.DeliveryBatchWorkflow})
			},
		},
		{
			// Another activity in the batch's place.
			name: "DeliveryBatch running another activity",
			file: "deliverybatch-retries-deadletters.json",
			register: func(r worker.WorkflowReplayer) {
				r.RegisterWorkflowWithOptions(deliveryBatchOtherActivityType, workflow.RegisterOptions{Name: vocab.DeliveryBatchWorkflow})
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := historyNamed(t, c.file)
			// The unchanged code replays it...
			if _, err := replay.Replay(context.Background(), nil, h); err != nil {
				t.Fatalf("the unchanged code does not replay %s: %v", c.file, err)
			}
			// ...the changed one must not.
			r := worker.NewWorkflowReplayer()
			c.register(r)
			results, err := replay.ReplayWith(context.Background(), r, nil, h)
			if err == nil || len(results) != 1 || results[0].Err == nil {
				t.Fatalf("the changed workflow replayed %s without error", c.file)
			}
			// TMPRL1100 is the SDK's code for a non-determinism.
			if !strings.Contains(results[0].Err.Error(), "TMPRL1100") {
				t.Errorf("error is not a non-determinism (TMPRL1100): %v", results[0].Err)
			}
			t.Logf("caught: %v", results[0].Err)
		})
	}
}

// Design §6: children's ids derive from the workflow id, so the SDK's
// from-file shortcut (which replays under the id "ReplayId") reports a
// false non-determinism; the package replays with the original execution.
func TestReplayNeedsTheOriginalWorkflowID(t *testing.T) {
	h := historyNamed(t, "fanout-multibatch.json")
	r := replay.NewReplayer()
	if err := r.ReplayWorkflowHistoryFromJSONFile(quiet, h.Name); err == nil {
		t.Fatal("the from-file shortcut replayed a history with children; expected the false non-determinism of design §6")
	}
	wrong := h
	wrong.WorkflowID = "fanout/webhook/some-other-event"
	if _, err := replay.Replay(context.Background(), nil, wrong); err == nil {
		t.Fatal("replayed under another workflow id without error")
	}
	if _, err := replay.Replay(context.Background(), nil, h); err != nil {
		t.Fatalf("with the original execution: %v", err)
	}
}

var acts *activities.Activities

// quiet discards the SDK's logs (the from-file replay logs its panic).
var quiet = tlog.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))

// fanoutWithTimerFirst is Fanout with a sleep added before it.
func fanoutWithTimerFirst(ctx workflow.Context, in workflows.FanoutInput) (workflows.FanoutResult, error) {
	if err := workflow.Sleep(ctx, time.Second); err != nil {
		return workflows.FanoutResult{}, err
	}
	return workflows.Fanout(ctx, in)
}

// fanoutWithoutLocalActivities starts like Fanout but prepares the message
// with a regular activity.
func fanoutWithoutLocalActivities(ctx workflow.Context, in workflows.FanoutInput) (workflows.FanoutResult, error) {
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute})
	var prep activities.PrepareResult
	if err := workflow.ExecuteActivity(actx, acts.Prepare, activities.PrepareInput{Event: in.Event}).Get(ctx, &prep); err != nil {
		return workflows.FanoutResult{}, err
	}
	return workflows.Fanout(ctx, in)
}

// deliveryBatchRenamedActivity is DeliveryBatch calling its activity by
// another name.
func deliveryBatchRenamedActivity(ctx workflow.Context, in workflows.DeliveryBatchInput) (workflows.DeliveryBatchResult, error) {
	var res workflows.DeliveryBatchResult
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute})
	err := workflow.ExecuteActivity(actx, "DeliverBatchV2", activities.DeliverBatchInput{Event: in.Event, AttemptID: in.AttemptID}).Get(ctx, &res)
	return res, err
}

// deliveryBatchOtherActivityType is DeliveryBatch running the page activity
// instead of the delivery.
func deliveryBatchOtherActivityType(ctx workflow.Context, in workflows.DeliveryBatchInput) (workflows.DeliveryBatchResult, error) {
	var res workflows.DeliveryBatchResult
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute})
	err := workflow.ExecuteActivity(actx, acts.RecipientsPage, activities.RecipientsPageInput{Event: in.Event}).Get(ctx, nil)
	return res, err
}
