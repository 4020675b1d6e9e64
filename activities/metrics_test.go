package activities

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.temporal.io/sdk/temporal"

	"github.com/fanout/fanout"
)

// Retries are not an outcome: a batch whose first attempt leaves two
// recipients to a retry and whose second attempt delivers them counts them
// on fanout.delivery.retries, and fanout.deliveries holds only the final
// outcomes, each recipient once, so failed / sum(deliveries) is a ratio over
// recipients.
func TestRetriesAreNotAnOutcome(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	otel.SetMeterProvider(mp) // the instruments use the global provider (telemetry.Setup sets it)

	ctx := context.Background()
	in := DeliverBatchInput{Event: fanout.Event{ID: "e", Type: "metrics-test"}, Priority: fanout.PriorityHigh}
	// Attempt 1: 2 recipients left to the retry.
	observeRetried(ctx, in, 2)
	observeBatch(ctx, in, DeliverBatchResult{}, temporal.NewApplicationError("retry", ErrDeliveryRetry), time.Millisecond)
	// Attempt 2 completes: 7 delivered, 2 duplicates, 1 failed (dead-lettered).
	observeBatch(ctx, in, DeliverBatchResult{Delivered: 7, Duplicates: 2, Failed: 1, DeadLettered: 1}, nil, time.Millisecond)

	// Deliveries timed by result, with the batch's options (as deliverAll
	// sets them) and without.
	batchIn := in
	batchIn.obs = newDeliverObs(in.Event.Type)
	for _, di := range []*DeliverBatchInput{&in, &batchIn} {
		for _, err := range []error{nil, nil, fanout.Permanent(errors.New("HTTP 404")), errors.New("HTTP 503")} {
			_ = observeDeliver(ctx, callHandler{func() error { return err }, nil}, di, fanout.Recipient{ID: "r"})
		}
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	durations := map[string]uint64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if h, ok := m.Data.(metricdata.Histogram[float64]); ok && m.Name == "fanout.delivery.duration" {
				for _, dp := range h.DataPoints {
					if et, _ := dp.Attributes.Value("event_type"); et.AsString() == "metrics-test" {
						r, _ := dp.Attributes.Value("result")
						durations[r.AsString()] += dp.Count
					}
				}
			}
		}
	}
	if want := map[string]uint64{"ok": 4, "permanent_error": 2, "error": 2}; fmt.Sprint(durations) != fmt.Sprint(want) {
		t.Errorf("fanout.delivery.duration counts by result %v, want %v", durations, want)
	}
	sums := map[string]map[string]int64{} // metric -> outcome (or "") -> value
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			s, ok := m.Data.(metricdata.Sum[int64])
			if !ok {
				continue
			}
			for _, dp := range s.DataPoints {
				if et, _ := dp.Attributes.Value("event_type"); et.AsString() != "metrics-test" {
					continue
				}
				if p, _ := dp.Attributes.Value("priority"); p.AsString() != string(fanout.PriorityHigh) {
					t.Errorf("%s: priority %q, want %q", m.Name, p.AsString(), fanout.PriorityHigh)
				}
				o, _ := dp.Attributes.Value("outcome")
				if sums[m.Name] == nil {
					sums[m.Name] = map[string]int64{}
				}
				sums[m.Name][o.AsString()] += dp.Value
			}
		}
	}
	want := map[string]map[string]int64{
		"fanout.deliveries":         {"delivered": 7, "duplicate": 2, "failed": 1},
		"fanout.delivery.retries":   {"": 2},
		"fanout.duplicates.skipped": {"": 2},
		"fanout.dead_letters":       {"": 1},
	}
	for name, w := range want {
		got := sums[name]
		if len(got) != len(w) {
			t.Errorf("%s: %v, want %v", name, got, w)
			continue
		}
		for k, v := range w {
			if got[k] != v {
				t.Errorf("%s{outcome=%q} = %d, want %d (all: %v)", name, k, got[k], v, got)
			}
		}
	}
	var total int64
	for _, v := range sums["fanout.deliveries"] {
		total += v
	}
	if total != 10 {
		t.Errorf("fanout.deliveries sums to %d over the batch's 10 recipients, want each counted once", total)
	}
}
