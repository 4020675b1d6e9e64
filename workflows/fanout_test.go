package workflows

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	sdkpb "go.temporal.io/api/sdk/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/activities"
	"github.com/fanout/fanout/workflows/vocab"
)

// The tests run Fanout and its DeliveryBatch children in the Temporal test
// environment with the three activities mocked: Prepare returns a fixed
// message and the fixture's options, RecipientsPage serves a fake in-memory
// audience (cursor = decimal offset) and DeliverBatch records what it was
// handed. Durations are on the test environment's mock clock.

// fixture describes one fan-out under test.
type fixture struct {
	Event    fanout.Event
	Audience int                // recipients r00000 .. r<Audience-1>
	Options  fanout.TypeOptions // as returned by Prepare (defaults not applied)
	// EmptyTail makes the audience end with an empty page carrying a cursor.
	EmptyTail bool
	// MaxHistoryLength is passed in FanoutInput; HistoryPerPage is added to
	// the (simulated) current history length on each RecipientsPage call,
	// since the test environment does not count history events.
	MaxHistoryLength int
	HistoryPerPage   int
	PageDelay        time.Duration
	DeliverDelay     time.Duration
	// Outcome, if set, classifies a recipient in DeliverBatch's result.
	Outcome func(r fanout.Recipient) outcome
	// DeliverErr, if set and non-nil for a batch, is DeliverBatch's error.
	DeliverErr func(in activities.DeliverBatchInput) error
	// Waits, if set, is how long a batch's attempt waited in its queue and
	// ran (DeliverBatch's result, which the adaptive window reads).
	Waits func(in activities.DeliverBatchInput) (queued, ran time.Duration)
	// PrepareErr is Prepare's error; OpenErr is Open's, before it runs
	// the steps.
	PrepareErr, OpenErr error
	// Staged makes RecipientsPage stage multi-batch pages (as it does when
	// the worker has Redis) and return batch refs instead of recipients.
	Staged bool
	// FirstPageRule runs the event as histories recorded with version 1 of
	// largeChange replay: its batches grow from its second page on.
	FirstPageRule bool
	// Logger, when set, receives the workflows' log.
	Logger tlog.Logger
}

type outcome int

const (
	delivered outcome = iota
	duplicate
	failed
	// unconfirmed: an at-most-once recipient whose call a crash
	// interrupted (dead-lettered, counted Failed and Unconfirmed).
	unconfirmed
	// braked: delivered, held to the low-priority brake's rate first.
	braked
	// expiredOut: left undelivered by a batch that ran past the event's
	// expiry (DeliverBatchResult.Expired).
	expiredOut
)

var testMessage = fanout.Message{ContentType: "text/plain", Body: []byte("hello")}

func recipientID(i int) string { return fmt.Sprintf("r%05d", i) }

// recorder is shared by the mocks and listeners of one test (possibly across
// several runs); they run on other goroutines than the test.
type recorder struct {
	mu sync.Mutex

	prepares    int
	pages       int                 // RecipientsPage calls in the current run
	attempts    map[string][]string // attempt id -> recipient ids delivered by it
	perRecip    map[string]int      // recipient id -> number of DeliverBatch calls holding it
	staged      map[string][]fanout.Recipient
	badInputs   []string // DeliverBatch inputs that broke an expectation
	inflight    int      // DeliverBatch calls in progress
	maxInflight int
	delivers    []deliverCall
	heartbeats  []time.Duration // HeartbeatTimeout of each DeliverBatch activity (not local)
	paced       []pacedCall
	// deadLettered: DeadLetterBatch calls, attempt id -> reason;
	// deadLetterQueues: the task queue each ran on.
	deadLettered     map[string]string
	deadLetterQueues map[string]string

	childIDs    []string
	childQueues map[string]bool
	// childSizes: each child's recipients, by its task queue.
	childSizes  map[string][]int
	openKids    int
	maxOpenKids int
	// openAtStarts: the children open as each one started (itself included).
	openAtStarts []int

	status, priority, eventType string      // last upserted search attributes
	statuses                    []string    // every status upserted, in order
	scheduledFor                time.Time   // last upserted FanoutScheduledFor
	expired                     *float64    // last upserted FanoutExpired (nil: never)
	expiresAts                  []time.Time // DeliverBatchInput.ExpiresAt of each DeliverBatch call
	prepareAt                   time.Time   // when Prepare was first called (mock clock)
}

// pacedCall is the pace one DeliverBatch call was given and when it ended
// (on the mock clock; it started DeliverDelay before).
type pacedCall struct {
	rate     float64
	from     time.Time
	end      time.Time
	attempts string
}

// deliverCall is how one DeliverBatch call ran.
type deliverCall struct {
	local bool
	queue string
}

func newRecorder() *recorder {
	return &recorder{attempts: map[string][]string{}, perRecip: map[string]int{}, childQueues: map[string]bool{}, staged: map[string][]fanout.Recipient{}}
}

// newEnv builds a test environment for fx whose mocks and listeners report to
// rec. Prepare, RecipientsPage and DeliverBatch are all mocked; a continued
// run must not call Prepare (the test checks rec.prepares).
func newEnv(t *testing.T, fx fixture, rec *recorder) *testsuite.TestWorkflowEnvironment {
	t.Helper()
	var s testsuite.WorkflowTestSuite
	if fx.Logger != nil {
		s.SetLogger(fx.Logger)
	}
	env := s.NewTestWorkflowEnvironment()
	env.RegisterWorkflow(Fanout)
	env.RegisterWorkflow(DeliveryBatch)
	env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: vocab.WorkflowID(fx.Event.Type, fx.Event.ID), TaskQueue: vocab.EventsTaskQueue})
	wantOpts := fx.Options.WithDefaults()
	if fx.FirstPageRule {
		env.OnGetVersion(largeChange, workflow.DefaultVersion, 2).Return(workflow.Version(1))
	}
	rec.mu.Lock()
	rec.pages = 0
	rec.mu.Unlock()

	prepareFn := func(_ context.Context, in activities.PrepareInput) (activities.PrepareResult, error) {
		rec.mu.Lock()
		rec.prepares++
		if rec.prepareAt.IsZero() {
			rec.prepareAt = env.Now()
		}
		rec.mu.Unlock()
		if fx.PrepareErr != nil {
			return activities.PrepareResult{}, fx.PrepareErr
		}
		return activities.PrepareResult{Message: testMessage, Options: fx.Options}, nil
	}
	env.OnActivity(a.Prepare, mock.Anything, mock.Anything).Return(prepareFn)

	pageFn := func(_ context.Context, in activities.RecipientsPageInput) (activities.PageResult, error) {
		rec.mu.Lock()
		rec.pages++
		pages := rec.pages
		rec.mu.Unlock()
		if fx.HistoryPerPage > 0 {
			env.SetCurrentHistoryLength(pages * fx.HistoryPerPage)
		}
		if in.Limit != wantOpts.PageSize {
			return activities.PageResult{}, temporal.NewNonRetryableApplicationError(
				fmt.Sprintf("limit %d, want %d", in.Limit, wantOpts.PageSize), "Test", nil)
		}
		off := 0
		if in.Cursor != "" {
			var err error
			if off, err = strconv.Atoi(in.Cursor); err != nil || off < 0 || off > fx.Audience {
				return activities.PageResult{}, temporal.NewNonRetryableApplicationError("bad cursor "+in.Cursor, "Test", err)
			}
		}
		end := min(off+in.Limit, fx.Audience)
		var p activities.PageResult
		for i := off; i < end; i++ {
			p.Recipients = append(p.Recipients, fanout.Recipient{ID: recipientID(i), Address: "addr-" + recipientID(i)})
		}
		if end < fx.Audience || (fx.EmptyTail && off < fx.Audience) {
			p.NextCursor = strconv.Itoa(end)
		}
		single := p.NextCursor == "" && len(p.Recipients) <= in.BatchSize
		if fx.Staged && !single && len(p.Recipients) > 0 {
			want := wantOpts.BatchSize
			if in.Cursor != "" && (fx.FirstPageRule || in.FirstBatch >= wantOpts.Window) {
				want = wantOpts.LargeBatch()
			}
			if in.BatchSize != want {
				return activities.PageResult{}, temporal.NewNonRetryableApplicationError(
					fmt.Sprintf("batch size %d, want %d", in.BatchSize, want), "Test", nil)
			}
			p.Count = len(p.Recipients)
			rec.mu.Lock()
			for i, b := range slices.Collect(slices.Chunk(p.Recipients, in.BatchSize)) {
				key := fmt.Sprintf("stage/%d", in.FirstBatch+i)
				rec.staged[key] = b
				p.Batches = append(p.Batches, activities.BatchRef{N: in.FirstBatch + i, Key: key, Count: len(b), PageCursor: in.Cursor})
			}
			rec.mu.Unlock()
			p.Recipients = nil
		}
		return p, nil
	}
	env.OnActivity(a.RecipientsPage, mock.Anything, mock.Anything).After(fx.PageDelay).Return(pageFn)

	startDeliver := func() {
		rec.mu.Lock()
		rec.inflight++
		rec.maxInflight = max(rec.maxInflight, rec.inflight)
		rec.mu.Unlock()
	}
	deliverFn := func(ctx context.Context, in activities.DeliverBatchInput) (activities.DeliverBatchResult, error) {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		rec.inflight--
		info := activity.GetInfo(ctx)
		rec.delivers = append(rec.delivers, deliverCall{local: info.IsLocalActivity, queue: info.TaskQueue})
		if !info.IsLocalActivity {
			rec.heartbeats = append(rec.heartbeats, info.HeartbeatTimeout)
		}
		rec.paced = append(rec.paced, pacedCall{rate: in.Rate, from: in.PaceFrom, end: env.Now(), attempts: in.AttemptID})
		rec.expiresAts = append(rec.expiresAts, in.ExpiresAt)
		if in.Ref != nil {
			// A staged batch: the workflow passed only the ref.
			if len(in.Recipients) != 0 || !fx.Staged || len(rec.staged[in.Ref.Key]) != in.Ref.Count ||
				in.AttemptID != vocab.AttemptID(fx.Event.Type, fx.Event.ID, in.Ref.N) {
				rec.badInputs = append(rec.badInputs, fmt.Sprintf("%s: bad ref %+v", in.AttemptID, in.Ref))
			}
			// A staged batch keeps the payload: it may have to fetch its
			// page again.
			if string(in.Event.Payload) != string(fx.Event.Payload) {
				rec.badInputs = append(rec.badInputs, in.AttemptID+": staged batch without the event payload")
			}
			in.Recipients = rec.staged[in.Ref.Key]
		} else if len(in.Event.Payload) != 0 {
			rec.badInputs = append(rec.badInputs, in.AttemptID+": batch with its recipients carries the payload")
		}
		if len(in.Recipients) == 0 || len(in.Recipients) > max(wantOpts.BatchSize, wantOpts.LargeBatch()) {
			rec.badInputs = append(rec.badInputs, fmt.Sprintf("%s: %d recipients (batch size %d, large %d)", in.AttemptID, len(in.Recipients), wantOpts.BatchSize, wantOpts.LargeBatch()))
		}
		if in.Event.ID != fx.Event.ID || string(in.Message.Body) != string(testMessage.Body) ||
			in.MaxAttempts != wantOpts.MaxAttempts || in.Concurrency != wantOpts.DeliverConcurrency {
			rec.badInputs = append(rec.badInputs, fmt.Sprintf("%s: unexpected input %+v", in.AttemptID, in))
		}
		if fx.DeliverErr != nil {
			if err := fx.DeliverErr(in); err != nil {
				return activities.DeliverBatchResult{}, err
			}
		}
		var res activities.DeliverBatchResult
		if fx.Waits != nil {
			res.Queued, res.Ran = fx.Waits(in)
		}
		for _, r := range in.Recipients {
			rec.attempts[in.AttemptID] = append(rec.attempts[in.AttemptID], r.ID)
			rec.perRecip[r.ID]++
			o := delivered
			if fx.Outcome != nil {
				o = fx.Outcome(r)
			}
			switch o {
			case delivered:
				res.Delivered++
			case duplicate:
				res.Duplicates++
			case failed:
				res.Failed++
				res.Failures = append(res.Failures, activities.Failure{Recipient: r, Attempts: 5, Permanent: true, Error: "gone"})
			case unconfirmed:
				res.Failed++
				res.DeadLettered++
				res.Unconfirmed++
			case braked:
				res.Delivered++
				res.Braked++
			case expiredOut:
				res.Expired++
			}
		}
		return res, nil
	}
	env.OnActivity(a.DeliverBatch, mock.Anything, mock.Anything).AfterFn(func() time.Duration {
		startDeliver()
		return fx.DeliverDelay
	}).Return(deliverFn)

	// Open composes the mocks above as the real one composes the real
	// activities.
	env.OnActivity(a.Open, mock.Anything, mock.Anything).Return(
		func(ctx context.Context, in activities.OpenInput) (activities.OpenResult, error) {
			if fx.OpenErr != nil {
				return activities.OpenResult{}, fx.OpenErr
			}
			return activities.OpenSteps{Prepare: prepareFn, Page: pageFn, Deliver: func(ctx context.Context, in activities.DeliverBatchInput) (activities.DeliverBatchResult, error) {
				startDeliver()
				return deliverFn(ctx, in)
			}}.Open(ctx, in)
		})

	env.OnActivity(a.DeadLetterBatch, mock.Anything, mock.Anything).Return(
		func(ctx context.Context, in activities.DeadLetterBatchInput) (int, error) {
			rec.mu.Lock()
			defer rec.mu.Unlock()
			if rec.deadLettered == nil {
				rec.deadLettered = map[string]string{}
				rec.deadLetterQueues = map[string]string{}
			}
			rec.deadLettered[in.Batch.AttemptID] = in.Reason
			rec.deadLetterQueues[in.Batch.AttemptID] = activity.GetInfo(ctx).TaskQueue
			if in.Batch.Ref != nil {
				return in.Batch.Ref.Count, nil
			}
			return len(in.Batch.Recipients), nil
		})

	env.SetOnChildWorkflowStartedListener(func(info *workflow.Info, _ workflow.Context, args converter.EncodedValues) {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		rec.childIDs = append(rec.childIDs, info.WorkflowExecution.ID)
		rec.childQueues[info.TaskQueueName] = true
		var in DeliveryBatchInput
		if err := args.Get(&in); err == nil {
			size := len(in.Recipients)
			if in.Ref != nil {
				size = in.Ref.Count
			}
			if rec.childSizes == nil {
				rec.childSizes = map[string][]int{}
			}
			rec.childSizes[info.TaskQueueName] = append(rec.childSizes[info.TaskQueueName], size)
		}
		rec.openKids++
		rec.maxOpenKids = max(rec.maxOpenKids, rec.openKids)
		rec.openAtStarts = append(rec.openAtStarts, rec.openKids)
	})
	env.SetOnChildWorkflowCompletedListener(func(*workflow.Info, converter.EncodedValue, error) {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		rec.openKids--
	})

	env.OnUpsertTypedSearchAttributes(mock.Anything).Return(nil).Run(func(args mock.Arguments) {
		sa := args.Get(0).(temporal.SearchAttributes)
		rec.mu.Lock()
		defer rec.mu.Unlock()
		if v, ok := sa.GetKeyword(vocab.StatusKey); ok {
			rec.status = v
			rec.statuses = append(rec.statuses, v)
		}
		if v, ok := sa.GetTime(vocab.ScheduledForKey); ok {
			rec.scheduledFor = v
		}
		if v, ok := sa.GetFloat64(vocab.ExpiredKey); ok {
			rec.expired = &v
		}
		if v, ok := sa.GetKeyword(vocab.PriorityKey); ok {
			rec.priority = v
		}
		if v, ok := sa.GetKeyword(vocab.EventTypeKey); ok {
			rec.eventType = v
		}
	})
	return env
}

func testEvent(id string) fanout.Event {
	return fanout.Event{ID: id, Type: "news", Payload: json.RawMessage(`{"topic":"launch"}`)}
}

// expectedShape is the number of pages and batches the workflow should use
// for an audience of n: batches of BatchSize until a window of them has
// started, of LargeBatch after (firstPageRule: after the first page).
func expectedShape(n int, o fanout.TypeOptions, emptyTail, firstPageRule bool) (pages, batches int) {
	o = o.WithDefaults()
	for off := 0; off < n; off += o.PageSize {
		pages++
		size := o.BatchSize
		if off > 0 && (firstPageRule || batches >= o.Window) {
			size = o.LargeBatch()
		}
		batches += (min(o.PageSize, n-off) + size - 1) / size
	}
	if n == 0 || emptyTail {
		pages++
	}
	return pages, batches
}

func runToResult(t *testing.T, env *testsuite.TestWorkflowEnvironment, in FanoutInput) FanoutResult {
	t.Helper()
	env.ExecuteWorkflow(Fanout, in)
	if !env.IsWorkflowCompleted() {
		t.Fatal("workflow did not complete")
	}
	if err := env.GetWorkflowError(); err != nil {
		t.Fatalf("workflow failed: %v", err)
	}
	var res FanoutResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	return res
}

func queryProgress(t *testing.T, env *testsuite.TestWorkflowEnvironment) Progress {
	t.Helper()
	v, err := env.QueryWorkflow(vocab.ProgressQuery)
	if err != nil {
		t.Fatalf("query: %v", err)
	}
	var p Progress
	if err := v.Get(&p); err != nil {
		t.Fatalf("query result: %v", err)
	}
	return p
}

// checkDelivery asserts that batches 0..batches-1 were delivered with their
// deterministic attempt ids, that together they hold recipients 0..n-1 in
// order, and that every recipient was handed to DeliverBatch exactly once.
func checkDelivery(t *testing.T, rec *recorder, ev fanout.Event, n, batches int, inline bool) {
	t.Helper()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, b := range rec.badInputs {
		t.Errorf("DeliverBatch input: %s", b)
	}
	if len(rec.attempts) != batches {
		t.Errorf("DeliverBatch saw %d attempt ids, want %d", len(rec.attempts), batches)
	}
	var all []string
	for b := range batches {
		ids, ok := rec.attempts[vocab.AttemptID(ev.Type, ev.ID, b)]
		if !ok {
			t.Errorf("no DeliverBatch with attempt id %q", vocab.AttemptID(ev.Type, ev.ID, b))
		}
		all = append(all, ids...)
	}
	want := make([]string, n)
	for i := range n {
		want[i] = recipientID(i)
	}
	if !slices.Equal(all, want) {
		t.Errorf("batches in order hold %d recipients, want r00000..r%05d in order", len(all), n-1)
	}
	if len(rec.perRecip) != n {
		t.Errorf("%d distinct recipients delivered, want %d", len(rec.perRecip), n)
	}
	for id, c := range rec.perRecip {
		if c != 1 {
			t.Errorf("recipient %s delivered %d times", id, c)
		}
	}
	wf := vocab.WorkflowID(ev.Type, ev.ID)
	// An event of one page delivers without a child workflow.
	wantKids := []string{}
	for b := range batches {
		if !inline {
			wantKids = append(wantKids, vocab.BatchWorkflowID(wf, b))
		}
	}
	gotKids := append([]string{}, slices.Sorted(slices.Values(rec.childIDs))...)
	slices.Sort(wantKids)
	if !slices.Equal(gotKids, wantKids) {
		t.Errorf("child workflow ids %v, want %v", gotKids, wantKids)
	}
}

func TestFanoutPaging(t *testing.T) {
	small := fanout.TypeOptions{BatchSize: 100, PageSize: 250, Window: 3}
	tests := []struct {
		name      string
		n         int
		opts      fanout.TypeOptions
		emptyTail bool
		staged    bool
		v1        bool
	}{
		{"empty", 0, small, false, false, false},
		{"one", 1, small, false, false, false},
		{"499", 499, small, false, false, false},
		{"500", 500, small, false, false, false},
		{"500 then empty page", 500, small, true, false, false},
		{"501", 501, small, false, false, false},
		{"2345", 2345, small, false, false, false},
		{"page smaller than batch", 95, fanout.TypeOptions{BatchSize: 100, PageSize: 30, Window: 2}, false, false, false},
		{"default page size", 2345, fanout.TypeOptions{BatchSize: 500}, false, false, false},
		{"staged 2345", 2345, small, false, true, false},
		{"staged one", 1, small, false, true, false},
		{"staged 500 then empty page", 500, small, true, true, false},
		// Once a window of batches (3) has started, batches of
		// LargeBatchSize: 100+100+50, then one batch per page.
		{"large batches 2345", 2345, fanout.TypeOptions{BatchSize: 100, PageSize: 250, Window: 3, LargeBatchSize: 250}, false, false, false},
		{"staged large batches 2345", 2345, fanout.TypeOptions{BatchSize: 100, PageSize: 250, Window: 3, LargeBatchSize: 200}, false, true, false},
		{"large batches, one page", 250, fanout.TypeOptions{BatchSize: 100, PageSize: 250, LargeBatchSize: 250}, false, true, false},
		// No growth until the window (10) has started: four pages of 3
		// small batches, then 6 pages of one.
		{"large batches after a window", 2345, fanout.TypeOptions{BatchSize: 100, PageSize: 250, Window: 10, LargeBatchSize: 250}, false, true, false},
		// An event of fewer batches than the window keeps every batch
		// small, whatever its pages: 24 of them spread over the delivery
		// workers (large ones after the first page ran at one worker's
		// pace).
		{"under a window: all small", 2345, fanout.TypeOptions{BatchSize: 100, PageSize: 250, Window: 30, LargeBatchSize: 250}, false, true, false},
		// A history recorded with version 1 of largeChange replays its
		// rule: 3 small batches, then 9 pages of one, whatever the window.
		{"version 1: large batches from the second page", 2345, fanout.TypeOptions{BatchSize: 100, PageSize: 250, Window: 10, LargeBatchSize: 250}, false, true, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fx := fixture{Event: testEvent("ev-" + tc.name), Audience: tc.n, Options: tc.opts, EmptyTail: tc.emptyTail,
				PageDelay: time.Second, DeliverDelay: time.Minute, Staged: tc.staged, FirstPageRule: tc.v1}
			rec := newRecorder()
			env := newEnv(t, fx, rec)
			res := runToResult(t, env, FanoutInput{Event: fx.Event})

			pages, batches := expectedShape(tc.n, tc.opts, tc.emptyTail, tc.v1)
			want := Progress{Found: int64(tc.n), Delivered: int64(tc.n), BatchesStarted: batches,
				BatchesCompleted: batches, Pages: pages, Runs: 1, PagingDone: true}
			if res.Progress != want {
				t.Errorf("result %+v\nwant   %+v", res.Progress, want)
			}
			// The first page holds the whole audience: its batches run
			// without children (one batch inline, more as activities of
			// the event's, oneStepBatches).
			d := tc.opts.WithDefaults()
			inline := !tc.emptyTail && tc.n <= d.PageSize
			checkDelivery(t, rec, fx.Event, tc.n, batches, inline)
			if rec.prepares != 1 {
				t.Errorf("Prepare called %d times", rec.prepares)
			}
			// The bridge sets the event type at start; the workflow only
			// upserts the default priority and the final status.
			if rec.status != vocab.StatusCompleted || rec.eventType != "" {
				t.Errorf("search attributes: status %q event type %q", rec.status, rec.eventType)
			}
		})
	}
}

// TestLargeBatchesRunOnTheirOwnQueue: once an event has filled its window,
// its page-sized batches (over BatchSize) start on the priority's
// large-batch queue, and every batch up to BatchSize on its delivery queue,
// so a small event's batches never wait for a slot a big event's page
// holds. Staged or inline alike. A low event's pages stay on the low
// queue, whose few slots bound its load.
func TestLargeBatchesRunOnTheirOwnQueue(t *testing.T) {
	for _, staged := range []bool{false, true} {
		t.Run(fmt.Sprintf("staged %v", staged), func(t *testing.T) {
			opts := fanout.TypeOptions{BatchSize: 100, PageSize: 250, Window: 3, LargeBatchSize: 250}
			fx := fixture{Event: testEvent("ev-large-queue"), Audience: 2345, Options: opts,
				PageDelay: time.Second, DeliverDelay: time.Minute, Staged: staged}
			rec := newRecorder()
			env := newEnv(t, fx, rec)
			res := runToResult(t, env, FanoutInput{Event: fx.Event})
			if res.Delivered != 2345 {
				t.Fatalf("result %+v", res.Progress)
			}
			small, large := vocab.DeliveryTaskQueue(fanout.PriorityNormal), vocab.LargeDeliveryTaskQueue(fanout.PriorityNormal)
			if len(rec.childSizes) != 2 || len(rec.childSizes[small]) == 0 || len(rec.childSizes[large]) == 0 {
				t.Fatalf("children by queue %v, want some on %s and some on %s", rec.childSizes, small, large)
			}
			for _, n := range rec.childSizes[small] {
				if n > opts.BatchSize {
					t.Errorf("a batch of %d on %s, over BatchSize %d", n, small, opts.BatchSize)
				}
			}
			for _, n := range rec.childSizes[large] {
				if n <= opts.BatchSize {
					t.Errorf("a batch of %d on %s, not over BatchSize %d", n, large, opts.BatchSize)
				}
			}
		})
	}
	t.Run("low", func(t *testing.T) {
		opts := fanout.TypeOptions{BatchSize: 100, PageSize: 250, Window: 3, LargeBatchSize: 250}
		ev := testEvent("ev-large-queue-low")
		ev.Priority = fanout.PriorityLow
		fx := fixture{Event: ev, Audience: 2345, Options: opts, PageDelay: time.Second, DeliverDelay: time.Minute, Staged: true}
		rec := newRecorder()
		env := newEnv(t, fx, rec)
		if res := runToResult(t, env, FanoutInput{Event: fx.Event}); res.Delivered != 2345 {
			t.Fatalf("result %+v", res.Progress)
		}
		low := vocab.DeliveryTaskQueue(fanout.PriorityLow)
		if len(rec.childSizes) != 1 || !slices.ContainsFunc(rec.childSizes[low], func(n int) bool { return n > opts.BatchSize }) {
			t.Errorf("children by queue %v, want all on %s, pages among them", rec.childSizes, low)
		}
	})
}

func TestFanoutWindow(t *testing.T) {
	for _, window := range []int{1, 2, 5} {
		t.Run(fmt.Sprintf("window %d", window), func(t *testing.T) {
			fx := fixture{Event: testEvent("ev-window"), Audience: 1000,
				Options:   fanout.TypeOptions{BatchSize: 50, PageSize: 200, Window: window},
				PageDelay: time.Second, DeliverDelay: time.Minute}
			rec := newRecorder()
			env := newEnv(t, fx, rec)
			res := runToResult(t, env, FanoutInput{Event: fx.Event})
			if res.Delivered != 1000 || res.BatchesStarted != 20 {
				t.Errorf("result %+v", res.Progress)
			}
			// Deliveries are slow next to paging, so the window fills up: the
			// maximum is reached, and never exceeded.
			if rec.maxOpenKids != window {
				t.Errorf("at most %d children open at once, want %d", rec.maxOpenKids, window)
			}
			if rec.maxInflight != window {
				t.Errorf("at most %d DeliverBatch calls at once, want %d", rec.maxInflight, window)
			}
			if rec.openKids != 0 {
				t.Errorf("%d children still open", rec.openKids)
			}
			checkDelivery(t, rec, fx.Event, 1000, 20, false)
		})
	}
}

// TestFanoutWindowAdapts: while an event's batches wait in their queue
// longer than they run, it keeps fewer open, down to minWindow; once they
// start at once, the window grows back to Window.
func TestFanoutWindowAdapts(t *testing.T) {
	const window, batches = 20, 200
	var slow atomic.Bool
	slow.Store(true)
	fx := fixture{Event: testEvent("ev-adapt"), Audience: batches * 10,
		Options:   fanout.TypeOptions{BatchSize: 10, LargeBatchSize: 10, PageSize: 100, Window: window},
		PageDelay: time.Millisecond, DeliverDelay: time.Minute,
		Waits: func(in activities.DeliverBatchInput) (time.Duration, time.Duration) {
			if slow.Load() {
				return 2 * time.Second, time.Second // queued longer than it ran
			}
			return 10 * time.Millisecond, time.Second
		}}
	rec := newRecorder()
	env := newEnv(t, fx, rec)
	env.SetOnChildWorkflowStartedListener(func(info *workflow.Info, _ workflow.Context, _ converter.EncodedValues) {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		rec.openKids++
		rec.openAtStarts = append(rec.openAtStarts, rec.openKids)
		if len(rec.openAtStarts) == batches/2 {
			slow.Store(false) // the queue drained: batches start at once
		}
	})
	res := runToResult(t, env, FanoutInput{Event: fx.Event})
	if res.Delivered != batches*10 || res.BatchesStarted != batches {
		t.Fatalf("result %+v", res.Progress)
	}
	opens := rec.openAtStarts
	// The first window opens in full; batches that waited long shrink it.
	if m := slices.Max(opens[:window]); m != window {
		t.Errorf("the first %d batches had at most %d open, want %d", window, m, window)
	}
	if m := slices.Max(opens[window*2 : batches/2]); m > minWindow {
		t.Errorf("with batches queued longer than they run, up to %d open, want at most %d: %v", m, minWindow, opens[:batches/2])
	}
	// Batches that start at once grow it back to Window.
	if m := slices.Max(opens[batches/2:]); m != window {
		t.Errorf("once batches started at once, up to %d open, want %d: %v", m, window, opens[batches/2:])
	}
}

func TestFanoutContinueAsNew(t *testing.T) {
	// 1000 recipients in pages of 100 (3 batches each: 40+40+20). Each page
	// adds 10 to the history length; at 30 the run continues as new, so the
	// runs do 3, 3, 3 and 1 pages.
	fx := fixture{Event: fanout.Event{ID: "ev-can", Type: "news"}, Audience: 1000,
		Options:          fanout.TypeOptions{BatchSize: 40, PageSize: 100, Window: 2, DefaultPriority: fanout.PriorityLow},
		MaxHistoryLength: 30, HistoryPerPage: 10,
		PageDelay: time.Second, DeliverDelay: time.Minute}
	rec := newRecorder()
	in := FanoutInput{Event: fx.Event, MaxHistoryLength: fx.MaxHistoryLength}
	var res FanoutResult
	for run := 1; ; run++ {
		if run > 10 {
			t.Fatal("too many runs")
		}
		env := newEnv(t, fx, rec)
		env.ExecuteWorkflow(Fanout, in)
		if !env.IsWorkflowCompleted() {
			t.Fatalf("run %d did not complete", run)
		}
		err := env.GetWorkflowError()
		var can *workflow.ContinueAsNewError
		if !errors.As(err, &can) {
			if err != nil {
				t.Fatalf("run %d failed: %v", run, err)
			}
			if run != 4 {
				t.Fatalf("completed in run %d, want 4", run)
			}
			if err := env.GetWorkflowResult(&res); err != nil {
				t.Fatal(err)
			}
			break
		}
		if can.WorkflowType == nil || can.WorkflowType.Name != vocab.FanoutWorkflow {
			t.Fatalf("run %d continues as %v", run, can.WorkflowType)
		}
		var next FanoutInput
		if err := converter.GetDefaultDataConverter().FromPayloads(can.Input, &next); err != nil {
			t.Fatalf("decode continue-as-new input: %v", err)
		}
		st := next.State
		if st == nil {
			t.Fatalf("run %d: continue-as-new input has no state", run)
		}
		found := 300 * run
		wantProg := Progress{Found: int64(found), Delivered: int64(found), BatchesStarted: 9 * run,
			BatchesCompleted: 9 * run, PendingBatches: 0, Pages: 3 * run, Runs: run, Cursor: strconv.Itoa(found)}
		if st.Progress != wantProg {
			t.Errorf("run %d state progress %+v\nwant                    %+v", run, st.Progress, wantProg)
		}
		if st.Cursor != strconv.Itoa(found) || st.NextBatch != 9*run || st.Priority != fanout.PriorityLow ||
			string(st.Message.Body) != string(testMessage.Body) || st.Options != fx.Options.WithDefaults() {
			t.Errorf("run %d state %+v", run, *st)
		}
		if next.Event.ID != fx.Event.ID || next.Event.Type != fx.Event.Type || next.MaxHistoryLength != fx.MaxHistoryLength {
			t.Errorf("run %d next input %+v", run, next)
		}
		// All batches of the run completed before it continued.
		rec.mu.Lock()
		if rec.openKids != 0 || len(rec.perRecip) != found {
			t.Errorf("run %d continued with %d children open and %d recipients delivered (want 0, %d)",
				run, rec.openKids, len(rec.perRecip), found)
		}
		rec.mu.Unlock()
		in = next
	}

	want := Progress{Found: 1000, Delivered: 1000, BatchesStarted: 30, BatchesCompleted: 30, Pages: 10, Runs: 4, PagingDone: true}
	if res.Progress != want {
		t.Errorf("final result %+v\nwant         %+v", res.Progress, want)
	}
	checkDelivery(t, rec, fx.Event, 1000, 30, false)
	if rec.prepares != 1 {
		t.Errorf("Prepare called %d times over the runs, want 1", rec.prepares)
	}
	if len(rec.childQueues) != 1 || !rec.childQueues[vocab.DeliveryTaskQueue(fanout.PriorityLow)] {
		t.Errorf("children ran on task queues %v", rec.childQueues)
	}
}

func TestFanoutProgressQuery(t *testing.T) {
	// Pages of 200 take 10s, batches of 100 take 60s, two at a time. Page 1
	// is in at 10s and starts batches 0 and 1; page 2 is in at 20s and waits
	// for them (70s) to start batches 2 and 3; page 3 is in at 80s and waits.
	// So at 90s: 3 pages found, 2 batches done, 2 running, and the cursor is
	// still that of page 3 (it advances once a page is fully dispatched).
	fx := fixture{Event: testEvent("ev-query"), Audience: 1000,
		Options:   fanout.TypeOptions{BatchSize: 100, PageSize: 200, Window: 2},
		PageDelay: 10 * time.Second, DeliverDelay: time.Minute}
	rec := newRecorder()
	env := newEnv(t, fx, rec)
	var mid *Progress
	env.RegisterDelayedCallback(func() {
		p := queryProgress(t, env)
		mid = &p
	}, 90*time.Second)
	res := runToResult(t, env, FanoutInput{Event: fx.Event})

	if mid == nil {
		t.Fatal("the delayed query did not run")
	}
	if mid.Found <= 0 || mid.Found >= 1000 || mid.Delivered <= 0 || mid.Delivered >= mid.Found ||
		mid.PendingBatches <= 0 || mid.PendingBatches > 2 || mid.BatchesCompleted+mid.PendingBatches != mid.BatchesStarted ||
		mid.PagingDone || mid.Cursor == "" || mid.Runs != 1 {
		t.Errorf("implausible mid-run progress %+v", *mid)
	}
	wantMid := Progress{Found: 600, Delivered: 200, BatchesStarted: 4, BatchesCompleted: 2, PendingBatches: 2, Pages: 3, Runs: 1, Cursor: "400"}
	if *mid != wantMid {
		t.Errorf("mid-run progress %+v\nwant             %+v", *mid, wantMid)
	}

	end := queryProgress(t, env)
	if res.Progress != end {
		t.Errorf("result %+v differs from final query %+v", res.Progress, end)
	}
	if end.Delivered != 1000 || !end.PagingDone || end.PendingBatches != 0 {
		t.Errorf("final progress %+v", end)
	}
}

func TestFanoutDeliveryOutcomes(t *testing.T) {
	// Every 7th recipient fails, every 11th (not failing) is a duplicate.
	outcomeOf := func(r fanout.Recipient) outcome {
		i, _ := strconv.Atoi(r.ID[1:])
		switch {
		case i%7 == 0:
			return failed
		case i%11 == 0:
			return duplicate
		}
		return delivered
	}
	const n = 777
	var wantFailed, wantDup int64
	for i := range n {
		switch outcomeOf(fanout.Recipient{ID: recipientID(i)}) {
		case failed:
			wantFailed++
		case duplicate:
			wantDup++
		}
	}
	fx := fixture{Event: testEvent("ev-fail"), Audience: n, Options: fanout.TypeOptions{BatchSize: 60, PageSize: 180, Window: 4},
		DeliverDelay: time.Minute, Outcome: outcomeOf}
	rec := newRecorder()
	env := newEnv(t, fx, rec)
	res := runToResult(t, env, FanoutInput{Event: fx.Event})
	if res.Failed != wantFailed || res.Duplicates != wantDup || res.Delivered != n-wantFailed-wantDup || res.Found != n {
		t.Errorf("result %+v, want Failed %d Duplicates %d Delivered %d", res.Progress, wantFailed, wantDup, n-wantFailed-wantDup)
	}
	if rec.status != vocab.StatusCompletedWithFailures {
		t.Errorf("status %q, want %q", rec.status, vocab.StatusCompletedWithFailures)
	}
}

// TestFanoutCountsUnconfirmed: the at-most-once recipients a batch reports
// unconfirmed are in the event's progress, among the failed and
// dead-lettered ones.
func TestFanoutCountsUnconfirmed(t *testing.T) {
	const n = 300
	outcomeOf := func(r fanout.Recipient) outcome {
		if i, _ := strconv.Atoi(r.ID[1:]); i%13 == 0 {
			return unconfirmed
		}
		return delivered
	}
	var want int64
	for i := range n {
		if outcomeOf(fanout.Recipient{ID: recipientID(i)}) == unconfirmed {
			want++
		}
	}
	fx := fixture{Event: testEvent("ev-amo"), Audience: n, Options: fanout.TypeOptions{BatchSize: 50, PageSize: 100, Window: 4, Semantics: fanout.AtMostOnce},
		DeliverDelay: time.Minute, Outcome: outcomeOf}
	env := newEnv(t, fx, newRecorder())
	res := runToResult(t, env, FanoutInput{Event: fx.Event})
	if res.Unconfirmed != want || res.Failed != want || res.DeadLettered != want || res.Delivered != n-want {
		t.Errorf("result %+v, want Unconfirmed = Failed = DeadLettered = %d, Delivered %d", res.Progress, want, n-want)
	}
}

// TestFanoutCountsBraked: the deliveries the low-priority brake held are
// counted in the event's progress and named on its details line (the UI's
// current details), so a low event that slowed down says why.
func TestFanoutCountsBraked(t *testing.T) {
	const n = 300
	outcomeOf := func(r fanout.Recipient) outcome {
		if i, _ := strconv.Atoi(r.ID[1:]); i >= 100 {
			return braked
		}
		return delivered
	}
	ev := testEvent("ev-braked")
	ev.Priority = fanout.PriorityLow
	fx := fixture{Event: ev, Audience: n, Options: fanout.TypeOptions{BatchSize: 50, PageSize: 100, Window: 4},
		DeliverDelay: time.Minute, Outcome: outcomeOf}
	env := newEnv(t, fx, newRecorder())
	res := runToResult(t, env, FanoutInput{Event: fx.Event})
	if res.Braked != 200 || res.Delivered != n {
		t.Errorf("result %+v, want 200 braked among %d delivered", res.Progress, n)
	}
	v, err := env.QueryWorkflow("__temporal_workflow_metadata")
	if err != nil {
		t.Fatalf("metadata query: %v", err)
	}
	var md sdkpb.WorkflowMetadata
	if err := v.Get(&md); err != nil {
		t.Fatal(err)
	}
	if d := md.GetCurrentDetails(); !strings.Contains(d, "braked: 200 held while other priorities delivered") {
		t.Errorf("details %q do not name the braked deliveries", d)
	}
}

func TestFanoutFailedBatch(t *testing.T) {
	// The DeliverBatch of batch 2 fails for good: its child workflow fails,
	// its recipients count as failed (with the error in the progress), the
	// other batches still run and the fan-out completes with failures.
	bad := vocab.AttemptID(testEvent("ev-badbatch").Type, "ev-badbatch", 2)
	fx := fixture{Event: testEvent("ev-badbatch"), Audience: 500, Options: fanout.TypeOptions{BatchSize: 100, PageSize: 200, Window: 2},
		DeliverDelay: time.Minute,
		DeliverErr: func(in activities.DeliverBatchInput) error {
			if in.AttemptID == bad {
				return temporal.NewNonRetryableApplicationError("no handler", activities.ErrUnknownEventType, nil)
			}
			return nil
		}}
	rec := newRecorder()
	env := newEnv(t, fx, rec)
	env.ExecuteWorkflow(Fanout, FanoutInput{Event: fx.Event})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatalf("workflow error %v, want completion with failures counted", err)
	}
	p := queryProgress(t, env)
	if !strings.Contains(p.LastBatchError, "no handler") {
		t.Errorf("LastBatchError %q, want the batch's error", p.LastBatchError)
	}
	p.LastBatchError = ""
	// Its recipients are dead-lettered with the error, so a redrive can
	// reach them: none is only counted.
	want := Progress{Found: 500, Delivered: 400, Failed: 100, DeadLettered: 100, BatchesStarted: 5, BatchesCompleted: 5, Pages: 3, Runs: 1, PagingDone: true, BatchErrors: 1}
	if p != want {
		t.Errorf("progress %+v\nwant     %+v", p, want)
	}
	if len(rec.deadLettered) != 1 || !strings.Contains(rec.deadLettered[bad], "no handler") {
		t.Errorf("dead-lettered batches %v, want only %s with its error", rec.deadLettered, bad)
	}
	// On the batch's delivery queue, where the letters' memory and Kafka
	// writes belong, never on the events queue.
	if q, want := rec.deadLetterQueues[bad], vocab.DeliveryTaskQueue(fanout.PriorityNormal); q != want {
		t.Errorf("DeadLetterBatch ran on %q, want %q", q, want)
	}
	if rec.status != vocab.StatusCompletedWithFailures {
		t.Errorf("status %q, want %q", rec.status, vocab.StatusCompletedWithFailures)
	}
}

func TestFanoutPrepareFails(t *testing.T) {
	fx := fixture{Event: testEvent("ev-prep"), Audience: 10,
		PrepareErr: temporal.NewNonRetryableApplicationError("event type not registered", activities.ErrUnknownEventType, nil)}
	rec := newRecorder()
	env := newEnv(t, fx, rec)
	env.ExecuteWorkflow(Fanout, FanoutInput{Event: fx.Event})
	if !env.IsWorkflowCompleted() {
		t.Fatal("workflow did not complete")
	}
	err := env.GetWorkflowError()
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || ae.Type() != activities.ErrUnknownEventType {
		t.Fatalf("workflow error %v, want UnknownEventType", err)
	}
	if rec.prepares != 1 || rec.pages != 0 || len(rec.childIDs) != 0 {
		t.Errorf("Prepare %d calls, RecipientsPage %d calls, %d children; want 1, 0, 0", rec.prepares, rec.pages, len(rec.childIDs))
	}
	if rec.status != vocab.StatusFailed {
		t.Errorf("status %q, want %q", rec.status, vocab.StatusFailed)
	}
}

func TestFanoutPriority(t *testing.T) {
	tests := []struct {
		event, typeDefault, want fanout.Priority
	}{
		{fanout.PriorityHigh, fanout.PriorityLow, fanout.PriorityHigh},
		{fanout.PriorityLow, "", fanout.PriorityLow},
		{"", fanout.PriorityLow, fanout.PriorityLow},
		{"", fanout.PriorityHigh, fanout.PriorityHigh},
		{"", "", fanout.PriorityNormal},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("event %q default %q", tc.event, tc.typeDefault), func(t *testing.T) {
			ev := testEvent("ev-prio")
			ev.Priority = tc.event
			fx := fixture{Event: ev, Audience: 250,
				Options: fanout.TypeOptions{BatchSize: 100, PageSize: 100, DefaultPriority: tc.typeDefault}}
			rec := newRecorder()
			env := newEnv(t, fx, rec)
			runToResult(t, env, FanoutInput{Event: ev})
			wantQ := vocab.DeliveryTaskQueue(tc.want)
			if len(rec.childIDs) != 3 || len(rec.childQueues) != 1 || !rec.childQueues[wantQ] {
				t.Errorf("%d children on task queues %v, want 3 on %s", len(rec.childIDs), rec.childQueues, wantQ)
			}
			// An event's own priority is set by the bridge at start; the
			// workflow upserts only a type default.
			wantSA := string(tc.want)
			if tc.event != "" {
				wantSA = ""
			}
			if rec.priority != wantSA {
				t.Errorf("priority search attribute %q, want %q", rec.priority, wantSA)
			}
		})
	}
}

// TestFanoutLocalDelivery covers the fast path of small events: delivered
// by a local activity in the first workflow task, and handed to the
// priority's delivery queue when that one try fails.
func TestFanoutLocalDelivery(t *testing.T) {
	retryIn := 3 * time.Second
	tests := []struct {
		name       string
		n          int
		localMax   int
		failFirst  error // the first DeliverBatch call's error
		want       []deliverCall
		minElapsed time.Duration
		failed     int64
	}{
		{name: "fits", n: 20, localMax: 100,
			want: []deliverCall{{local: true, queue: vocab.EventsTaskQueue}}},
		{name: "exactly the limit", n: 100, localMax: 100,
			want: []deliverCall{{local: true, queue: vocab.EventsTaskQueue}}},
		{name: "over the limit", n: 101, localMax: 100,
			want: []deliverCall{{queue: vocab.DeliveryTaskQueue(fanout.PriorityHigh)}}},
		{name: "off", n: 20, localMax: -1,
			want: []deliverCall{{queue: vocab.DeliveryTaskQueue(fanout.PriorityHigh)}}},
		{name: "transient failure goes to the delivery queue after its delay", n: 20, localMax: 100,
			failFirst:  temporal.NewApplicationErrorWithOptions("sink 503", "Transient", temporal.ApplicationErrorOptions{NextRetryDelay: retryIn}),
			want:       []deliverCall{{local: true, queue: vocab.EventsTaskQueue}, {queue: vocab.DeliveryTaskQueue(fanout.PriorityHigh)}},
			minElapsed: retryIn},
		{name: "crash-like failure goes to the delivery queue at once", n: 20, localMax: 100,
			failFirst: errors.New("redis: connection refused"),
			want:      []deliverCall{{local: true, queue: vocab.EventsTaskQueue}, {queue: vocab.DeliveryTaskQueue(fanout.PriorityHigh)}}},
		{name: "non-retryable failure is not tried again", n: 20, localMax: 100,
			failFirst: temporal.NewNonRetryableApplicationError("unknown event type", "UnknownType", nil),
			want:      []deliverCall{{local: true, queue: vocab.EventsTaskQueue}}, failed: 20},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ev := testEvent("ev-local")
			ev.Priority = fanout.PriorityHigh
			calls := 0
			fx := fixture{Event: ev, Audience: tc.n, Options: fanout.TypeOptions{LocalDeliveryMax: tc.localMax},
				DeliverErr: func(activities.DeliverBatchInput) error {
					calls++
					if calls == 1 {
						return tc.failFirst
					}
					return nil
				}}
			rec := newRecorder()
			env := newEnv(t, fx, rec)
			start := env.Now()
			env.ExecuteWorkflow(Fanout, FanoutInput{Event: ev})
			if !env.IsWorkflowCompleted() {
				t.Fatal("workflow did not complete")
			}
			var res FanoutResult
			if err := env.GetWorkflowResult(&res); err != nil && tc.failed == 0 {
				t.Fatalf("workflow failed: %v", err)
			}
			if !slices.Equal(rec.delivers, tc.want) {
				t.Errorf("DeliverBatch calls %+v, want %+v", rec.delivers, tc.want)
			}
			if len(rec.childIDs) != 0 {
				t.Errorf("children %v, want none", rec.childIDs)
			}
			if el := env.Now().Sub(start); el < tc.minElapsed {
				t.Errorf("fallback after %v, want at least %v (the activity's NextRetryDelay)", el, tc.minElapsed)
			}
			wantDelivered := int64(tc.n)
			if tc.failed > 0 {
				wantDelivered = 0
			}
			if res.Delivered != wantDelivered || res.Failed != tc.failed || res.BatchesCompleted != 1 {
				t.Errorf("result %+v, want %d delivered, %d failed, 1 batch", res.Progress, wantDelivered, tc.failed)
			}
		})
	}
}

// TestFanoutAudienceBounds: a recipients endpoint that keeps handing out
// cursors cannot keep an event running: paging stops at MaxPages (or past
// MaxRecipients), what was found is delivered, and the event fails with the
// reason.
func TestFanoutAudienceBounds(t *testing.T) {
	cases := []struct {
		name          string
		opts          fanout.TypeOptions
		reason        string
		wantDelivered int64
	}{
		{"endless cursors stop at MaxPages", fanout.TypeOptions{BatchSize: 500, PageSize: 1000, MaxPages: 3}, "too_many_pages", 3000},
		{"audience past MaxRecipients", fanout.TypeOptions{BatchSize: 500, PageSize: 1000, MaxRecipients: 1500}, "too_many_recipients", 2000},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fx := fixture{Event: testEvent("ev-bound"), Audience: 1_000_000, Options: c.opts}
			rec := newRecorder()
			env := newEnv(t, fx, rec)
			var prog Progress
			env.ExecuteWorkflow(Fanout, FanoutInput{Event: fx.Event})
			err := env.GetWorkflowError()
			if err == nil || !strings.Contains(err.Error(), c.reason) {
				t.Fatalf("workflow error %v, want %s", err, c.reason)
			}
			v, qerr := env.QueryWorkflow(vocab.ProgressQuery)
			if qerr != nil || v.Get(&prog) != nil {
				t.Fatalf("progress query: %v", qerr)
			}
			if prog.Delivered != c.wantDelivered || prog.Found != c.wantDelivered {
				t.Errorf("found %d, delivered %d; want %d each", prog.Found, prog.Delivered, c.wantDelivered)
			}
		})
	}
}

// TestFanoutOpenIsOneLocalActivity: a small event's first (and only)
// workflow task runs one local activity, so its history holds one marker;
// a transient Prepare failure falls back to the steps one by one.
func TestFanoutOpenIsOneLocalActivity(t *testing.T) {
	tests := []struct {
		name       string
		prepareErr error
		want       []string
	}{
		{"open", nil, []string{"Open"}},
		{"open, Prepare fails once", errors.New("message service unavailable"), []string{"Open", "Prepare", "RecipientsPage", "DeliverBatch"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fx := fixture{Event: testEvent("ev-open"), Audience: 20, Options: fanout.TypeOptions{LocalDeliveryMax: 100}, OpenErr: tc.prepareErr}
			rec := newRecorder()
			env := newEnv(t, fx, rec)
			var las []string
			env.SetOnLocalActivityStartedListener(func(info *activity.Info, _ context.Context, _ []any) {
				las = append(las, info.ActivityType.Name)
			})
			res := runToResult(t, env, FanoutInput{Event: fx.Event})
			if !slices.Equal(las, tc.want) {
				t.Errorf("local activities %v, want %v", las, tc.want)
			}
			if res.Delivered != 20 || res.BatchesCompleted != 1 || len(rec.childIDs) != 0 {
				t.Errorf("result %+v, children %v", res.Progress, rec.childIDs)
			}
		})
	}
}

// TestFanoutInlineBatchIsBounded: an event's one batch run as an activity
// without a child (over LocalDeliveryMax, or handed over by the fast path)
// is bounded as a child's batch is (its WorkflowRunTimeout): a DeliverBatch
// that keeps asking to be retried (a destination limit slower than its
// calls, a breaker that never closes) times out within batchRunTimeout, and
// its recipients are counted failed and dead-lettered. (The test
// environment stops retries after 10 attempts where the server would go on
// for ever: 4 h apart, they outlast the bound.)
func TestFanoutInlineBatchIsBounded(t *testing.T) {
	for _, tc := range []struct {
		name string
		n    int
	}{{"over the local limit", 150}, {"handed over by the fast path", 20}} {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			fx := fixture{Event: testEvent("ev-inline-bound"), Audience: tc.n, Options: fanout.TypeOptions{LocalDeliveryMax: 100},
				DeliverErr: func(activities.DeliverBatchInput) error {
					calls++
					return temporal.NewApplicationErrorWithOptions("destination limit: all left to the next attempt", activities.ErrDeliveryRetry,
						temporal.ApplicationErrorOptions{NextRetryDelay: 4 * time.Hour})
				}}
			rec := newRecorder()
			env := newEnv(t, fx, rec)
			start := env.Now()
			res := runToResult(t, env, FanoutInput{Event: fx.Event})
			// The hand-over waits the fast path's NextRetryDelay (4 h) first.
			if el := env.Now().Sub(start); el > batchRunTimeout+5*time.Hour {
				t.Errorf("the inline batch ran %d times over %v: not bounded by %v", calls, el, batchRunTimeout)
			}
			if res.Failed != int64(tc.n) || res.BatchErrors != 1 || res.DeadLettered != int64(tc.n) {
				t.Errorf("result %+v, want %d failed and dead-lettered", res.Progress, tc.n)
			}
		})
	}
}

// TestDeliverHeartbeatFollowsCallTimeout: a batch heartbeats between calls,
// so one call may hold its heartbeat for the type's CallTimeout (the stock
// type's FANOUT_HTTP_TIMEOUT): every DeliverBatch activity's heartbeat
// timeout is derived from it, a child's and an event's one batch alike;
// with a fixed 15 s, calls of 40 s had the batch retried while they were in
// flight.
func TestDeliverHeartbeatFollowsCallTimeout(t *testing.T) {
	for _, tc := range []struct {
		name     string
		n        int
		call     time.Duration
		children int
	}{
		{"children, default call timeout", 250, 0, 3},
		{"children, 40s calls", 250, 40 * time.Second, 3},
		{"one batch without a child, 40s calls", 150, 40 * time.Second, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := fanout.TypeOptions{BatchSize: 200, LocalDeliveryMax: 100, CallTimeout: tc.call}
			if tc.children > 0 {
				opts.BatchSize, opts.PageSize = 100, 100
			}
			fx := fixture{Event: testEvent("ev-heartbeat"), Audience: tc.n, Options: opts}
			rec := newRecorder()
			env := newEnv(t, fx, rec)
			res := runToResult(t, env, FanoutInput{Event: fx.Event})
			if res.Delivered != int64(tc.n) || len(rec.childIDs) != tc.children {
				t.Fatalf("result %+v, children %v", res.Progress, rec.childIDs)
			}
			want := opts.WithDefaults().CallTimeout + fanout.CallSlack
			if len(rec.heartbeats) == 0 {
				t.Fatal("no DeliverBatch activity")
			}
			for _, hb := range rec.heartbeats {
				if hb != want {
					t.Errorf("DeliverBatch heartbeat timeout %v, want %v (the call timeout %v and the slack)", hb, want, opts.WithDefaults().CallTimeout)
				}
			}
		})
	}
}
