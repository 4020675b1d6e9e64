//go:build integration

package activities_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/activities"
	"github.com/fanout/fanout/activities/gate"
	"github.com/fanout/fanout/activities/staging"
	"github.com/fanout/fanout/dev/stack"
	"github.com/fanout/fanout/workflows/vocab"
)

var rdb *redis.Client

func TestMain(m *testing.M) {
	os.Exit(func() int {
		port, err := stack.FreePort()
		if err != nil {
			panic(err)
		}
		dir, _ := os.MkdirTemp("", "activities-test-")
		defer func() { _ = os.RemoveAll(dir) }()
		p, addr, err := stack.StartRedis(context.Background(), port, "", filepath.Join(dir, "redis.log"), os.Stderr)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer p.Stop(5 * time.Second)
		rdb = redis.NewClient(&redis.Options{Addr: addr})
		defer func() { _ = rdb.Close() }()
		return m.Run()
	}())
}

func setup(t *testing.T, h *audience) (*testsuite.TestActivityEnvironment, *activities.Activities, *dlqRecorder) {
	t.Helper()
	h.delivered = map[string]int{}
	reg := fanout.NewRegistry()
	reg.MustRegister("t", h, fanout.TypeOptions{})
	dl := &dlqRecorder{}
	acts := &activities.Activities{Registry: reg, Gate: gate.New(rdb, time.Hour), Staging: staging.New(rdb, time.Hour), DeadLetters: dl}
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	env.RegisterActivity(acts)
	return env, acts, dl
}

func TestStagedBatchesAreDeliveredAndRefetchedWhenLost(t *testing.T) {
	h := &audience{}
	env, acts, _ := setup(t, h)
	ev := event("stage", 250)
	v, err := env.ExecuteActivity(acts.RecipientsPage, activities.RecipientsPageInput{Event: ev, Limit: 250, BatchSize: 100, FirstBatch: 7})
	if err != nil {
		t.Fatal(err)
	}
	var page activities.PageResult
	if err := v.Get(&page); err != nil {
		t.Fatal(err)
	}
	if len(page.Recipients) != 0 || len(page.Batches) != 3 || page.Count != 250 || page.Len() != 250 {
		t.Fatalf("page %+v: want 3 staged batches and no inline recipients", page)
	}
	for i, ref := range page.Batches {
		if ref.N != 7+i || ref.Offset != 100*i || ref.Count != min(100, 250-100*i) {
			t.Fatalf("ref %d: %+v", i, ref)
		}
	}
	// Lose the staged copy of the middle batch: it is fetched again by cursor.
	if err := rdb.Del(context.Background(), page.Batches[1].Key).Err(); err != nil {
		t.Fatal(err)
	}
	pagesBefore := h.pages
	for _, ref := range page.Batches {
		ref := ref
		v, err := env.ExecuteActivity(acts.DeliverBatch, activities.DeliverBatchInput{
			Event: ev, AttemptID: vocab.AttemptID(ev.Type, ev.ID, ref.N), Ref: &ref, MaxAttempts: 3, Concurrency: 8})
		if err != nil {
			t.Fatalf("batch %d: %v", ref.N, err)
		}
		var res activities.DeliverBatchResult
		if err := v.Get(&res); err != nil {
			t.Fatal(err)
		}
		if res.Delivered != ref.Count || res.Duplicates != 0 || res.Failed != 0 {
			t.Fatalf("batch %d: %+v", ref.N, res)
		}
		if n, _ := rdb.Exists(context.Background(), ref.Key).Result(); n != 0 {
			t.Errorf("batch %d: staged copy not dropped after delivery", ref.N)
		}
	}
	if h.pages != pagesBefore+1 {
		t.Errorf("get_recipients called %d times for the lost batch, want 1", h.pages-pagesBefore)
	}
	if len(h.delivered) != 250 {
		t.Errorf("%d recipients delivered, want 250", len(h.delivered))
	}
	for id, c := range h.delivered {
		if c != 1 {
			t.Errorf("%s delivered %d times", id, c)
		}
	}
}

// deliverBatch runs DeliverBatch and returns its result, failing the test on
// an error.
func deliverBatch(t *testing.T, env *testsuite.TestActivityEnvironment, acts *activities.Activities, in activities.DeliverBatchInput) activities.DeliverBatchResult {
	t.Helper()
	v, err := env.ExecuteActivity(acts.DeliverBatch, in)
	if err != nil {
		t.Fatal(err)
	}
	var res activities.DeliverBatchResult
	if err := v.Get(&res); err != nil {
		t.Fatal(err)
	}
	return res
}

func TestGateSkipsWhatWasDeliveredAndDuplicates(t *testing.T) {
	h := &audience{}
	env, acts, _ := setup(t, h)
	ev := event("gate", 0)
	rs := []fanout.Recipient{{ID: "a"}, {ID: "b"}, {ID: "c"}}
	run := func(attempt string, recips []fanout.Recipient) activities.DeliverBatchResult {
		t.Helper()
		return deliverBatch(t, env, acts, activities.DeliverBatchInput{Event: ev, AttemptID: attempt, Recipients: recips, MaxAttempts: 3, Concurrency: 2})
	}
	if r := run("e#0", rs); r.Delivered != 3 {
		t.Fatalf("first run: %+v", r)
	}
	// A retry of the same batch (same attempt id): everything is already
	// delivered by us, nothing is delivered again.
	if r := run("e#0", rs); r.Delivered != 3 || r.Duplicates != 0 {
		t.Fatalf("retry: %+v", r)
	}
	// Another batch holding b and d: b is a duplicate, d is new.
	if r := run("e#1", []fanout.Recipient{{ID: "b"}, {ID: "d"}}); r.Delivered != 1 || r.Duplicates != 1 {
		t.Fatalf("second batch: %+v", r)
	}
	for id, want := range map[string]int{"a": 1, "b": 1, "c": 1, "d": 1} {
		if h.delivered[id] != want {
			t.Errorf("%s delivered %d times, want %d", id, h.delivered[id], want)
		}
	}
}

func TestFailuresRetryWithJitterThenDeadLetter(t *testing.T) {
	h := &audience{fail: failPermanentOrRetryAfter("perm", "flaky")}
	env, acts, dl := setup(t, h)
	ev := event("fail", 0)
	in := activities.DeliverBatchInput{Event: ev, Priority: fanout.PriorityHigh, AttemptID: "f#0",
		Recipients: []fanout.Recipient{{ID: "ok"}, {ID: "perm"}, {ID: "flaky"}}, MaxAttempts: 2, Concurrency: 3}
	// Attempt 1: ok delivered, perm dead-lettered at once, flaky retried
	// after its Retry-After.
	_, err := env.ExecuteActivity(acts.DeliverBatch, in)
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || ae.Type() != activities.ErrDeliveryRetry || ae.NextRetryDelay() != 3*time.Second {
		t.Fatalf("attempt 1: %v, want a retry in 3s", err)
	}
	if len(dl.dls) != 1 || dl.dls[0].Recipient.ID != "perm" || !dl.dls[0].Permanent || dl.dls[0].AttemptID != "f#0" || dl.dls[0].Priority != fanout.PriorityHigh {
		t.Fatalf("dead letters after attempt 1: %+v", dl.dls)
	}
	// Attempt 2: flaky fails a second time, reaching MaxAttempts: dead-lettered.
	v, err := env.ExecuteActivity(acts.DeliverBatch, in)
	if err != nil {
		t.Fatalf("attempt 2: %v", err)
	}
	var res activities.DeliverBatchResult
	if err := v.Get(&res); err != nil {
		t.Fatal(err)
	}
	if res.Delivered != 1 || res.Failed != 2 || res.DeadLettered != 2 {
		t.Fatalf("attempt 2: %+v", res)
	}
	if len(dl.dls) != 2 || dl.dls[1].Recipient.ID != "flaky" || dl.dls[1].Attempts != 2 || dl.dls[1].Permanent {
		t.Fatalf("dead letters: %+v", dl.dls)
	}
	if h.delivered["ok"] != 1 {
		t.Errorf("ok delivered %d times", h.delivered["ok"])
	}
	// A redrive of the same attempt id delivers the dead letters once they
	// succeed.
	h.fail = nil
	in.Recipients, in.Redrive, in.Round = []fanout.Recipient{{ID: "perm"}, {ID: "flaky"}}, true, "r1"
	v, err = env.ExecuteActivity(acts.DeliverBatch, in)
	if err != nil {
		t.Fatalf("redrive: %v", err)
	}
	if err := v.Get(&res); err != nil || res.Delivered != 2 {
		t.Fatalf("redrive: %+v %v", res, err)
	}
}

// TestBatchScreensRepeatedAndInvalidRecipientIDs: a recipient listed twice
// in one batch is delivered once (the repeat is a duplicate), and ids outside
// fanout's grammar (a slash, empty, a bidi mark, 10 KiB) are never delivered:
// they go to the deliveries DLQ under a stand-in id with the reason, once,
// and a retry of the batch neither delivers nor dead-letters them again.
func TestBatchScreensRepeatedAndInvalidRecipientIDs(t *testing.T) {
	h := &audience{}
	env, acts, dl := setup(t, h)
	ev := event("screen", 0)
	bad := []string{"x/batch/0", "", "a\u202eb", strings.Repeat("z", 10<<10)}
	rs := []fanout.Recipient{{ID: "a"}, {ID: "a"}, {ID: "b"}}
	for _, id := range bad {
		rs = append(rs, fanout.Recipient{ID: id, Address: "http://127.0.0.1:1/"})
	}
	rs = append(rs, fanout.Recipient{ID: bad[0]}) // an invalid id repeated
	run := func() activities.DeliverBatchResult {
		t.Helper()
		return deliverBatch(t, env, acts, activities.DeliverBatchInput{Event: ev, AttemptID: "s#0", Recipients: rs, MaxAttempts: 3, Concurrency: 4})
	}
	res := run()
	if res.Delivered != 2 || res.Duplicates != 2 || res.Failed != len(bad) || res.DeadLettered != len(bad) {
		t.Fatalf("first run: %+v; want 2 delivered, 2 duplicates, %d failed and dead-lettered", res, len(bad))
	}
	if res.Delivered+res.Duplicates+res.Failed != len(rs) {
		t.Errorf("%d recipients accounted for, want all %d", res.Delivered+res.Duplicates+res.Failed, len(rs))
	}
	for id, n := range h.delivered {
		if fanout.ValidateID(id) != nil || n != 1 {
			t.Errorf("recipient %.20q delivered %d times", id, n)
		}
	}
	if len(dl.dls) != len(bad) {
		t.Fatalf("%d dead letters, want %d", len(dl.dls), len(bad))
	}
	for _, d := range dl.dls {
		if !strings.HasPrefix(d.Recipient.ID, "invalid-") || fanout.ValidateID(d.Recipient.ID) != nil ||
			!strings.HasPrefix(d.LastError, activities.ReasonInvalidRecipientID) || !d.Permanent || len(d.LastError) > 400 {
			t.Errorf("dead letter %+v", d.Recipient)
		}
	}
	// The retry of the same batch: nothing delivered or dead-lettered again.
	again := run()
	if again.Delivered != 2 || again.Failed != len(bad) || len(dl.dls) != len(bad) || h.delivered["a"] != 1 {
		t.Errorf("retry: %+v, %d dead letters, a delivered %d times", again, len(dl.dls), h.delivered["a"])
	}
}

// TestEventsOfTwoTypesShareNoKey: two events of different types with the
// same id keep apart: each delivers to its own recipients (a recipient of
// both is delivered by both, not skipped as a duplicate) and each staged
// batch holds its own event's recipients.
func TestEventsOfTwoTypesShareNoKey(t *testing.T) {
	h := &audience{delivered: map[string]int{}}
	reg := fanout.NewRegistry()
	reg.MustRegister("a", h, fanout.TypeOptions{})
	reg.MustRegister("b", h, fanout.TypeOptions{})
	acts := &activities.Activities{Registry: reg, Gate: gate.New(rdb, time.Hour), Staging: staging.New(rdb, time.Hour)}
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	env.RegisterActivity(acts)
	id := "shared-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	evA := fanout.Event{ID: id, Type: "a", Payload: json.RawMessage(`{"N":20}`)}
	evB := fanout.Event{ID: id, Type: "b", Payload: json.RawMessage(`{"N":30}`)}

	page := func(ev fanout.Event) activities.PageResult {
		t.Helper()
		v, err := env.ExecuteActivity(acts.RecipientsPage, activities.RecipientsPageInput{Event: ev, Limit: 100, BatchSize: 10})
		if err != nil {
			t.Fatal(err)
		}
		var p activities.PageResult
		if err := v.Get(&p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	pa, pb := page(evA), page(evB)
	if len(pa.Batches) != 2 || len(pb.Batches) != 3 || pa.Batches[0].Key == pb.Batches[0].Key {
		t.Fatalf("staged batches: a %+v, b %+v", pa.Batches, pb.Batches)
	}
	// Batch 0 of each event: the same recipients r0..r9, each event's own.
	for _, c := range []struct {
		ev  fanout.Event
		ref activities.BatchRef
	}{{evA, pa.Batches[0]}, {evB, pb.Batches[0]}} {
		ref := c.ref
		v, err := env.ExecuteActivity(acts.DeliverBatch, activities.DeliverBatchInput{
			Event: c.ev, AttemptID: vocab.AttemptID(c.ev.Type, c.ev.ID, 0), Ref: &ref, MaxAttempts: 1, Concurrency: 4})
		if err != nil {
			t.Fatal(err)
		}
		var res activities.DeliverBatchResult
		if err := v.Get(&res); err != nil || res.Delivered != 10 || res.Duplicates != 0 {
			t.Fatalf("event %s/%s batch 0: %+v %v; want 10 delivered, no duplicates", c.ev.Type, c.ev.ID, res, err)
		}
	}
	if h.delivered["r0"] != 2 || h.delivered["r9"] != 2 {
		t.Errorf("r0 delivered %d times, r9 %d times; want 2 each (once per event)", h.delivered["r0"], h.delivered["r9"])
	}
	if vocab.AttemptID("a", id, 0) == vocab.AttemptID("b", id, 0) {
		t.Error("the two events' batch 0 share an attempt id")
	}
}

// TestHeavyPagesAreBounded: a Go handler's page is bounded in bytes like the
// webhook type's: over fanout.MaxPageBytes of ids and addresses, or with a
// cursor over fanout.MaxCursorLen, it fails for good with the reason; a
// page of one batch with long addresses is staged in Redis instead of
// riding back to the workflow inline.
func TestHeavyPagesAreBounded(t *testing.T) {
	addr := "https://example.com/" + strings.Repeat("a", fanout.MaxAddressLen-20)
	page := func(n int, cursor string) fanout.Page {
		p := fanout.Page{NextCursor: cursor}
		for i := range n {
			p.Recipients = append(p.Recipients, fanout.Recipient{ID: "r" + strconv.Itoa(i), Address: addr})
		}
		return p
	}
	var next fanout.Page
	reg := fanout.NewRegistry()
	reg.MustRegister("heavy", fanout.HandlerFuncs{
		GetRecipientsFunc: func(context.Context, fanout.Event, string, int) (fanout.Page, error) { return next, nil },
	}, fanout.TypeOptions{})
	acts := &activities.Activities{Registry: reg, Staging: staging.New(rdb, time.Hour)}
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	env.RegisterActivity(acts)
	in := activities.RecipientsPageInput{Event: fanout.Event{ID: "heavy-page", Type: "heavy"}, Limit: 5000, BatchSize: 5000}

	for _, c := range []struct {
		name, errType string
		page          fanout.Page
	}{
		{"over MaxPageBytes", "PageTooLarge", page(fanout.MaxPageBytes/fanout.MaxAddressLen+1, "")},
		{"cursor over MaxCursorLen", "InvalidCursor", page(1, strings.Repeat("c", fanout.MaxCursorLen+1))},
	} {
		next = c.page
		_, err := env.ExecuteActivity(acts.RecipientsPage, in)
		var ae *temporal.ApplicationError
		if !errors.As(err, &ae) || !ae.NonRetryable() || ae.Type() != c.errType {
			t.Errorf("%s: %v, want a non-retryable %s", c.name, err, c.errType)
		}
	}

	next = page(100, "") // 400 KiB: one batch, staged
	v, err := env.ExecuteActivity(acts.RecipientsPage, in)
	if err != nil {
		t.Fatal(err)
	}
	var res activities.PageResult
	if err := v.Get(&res); err != nil {
		t.Fatal(err)
	}
	if len(res.Recipients) != 0 || len(res.Batches) != 1 || res.Batches[0].Count != 100 {
		t.Fatalf("a 400 KiB page of one batch: %d inline, %d batches; want it staged", len(res.Recipients), len(res.Batches))
	}
	if rs, ok, err := acts.Staging.Load(context.Background(), res.Batches[0].Key); err != nil || !ok || len(rs) != 100 {
		t.Fatalf("staged batch: %d recipients, %v %v", len(rs), ok, err)
	}
}

// listed is an audience whose one page is whatever list holds now.
type listed struct {
	*audience
	mu   sync.Mutex
	list []fanout.Recipient
}

func (h *listed) GetRecipients(_ context.Context, _ fanout.Event, cursor string, limit int) (fanout.Page, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	off, _ := strconv.Atoi(cursor)
	return fanout.Page{Recipients: slices.Clone(h.list[min(off, len(h.list)):min(off+limit, len(h.list))])}, nil
}

func (h *listed) set(rs []fanout.Recipient) { h.mu.Lock(); h.list = rs; h.mu.Unlock() }

// TestRefetchedBatchOfAChangedPage: a staged batch whose copy is gone is
// fetched again from its page; when the page has since changed so that the
// batch's recipients are no longer where they were (the page is shorter, or
// reordered across batches) the batch fails for good with the reason
// (PageChanged) and delivers nothing, rather than delivering part of it or
// other recipients and dropping the rest silently. A page reordered only
// within the batch still delivers the batch.
func TestRefetchedBatchOfAChangedPage(t *testing.T) {
	h := &listed{audience: &audience{delivered: map[string]int{}}, list: recipients(250)}
	reg := fanout.NewRegistry()
	reg.MustRegister("t", h, fanout.TypeOptions{})
	acts := &activities.Activities{Registry: reg, Gate: gate.New(rdb, time.Hour), Staging: staging.New(rdb, time.Hour), DeadLetters: &dlqRecorder{}}
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	env.RegisterActivity(acts)
	ev := event("changed", 250)
	v, err := env.ExecuteActivity(acts.RecipientsPage, activities.RecipientsPageInput{Event: ev, Limit: 250, BatchSize: 100})
	if err != nil {
		t.Fatal(err)
	}
	var page activities.PageResult
	if err := v.Get(&page); err != nil || len(page.Batches) != 3 {
		t.Fatalf("page %+v %v: want 3 staged batches", page, err)
	}
	for _, ref := range page.Batches {
		if err := rdb.Del(context.Background(), ref.Key).Err(); err != nil {
			t.Fatal(err)
		}
	}
	deliver := func(ref activities.BatchRef) error {
		_, err := env.ExecuteActivity(acts.DeliverBatch, activities.DeliverBatchInput{
			Event: ev, AttemptID: vocab.AttemptID(ev.Type, ev.ID, ref.N), Ref: &ref, MaxAttempts: 3, Concurrency: 8})
		return err
	}
	orig := recipients(250)
	for _, c := range []struct {
		name string
		list []fanout.Recipient
		ref  activities.BatchRef
	}{
		{"shorter", orig[:230], page.Batches[2]},
		{"reordered across batches", slices.Concat(orig[150:250], orig[0:150]), page.Batches[1]},
	} {
		h.set(c.list)
		before := len(h.delivered)
		err := deliver(c.ref)
		var ae *temporal.ApplicationError
		if !errors.As(err, &ae) || ae.Type() != activities.ErrPageChanged || !ae.NonRetryable() {
			t.Errorf("%s: %v; want a non-retryable PageChanged error", c.name, err)
		}
		if got := len(h.delivered) - before; got != 0 {
			t.Errorf("%s: %d recipients delivered, want none", c.name, got)
		}
	}
	within := slices.Clone(orig)
	slices.Reverse(within[:100])
	h.set(within)
	if err := deliver(page.Batches[0]); err != nil || len(h.delivered) != 100 {
		t.Errorf("reordered within the batch: %v, %d delivered; want the batch's 100", err, len(h.delivered))
	}
}
