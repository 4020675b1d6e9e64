// Package workflows holds fanout's workflows: Fanout, one per event, which
// pages the audience and fans delivery batches out as DeliveryBatch children
// on the task queue of the event's priority.
package workflows

import (
	"errors"
	"fmt"
	"math"
	"time"
	"unicode/utf8"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/activities"
	"github.com/fanout/fanout/workflows/vocab"
)

// a is the nil receiver through which workflows name activities.
var a *activities.Activities

// countsUpsertInterval throttles the upserts of the count search attributes
// (each is a history event and a visibility write).
const countsUpsertInterval = 10 * time.Second

// FanoutInput starts (or continues) the fan-out of one event.
type FanoutInput struct {
	Event fanout.Event
	// State is nil on the first run and carries the cursor and counters
	// across continue-as-new.
	State *FanoutState `json:",omitempty"`
	// MaxHistoryLength makes the run continue-as-new once its history is
	// longer (0: only when Temporal suggests it). For tests and tuning.
	MaxHistoryLength int `json:",omitempty"`
	// ScheduleHorizon bounds how far ahead the reschedule update may move
	// a scheduled event (0: DefaultScheduleHorizon). See schedule.go.
	ScheduleHorizon time.Duration `json:",omitempty"`
}

// Error types of the workflows' non-retryable errors.
const (
	ErrUnknownPriority   = "UnknownPriority"
	ErrTooManyPages      = "TooManyPages"
	ErrTooManyRecipients = "TooManyRecipients"
	ErrInvalidDelay      = "InvalidDelay"
	ErrInvalidEvent      = "InvalidEvent"
)

// FanoutState is what a run hands to the next one.
type FanoutState struct {
	Message   fanout.Message
	Options   fanout.TypeOptions
	Priority  fanout.Priority
	Cursor    string
	NextBatch int
	Progress  Progress
	// Paused and Rate are the operator's steering (see the updates).
	Paused bool    `json:",omitempty"`
	Rate   float64 `json:",omitempty"`
	// LaneEnds are where the rate cap's lanes' schedules ended when the
	// run continued-as-new, at LaneShare per second each, so the next run's
	// first batches make up the gap (see rateLanes).
	LaneEnds  []time.Time `json:",omitempty"`
	LaneShare float64     `json:",omitempty"`
	// Window is the adaptive window the run ended with (0: Options.Window;
	// see adaptWindow).
	Window int `json:",omitempty"`
	// ExpiresAt is the event's expiry, resolved on its first run (its
	// expires_at, or the type's TTL from when it opened); CanarySent counts
	// the recipients of the batches started while the canary was undecided,
	// CanaryJudged is true once it was judged (see the guard).
	ExpiresAt    time.Time `json:",omitzero"`
	CanarySent   int64     `json:",omitempty"`
	CanaryJudged bool      `json:",omitempty"`
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
	// Canceled counts recipients of batches stopped by a cancel: not
	// confirmed delivered (part of each may have been delivered before the
	// stop; the gate knows which, and a reset re-drives only the rest).
	// After a cancel mid-page, Cursor is still that page's cursor.
	Canceled int64 `json:",omitempty"`
	Paused   bool  `json:",omitempty"`
	// Rate is the delivery rate cap in recipients per second (0: none).
	Rate float64 `json:",omitempty"`
	// Unconfirmed counts the Failed recipients of an at-most-once type
	// whose call a crash interrupted (dead-lettered, not called again).
	Unconfirmed int64 `json:",omitempty"`
	// Braked counts the deliveries of a low-priority event that the
	// low-priority brake held to its rate while other priorities delivered.
	Braked int64 `json:",omitempty"`
	// ScheduledFor is the time a scheduled event waits (or waited) for.
	ScheduledFor time.Time `json:",omitzero"`
	// Destinations are the busiest throttled or broken destinations, from
	// the batches' results (activities.MergeDestinationStats).
	Destinations activities.DestinationStats `json:",omitzero"`
	// PauseReason is why the event is paused: the operator's reason, or
	// the canary's verdict ("canary: 52 of 100 failed (52% > 20%)").
	PauseReason string `json:",omitempty"`
	// Canary is the canary's verdict once it was judged ("passed: ..." or
	// "failed: ...").
	Canary string `json:",omitempty"`
	// ExpiresAt is the event's expiry (zero: none). Expired counts the
	// recipients not delivered because it passed: those of the batches not
	// started after it, and those the batches running then left (neither
	// failed nor dead-lettered). Paging stops at the expiry: recipients not
	// yet found are not counted (Cursor is where it stopped).
	ExpiresAt time.Time `json:",omitzero"`
	Expired   int64     `json:",omitempty"`
}

// FanoutResult is the outcome of an event's fan-out.
type FanoutResult struct {
	Progress
}

// fanoutRun is one run of the Fanout workflow.
type fanoutRun struct {
	ctx        workflow.Context
	in         FanoutInput
	st         *FanoutState
	prog       Progress
	sel        workflow.Selector
	wake       workflow.Channel
	pending    int
	lastUpsert time.Time

	// The rate cap's lanes (see rateLanes): capped counts the open batches
	// paced at a share of the cap, committed the sum of their shares,
	// uncapped the open batches started without a cap (each may deliver
	// at full speed); laneEnds are the schedule ends of the lanes free for
	// the next batch, at laneShare each.
	capped, uncapped int
	committed        float64
	laneEnds         []time.Time
	laneShare        float64
	// finalSA are search attribute updates left to finish's upsert.
	finalSA []temporal.SearchAttributeUpdate
	// sched is a scheduled event's wait (schedule.go).
	sched schedule

	// The event's guard (initGuard): canary is the canary still to judge
	// (Recipients 0: none, or judged), expiresAt the expiry (zero: none),
	// expired true once paging stopped at the expiry.
	canary    fanout.Canary
	expiresAt time.Time
	expired   bool
	// armed: the expiry's timer is started (armExpiry).
	armed bool

	// oneStep: the event's audience came in one page, so its batches run
	// as DeliverBatch activities of its own, not as children (oneStepBatches).
	oneStep bool
}

// batchPace is the pace of one batch: its share of the rate cap per second
// (0: none) and where its schedule starts.
type batchPace struct {
	share float64
	from  time.Time
}

// Fanout fans one event out: it generates the message once, pages the
// recipients through an activity, starts DeliveryBatch children with
// deterministic ids in a bounded window on the delivery task queue of the
// event's priority, and continues-as-new (after draining its open batches)
// when its history grows long.
//
// The first workflow task runs one local activity, Open: the message, the
// first page and, for a small audience, its delivery (the steps one by one
// when it fails). An event whose whole audience fits one batch skips the
// child: its one batch runs in Open or as a DeliverBatch activity directly
// on the delivery task queue, with the same attempt id batch 0 would have.
// An audience within LocalDeliveryMax then costs one workflow task and no
// activity task.
//
// Operators steer it with the progress query and the pause, resume and
// set-rate updates; a cancel stops paging and the open batches.
func Fanout(ctx workflow.Context, in FanoutInput) (FanoutResult, error) {
	r := &fanoutRun{ctx: ctx, in: in, st: in.State, sel: workflow.NewSelector(ctx), wake: workflow.NewBufferedChannel(ctx, 1)}
	if r.st != nil {
		r.prog = r.st.Progress
		r.prog.Paused, r.prog.Rate = r.st.Paused, r.st.Rate
		r.laneEnds, r.laneShare = r.st.LaneEnds, r.st.LaneShare
		r.st.LaneEnds, r.st.LaneShare = nil, 0
	}
	r.prog.Runs++
	r.prog.PendingBatches = 0
	r.sel.AddReceive(r.wake, func(c workflow.ReceiveChannel, _ bool) { c.Receive(ctx, nil) })
	if err := r.registerHandlers(); err != nil {
		return FanoutResult{}, err
	}
	return r.run()
}

func (r *fanoutRun) registerHandlers() error {
	if err := workflow.SetQueryHandler(r.ctx, vocab.ProgressQuery, func() (Progress, error) {
		return r.prog, nil
	}); err != nil {
		return err
	}
	active := func() error {
		if r.prog.PagingDone && r.pending == 0 {
			return errors.New("the fan-out has finished")
		}
		return nil
	}
	if err := workflow.SetUpdateHandlerWithOptions(r.ctx, vocab.PauseUpdate, func(ctx workflow.Context, reason string) (Progress, error) {
		r.prog.Paused, r.prog.PauseReason = true, clipReason(reason)
		workflow.GetLogger(ctx).Info("paused", "reason", reason)
		r.setDetails()
		return r.prog, workflow.UpsertTypedSearchAttributes(ctx, vocab.StatusKey.ValueSet(vocab.StatusPaused))
	}, workflow.UpdateHandlerOptions{Validator: func(reason string) error {
		if r.prog.Paused {
			return errors.New("already paused")
		}
		return active()
	}}); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(r.ctx, vocab.ResumeUpdate, func(ctx workflow.Context) (Progress, error) {
		r.prog.Paused, r.prog.PauseReason = false, ""
		r.wake.SendAsync(true)
		r.setDetails()
		return r.prog, workflow.UpsertTypedSearchAttributes(ctx, vocab.StatusKey.ValueSet(r.status()))
	}, workflow.UpdateHandlerOptions{Validator: func() error {
		if !r.prog.Paused {
			return errors.New("not paused")
		}
		return nil
	}}); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(r.ctx, vocab.SetRateUpdate, func(ctx workflow.Context, perSecond float64) (Progress, error) {
		r.prog.Rate = perSecond
		r.wake.SendAsync(true)
		r.setDetails()
		return r.prog, nil
	}, workflow.UpdateHandlerOptions{Validator: func(perSecond float64) error {
		if perSecond < 0 || perSecond > 1e7 || perSecond > 0 && perSecond < fanout.MinRate {
			return fmt.Errorf("rate %v outside 0 (no cap), %v (fanout.MinRate: one an hour) .. 10000000 recipients/s", perSecond, fanout.MinRate)
		}
		return active()
	}}); err != nil {
		return err
	}
	return r.registerReschedule()
}

// run fans the event out: on its first run, after its time has come, it
// opens the event (which may settle an event of one batch); then it pages
// the audience and starts its batches.
func (r *fanoutRun) run() (FanoutResult, error) {
	if r.st != nil {
		r.initGuard()
		return r.fanOut(nil)
	}
	if err := r.awaitSchedule(); err != nil {
		return r.finish(err)
	}
	return r.open()
}

// stepContext is the context the event's steps (Prepare, RecipientsPage)
// run in as activities.
func stepContext(ctx workflow.Context) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 5 * time.Minute,
		// A step whose worker is gone is tried again after this, not
		// after minutes; the steps heartbeat while they run.
		HeartbeatTimeout: activities.StepHeartbeat,
		// get_recipients may be slow or flaky: keep trying, but not
		// forever; an endpoint down for a day fails the event with the
		// activity's last error.
		ScheduleToCloseTimeout: 24 * time.Hour,
		RetryPolicy:            retryUntilItPasses(),
	})
}

// retryUntilItPasses is the retry policy of the steps that retry until
// their bound (schedule-to-close): get_recipients may be slow or flaky,
// Kafka may be down a while.
func retryUntilItPasses() *temporal.RetryPolicy {
	return &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: time.Minute}
}

// noRetry is the retry policy of a step tried once.
func noRetry() *temporal.RetryPolicy { return &temporal.RetryPolicy{MaximumAttempts: 1} }

// localStepContext is the context the event's steps run in first, as
// local activities (see localThenRemote).
func localStepContext(ctx workflow.Context) workflow.Context {
	return workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		StartToCloseTimeout: 30 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:    time.Second,
			BackoffCoefficient: 2,
			MaximumInterval:    5 * time.Second,
			MaximumAttempts:    3,
		},
	})
}

// open runs the first run's first steps: Open, the state it starts, and
// the event's one batch when the first page is all of it; a bigger
// audience goes on to fanOut from that page.
func (r *fanoutRun) open() (FanoutResult, error) {
	if !r.in.Event.ExpiresAt.IsZero() && r.guardVersion() {
		r.expiresAt = r.in.Event.ExpiresAt
		r.armExpiry()
	}
	// An event paused while it waited for its time is held here, so
	// that Open, which may deliver, runs only once it is resumed (or it
	// expires).
	r.waitWhilePaused()
	if r.ctx.Err() != nil {
		return r.finish(temporal.NewCanceledError())
	}
	if r.expiring() {
		// Expired before it opened (it waited for its time, or was
		// paused, past it): nothing is paged, nothing delivered.
		r.prog.ExpiresAt, r.expired = r.expiresAt, true
		return r.finish(nil)
	}
	o, err := r.openEvent()
	if err != nil {
		return r.finish(err)
	}
	if err := r.startState(o.Prepared); err != nil {
		return r.finish(err)
	}
	if err := r.recordPriority(o.Delivered); err != nil {
		return FanoutResult{}, err
	}
	r.initGuard()
	if o.Delivered {
		return r.openedDelivered(o)
	}
	if !o.Paged {
		if err := localThenRemote(r.ctx, localStepContext(r.ctx), stepContext(r.ctx), a.RecipientsPage, activities.RecipientsPageInput{
			Event: r.in.Event, Limit: r.st.Options.PageSize, BatchSize: r.st.Options.BatchSize,
		}, &o.Page); err != nil {
			return r.finish(err)
		}
	}
	if o.Page.OneBatch(r.st.Options.BatchSize) && !r.prog.Paused {
		if o.DeliverError != "" {
			return r.deliverRemote(o)
		}
		return r.deliverInline(o.Page.Recipients)
	}
	return r.fanOut(&o.Page)
}

// openEvent runs Open, one local activity, and when it fails for a reason
// other than a non-retryable error, Prepare on its own with its retries.
func (r *fanoutRun) openEvent() (activities.OpenResult, error) {
	ctx, in := r.ctx, r.in
	rate, from := r.inlinePace()
	// Prepare and a page within 30 s (the steps' own local-activity
	// timeout), and a delivery within its budget (with calls of the
	// default timeout; a type's longer calls leave Open less time to
	// start them). Schedule-to-close: the wait for a local-activity slot
	// counts.
	open := 30*time.Second + activities.LocalDeliverBudget(0, 0)
	octx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		ScheduleToCloseTimeout: open,
		StartToCloseTimeout:    open,
		RetryPolicy:            noRetry(),
	})
	var o activities.OpenResult
	err := workflow.ExecuteLocalActivity(octx, a.Open, activities.OpenInput{Event: in.Event, Rate: rate, PaceFrom: from}).Get(ctx, &o)
	var ae *temporal.ApplicationError
	switch {
	case err == nil:
	case ctx.Err() != nil || (errors.As(err, &ae) && ae.NonRetryable()):
		return o, err
	default:
		// Prepare failed: the steps one by one, with their retries.
		workflow.GetLogger(ctx).Warn("opening the event failed; taking its steps one by one", "error", err)
		if err := localThenRemote(ctx, localStepContext(ctx), stepContext(ctx), a.Prepare, activities.PrepareInput{Event: in.Event}, &o.Prepared); err != nil {
			return o, err
		}
	}
	return o, nil
}

// startState starts the run's state from what Prepare returned: the
// message, the type's options and the priority (the type's default when
// the event names none), which must be one fanout knows.
func (r *fanoutRun) startState(p activities.PrepareResult) error {
	r.st = &FanoutState{Message: p.Message, Options: p.Options.WithDefaults(), Priority: r.in.Event.Priority}
	if r.st.Priority == "" {
		r.st.Priority = r.st.Options.DefaultPriority
	}
	if !r.st.Priority.Valid() {
		return temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("unknown priority %q", r.st.Priority), ErrUnknownPriority, nil)
	}
	return nil
}

// recordPriority records the type's default priority of an event that
// named none as a search attribute: now, or with the final status of an
// event Open delivered.
func (r *fanoutRun) recordPriority(delivered bool) error {
	if r.in.Event.Priority != "" {
		return nil
	}
	// The bridge set type and status at start; the default priority is
	// only known now. An event delivered in this task records it with its
	// final status instead (one upsert, not two).
	r.finalSA = append(r.finalSA, vocab.PriorityKey.ValueSet(string(r.st.Priority)))
	if delivered {
		return nil
	}
	if err := workflow.UpsertTypedSearchAttributes(r.ctx, r.finalSA...); err != nil {
		return err
	}
	r.finalSA = nil
	return nil
}

// fanOut pages the audience from the cursor (first: the page Open read)
// and starts each page's batches in the window, until the last page, a
// cancel, an error or a continue-as-new; then it waits for the open
// batches and finishes.
func (r *fanoutRun) fanOut(first *activities.PageResult) (FanoutResult, error) {
	ctx := r.ctx
	actx := stepContext(ctx)
	r.lastUpsert = workflow.Now(ctx)
	r.armExpiry()
	r.setDetails()
	for !r.prog.PagingDone {
		r.waitWhilePaused()
		if ctx.Err() != nil {
			break
		}
		if first == nil && r.expiring() {
			r.expired = true // paging stops: the rest of the audience is not asked for
			break
		}
		var page activities.PageResult
		batchSize := r.pageBatchSize()
		if first != nil {
			page, first = *first, nil
		} else if err := workflow.ExecuteActivity(actx, a.RecipientsPage, activities.RecipientsPageInput{
			Event: r.in.Event, Cursor: r.st.Cursor, Limit: r.st.Options.PageSize, BatchSize: batchSize, FirstBatch: r.st.NextBatch,
		}).Get(ctx, &page); err != nil {
			r.drain(0)
			return r.finish(err)
		}
		r.startPage(page, batchSize)
		if ctx.Err() != nil || r.expired {
			break // canceled or expired mid-page: the cursor stays at this page
		}
		r.st.Cursor = page.NextCursor
		r.prog.Cursor = page.NextCursor
		r.prog.PagingDone = page.NextCursor == ""
		if err := r.audienceBound(); err != nil {
			// What was found is delivered; the event then fails with the
			// reason, visible in the UI.
			r.drain(0)
			return r.finish(err)
		}
		r.maybeUpsertCounts()
		if !r.prog.PagingDone && continueAsNewDue(ctx, r.in.MaxHistoryLength) {
			// Children close with this run (parent-close policy), so let the
			// open batches finish first; nothing in flight is lost.
			r.drain(0)
			if ctx.Err() != nil {
				break
			}
			return r.continueAsNew()
		}
	}
	r.drain(0)
	if ctx.Err() != nil {
		return r.finish(temporal.NewCanceledError())
	}
	return r.finish(nil)
}

// startPage counts a page and starts its batches, each once the window,
// a pause and the rate cap let it: the staged batches the page names, or
// its recipients in batches of batchSize. A cancel stops it.
func (r *fanoutRun) startPage(page activities.PageResult, batchSize int) {
	r.prog.Pages++
	r.prog.Found += int64(page.Len())
	r.oneStep = r.prog.Pages == 1 && page.NextCursor == "" && r.in.State == nil && r.oneStepVersion()
	for i := range page.Batches {
		pace, ok := r.nextBatch(page.Batches[i].Count)
		if !ok {
			break
		}
		if r.expiring() {
			n := 0
			for _, b := range page.Batches[i:] {
				n += b.Count
			}
			r.expire(int64(n))
			break
		}
		ref := page.Batches[i]
		r.startBatch(ref.N, nil, &ref, pace)
		r.st.NextBatch = ref.N + 1
	}
	for rs := page.Recipients; len(rs) > 0 && len(page.Batches) == 0; {
		k := min(len(rs), batchSize)
		pace, ok := r.nextBatch(k)
		if !ok {
			break
		}
		if r.expiring() {
			r.expire(int64(len(rs)))
			break
		}
		r.startBatch(r.st.NextBatch, rs[:k], nil, pace)
		r.st.NextBatch++
		rs = rs[k:]
	}
}

// continueAsNew hands the cursor, the counters, the operator's steering
// and the rate cap's lanes to the next run, once the update handlers are
// done.
func (r *fanoutRun) continueAsNew() (FanoutResult, error) {
	ctx := r.ctx
	r.st.Progress = r.prog
	r.st.Paused, r.st.Rate = r.prog.Paused, r.prog.Rate
	if r.prog.Rate > 0 && len(r.laneEnds) > 0 {
		r.st.LaneEnds, r.st.LaneShare = r.laneEnds, r.laneShare
	}
	workflow.GetLogger(ctx).Info("continuing as new", "batches", r.st.NextBatch) // not the cursor: the source's opaque state
	if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
		return FanoutResult{}, err
	}
	return FanoutResult{}, workflow.NewContinueAsNewError(ctx, Fanout, FanoutInput{
		Event: r.in.Event, State: r.st, MaxHistoryLength: r.in.MaxHistoryLength,
	})
}

// pageBatchSize is the batch size of the page at the cursor: BatchSize
// until the event has started a window of batches (Window), the larger
// LargeBatch from then on. Only an audience that fills the window grows its
// batches: the window caps the batches in flight anyway, so larger ones
// then cost Temporal less per delivery without costing parallelism, while
// a smaller event keeps as many batches as it has pages to spread over the
// delivery workers (a large batch runs on one worker: an event of 40,000
// recipients in 10 small batches and 3 large ones ran at one worker's pace
// with four workers).
//
// Runs recorded with version 1 of largeChange grew their batches from the
// second page on, and replay so.
func (r *fanoutRun) pageBatchSize() int {
	o := r.st.Options
	switch {
	case r.st.Cursor == "":
		return o.BatchSize
	case r.st.NextBatch >= o.Window || o.LargeBatch() == o.BatchSize:
		return o.LargeBatch() // every version agrees
	case r.largeAfterFirstPage():
		return o.LargeBatch()
	}
	return o.BatchSize
}

// largeChange is the workflow.GetVersion change of pageBatchSize's rule:
// DefaultVersion (recorded before it) and 2 grow an event's batches after
// a window of small ones, 1 after its first page.
const largeChange = "large-after-first-page"

// largeAfterFirstPage reports whether this run was recorded with version 1
// of largeChange; new runs record 2.
func (r *fanoutRun) largeAfterFirstPage() bool {
	return workflow.GetVersion(r.ctx, largeChange, workflow.DefaultVersion, 2) == 1
}

// audienceBound is the error of an event whose paging must stop: more pages
// than MaxPages (an endpoint handing out cursors forever) or more recipients
// than MaxRecipients.
func (r *fanoutRun) audienceBound() error {
	opts, p := r.st.Options, r.prog
	switch {
	case p.PagingDone:
		return nil
	case p.Pages >= opts.MaxPages:
		return temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("too_many_pages: paging stopped after %d pages (MaxPages); %d recipients found were delivered", p.Pages, p.Found), ErrTooManyPages, nil)
	case opts.MaxRecipients > 0 && p.Found > opts.MaxRecipients:
		return temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("too_many_recipients: paging stopped at %d recipients, over MaxRecipients %d", p.Found, opts.MaxRecipients), ErrTooManyRecipients, nil)
	}
	return nil
}

// beforeBatch waits for room in the window, for a resume and for room
// under the rate cap before a batch of k recipients, and returns the
// batch's pace; false means the run was canceled.
func (r *fanoutRun) beforeBatch(k int) (batchPace, bool) {
	r.drain(r.window() - 1)
	r.waitWhilePaused()
	for r.prog.Rate > 0 && r.ctx.Err() == nil && !r.expiring() {
		share := r.prog.Rate / float64(rateLanes(r.prog.Rate, r.st.Options))
		if r.uncapped == 0 && r.committed+share <= r.prog.Rate*(1+1e-9) {
			return r.takeLane(share), true
		}
		// Wakes on a finished batch, a rate change, a pause.
		r.sel.Select(r.ctx)
		r.drain(r.window() - 1)
		r.waitWhilePaused()
	}
	return batchPace{}, r.ctx.Err() == nil
}

// rateLaneCalls is the rate of calls one delivery slot is assumed to
// sustain (a destination answering within 100 ms): a batch is given at
// most DeliverConcurrency × this as its share of a cap.
const rateLaneCalls = 10

// rateLanes is the number of lanes a cap of perSecond runs in: batches
// open at once, each delivering perSecond/lanes. As few as a batch's
// concurrency allows (fewer and shorter batches in flight: a new cap
// reaches every open batch sooner), at most the window.
func rateLanes(perSecond float64, o fanout.TypeOptions) int {
	per := float64(max(o.DeliverConcurrency, 1) * rateLaneCalls)
	return int(max(1, min(float64(max(o.Window, 1)), math.Ceil(perSecond/per-1e-9))))
}

// takeLane gives the next batch a lane at share per second: the schedule
// of the lane that ended first, so the gap between its last batch and
// this one is made up (at most activities.MaxPaceCatchUp's worth), or a
// new lane from now.
func (r *fanoutRun) takeLane(share float64) batchPace {
	now := workflow.Now(r.ctx)
	if share != r.laneShare {
		r.laneEnds, r.laneShare = nil, share
	}
	from := now
	if len(r.laneEnds) > 0 {
		from = r.laneEnds[0]
		r.laneEnds = r.laneEnds[1:]
		if earliest := now.Add(-activities.MaxPaceCatchUp); from.Before(earliest) {
			from = earliest
		}
	}
	return batchPace{share: share, from: from}
}

// releaseLane frees the lane of a capped batch of size recipients that
// finished: its schedule ended at from + size/share, or now if it finished
// sooner (recipients the gate skipped take no time).
func (r *fanoutRun) releaseLane(p batchPace, size int64) {
	r.capped--
	r.committed -= p.share
	if r.capped == 0 {
		r.committed = 0
	}
	if p.share != r.laneShare {
		return // a lane of an earlier cap
	}
	end := p.from.Add(time.Duration(float64(size) / p.share * float64(time.Second)))
	if now := workflow.Now(r.ctx); now.Before(end) {
		end = now
	}
	r.laneEnds = append(r.laneEnds, end)
}

// startBatch starts batch n: recips inline, or the staged batch ref, at
// pace.
func (r *fanoutRun) startBatch(n int, recips []fanout.Recipient, ref *activities.BatchRef, pace batchPace) {
	ctx, st, opts := r.ctx, r.st, r.st.Options
	size := int64(len(recips))
	if ref != nil {
		size = int64(ref.Count)
	}
	// A large batch runs on its priority's large-batch queue, with slots
	// of its own (vocab.LargeDeliveryTaskQueue); its activity runs on the
	// child's queue. (A replayed history keeps the queue it recorded: the
	// SDK matches a child by its type, not its queue.) The batch and its
	// activity dispatch fairly against other events' on the queue (the
	// activity inherits it).
	tq := vocab.DeliveryTaskQueue(st.Priority)
	if size > int64(opts.BatchSize) {
		tq = vocab.LargeDeliveryTaskQueue(st.Priority)
	}
	cctx := workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{
		WorkflowID:            vocab.BatchWorkflowID(workflow.GetInfo(ctx).WorkflowExecution.ID, n),
		TaskQueue:             tq,
		WorkflowRunTimeout:    batchRunTimeout,
		ParentClosePolicy:     enumspb.PARENT_CLOSE_POLICY_TERMINATE,
		WorkflowIDReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		Priority:              vocab.TaskPriority(r.in.Event, opts.FairnessWeight),
	})
	bin := r.batchInput(n, recips, ref)
	bin.Rate, bin.PaceFrom = pace.share, pace.from
	var fut workflow.Future
	if r.oneStep {
		actx := deliverContext(ctx, opts.DeliverTimeout, opts.CallTimeout, tq)
		ao := workflow.GetActivityOptions(actx)
		ao.Priority = vocab.TaskPriority(r.in.Event, opts.FairnessWeight)
		fut = workflow.ExecuteActivity(workflow.WithActivityOptions(actx, ao), a.DeliverBatch, bin)
	} else {
		fut = workflow.ExecuteChildWorkflow(cctx, DeliveryBatch, DeliveryBatchInput{
			DeliverBatchInput: bin,
			BatchNo:           n,
			Timeout:           opts.DeliverTimeout,
			CallTimeout:       opts.CallTimeout,
		})
	}
	r.pending++
	r.prog.BatchesStarted++
	r.prog.PendingBatches = r.pending
	if pace.share > 0 {
		r.capped++
		r.committed += pace.share
	} else {
		r.uncapped++
	}
	if r.canary.Recipients > 0 {
		r.st.CanarySent += size
	}
	r.sel.AddFuture(fut, func(f workflow.Future) {
		if pace.share > 0 {
			r.releaseLane(pace, size)
		} else {
			r.uncapped--
		}
		r.pending--
		r.prog.PendingBatches = r.pending
		r.prog.BatchesCompleted++
		var res DeliveryBatchResult
		err := f.Get(ctx, &res)
		r.account(res, err, size)
		r.adaptWindow(res)
		if dl := r.deadLetterFailed(bin, err); dl != nil {
			// The dead-lettering holds the batch's place until it is done.
			r.pending++
			r.sel.AddFuture(dl, func(f workflow.Future) {
				r.pending--
				r.countDeadLettered(f)
			})
		}
		r.setDetails()
	})
}

// deadLetterFailed sends the recipients of a batch that ended in error (a
// failed start, a termination, a timeout, a non-retryable error) to the
// deliveries DLQ with the error, so that a redrive can reach them: it
// presents the batch's attempt id, so what the batch delivered before it
// failed is skipped. It returns nil for a batch that did not fail and for
// a canceled one.
func (r *fanoutRun) deadLetterFailed(in activities.DeliverBatchInput, err error) workflow.Future {
	var canceled *temporal.CanceledError
	if err == nil || errors.As(err, &canceled) || r.ctx.Err() != nil {
		return nil
	}
	// On the batch's delivery queue (the letters' memory and Kafka writes
	// belong to the delivery pool, not to event processing), heartbeating
	// between chunks of letters.
	actx := workflow.WithActivityOptions(r.ctx, workflow.ActivityOptions{
		TaskQueue:              vocab.DeliveryTaskQueue(r.st.Priority),
		StartToCloseTimeout:    10 * time.Minute,
		HeartbeatTimeout:       time.Minute,
		ScheduleToCloseTimeout: 24 * time.Hour, // Kafka may be down a while
		RetryPolicy:            retryUntilItPasses(),
	})
	return workflow.ExecuteActivity(actx, a.DeadLetterBatch, activities.DeadLetterBatchInput{Batch: in, Reason: err.Error()})
}

// countDeadLettered adds what DeadLetterBatch dead-lettered to the progress.
func (r *fanoutRun) countDeadLettered(f workflow.Future) {
	var n int
	if err := f.Get(r.ctx, &n); err != nil {
		r.prog.LastBatchError = "dead-lettering a failed batch: " + err.Error()
		return
	}
	r.prog.DeadLettered += int64(n)
}

// batchInput is the DeliverBatchInput of batch n: recips inline, or the
// staged batch ref.
func (r *fanoutRun) batchInput(n int, recips []fanout.Recipient, ref *activities.BatchRef) activities.DeliverBatchInput {
	in := activities.NewBatchInput(r.in.Event, r.st.Priority, n, r.st.Message, r.st.Options, recips, ref)
	in.ExpiresAt = r.expiresAt
	return in
}

// account adds a batch's outcome to the progress.
func (r *fanoutRun) account(res activities.DeliverBatchResult, err error, size int64) {
	var canceled *temporal.CanceledError
	switch {
	case err != nil && (errors.As(err, &canceled) || r.ctx.Err() != nil):
		r.prog.Canceled += size
	case err != nil:
		// Termination or timeout of the batch, or a non-retryable activity
		// error (an event type this worker does not know).
		r.prog.Failed += size
		r.prog.BatchErrors++
		r.prog.LastBatchError = err.Error()
	default:
		r.prog.Delivered += int64(res.Delivered)
		r.prog.Duplicates += int64(res.Duplicates)
		r.prog.Failed += int64(res.Failed)
		r.prog.DeadLettered += int64(res.DeadLettered)
		r.prog.Unconfirmed += int64(res.Unconfirmed)
		r.prog.Braked += int64(res.Braked)
		r.addExpired(int64(res.Expired))
		r.prog.Destinations = activities.MergeDestinationStats(r.prog.Destinations, res.Destinations)
	}
}

// window is how many batches the event keeps open at once (started and
// not finished): Options.Window at most, fewer while its batches wait in
// the delivery queue longer than they run (adaptWindow).
func (r *fanoutRun) window() int {
	if r.st.Window > 0 {
		return min(r.st.Window, r.st.Options.Window)
	}
	return r.st.Options.Window
}

// The adaptive window keeps an event's queued batches to what the delivery
// pool can start soon: a batch that waited in the queue longer than it ran
// (and over queueWaitFloor) means more batches are queued than the workers
// run, so the window shrinks by one, down to minWindow; one that waited
// less than a quarter of its run (or under queueWaitFloor) grows it by one,
// up to Options.Window. The event's queued batches then settle between a
// quarter and all of the slots that serve them: the slots stay fed, and a
// small event of the same priority waits behind about one batch per slot
// instead of Window per big event (on a server without fairness; with it,
// the keys take turns anyway). More workers start batches sooner, so the
// window grows back with them.
const (
	minWindow      = 4
	queueWaitFloor = 250 * time.Millisecond
)

// adaptWindow moves the window by what a finished batch's attempt waited
// and ran (neither known after a retry: no change).
func (r *fanoutRun) adaptWindow(res DeliveryBatchResult) {
	if res.Ran <= 0 {
		return
	}
	w := r.window()
	switch {
	case res.Queued > max(res.Ran, queueWaitFloor):
		w = max(minWindow, w-1)
	case res.Queued < max(res.Ran/4, queueWaitFloor):
		w++
	}
	r.st.Window = min(w, r.st.Options.Window)
}

// drain waits until at most limit batches are open.
func (r *fanoutRun) drain(limit int) {
	for r.pending > limit {
		r.sel.Select(r.ctx)
	}
}

// waitWhilePaused blocks while the event is paused, still accounting for the
// batches that finish meanwhile.
func (r *fanoutRun) waitWhilePaused() {
	if r.prog.Paused {
		r.setDetails()
	}
	// An expiry that passes ends the wait: nothing can be delivered then.
	for r.prog.Paused && r.ctx.Err() == nil && !r.expiring() {
		r.sel.Select(r.ctx)
	}
}

// setDetails writes the one-line markdown the Temporal UI shows as the
// workflow's current details.
func (r *fanoutRun) setDetails() {
	if r.sched.waiting {
		workflow.SetCurrentDetails(r.ctx, r.scheduleDetails())
		return
	}
	p := r.prog
	state := "running"
	switch {
	case r.expired && p.PendingBatches == 0:
		state = "**expired**"
	case p.PagingDone && p.PendingBatches == 0:
		state = "done"
	case p.Paused && p.PauseReason != "":
		state = "**paused** (" + p.PauseReason + ")"
	case p.Paused:
		state = "**paused**"
	case r.expired:
		state = "expired, batches finishing"
	case p.PagingDone:
		state = "paging done"
	}
	state += r.guardDetails()
	rate := ""
	if p.Rate > 0 {
		rate = fmt.Sprintf(" · rate cap %.0f/s", p.Rate)
	}
	if p.Braked > 0 {
		rate += fmt.Sprintf(" · braked: %d held while other priorities delivered", p.Braked)
	}
	rate += activities.DestinationDetails(p.Destinations)
	unconfirmed := ""
	if p.Unconfirmed > 0 {
		unconfirmed = fmt.Sprintf(", %d unconfirmed at most once", p.Unconfirmed)
	}
	workflow.SetCurrentDetails(r.ctx, fmt.Sprintf(
		"%s · **%d delivered** of %d found · %d duplicates · %d failed (%d dead-lettered%s) · batches %d open, %d done · page %d, run %d%s",
		state, p.Delivered, p.Found, p.Duplicates, p.Failed, p.DeadLettered, unconfirmed, p.PendingBatches, p.BatchesCompleted, p.Pages, p.Runs, rate))
}

// maybeUpsertCounts upserts the count search attributes, at most every
// countsUpsertInterval.
func (r *fanoutRun) maybeUpsertCounts() {
	now := workflow.Now(r.ctx)
	if now.Sub(r.lastUpsert) < countsUpsertInterval {
		return
	}
	r.lastUpsert = now
	_ = workflow.UpsertTypedSearchAttributes(r.ctx, r.countUpdates()...)
}

func (r *fanoutRun) countUpdates() []temporal.SearchAttributeUpdate {
	u := []temporal.SearchAttributeUpdate{
		vocab.FoundKey.ValueSet(r.prog.Found), vocab.DeliveredKey.ValueSet(r.prog.Delivered), vocab.FailedKey.ValueSet(r.prog.Failed),
	}
	if r.expired || r.prog.Expired > 0 {
		// Only on events that expired: the attribute is newer than the
		// others, and the others' histories do not set it.
		u = append(u, vocab.ExpiredKey.ValueSet(float64(r.prog.Expired)))
	}
	return u
}

// localThenRemote runs an activity as a local activity (no extra workflow
// task) and falls back to a regular activity when that fails for a reason
// other than a non-retryable error (a slow get_recipients, a worker
// restart, a delivery to retry); a delay the activity asked for (backoff,
// Retry-After) is waited out first.
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
	if ae != nil && ae.NextRetryDelay() > 0 {
		if err := workflow.Sleep(ctx, ae.NextRetryDelay()); err != nil {
			return err
		}
	}
	return workflow.ExecuteActivity(actx, act, in).Get(ctx, out)
}

// openedDelivered finishes an event whose one batch Open delivered.
func (r *fanoutRun) openedDelivered(o activities.OpenResult) (FanoutResult, error) {
	// Open leaves the delivered recipients out of its result: Len is their
	// count.
	n := int64(o.Page.Len())
	r.prog.Pages, r.prog.Found, r.prog.PagingDone = 1, n, true
	r.prog.BatchesStarted, r.prog.BatchesCompleted = 1, 1
	r.account(o.Delivery, nil, n)
	return r.finish(nil)
}

// deliverRemote hands the one batch Open could not finish delivering to a
// DeliverBatch activity on the priority's delivery queue, after the delay
// it asked for; the same attempt id skips what Open delivered. A
// non-retryable error fails the batch instead, as it fails that activity.
func (r *fanoutRun) deliverRemote(o activities.OpenResult) (FanoutResult, error) {
	ctx, st, recips := r.ctx, r.st, o.Page.Recipients
	r.prog.Pages, r.prog.Found, r.prog.PagingDone = 1, int64(len(recips)), true
	if r.expiring() {
		r.expire(int64(len(recips)))
		return r.finish(nil)
	}
	r.prog.BatchesStarted, r.prog.PendingBatches, r.pending = 1, 1, 1
	r.setDetails()
	in := r.batchInput(0, recips, nil)
	in.Rate, in.PaceFrom = r.inlinePace()
	var res activities.DeliverBatchResult
	var err error
	switch {
	case o.DeliverNonRetryable:
		err = temporal.NewNonRetryableApplicationError(o.DeliverError, o.DeliverErrorType, nil)
	case o.DeliverRetryDelay > 0:
		workflow.GetLogger(ctx).Warn("local delivery did not finish; retrying as an activity", "error", o.DeliverError)
		err = workflow.Sleep(ctx, o.DeliverRetryDelay)
	default:
		workflow.GetLogger(ctx).Warn("local delivery did not finish; retrying as an activity", "error", o.DeliverError)
	}
	if err == nil {
		err = workflow.ExecuteActivity(deliverContext(ctx, st.Options.DeliverTimeout, st.Options.CallTimeout, vocab.DeliveryTaskQueue(st.Priority)), a.DeliverBatch, in).Get(ctx, &res)
	}
	return r.settleInline(in, res, err)
}

// deliverInline delivers a single-batch event without a child workflow:
// on the fast path (a local activity here, see TypeOptions.LocalDeliveryMax)
// when the audience is small enough, else as a DeliverBatch activity on the
// priority's delivery queue.
func (r *fanoutRun) deliverInline(recips []fanout.Recipient) (FanoutResult, error) {
	ctx, st := r.ctx, r.st
	r.prog.Pages++
	r.prog.Found += int64(len(recips))
	r.prog.PagingDone = true
	if len(recips) > 0 && r.expiring() {
		r.expire(int64(len(recips)))
		return r.finish(nil)
	}
	if len(recips) > 0 {
		r.prog.BatchesStarted, r.prog.PendingBatches, r.pending = 1, 1, 1
		r.setDetails()
		var res activities.DeliverBatchResult
		in := r.batchInput(0, recips, nil)
		in.Rate, in.PaceFrom = r.inlinePace()
		dctx := deliverContext(ctx, st.Options.DeliverTimeout, st.Options.CallTimeout, vocab.DeliveryTaskQueue(st.Priority))
		var err error
		if len(recips) <= st.Options.LocalDeliveryMax {
			// Schedule-to-close: the wait for a local-activity slot counts.
			budget := activities.LocalDeliverBudget(st.Options.DeliverTimeout, st.Options.CallTimeout)
			lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
				ScheduleToCloseTimeout: budget,
				StartToCloseTimeout:    budget,
				RetryPolicy:            noRetry(),
			})
			err = localThenRemote(ctx, lctx, dctx, a.DeliverBatch, in, &res)
		} else {
			err = workflow.ExecuteActivity(dctx, a.DeliverBatch, in).Get(ctx, &res)
		}
		return r.settleInline(in, res, err)
	}
	return r.finish(nil)
}

// inlinePace is the pace of an event's one batch run without a child (in
// Open, or as an activity): the whole rate cap, set before the first page
// (while the event waited for its time, say), from now; none without a cap.
func (r *fanoutRun) inlinePace() (float64, time.Time) {
	if r.prog.Rate <= 0 {
		return 0, time.Time{}
	}
	return r.prog.Rate, workflow.Now(r.ctx)
}

// settleInline accounts for an event's one batch, run as an activity
// without a child, and finishes the event.
func (r *fanoutRun) settleInline(in activities.DeliverBatchInput, res activities.DeliverBatchResult, err error) (FanoutResult, error) {
	r.prog.PendingBatches, r.prog.BatchesCompleted, r.pending = 0, 1, 0
	r.account(res, err, int64(len(in.Recipients)))
	if dl := r.deadLetterFailed(in, err); dl != nil {
		r.countDeadLettered(dl)
	}
	if r.ctx.Err() != nil {
		return r.finish(temporal.NewCanceledError())
	}
	return r.finish(nil)
}

func continueAsNewDue(ctx workflow.Context, maxHistory int) bool {
	info := workflow.GetInfo(ctx)
	if info.GetContinueAsNewSuggested() {
		return true
	}
	return maxHistory > 0 && info.GetCurrentHistoryLength() >= maxHistory
}

// finish records the final status and counts as search attributes and
// returns.
func (r *fanoutRun) finish(err error) (FanoutResult, error) {
	ctx, prog := r.ctx, r.prog
	status := vocab.StatusCompleted
	if err == nil && prog.Failed > 0 {
		status = vocab.StatusCompletedWithFailures
	}
	var canceled *temporal.CanceledError
	switch {
	case errors.As(err, &canceled) || (err != nil && ctx.Err() != nil):
		status = vocab.StatusCanceled
	case err != nil:
		status = vocab.StatusFailed
	case r.expired || prog.Expired > 0:
		status = vocab.StatusExpired
	}
	r.setDetails()
	uctx, _ := workflow.NewDisconnectedContext(ctx)
	if uerr := workflow.UpsertTypedSearchAttributes(uctx, append(append(r.countUpdates(), vocab.StatusKey.ValueSet(status)), r.finalSA...)...); uerr != nil {
		return FanoutResult{Progress: prog}, fmt.Errorf("upsert status: %w (after %v)", uerr, err)
	}
	if err == nil {
		// Let update handlers that are mid-way finish before completing.
		_ = workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) })
	}
	return FanoutResult{Progress: prog}, err
}

// The guard of an event: its canary and its expiry (both off unless the
// event or its type sets them).
//
// The canary is the first batches of the event, together at least
// Canary.Recipients: once they are started, the next batch waits until
// they have all finished, and the event goes on only if the recipients
// they failed are at most MaxFailureRatio of those they settled (delivered
// or failed; duplicates, delivered earlier, and canceled ones count for
// neither). Failed is the batches' final outcome: given up at once on a
// permanent answer, after MaxAttempts on a transient one (a batch that
// ended in error counts all its recipients), so a canary judges what the
// event would leave behind, not a destination's first hiccup. Otherwise
// the event pauses itself (FanoutStatus paused, the reason on its details
// line and in Progress.PauseReason) until an operator's resume. An
// audience delivered in one batch has no canary: it would be all of it.
//
// The expiry: a batch that would start after it is not started, its
// recipients counted Expired, and paging stops; batches running then
// finish their current attempt and are not retried after it (DeliverBatch
// counts what they left Expired). The event ends with status expired and
// FanoutExpired set.

// oneStepChange is the workflow.GetVersion change of oneStepBatches:
// recorded histories, whose one-page events started children, replay
// without it.
const oneStepChange = "one-step-batches"

// oneStepBatches: an event whose whole audience came in its first page
// runs that page's batches as DeliverBatch activities on the queues their
// children would have used, with the same options, fairness key and
// attempt ids, instead of as DeliveryBatch children. It is what a lone
// batch already does (deliverInline), for up to a page of them. A small
// event then reaches its recipients one step sooner: no child to start
// and no child workflow task before the activity is scheduled, a step that
// waits 100 to 250 ms on a server busy with big events. The batches are
// not workflows of their own (the Temporal UI lists them as the event's
// activities); the event's history gains a few events per batch, no more
// than a child's would add.
func (r *fanoutRun) oneStepVersion() bool {
	return workflow.GetVersion(r.ctx, oneStepChange, workflow.DefaultVersion, 1) >= 1
}

// guardChange is the workflow.GetVersion change of the guard: events that
// have one record its marker, and recorded histories (which have none)
// replay without it.
const guardChange = "guard"

// guardVersion reports whether this run may take the guard's decisions.
func (r *fanoutRun) guardVersion() bool {
	return workflow.GetVersion(r.ctx, guardChange, workflow.DefaultVersion, 1) >= 1
}

// initGuard resolves the event's canary and expiry, once the type's
// options are known: on the first run its expires_at or, without one, the
// type's TTL from now (after a scheduled event's wait); later runs carry
// it in the state.
func (r *fanoutRun) initGuard() {
	st, ev := r.st, r.in.Event
	if r.in.State == nil {
		st.ExpiresAt = ev.ExpiresAt
		if st.ExpiresAt.IsZero() && st.Options.TTL > 0 {
			st.ExpiresAt = workflow.Now(r.ctx).Add(st.Options.TTL)
		}
	}
	c := fanout.CanaryOf(ev, st.Options)
	if st.CanaryJudged {
		c = fanout.Canary{}
	}
	if c.Recipients == 0 && st.ExpiresAt.IsZero() {
		return
	}
	if !r.guardVersion() {
		st.ExpiresAt = time.Time{}
		return
	}
	r.canary, r.expiresAt = c, st.ExpiresAt
	r.prog.ExpiresAt = st.ExpiresAt
}

// armExpiry starts a timer at the expiry, which wakes the run's waits
// (for a resume, the window, the rate cap) when it passes.
func (r *fanoutRun) armExpiry() {
	if r.expiresAt.IsZero() || r.armed {
		return
	}
	r.armed = true
	if d := r.expiresAt.Sub(workflow.Now(r.ctx)); d > 0 {
		r.sel.AddFuture(workflow.NewTimer(r.ctx, d), func(workflow.Future) {})
	}
}

// expiring reports whether the event has expired.
func (r *fanoutRun) expiring() bool {
	return !r.expiresAt.IsZero() && !workflow.Now(r.ctx).Before(r.expiresAt)
}

// expire stops the event at its expiry with n recipients not started.
func (r *fanoutRun) expire(n int64) {
	r.expired = true
	r.addExpired(n)
	workflow.GetLogger(r.ctx).Info("expired", "expires_at", r.expiresAt, "not_started", n)
}

// addExpired counts n expired recipients in the progress and the
// fanout.expired metric (not recorded while a history replays).
func (r *fanoutRun) addExpired(n int64) {
	if n <= 0 {
		return
	}
	r.prog.Expired += n
	workflow.GetMetricsHandler(r.ctx).WithTags(map[string]string{
		"event_type": r.in.Event.Type, "priority": string(r.st.Priority),
	}).Counter(activities.ExpiredMetric).Inc(n)
}

// nextBatch waits until the next batch, of k recipients, may start (the
// canary's verdict, the window, a resume, the rate cap) and returns its
// pace; false means the run was canceled. At the expiry it returns at
// once: the caller expires the batch.
func (r *fanoutRun) nextBatch(k int) (batchPace, bool) {
	if r.expiring() {
		return batchPace{}, true
	}
	r.judgeCanaryWhenDue()
	return r.beforeBatch(k)
}

// judgeCanaryWhenDue judges the canary once its batches are started: it
// waits for them to finish, then lets the event go on or pauses it.
func (r *fanoutRun) judgeCanaryWhenDue() {
	c := r.canary
	if c.Recipients == 0 || r.st.CanarySent < int64(c.Recipients) {
		return
	}
	r.drain(0)
	if r.ctx.Err() != nil {
		return
	}
	r.canary, r.st.CanaryJudged = fanout.Canary{}, true
	// Every batch started so far is the canary's.
	p := r.prog
	settled := p.Delivered + p.Failed
	ratio := 0.0
	if settled > 0 {
		ratio = float64(p.Failed) / float64(settled)
	}
	verdict := fmt.Sprintf("%d of %d failed (%.3g%% %s %.3g%%)", p.Failed, settled, ratio*100, map[bool]string{true: "≤", false: ">"}[ratio <= c.MaxFailureRatio], c.MaxFailureRatio*100)
	if ratio <= c.MaxFailureRatio {
		r.prog.Canary = "passed: " + verdict
		workflow.GetLogger(r.ctx).Info("canary passed", "verdict", verdict)
		r.setDetails()
		return
	}
	r.prog.Canary = "failed: " + verdict
	r.prog.Paused, r.prog.PauseReason = true, "canary: "+verdict
	workflow.GetLogger(r.ctx).Warn("canary failed: the event pauses until it is resumed", "verdict", verdict)
	r.setDetails()
	if err := workflow.UpsertTypedSearchAttributes(r.ctx, vocab.StatusKey.ValueSet(vocab.StatusPaused)); err != nil {
		workflow.GetLogger(r.ctx).Error("upsert of the paused status failed", "error", err)
	}
}

// guardDetails is the guard's part of the details line.
func (r *fanoutRun) guardDetails() string {
	p, out := r.prog, ""
	if p.Canary != "" {
		out += " · canary " + p.Canary
	}
	if p.Expired > 0 || r.expired {
		out += fmt.Sprintf(" · **%d expired** (expires_at %s; paging stopped)", p.Expired, p.ExpiresAt.UTC().Format(time.RFC3339))
	} else if !p.ExpiresAt.IsZero() {
		out += " · expires " + p.ExpiresAt.UTC().Format(time.RFC3339)
	}
	return out
}

// maxReasonBytes bounds an operator's pause reason kept in the progress
// and shown on the details line.
const maxReasonBytes = 200

// clipReason cuts a pause reason to maxReasonBytes (at a rune boundary).
func clipReason(s string) string {
	if len(s) <= maxReasonBytes {
		return s
	}
	i := maxReasonBytes
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "…"
}
