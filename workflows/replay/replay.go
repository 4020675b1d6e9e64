// Package replay replays fanout workflow histories against the current
// workflow code, to catch non-deterministic changes before they reach
// running events.
//
// Histories come from JSON files exported with
// `temporal workflow show --output json` (LoadFile, LoadDir) or straight from
// a cluster by visibility query (LoadQuery, LoadExecution). Each is replayed
// with its original workflow id: Fanout derives its children's ids from its
// own (<workflow id>/batch/<n>), so the SDK's from-file shortcut, which
// replays under the id "ReplayId", reports a false non-determinism.
package replay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/fanout/fanout/workflows"
	"github.com/fanout/fanout/workflows/vocab"
)

// IndexFile names the index of a history directory: a JSON array of
// IndexEntry, giving each file's execution.
const IndexFile = "index.json"

// IndexEntry describes one exported history file.
type IndexEntry struct {
	File         string `json:"file"`
	WorkflowType string `json:"workflow_type"`
	WorkflowID   string `json:"workflow_id"`
	RunID        string `json:"run_id"`
	// Description says what the execution exercised (optional).
	Description string `json:"description,omitempty"`
}

// History is one workflow history and the execution it belongs to.
type History struct {
	// Name says where it came from: a file path, or workflow id and run id.
	Name         string
	WorkflowType string
	WorkflowID   string
	RunID        string
	History      *historypb.History
}

// Result is the outcome of replaying one history: Err is nil when the
// current code makes the same decisions the history recorded.
type Result struct {
	History
	Err error
}

// Option adjusts loading and replaying.
type Option func(*options)

type options struct {
	dc converter.DataConverter
}

// WithDataConverter reads payloads with dc: the data converter the workers
// run with, e.g. internal/codec's Keyring.DataConverter() for histories
// whose payloads are encrypted (with the default converter their inputs do
// not decode and their replay fails). Give it to NewReplayer and to the
// Load functions (which read a start's input for its workflow id).
func WithDataConverter(dc converter.DataConverter) Option {
	return func(o *options) { o.dc = dc }
}

func collect(opts []Option) options {
	o := options{dc: converter.GetDefaultDataConverter()}
	for _, f := range opts {
		f(&o)
	}
	return o
}

// NewReplayer returns a replayer with fanout's workflows registered under
// the names the workers use.
func NewReplayer(opts ...Option) worker.WorkflowReplayer {
	o := collect(opts)
	r, err := worker.NewWorkflowReplayerWithOptions(worker.WorkflowReplayerOptions{
		DataConverter: o.dc,
		// Failures' messages are in their encoded attributes when the
		// workers encrypt them (config.WithKeyring).
		FailureConverter: temporal.NewDefaultFailureConverter(temporal.DefaultFailureConverterOptions{DataConverter: o.dc}),
	})
	if err != nil {
		panic(err) // only for options set here
	}
	r.RegisterWorkflowWithOptions(workflows.Fanout, workflow.RegisterOptions{Name: vocab.FanoutWorkflow})
	r.RegisterWorkflowWithOptions(workflows.DeliveryBatch, workflow.RegisterOptions{Name: vocab.DeliveryBatchWorkflow})
	return r
}

// Replay replays histories against the current Fanout and DeliveryBatch
// code. It returns one Result per history and an error naming the ones that
// failed (nil when all replayed). logger may be nil.
func Replay(ctx context.Context, logger log.Logger, histories ...History) ([]Result, error) {
	return ReplayWith(ctx, NewReplayer(), logger, histories...)
}

// ReplayWith is Replay with a given replayer (for other registrations, e.g.
// a changed workflow under test).
func ReplayWith(ctx context.Context, r worker.WorkflowReplayer, logger log.Logger, histories ...History) ([]Result, error) {
	if logger == nil {
		logger = nopLogger{}
	}
	results := make([]Result, 0, len(histories))
	var failed []string
	for _, h := range histories {
		if err := ctx.Err(); err != nil {
			return results, err
		}
		var err error
		if h.History == nil || len(h.History.Events) == 0 {
			err = errors.New("empty history")
		} else {
			err = r.ReplayWorkflowHistoryWithOptions(logger, h.History, worker.ReplayWorkflowHistoryOptions{
				OriginalExecution: workflow.Execution{ID: h.WorkflowID, RunID: h.RunID},
			})
		}
		results = append(results, Result{History: h, Err: err})
		if err != nil {
			failed = append(failed, h.Name)
		}
	}
	if len(failed) > 0 {
		return results, fmt.Errorf("%d of %d histories failed to replay: %s", len(failed), len(histories), strings.Join(failed, ", "))
	}
	return results, nil
}

// LoadFile reads a history exported with `temporal workflow show --output
// json`. The execution it belongs to is, in this order: workflowID and runID
// when given, its entry in the index.json beside it, or what the history
// itself tells (the prefix of its children's ids, the id the bridge derives
// from the event in its input, and the run id it was started with).
func LoadFile(path, workflowID, runID string, opts ...Option) (History, error) {
	f, err := os.Open(path)
	if err != nil {
		return History{}, err
	}
	defer func() { _ = f.Close() }()
	hist, err := client.HistoryFromJSON(f, client.HistoryJSONOptions{})
	if err != nil {
		return History{}, fmt.Errorf("%s: %w", path, err)
	}
	if len(hist.Events) == 0 {
		return History{}, fmt.Errorf("%s: no events (not a history exported with --output json?)", path)
	}
	h := History{Name: path, History: hist, WorkflowID: workflowID, RunID: runID}
	if h.WorkflowID == "" || h.RunID == "" {
		if idx, err := ReadIndex(filepath.Dir(path)); err == nil {
			for _, e := range idx {
				if e.File == filepath.Base(path) {
					h.WorkflowID = orElse(h.WorkflowID, e.WorkflowID)
					h.RunID = orElse(h.RunID, e.RunID)
				}
			}
		} else if !errors.Is(err, os.ErrNotExist) {
			return History{}, err
		}
	}
	fillFromHistory(&h, collect(opts).dc)
	return h, nil
}

// ReadIndex reads dir/index.json.
func ReadIndex(dir string) ([]IndexEntry, error) {
	b, err := os.ReadFile(filepath.Join(dir, IndexFile))
	if err != nil {
		return nil, err
	}
	var idx []IndexEntry
	if err := json.Unmarshal(b, &idx); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, IndexFile), err)
	}
	return idx, nil
}

// LoadDir loads every history file (*.json but index.json) in dir.
func LoadDir(dir string, opts ...Option) ([]History, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	sort.Strings(paths)
	var out []History
	for _, p := range paths {
		if filepath.Base(p) == IndexFile {
			continue
		}
		h, err := LoadFile(p, "", "", opts...)
		if err != nil {
			return nil, err
		}
		out = append(out, h)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no history files in %s", dir)
	}
	return out, nil
}

// LoadExecution fetches the history of one execution (runID "" = the
// latest run) from the cluster.
func LoadExecution(ctx context.Context, tc client.Client, workflowID, runID string, opts ...Option) (History, error) {
	iter := tc.GetWorkflowHistory(ctx, workflowID, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	hist := &historypb.History{}
	for iter.HasNext() {
		e, err := iter.Next()
		if err != nil {
			return History{}, fmt.Errorf("history of %s/%s: %w", workflowID, runID, err)
		}
		hist.Events = append(hist.Events, e)
	}
	h := History{Name: workflowID + "/" + runID, WorkflowID: workflowID, RunID: runID, History: hist}
	fillFromHistory(&h, collect(opts).dc)
	if runID == "" {
		h.Name = workflowID + "/" + h.RunID
	}
	return h, nil
}

// LoadQuery fetches the histories of the executions a visibility query
// matches (e.g. "WorkflowType='Fanout' AND ExecutionStatus='Completed'"),
// at most limit of them (0: no limit).
func LoadQuery(ctx context.Context, tc client.Client, query string, limit int, opts ...Option) ([]History, error) {
	var out []History
	var token []byte
	for {
		resp, err := tc.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: query, NextPageToken: token})
		if err != nil {
			return out, fmt.Errorf("list %q: %w", query, err)
		}
		for _, e := range resp.GetExecutions() {
			if limit > 0 && len(out) >= limit {
				return out, nil
			}
			h, err := LoadExecution(ctx, tc, e.GetExecution().GetWorkflowId(), e.GetExecution().GetRunId(), opts...)
			if err != nil {
				return out, err
			}
			out = append(out, h)
		}
		token = resp.GetNextPageToken()
		if len(token) == 0 {
			return out, nil
		}
	}
}

// fillFromHistory completes the type, workflow id and run id from the
// history where they are missing.
func fillFromHistory(h *History, dc converter.DataConverter) {
	if len(h.History.GetEvents()) == 0 {
		return
	}
	start := h.History.Events[0].GetWorkflowExecutionStartedEventAttributes()
	if start == nil {
		return
	}
	h.WorkflowType = orElse(h.WorkflowType, start.GetWorkflowType().GetName())
	h.RunID = orElse(h.RunID, start.GetOriginalExecutionRunId())
	// Recent servers record the workflow id in the start event (the only
	// source for ids that derive from nothing in the input, such as a
	// Temporal Schedule's occurrences); older histories lack it.
	h.WorkflowID = orElse(h.WorkflowID, start.GetWorkflowId())
	if h.WorkflowID == "" {
		h.WorkflowID = idFromChildren(h.History)
	}
	if h.WorkflowID == "" {
		h.WorkflowID = idFromInput(h.WorkflowType, start, dc)
	}
}

// idFromChildren is the workflow id the children's ids were derived from.
func idFromChildren(hist *historypb.History) string {
	for _, e := range hist.Events {
		if a := e.GetStartChildWorkflowExecutionInitiatedEventAttributes(); a != nil {
			id := a.GetWorkflowId()
			if i := strings.LastIndex(id, "/batch/"); i > 0 {
				return id[:i]
			}
		}
	}
	return ""
}

// idFromInput is the id the bridge gives the workflow of the event in its
// input.
func idFromInput(workflowType string, start *historypb.WorkflowExecutionStartedEventAttributes, dc converter.DataConverter) string {
	ps := start.GetInput().GetPayloads()
	if len(ps) == 0 {
		return ""
	}
	switch workflowType {
	case vocab.FanoutWorkflow:
		var in workflows.FanoutInput
		if dc.FromPayload(ps[0], &in) == nil && in.Event.ID != "" {
			return vocab.WorkflowID(in.Event.Type, in.Event.ID)
		}
	case vocab.DeliveryBatchWorkflow:
		var in workflows.DeliveryBatchInput
		if dc.FromPayload(ps[0], &in) == nil && in.Event.ID != "" && !in.Redrive {
			return vocab.BatchWorkflowID(vocab.WorkflowID(in.Event.Type, in.Event.ID), in.BatchNo)
		}
	}
	return ""
}

func orElse(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

type nopLogger struct{}

func (nopLogger) Debug(string, ...any) {}
func (nopLogger) Info(string, ...any)  {}
func (nopLogger) Warn(string, ...any)  {}
func (nopLogger) Error(string, ...any) {}
