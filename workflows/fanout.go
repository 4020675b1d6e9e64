// Package workflows holds fanout's workflows: Fanout, one per event, which
// pages the audience and fans delivery batches out as DeliveryBatch children
// on the task queue of the event's priority.
package workflows

import (
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/activities"
)

// a is the nil receiver through which workflows name activities.
var a *activities.Activities

// Search attribute keys set by the bridge and upserted by Fanout.
var (
	EventTypeKey = temporal.NewSearchAttributeKeyKeyword(fanout.SearchAttrEventType)
	PriorityKey  = temporal.NewSearchAttributeKeyKeyword(fanout.SearchAttrPriority)
	StatusKey    = temporal.NewSearchAttributeKeyKeyword(fanout.SearchAttrStatus)
)

// FanoutInput starts (or continues) the fan-out of one event.
type FanoutInput struct {
	Event fanout.Event
	// State is nil on the first run and carries the cursor and counters
	// across continue-as-new.
	State *FanoutState `json:",omitempty"`
	// MaxHistoryLength makes the run continue-as-new once its history is
	// longer (0: only when Temporal suggests it). For tests and tuning.
	MaxHistoryLength int `json:",omitempty"`
}

// FanoutState is what a run hands to the next one.
type FanoutState struct {
	Message   fanout.Message
	Options   fanout.TypeOptions
	Priority  fanout.Priority
	Cursor    string
	NextBatch int
	Progress  Progress
}

// Progress is the answer to the progress query and the workflow's result.
type Progress struct {
	Found            int64
	Delivered        int64
	Duplicates       int64
	Failed           int64
	DeadLettered     int64
	BatchesStarted   int
	BatchesCompleted int
	PendingBatches   int
	Pages            int
	Runs             int
	PagingDone       bool
	Cursor           string
	// BatchErrors counts batches that ended in error (their recipients are
	// in Failed); LastBatchError is the latest such error.
	BatchErrors    int
	LastBatchError string
}

// FanoutResult is the outcome of an event's fan-out.
type FanoutResult struct {
	Progress
}

// Fanout fans one event out: it generates the message once, pages the
// recipients through an activity, starts DeliveryBatch children with
// deterministic ids in a bounded window on the delivery task queue of the
// event's priority, and continues-as-new (after draining its open batches)
// when its history grows long.
//
// The message and the first page are fetched by local activities in the
// first workflow task. An event whose whole audience fits one batch skips
// the child: its one batch runs as a DeliverBatch activity directly on the
// delivery task queue, with the same attempt id batch 0 would have. A small
// event then costs two workflow tasks and one activity.
func Fanout(ctx workflow.Context, in FanoutInput) (FanoutResult, error) {
	logger := workflow.GetLogger(ctx)
	info := workflow.GetInfo(ctx)
	st := in.State
	var prog Progress
	if st != nil {
		prog = st.Progress
	}
	prog.Runs++
	prog.PendingBatches = 0
	if err := workflow.SetQueryHandler(ctx, fanout.ProgressQuery, func() (Progress, error) {
		return prog, nil
	}); err != nil {
		return FanoutResult{}, err
	}

	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 5 * time.Minute,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:    time.Second,
			BackoffCoefficient: 2,
			MaximumInterval:    time.Minute,
			MaximumAttempts:    0, // get_recipients may be slow or flaky; keep trying
		},
	})
	lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		StartToCloseTimeout: 30 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:    time.Second,
			BackoffCoefficient: 2,
			MaximumInterval:    5 * time.Second,
			MaximumAttempts:    3,
		},
	})

	var firstPage *activities.PageResult
	if st == nil {
		var prep activities.PrepareResult
		if err := localThenRemote(ctx, lctx, actx, a.Prepare, activities.PrepareInput{Event: in.Event}, &prep); err != nil {
			return finish(ctx, prog, err)
		}
		st = &FanoutState{Message: prep.Message, Options: prep.Options.WithDefaults(), Priority: in.Event.Priority}
		if st.Priority == "" {
			st.Priority = st.Options.DefaultPriority
		}
		if !st.Priority.Valid() {
			return finish(ctx, prog, temporal.NewNonRetryableApplicationError(
				fmt.Sprintf("unknown priority %q", st.Priority), "UnknownPriority", nil))
		}
		if in.Event.Priority == "" {
			// The bridge set type and status at start; the default priority
			// is only known now.
			if err := workflow.UpsertTypedSearchAttributes(ctx, PriorityKey.ValueSet(string(st.Priority))); err != nil {
				return FanoutResult{}, err
			}
		}
		var page activities.PageResult
		if err := localThenRemote(ctx, lctx, actx, a.RecipientsPage, activities.RecipientsPageInput{
			Event: in.Event, Limit: st.Options.PageSize, BatchSize: st.Options.BatchSize,
		}, &page); err != nil {
			return finish(ctx, prog, err)
		}
		firstPage = &page
		if page.NextCursor == "" && len(page.Batches) == 0 && len(page.Recipients) <= st.Options.BatchSize {
			return deliverInline(ctx, in.Event, st, prog, page.Recipients)
		}
	}
	opts := st.Options

	sel := workflow.NewSelector(ctx)
	pending := 0
	// startBatch starts batch n: recips inline, or the staged batch ref.
	startBatch := func(n int, recips []fanout.Recipient, ref *activities.BatchRef) {
		cctx := workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{
			WorkflowID:            fanout.BatchWorkflowID(info.WorkflowExecution.ID, n),
			TaskQueue:             fanout.DeliveryTaskQueue(st.Priority),
			WorkflowRunTimeout:    24 * time.Hour,
			ParentClosePolicy:     enumspb.PARENT_CLOSE_POLICY_TERMINATE,
			WorkflowIDReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		})
		fut := workflow.ExecuteChildWorkflow(cctx, DeliveryBatch, DeliveryBatchInput{
			Event:       in.Event,
			Priority:    st.Priority,
			BatchNo:     n,
			AttemptID:   fanout.AttemptID(in.Event.ID, n),
			Recipients:  recips,
			Ref:         ref,
			Message:     st.Message,
			MaxAttempts: opts.MaxAttempts,
			Concurrency: opts.DeliverConcurrency,
			Timeout:     opts.DeliverTimeout,
		})
		pending++
		prog.BatchesStarted++
		prog.PendingBatches = pending
		size := int64(len(recips))
		if ref != nil {
			size = int64(ref.Count)
		}
		sel.AddFuture(fut, func(f workflow.Future) {
			pending--
			prog.PendingBatches = pending
			prog.BatchesCompleted++
			var r DeliveryBatchResult
			if err := f.Get(ctx, &r); err != nil {
				// Cancellation, termination or timeout of the batch, or a
				// non-retryable activity error (an event type this worker
				// does not know): its recipients count as failed.
				prog.Failed += size
				prog.BatchErrors++
				prog.LastBatchError = err.Error()
				return
			}
			prog.Delivered += int64(r.Delivered)
			prog.Duplicates += int64(r.Duplicates)
			prog.Failed += int64(r.Failed)
			prog.DeadLettered += int64(r.DeadLettered)
		})
	}
	drain := func(limit int) {
		for pending > limit {
			sel.Select(ctx)
		}
	}

	for !prog.PagingDone {
		if ctx.Err() != nil {
			break
		}
		var page activities.PageResult
		if firstPage != nil {
			page, firstPage = *firstPage, nil
		} else if err := workflow.ExecuteActivity(actx, a.RecipientsPage, activities.RecipientsPageInput{
			Event: in.Event, Cursor: st.Cursor, Limit: opts.PageSize, BatchSize: opts.BatchSize, FirstBatch: st.NextBatch,
		}).Get(ctx, &page); err != nil {
			drain(0)
			return finish(ctx, prog, err)
		}
		prog.Pages++
		prog.Found += int64(page.Len())
		for i := range page.Batches {
			drain(opts.Window - 1)
			if ctx.Err() != nil {
				break
			}
			ref := page.Batches[i]
			startBatch(ref.N, nil, &ref)
			st.NextBatch = ref.N + 1
		}
		for rs := page.Recipients; len(rs) > 0 && len(page.Batches) == 0; {
			k := min(len(rs), opts.BatchSize)
			drain(opts.Window - 1)
			if ctx.Err() != nil {
				break
			}
			startBatch(st.NextBatch, rs[:k], nil)
			st.NextBatch++
			rs = rs[k:]
		}
		if ctx.Err() != nil {
			break // canceled mid-page: the cursor stays at this page
		}
		st.Cursor = page.NextCursor
		prog.Cursor = page.NextCursor
		prog.PagingDone = page.NextCursor == ""
		if !prog.PagingDone && continueAsNewDue(ctx, in.MaxHistoryLength) {
			// Children close with this run (parent-close policy), so let the
			// open batches finish first; nothing in flight is lost.
			drain(0)
			if ctx.Err() != nil {
				break
			}
			st.Progress = prog
			logger.Info("continuing as new", "cursor", st.Cursor, "batches", st.NextBatch)
			return FanoutResult{}, workflow.NewContinueAsNewError(ctx, Fanout, FanoutInput{
				Event: in.Event, State: st, MaxHistoryLength: in.MaxHistoryLength,
			})
		}
	}
	drain(0)
	if ctx.Err() != nil {
		return finish(ctx, prog, temporal.NewCanceledError())
	}
	return finish(ctx, prog, nil)
}

// localThenRemote runs an activity as a local activity (no extra workflow
// task) and falls back to a regular activity when that fails for a reason
// other than a non-retryable error (a slow get_recipients, a worker
// restart).
func localThenRemote(ctx, lctx, actx workflow.Context, act, in, out any) error {
	err := workflow.ExecuteLocalActivity(lctx, act, in).Get(ctx, out)
	if err == nil || ctx.Err() != nil {
		return err
	}
	var ae *temporal.ApplicationError
	if errors.As(err, &ae) && ae.NonRetryable() {
		return err
	}
	workflow.GetLogger(ctx).Warn("local activity failed; retrying as an activity", "error", err)
	return workflow.ExecuteActivity(actx, act, in).Get(ctx, out)
}

// deliverInline delivers a single-batch event without a child workflow.
func deliverInline(ctx workflow.Context, ev fanout.Event, st *FanoutState, prog Progress, recips []fanout.Recipient) (FanoutResult, error) {
	prog.Pages++
	prog.Found += int64(len(recips))
	prog.PagingDone = true
	if len(recips) > 0 {
		prog.BatchesStarted, prog.PendingBatches = 1, 1
		var r activities.DeliverBatchResult
		err := workflow.ExecuteActivity(deliverContext(ctx, st.Options.DeliverTimeout, fanout.DeliveryTaskQueue(st.Priority)),
			a.DeliverBatch, activities.DeliverBatchInput{
				Event: ev, Priority: st.Priority, AttemptID: fanout.AttemptID(ev.ID, 0), Recipients: recips,
				Message: st.Message, MaxAttempts: st.Options.MaxAttempts, Concurrency: st.Options.DeliverConcurrency,
			}).Get(ctx, &r)
		prog.PendingBatches, prog.BatchesCompleted = 0, 1
		if err != nil {
			prog.Failed += int64(len(recips))
			prog.BatchErrors++
			prog.LastBatchError = err.Error()
			if ctx.Err() != nil {
				return finish(ctx, prog, temporal.NewCanceledError())
			}
			return finish(ctx, prog, nil)
		}
		prog.Delivered += int64(r.Delivered)
		prog.Duplicates += int64(r.Duplicates)
		prog.Failed += int64(r.Failed)
		prog.DeadLettered += int64(r.DeadLettered)
	}
	return finish(ctx, prog, nil)
}

func continueAsNewDue(ctx workflow.Context, maxHistory int) bool {
	info := workflow.GetInfo(ctx)
	if info.GetContinueAsNewSuggested() {
		return true
	}
	return maxHistory > 0 && info.GetCurrentHistoryLength() >= maxHistory
}

// finish records the final status as a search attribute and returns.
func finish(ctx workflow.Context, prog Progress, err error) (FanoutResult, error) {
	status := fanout.StatusCompleted
	if err == nil && prog.Failed > 0 {
		status = fanout.StatusCompletedWithFailures
	}
	var canceled *temporal.CanceledError
	switch {
	case errors.As(err, &canceled) || (err != nil && ctx.Err() != nil):
		status = fanout.StatusCanceled
	case err != nil:
		status = fanout.StatusFailed
	}
	uctx, _ := workflow.NewDisconnectedContext(ctx)
	if uerr := workflow.UpsertTypedSearchAttributes(uctx, StatusKey.ValueSet(status)); uerr != nil {
		return FanoutResult{Progress: prog}, fmt.Errorf("upsert status: %w (after %v)", uerr, err)
	}
	return FanoutResult{Progress: prog}, err
}
