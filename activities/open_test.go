package activities_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/testsuite"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/activities"
)

// TestOpen: one local activity prepares, pages and, for an audience that is
// one batch of at most LocalDeliveryMax, delivers; a bigger audience comes
// back as its first page; a failed delivery comes back as an error to hand
// to the delivery queue, with the destination's Retry-After; a failed page
// leaves the page to the workflow.
func TestOpen(t *testing.T) {
	tests := []struct {
		name          string
		n             int
		fail          func(fanout.Recipient) error
		payload       string
		wantDelivered bool
		wantPaged     bool
		wantRetry     bool
	}{
		{name: "small: delivered", n: 20, wantDelivered: true, wantPaged: true},
		{name: "at the local limit", n: fanout.DefaultLocalDeliveryMax, wantDelivered: true, wantPaged: true},
		{name: "over the local limit: paged only", n: fanout.DefaultLocalDeliveryMax + 1, wantPaged: true},
		{name: "several batches: paged only", n: 2500, wantPaged: true},
		{name: "empty audience", n: 0, wantPaged: true},
		{name: "transient failure: to the delivery queue", n: 5, wantPaged: true, wantRetry: true,
			fail: failPermanentOrRetryAfter("none", "r3")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := &audience{delivered: map[string]int{}, fail: tc.fail}
			reg := fanout.NewRegistry()
			reg.MustRegister("t", h, fanout.TypeOptions{})
			var s testsuite.WorkflowTestSuite
			env := s.NewTestActivityEnvironment()
			env.SetTestTimeout(time.Minute) // the local activity's deadline: time to deliver
			acts := &activities.Activities{Registry: reg}
			env.RegisterActivity(acts)
			ev := event("open", tc.n)
			if tc.payload != "" {
				ev.Payload = []byte(tc.payload)
			}
			v, err := env.ExecuteLocalActivity(acts.Open, activities.OpenInput{Event: ev})
			if err != nil {
				t.Fatal(err)
			}
			var res activities.OpenResult
			if err := v.Get(&res); err != nil {
				t.Fatal(err)
			}
			if string(res.Prepared.Message.Body) != "hi" || res.Prepared.Options.LocalDeliveryMax != fanout.DefaultLocalDeliveryMax {
				t.Errorf("prepared %+v", res.Prepared)
			}
			if res.Delivered != tc.wantDelivered || res.Paged != tc.wantPaged || (res.DeliverError != "") != tc.wantRetry {
				t.Fatalf("delivered %v paged %v error %q; want %v %v retry %v", res.Delivered, res.Paged, res.DeliverError, tc.wantDelivered, tc.wantPaged, tc.wantRetry)
			}
			if tc.wantPaged && res.Page.Len() != min(tc.n, fanout.DefaultBatchSize*fanout.DefaultPageBatches) {
				t.Errorf("first page holds %d recipients", res.Page.Len())
			}
			switch {
			case tc.wantDelivered:
				if res.Delivery.Delivered != tc.n || len(h.delivered) != tc.n {
					t.Errorf("delivery %+v, handler saw %d recipients; want %d", res.Delivery, len(h.delivered), tc.n)
				}
				if len(res.Page.Recipients) != 0 || res.Page.Count != tc.n {
					t.Errorf("delivered page carries %d recipients (count %d); want none, count %d: they would only grow the marker", len(res.Page.Recipients), res.Page.Count, tc.n)
				}
			case tc.wantRetry:
				if res.DeliverNonRetryable || res.DeliverRetryDelay <= 0 {
					t.Errorf("retry %q non-retryable %v after %v; want retryable with the Retry-After", res.DeliverError, res.DeliverNonRetryable, res.DeliverRetryDelay)
				}
			default:
				if len(h.delivered) != 0 {
					t.Errorf("delivered %d recipients, want none", len(h.delivered))
				}
			}
		})
	}
}

// TestOpenPrepareFails: Open fails only with Prepare's error, kept whole.
func TestOpenPrepareFails(t *testing.T) {
	want := errors.New("template service down")
	steps := activities.OpenSteps{Prepare: func(context.Context, activities.PrepareInput) (activities.PrepareResult, error) {
		return activities.PrepareResult{}, want
	}}
	if _, err := steps.Open(t.Context(), activities.OpenInput{Event: event("open-fail", 3)}); !errors.Is(err, want) {
		t.Fatalf("Open: %v, want %v", err, want)
	}
}

// TestOpenPageFails: a page's non-retryable error (here: get_recipients
// says Permanent) fails Open, so the event fails without asking the
// endpoint again; another error leaves the page to the workflow.
func TestOpenPageFails(t *testing.T) {
	h := &audience{delivered: map[string]int{}}
	reg := fanout.NewRegistry()
	reg.MustRegister("t", h, fanout.TypeOptions{})
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	acts := &activities.Activities{Registry: reg}
	env.RegisterActivity(acts)
	ev := event("open-bad", 3)
	ev.Payload = []byte("not json")
	if _, err := env.ExecuteLocalActivity(acts.Open, activities.OpenInput{Event: ev}); err == nil || h.pages != 0 {
		t.Fatalf("Open with a permanent page error: %v (%d pages served), want the error", err, h.pages)
	}

	prepared := activities.PrepareResult{Message: fanout.Message{Body: []byte("hi")}, Options: fanout.TypeOptions{LocalDeliveryMax: 100}}
	steps := activities.OpenSteps{
		Prepare: func(context.Context, activities.PrepareInput) (activities.PrepareResult, error) { return prepared, nil },
		Page: func(context.Context, activities.RecipientsPageInput) (activities.PageResult, error) {
			return activities.PageResult{}, errors.New("connection reset")
		},
	}
	res, err := steps.Open(t.Context(), activities.OpenInput{Event: event("open-reset", 3)})
	if err != nil || res.Paged || res.Delivered || string(res.Prepared.Message.Body) != "hi" {
		t.Fatalf("Open with a transient page error: %+v, %v; want prepared, not paged, no error", res, err)
	}
}

// slowCalls is a handler whose calls take the time given per recipient and
// end early only when their context does: cut counts those (a call cut
// mid-way may have reached the destination without being marked, so the
// retry would repeat it).
type slowCalls struct {
	audience
	took map[string]time.Duration
	cut  atomic.Int32
}

func (h *slowCalls) Deliver(ctx context.Context, ev fanout.Event, r fanout.Recipient, m fanout.Message) error {
	select {
	case <-time.After(h.took[r.ID]):
	case <-ctx.Done():
		h.cut.Add(1)
		return ctx.Err()
	}
	return h.audience.Deliver(ctx, ev, r, m)
}

// TestOpenYieldsACallTimeoutBeforeItsDeadline: the fast path stops starting
// calls at least the type's CallTimeout (and CallSlack) before its local
// activity's deadline, so a call it starts ends, and is marked, before the
// deadline cuts it; what it did not start goes to the delivery queue. With
// little time left, it starts none.
func TestOpenYieldsACallTimeoutBeforeItsDeadline(t *testing.T) {
	const call = time.Second
	for _, tc := range []struct {
		name          string
		deadline      time.Duration // the local activity's, from its start
		took          map[string]time.Duration
		wantDelivered bool
	}{
		// r1 starts at 0.7 s and may take the whole call timeout: it would
		// end at 1.7 s, after the deadline.
		{"little time left: no call started", 1500 * time.Millisecond, map[string]time.Duration{"r0": 700 * time.Millisecond, "r1": call}, false},
		{"time for the calls: delivered", call + fanout.CallSlack + 3*time.Second, map[string]time.Duration{"r0": 700 * time.Millisecond, "r1": 300 * time.Millisecond}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &slowCalls{audience: audience{delivered: map[string]int{}}, took: tc.took}
			reg := fanout.NewRegistry()
			reg.MustRegister("t", h, fanout.TypeOptions{DeliverConcurrency: 1, CallTimeout: call})
			var s testsuite.WorkflowTestSuite
			env := s.NewTestActivityEnvironment()
			env.SetTestTimeout(tc.deadline)
			acts := &activities.Activities{Registry: reg}
			env.RegisterActivity(acts)
			v, err := env.ExecuteLocalActivity(acts.Open, activities.OpenInput{Event: event("open-yield", 2)})
			if n := h.cut.Load(); n != 0 {
				t.Fatalf("%d call(s) cut off by the local activity's deadline (%v from its start): started less than a call timeout (%v) before it; Open: %v", n, tc.deadline, call, err)
			}
			if err != nil {
				t.Fatal(err)
			}
			var res activities.OpenResult
			if err := v.Get(&res); err != nil {
				t.Fatal(err)
			}
			if res.Delivered != tc.wantDelivered {
				t.Errorf("delivered %v (%+v, error %q), want %v", res.Delivered, res.Delivery, res.DeliverError, tc.wantDelivered)
			}
			if !tc.wantDelivered && (res.DeliverError == "" || res.DeliverNonRetryable || len(h.delivered) != 0) {
				t.Errorf("error %q (non-retryable %v), %d delivered; want the batch handed over untouched", res.DeliverError, res.DeliverNonRetryable, len(h.delivered))
			}
		})
	}
}
