package activities_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/activities"
)

// audience is a handler whose audience size comes from the payload
// ({"n": N}); Deliver fails as told by fail.
type audience struct {
	mu        sync.Mutex
	delivered map[string]int
	pages     int
	fail      func(r fanout.Recipient) error
}

func (h *audience) GetRecipients(_ context.Context, ev fanout.Event, cursor string, limit int) (fanout.Page, error) {
	var p struct{ N int }
	if err := json.Unmarshal(ev.Payload, &p); err != nil {
		return fanout.Page{}, fanout.Permanent(err)
	}
	off, _ := strconv.Atoi(cursor)
	h.mu.Lock()
	h.pages++
	h.mu.Unlock()
	var page fanout.Page
	for i := off; i < min(off+limit, p.N); i++ {
		page.Recipients = append(page.Recipients, fanout.Recipient{ID: "r" + strconv.Itoa(i)})
	}
	if off+limit < p.N {
		page.NextCursor = strconv.Itoa(off + limit)
	}
	return page, nil
}

func (h *audience) GenerateMessage(context.Context, fanout.Event) (fanout.Message, error) {
	return fanout.Message{Body: []byte("hi")}, nil
}

func (h *audience) Deliver(_ context.Context, _ fanout.Event, r fanout.Recipient, _ fanout.Message) error {
	if h.fail != nil {
		if err := h.fail(r); err != nil {
			return err
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.delivered[r.ID]++
	return nil
}

type dlqRecorder struct {
	mu  sync.Mutex
	dls []activities.DeadLetter
}

func (d *dlqRecorder) Publish(_ context.Context, dls []activities.DeadLetter) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.dls = append(d.dls, dls...)
	return nil
}

// failPermanentOrRetryAfter fails recipient perm permanently (HTTP 404) and
// recipient flaky transiently with a Retry-After of 3s (HTTP 429).
func failPermanentOrRetryAfter(perm, flaky string) func(fanout.Recipient) error {
	return func(r fanout.Recipient) error {
		switch r.ID {
		case perm:
			return fanout.Permanent(errors.New("HTTP 404"))
		case flaky:
			return fanout.RetryAfter(3*time.Second, errors.New("HTTP 429"))
		}
		return nil
	}
}

func event(id string, n int) fanout.Event {
	return fanout.Event{ID: id + "-" + strconv.FormatInt(time.Now().UnixNano(), 36), Type: "t", Payload: json.RawMessage(fmt.Sprintf(`{"N":%d}`, n))}
}

// recipients are n recipients r0, r1, ... without addresses.
func recipients(n int) []fanout.Recipient {
	rs := make([]fanout.Recipient, n)
	for i := range rs {
		rs[i] = fanout.Recipient{ID: "r" + strconv.Itoa(i)}
	}
	return rs
}

// runDeliverBatch runs acts.DeliverBatch on in in a test activity environment
// with the worker options wo.
func runDeliverBatch(acts *activities.Activities, in activities.DeliverBatchInput, wo worker.Options) (activities.DeliverBatchResult, error) {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment().SetWorkerOptions(wo)
	env.RegisterActivity(acts)
	var res activities.DeliverBatchResult
	v, err := env.ExecuteActivity(acts.DeliverBatch, in)
	if err == nil {
		err = v.Get(&res)
	}
	return res, err
}

// TestPrepareResolvesLocalDeliveryMax: Prepare records the fast-path limit
// the workflow decides by (the type's, or the default when unset).
func TestPrepareResolvesLocalDeliveryMax(t *testing.T) {
	for _, tc := range []struct{ set, want int }{{0, fanout.DefaultLocalDeliveryMax}, {7, 7}, {-1, -1}} {
		if got := preparedOptions(t, fanout.TypeOptions{LocalDeliveryMax: tc.set}).LocalDeliveryMax; got != tc.want {
			t.Errorf("type's LocalDeliveryMax %d: Prepare reported %d, want %d", tc.set, got, tc.want)
		}
	}
}

// preparedOptions registers a type with opts and returns the options its
// Prepare records for the workflow.
func preparedOptions(t *testing.T, opts fanout.TypeOptions) fanout.TypeOptions {
	t.Helper()
	reg := fanout.NewRegistry()
	reg.MustRegister("t", &audience{}, opts)
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	acts := &activities.Activities{Registry: reg}
	env.RegisterActivity(acts)
	v, err := env.ExecuteActivity(acts.Prepare, activities.PrepareInput{Event: event("prep", 1)})
	if err != nil {
		t.Fatal(err)
	}
	var res activities.PrepareResult
	if err := v.Get(&res); err != nil {
		t.Fatal(err)
	}
	return res.Options
}

// TestPrepareResolvesLargeBatchSize: Prepare records the batch size of an
// event's later pages: the page size by default (one batch per page, at
// most fanout.MaxLargeBatchSize), the type's when set, BatchSize when
// negative (fixed batches).
func TestPrepareResolvesLargeBatchSize(t *testing.T) {
	for _, tc := range []struct {
		opts fanout.TypeOptions
		want int
	}{
		{fanout.TypeOptions{}, fanout.DefaultPageBatches * fanout.DefaultBatchSize},
		{fanout.TypeOptions{PageSize: 3000}, 3000},
		{fanout.TypeOptions{BatchSize: 2000}, fanout.MaxPageSize},
		{fanout.TypeOptions{BatchSize: 5000, PageSize: fanout.MaxPageSize}, fanout.MaxLargeBatchSize},
		{fanout.TypeOptions{BatchSize: 100, PageSize: 50}, 100},
		{fanout.TypeOptions{LargeBatchSize: 3000}, 3000},
		{fanout.TypeOptions{BatchSize: 300, LargeBatchSize: -1}, 300},
	} {
		if got := preparedOptions(t, tc.opts).LargeBatchSize; got != tc.want {
			t.Errorf("options %+v: Prepare reported LargeBatchSize %d, want %d", tc.opts, got, tc.want)
		}
	}
	for _, bad := range []fanout.TypeOptions{{LargeBatchSize: fanout.MaxLargeBatchSize + 1}, {BatchSize: 500, LargeBatchSize: 400}} {
		if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "LargeBatchSize") {
			t.Errorf("options %+v: Validate %v, want a LargeBatchSize error", bad, err)
		}
	}
}

// TestDeliverBatchBoundsFailureDetails: a batch whose every recipient fails
// counts them all and dead-letters them all, but its result (an activity
// result and a child's, in two histories) details only the first
// fanout.MaxFailureDetails, however large the batch.
func TestDeliverBatchBoundsFailureDetails(t *testing.T) {
	h := &audience{delivered: map[string]int{}, fail: func(fanout.Recipient) error { return fanout.Permanent(errors.New("HTTP 410")) }}
	reg := fanout.NewRegistry()
	reg.MustRegister("t", h, fanout.TypeOptions{})
	n := fanout.MaxFailureDetails + 50
	dl := &dlqRecorder{}
	res, err := runDeliverBatch(&activities.Activities{Registry: reg, DeadLetters: dl}, activities.DeliverBatchInput{
		Event: event("allfail", n), AttemptID: "a#0", Recipients: recipients(n), MaxAttempts: 1, Concurrency: 8}, worker.Options{})
	if err != nil || res.Failed != n || res.DeadLettered != n || len(dl.dls) != n {
		t.Fatalf("got %d failed, %d dead-lettered, %d in the DLQ (%v); want %d each", res.Failed, res.DeadLettered, len(dl.dls), err, n)
	}
	if len(res.Failures) != fanout.MaxFailureDetails {
		t.Fatalf("result details %d failures, want %d", len(res.Failures), fanout.MaxFailureDetails)
	}
	for _, f := range res.Failures {
		if !f.Permanent || !strings.Contains(f.Error, "410") {
			t.Fatalf("failure detail %+v, want the permanent HTTP 410", f)
		}
	}
}

// TestDeliverBatchYieldsBeforeItsDeadline: a batch whose deliveries are
// slower than its attempt's timeout allows stops starting them a while
// before the deadline and leaves the rest to its next attempt (at once),
// instead of being cut off mid-call: every call it started ends, and the
// recipients left are neither delivered nor failed.
func TestDeliverBatchYieldsBeforeItsDeadline(t *testing.T) {
	h := &audience{delivered: map[string]int{}, fail: func(fanout.Recipient) error { time.Sleep(200 * time.Millisecond); return nil }}
	reg := fanout.NewRegistry()
	// It yields a call's time (CallTimeout and CallSlack) before its
	// deadline: 5.3 s before the attempt's 8 s.
	reg.MustRegister("t", h, fanout.TypeOptions{CallTimeout: 300 * time.Millisecond})
	const n = 40 // 4 s at 2 at a time: more than the 2.7 s before the yield
	actx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	_, err := runDeliverBatch(&activities.Activities{Registry: reg}, activities.DeliverBatchInput{
		Event: event("slow", n), AttemptID: "a#0", Recipients: recipients(n), MaxAttempts: 1, Concurrency: 2},
		worker.Options{BackgroundActivityContext: actx})
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || ae.Type() != activities.ErrDeliveryRetry || ae.NextRetryDelay() != 100*time.Millisecond ||
		!strings.Contains(ae.Message(), "slower than the attempt's timeout allows") || ae.Category() != temporal.ApplicationErrorCategoryBenign {
		t.Fatalf("err %v, want a benign retry at once of the recipients left", err)
	}
	h.mu.Lock()
	delivered := len(h.delivered)
	h.mu.Unlock()
	// 2.7 s, 2 at a time, 200 ms each, is ~27 calls.
	if delivered == 0 || delivered >= n || !strings.Contains(ae.Message(), fmt.Sprintf("%d of %d recipients left", n-delivered, n)) {
		t.Fatalf("%d delivered, message %q: want some delivered and the rest left", delivered, ae.Message())
	}
	if err := actx.Err(); err != nil {
		t.Fatalf("the attempt ran to its deadline (%v): it should have returned before", err)
	}
}

// Without a gate and without staging, DeliverBatch counts failures by the
// activity's attempt, dead-letters permanent failures and those at
// MaxAttempts, asks for a retry (Retry-After) of the others, and fetches a
// staged batch's page again from get_recipients.
func TestDeliverBatchWithoutGateOrStaging(t *testing.T) {
	h := &audience{delivered: map[string]int{}, fail: failPermanentOrRetryAfter("r1", "r2")}
	reg := fanout.NewRegistry()
	reg.MustRegister("t", h, fanout.TypeOptions{})
	run := func(acts *activities.Activities, in activities.DeliverBatchInput) (activities.DeliverBatchResult, error) {
		return runDeliverBatch(acts, in, worker.Options{})
	}
	ev := event("nogate", 10)
	recips := []fanout.Recipient{{ID: "r0"}, {ID: "r1"}, {ID: "r2"}}

	// The first attempt has failed once: r2 is retried after its Retry-After.
	dl := &dlqRecorder{}
	_, err := run(&activities.Activities{Registry: reg, DeadLetters: dl},
		activities.DeliverBatchInput{Event: ev, AttemptID: "a#0", Recipients: recips, MaxAttempts: 2, Concurrency: 2})
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || ae.Type() != activities.ErrDeliveryRetry || ae.NextRetryDelay() != 3*time.Second ||
		!strings.Contains(ae.Message(), "1 of 3 recipients failed transiently") {
		t.Fatalf("MaxAttempts 2: %v, want a retry in 3s", err)
	}
	if len(dl.dls) != 1 || dl.dls[0].Recipient.ID != "r1" || !dl.dls[0].Permanent || dl.dls[0].Attempts != 1 {
		t.Fatalf("dead letters: %+v", dl.dls)
	}

	// At MaxAttempts 1, r2 is given up too; without a DLQ it is failed, not
	// dead-lettered.
	res, err := run(&activities.Activities{Registry: reg},
		activities.DeliverBatchInput{Event: ev, AttemptID: "a#0", Recipients: recips, MaxAttempts: 1, Concurrency: 2})
	if err != nil || res.Delivered != 1 || res.Failed != 2 || res.DeadLettered != 0 || len(res.Failures) != 2 {
		t.Fatalf("MaxAttempts 1: %+v %v", res, err)
	}

	// A staged batch without staging: its page is fetched again.
	h.fail = nil
	res, err = run(&activities.Activities{Registry: reg}, activities.DeliverBatchInput{Event: ev, AttemptID: "a#1",
		Ref: &activities.BatchRef{N: 1, Count: 4, PageLimit: 10, Offset: 3}, MaxAttempts: 1, Concurrency: 2})
	if err != nil || res.Delivered != 4 || res.Failed != 0 {
		t.Fatalf("staged batch: %+v %v", res, err)
	}
	for _, id := range []string{"r3", "r4", "r5", "r6"} {
		if h.delivered[id] != 1 {
			t.Errorf("%s delivered %d times, want 1", id, h.delivered[id])
		}
	}
}

// TestDeadLettersStayBounded: whatever the event, the message and the
// recipients hold, what reaches the deliveries DLQ fits a Kafka record: a
// message over fanout.MaxMessageBytes fails the event in Prepare (named
// reason, not retried), a recipient address over fanout.MaxAddressLen is
// dead-lettered under a stand-in without its address, and dead letters carry
// the event without its payload.
func TestDeadLettersStayBounded(t *testing.T) {
	big := strings.Repeat("x", fanout.MaxMessageBytes)
	reg := fanout.NewRegistry()
	h := &audience{delivered: map[string]int{}, fail: func(r fanout.Recipient) error { return fanout.Permanent(errors.New("gone")) }}
	reg.MustRegister("t", h, fanout.TypeOptions{})
	reg.MustRegister("huge", fanout.HandlerFuncs{
		GenerateMessageFunc: func(context.Context, fanout.Event) (fanout.Message, error) {
			return fanout.Message{ContentType: "text/plain", Body: []byte(big)}, nil
		},
	}, fanout.TypeOptions{})
	dl := &dlqRecorder{}
	acts := &activities.Activities{Registry: reg, DeadLetters: dl}
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	env.RegisterActivity(acts)

	_, err := env.ExecuteActivity(acts.Prepare, activities.PrepareInput{Event: fanout.Event{ID: "e", Type: "huge"}})
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || !ae.NonRetryable() || ae.Type() != activities.ErrMessageTooLarge || !strings.Contains(ae.Message(), "message_too_large") {
		t.Fatalf("Prepare of a %d-byte message: %v, want a non-retryable message_too_large", len(big), err)
	}

	ev := fanout.Event{ID: "e", Type: "t", Payload: json.RawMessage(`{"N":1,"blob":"` + strings.Repeat("p", 100<<10) + `"}`)}
	longAddr := "https://example.com/" + strings.Repeat("a", fanout.MaxAddressLen)
	v, err := env.ExecuteActivity(acts.DeliverBatch, activities.DeliverBatchInput{Event: ev, AttemptID: "t/e#0",
		Recipients: []fanout.Recipient{{ID: "long", Address: longAddr}, {ID: "ok", Address: "https://example.com/"}},
		Message:    fanout.Message{Body: []byte("hi")}, MaxAttempts: 1, Concurrency: 2})
	if err != nil {
		t.Fatal(err)
	}
	var res activities.DeliverBatchResult
	if err := v.Get(&res); err != nil || res.Failed != 2 || res.DeadLettered != 2 {
		t.Fatalf("batch: %+v %v; want both failed and dead-lettered", res, err)
	}
	if _, called := h.delivered["long"]; called || len(dl.dls) != 2 {
		t.Fatalf("deliveries %v, %d dead letters", h.delivered, len(dl.dls))
	}
	for _, d := range dl.dls {
		b, _ := json.Marshal(d)
		if len(b) > 16<<10 || d.Event.Payload != nil || len(d.Recipient.Address) > 256 {
			t.Errorf("dead letter of %s: %d bytes, payload %d bytes, address %d bytes", d.Recipient.ID, len(b), len(d.Event.Payload), len(d.Recipient.Address))
		}
	}
	if d := dl.dls[0]; d.Recipient.ID == "long" || !strings.HasPrefix(d.LastError, activities.ReasonInvalidRecipientAddress) {
		t.Errorf("long address dead-lettered as %q: %s", d.Recipient.ID, d.LastError)
	}
}

// TestDeadLetterBatch: the recipients of a batch that ended in error all go
// to the deliveries DLQ with the batch's attempt id and the reason (an
// invalid id under its stand-in), so a redrive can reach them.
func TestDeadLetterBatch(t *testing.T) {
	reg := fanout.NewRegistry()
	reg.MustRegister("t", &audience{}, fanout.TypeOptions{})
	dl := &dlqRecorder{}
	acts := &activities.Activities{Registry: reg, DeadLetters: dl}
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	env.RegisterActivity(acts)
	batch := activities.DeliverBatchInput{Event: fanout.Event{ID: "e", Type: "t"}, AttemptID: "t/e#3",
		Recipients: []fanout.Recipient{{ID: "r1"}, {ID: "r2"}, {ID: "bad/id"}}}
	v, err := env.ExecuteActivity(acts.DeadLetterBatch, activities.DeadLetterBatchInput{Batch: batch, Reason: "child terminated"})
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := v.Get(&n); err != nil || n != 3 || len(dl.dls) != 3 {
		t.Fatalf("dead-lettered %d (%v), %d records; want 3", n, err, len(dl.dls))
	}
	for _, d := range dl.dls {
		if d.AttemptID != "t/e#3" || (!strings.Contains(d.LastError, "batch_failed: child terminated") && !strings.HasPrefix(d.LastError, activities.ReasonInvalidRecipientID)) {
			t.Errorf("dead letter %+v", d)
		}
	}
	// A staged batch of a type this worker does not know, whose staged copy
	// is gone: a clear, final error, not a crash.
	ref := &activities.BatchRef{N: 1, Key: "gone", Count: 5}
	_, err = env.ExecuteActivity(acts.DeadLetterBatch, activities.DeadLetterBatchInput{
		Batch: activities.DeliverBatchInput{Event: fanout.Event{ID: "e", Type: "unknown"}, AttemptID: "unknown/e#1", Ref: ref}, Reason: "x"})
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || !ae.NonRetryable() {
		t.Errorf("staged batch without handler or staging: %v, want a non-retryable error", err)
	}
}

// TestDeliverBatchPacedAtItsRate: a batch given a Rate starts its
// deliveries at that pace (a token bucket that starts empty for a batch
// whose schedule starts now): the k-th delivery comes no sooner than
// k/Rate after the start, and every recipient is delivered once.
func TestDeliverBatchPacedAtItsRate(t *testing.T) {
	const n, perSecond, conc = 300, 600.0, 8
	var (
		mu    sync.Mutex
		times []time.Time
	)
	h := &audience{delivered: map[string]int{}, fail: func(fanout.Recipient) error {
		mu.Lock()
		times = append(times, time.Now())
		mu.Unlock()
		return nil
	}}
	reg := fanout.NewRegistry()
	reg.MustRegister("t", h, fanout.TypeOptions{})
	recips := recipients(n)
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	acts := &activities.Activities{Registry: reg}
	env.RegisterActivity(acts)
	start := time.Now()
	v, err := env.ExecuteActivity(acts.DeliverBatch, activities.DeliverBatchInput{Event: event("paced", n), AttemptID: "p#0",
		Recipients: recips, MaxAttempts: 1, Concurrency: conc, Rate: perSecond, PaceFrom: start})
	var res activities.DeliverBatchResult
	if err == nil {
		err = v.Get(&res)
	}
	if err != nil || res.Delivered != n {
		t.Fatalf("paced batch: %+v %v", res, err)
	}
	for i := range n {
		if c := h.delivered["r"+strconv.Itoa(i)]; c != 1 {
			t.Fatalf("r%d delivered %d times", i, c)
		}
	}
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	// The bucket starts empty, so the k-th delivery cannot start before
	// k/Rate: a loaded machine only makes deliveries later.
	for k := 1; k <= n; k++ {
		if due := start.Add(time.Duration(k) * time.Second / time.Duration(perSecond)); times[k-1].Before(due.Add(-time.Millisecond)) {
			t.Fatalf("delivery %d at +%v, before its due +%v at %v/s", k, times[k-1].Sub(start), due.Sub(start), perSecond)
		}
	}
}

// typedMessage is an audience whose message has the content type ct.
type typedMessage struct {
	audience
	ct string
}

func (h *typedMessage) GenerateMessage(context.Context, fanout.Event) (fanout.Message, error) {
	return fanout.Message{ContentType: h.ct, Body: []byte(`{}`)}, nil
}

// TestAMessageNetHTTPWouldRefuseIsRefusedBeforeAnyDelivery (issue 23, item
// 2): a content type with a control byte (net/http refuses it as a header,
// and mime.ParseMediaType accepts one in a quoted parameter) fails Prepare
// for good with invalid_message, and a batch carrying such a message (a
// redrive of a forged dead letter) fails for good without a call.
func TestAMessageNetHTTPWouldRefuseIsRefusedBeforeAnyDelivery(t *testing.T) {
	for _, ct := range []string{"application/json; x=\"\x01\"", "text/plain; charset=\"utf\x7f8\"", "text/plain\x00", "text/plain;\tcharset=utf-8"} {
		h := &typedMessage{ct: ct}
		h.delivered = map[string]int{}
		reg := fanout.NewRegistry()
		reg.MustRegister("t", h, fanout.TypeOptions{})
		acts := &activities.Activities{Registry: reg}
		var s testsuite.WorkflowTestSuite
		env := s.NewTestActivityEnvironment()
		env.RegisterActivity(acts)
		_, err := env.ExecuteActivity(acts.Prepare, activities.PrepareInput{Event: event("bad-ct", 1)})
		var ae *temporal.ApplicationError
		if !errors.As(err, &ae) || ae.Type() != activities.ErrInvalidMessage || !ae.NonRetryable() || !strings.Contains(err.Error(), "invalid_message") {
			t.Errorf("content type %q: Prepare: %v; want a non-retryable invalid_message", ct, err)
		}
		in := activities.DeliverBatchInput{Event: event("bad-ct", 2), AttemptID: "a#0", Recipients: recipients(2), MaxAttempts: 1,
			Message: fanout.Message{ContentType: ct, Body: []byte(`{}`)}}
		_, err = runDeliverBatch(acts, in, worker.Options{})
		if !errors.As(err, &ae) || ae.Type() != activities.ErrInvalidMessage || !ae.NonRetryable() || len(h.delivered) != 0 {
			t.Errorf("content type %q: DeliverBatch: %v, %d delivered; want a non-retryable invalid_message and no call", ct, err, len(h.delivered))
		}
	}
}

// TestDeliverBatchSlowerThanAnAttemptWaitsForItsTime (issue 23, item 8): a
// batch paced slower than one call per attempt (here one a minute, the
// attempt 30 s) delivers what is due, then asks to be retried when its next
// call is due, not in 100 ms (an attempt every 100 ms for a minute).
func TestDeliverBatchSlowerThanAnAttemptWaitsForItsTime(t *testing.T) {
	h := &audience{delivered: map[string]int{}}
	reg := fanout.NewRegistry()
	reg.MustRegister("t", h, fanout.TypeOptions{})
	actx, cancel := context.WithTimeout(context.Background(), paceAttempt)
	defer cancel()
	start := time.Now()
	_, err := runDeliverBatch(&activities.Activities{Registry: reg}, activities.DeliverBatchInput{
		Event: event("slow-rate", 3), AttemptID: "a#0", Recipients: recipients(3), MaxAttempts: 1, Concurrency: 1,
		Rate: 1.0 / 60, PaceFrom: start.Add(-time.Minute)}, // owed one call
		worker.Options{BackgroundActivityContext: actx})
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || ae.Type() != activities.ErrDeliveryRetry {
		t.Fatalf("err %v, want a retry of the recipients left", err)
	}
	if len(h.delivered) != 1 {
		t.Errorf("%d delivered, want the one call owed", len(h.delivered))
	}
	if d := ae.NextRetryDelay(); d < 50*time.Second || d > time.Minute {
		t.Errorf("retry in %v, want when the next call is due (~60s after the first)", d)
	}
}

// paceAttempt is the attempt of the slow-rate test: longer than
// the default call timeout and its slack (the yield comes that long
// before its deadline), far shorter than a minute.
const paceAttempt = 30 * time.Second

// chunkRecorder records each Publish call's letters: how many, and how many
// carry the message.
type chunkRecorder struct {
	mu        sync.Mutex
	calls     []int
	withMsg   []int
	omitted   int
	recipient map[string]int
}

func (c *chunkRecorder) Publish(_ context.Context, dls []activities.DeadLetter) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, d := range dls {
		if len(d.Message.Body) > 0 {
			n++
		} else if d.MessageOmitted > 0 {
			c.omitted++
		}
		c.recipient[d.Recipient.ID]++
	}
	c.calls, c.withMsg = append(c.calls, len(dls)), append(c.withMsg, n)
	return nil
}

// TestDeadLetterBatchStreamsChunks: a batch's letters go out in chunks of at
// most activities.DeadLetterChunk, each chunk carrying the message once
// (the others say it is omitted, and a redrive takes it from the chunk's
// first), with a heartbeat after each chunk, so the memory dead-lettering
// takes does not grow with the batch nor with the message times the
// recipients, and a long publish is not taken for a dead worker.
func TestDeadLetterBatchStreamsChunks(t *testing.T) {
	reg := fanout.NewRegistry()
	reg.MustRegister("t", &audience{}, fanout.TypeOptions{})
	dl := &chunkRecorder{recipient: map[string]int{}}
	acts := &activities.Activities{Registry: reg, DeadLetters: dl}
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	env.RegisterActivity(acts)
	var beats []int // the SDK sends the first at once, and throttles the rest
	env.SetOnActivityHeartbeatListener(func(_ *activity.Info, v converter.EncodedValues) {
		var n int
		if err := v.Get(&n); err != nil {
			t.Error(err)
		}
		beats = append(beats, n)
	})
	const n = 2500
	batch := activities.DeliverBatchInput{Event: fanout.Event{ID: "e", Type: "t"}, AttemptID: "t/e#3", Recipients: recipients(n),
		Message: fanout.Message{ContentType: "text/plain", Body: bytes.Repeat([]byte("m"), 64<<10)}}
	v, err := env.ExecuteActivity(acts.DeadLetterBatch, activities.DeadLetterBatchInput{Batch: batch, Reason: "child terminated"})
	if err != nil {
		t.Fatal(err)
	}
	var got int
	if err := v.Get(&got); err != nil || got != n {
		t.Fatalf("dead-lettered %d (%v), want %d", got, err, n)
	}
	chunks := (n + activities.DeadLetterChunk - 1) / activities.DeadLetterChunk
	if len(dl.calls) != chunks || len(beats) == 0 || beats[0] != activities.DeadLetterChunk {
		t.Errorf("%d publish calls %v, heartbeats %v; want %d calls, and a heartbeat of %d published after the first", len(dl.calls), dl.calls, beats, chunks, activities.DeadLetterChunk)
	}
	for i, c := range dl.calls {
		if c > activities.DeadLetterChunk || dl.withMsg[i] != 1 {
			t.Errorf("publish %d: %d letters, %d with the message; want at most %d, 1", i, c, dl.withMsg[i], activities.DeadLetterChunk)
		}
	}
	if len(dl.recipient) != n || dl.omitted != n-chunks {
		t.Errorf("%d recipients dead-lettered, %d letters without the message; want %d, %d", len(dl.recipient), dl.omitted, n, n-chunks)
	}
}

// TestBatchesShareTheWorkersCalls: the batches a worker runs draw their
// calls from one pool (activities.Calls): together they never have more in
// flight than the pool, and a call that ends goes to the highest priority
// waiting: a high batch that asked after a low one is served first.
func TestBatchesShareTheWorkersCalls(t *testing.T) {
	var (
		mu       sync.Mutex
		inFlight int
		peak     int
		started  []string
		release  = map[string]chan struct{}{}
		hold     = make(chan struct{})
	)
	for i := range 4 {
		release[fmt.Sprintf("normal-%d", i)] = make(chan struct{})
	}
	h := &audience{delivered: map[string]int{}, fail: func(r fanout.Recipient) error {
		mu.Lock()
		inFlight++
		peak = max(peak, inFlight)
		started = append(started, r.ID)
		ch, ok := release[r.ID]
		mu.Unlock()
		if !ok {
			ch = hold
		}
		<-ch
		mu.Lock()
		inFlight--
		mu.Unlock()
		return nil
	}}
	reg := fanout.NewRegistry()
	reg.MustRegister("t", h, fanout.TypeOptions{})
	acts := &activities.Activities{Registry: reg, Calls: activities.NewCalls(4)}
	batch := func(prio fanout.Priority, n int) activities.DeliverBatchInput {
		rs := make([]fanout.Recipient, n)
		for i := range rs {
			rs[i] = fanout.Recipient{ID: fmt.Sprintf("%s-%d", prio, i)}
		}
		return activities.DeliverBatchInput{Event: event(string(prio), n), AttemptID: "a#0", Recipients: rs,
			MaxAttempts: 1, Concurrency: 4, Priority: prio}
	}
	calls := func() int { mu.Lock(); defer mu.Unlock(); return len(started) }
	waitCalls := func(n int) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); calls() < n; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for call %d: %v", n, started)
			}
		}
		time.Sleep(50 * time.Millisecond) // the batches ask for their next call
	}
	var wg sync.WaitGroup
	run := func(in activities.DeliverBatchInput) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if res, err := runDeliverBatch(acts, in, worker.Options{}); err != nil || res.Delivered != len(in.Recipients) {
				t.Errorf("%s batch: %+v %v", in.Priority, res, err)
			}
		}()
	}
	// A normal batch takes the whole pool; a low batch, then a high one,
	// wait for calls.
	run(batch(fanout.PriorityNormal, 4))
	waitCalls(4)
	run(batch(fanout.PriorityLow, 3))
	time.Sleep(100 * time.Millisecond)
	run(batch(fanout.PriorityHigh, 3))
	time.Sleep(100 * time.Millisecond)
	if n := calls(); n != 4 {
		t.Errorf("%d calls started with the pool taken, want 4", n)
	}
	// The normal calls end one by one: each frees one call.
	for i := range 4 {
		close(release[fmt.Sprintf("normal-%d", i)])
		waitCalls(5 + i)
	}
	close(hold)
	wg.Wait()
	if peak > 4 {
		t.Errorf("%d calls in flight at once across the batches, over the pool's 4", peak)
	}
	var next []string
	for _, id := range started[4:8] {
		next = append(next, strings.SplitN(id, "-", 2)[0])
	}
	if want := []string{"high", "high", "high", "low"}; !slices.Equal(next, want) {
		t.Errorf("the freed calls went to %v, want %v", next, want)
	}
}
