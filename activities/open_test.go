package activities_test

import (
	"context"
	"errors"
	"testing"

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
