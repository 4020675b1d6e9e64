package activities

import (
	"context"
	"log/slog"
	"strconv"
	"sync/atomic"
	"testing"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/testsuite"

	"github.com/redis/go-redis/v9"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/activities/limits"
	"github.com/fanout/fanout/workers/webhook"
)

// benchSink is the webhook type with an in-memory Deliver: the delivery
// worker's own cost per recipient (feed, breaker, key, stats, gate calls)
// without the network. Its DestinationKey is the webhook type's.
type benchSink struct {
	*webhook.Handler
	n atomic.Int64
}

func (h *benchSink) Deliver(context.Context, fanout.Event, fanout.Recipient, fanout.Message) error {
	h.n.Add(1)
	return nil
}

// BenchmarkDeliverAll delivers a batch of 5,000 recipients, all to one
// host (the bench's sink), at least once, no limit configured, 512
// concurrent calls: per op, one DeliverBatch. "plain" runs without
// Destinations (no limits, no breakers), "destinations" with them as
// workers.Run sets them without Redis, "destinations+limiter" with a
// limiter too, never consulted (the host has no rate).
func BenchmarkDeliverAll(b *testing.B) {
	const n = 5000
	rs := make([]fanout.Recipient, n)
	for i := range rs {
		rs[i] = fanout.Recipient{ID: "r" + strconv.Itoa(i), Address: "http://127.0.0.1:8099/sink/" + strconv.Itoa(i)}
	}
	for _, tc := range []struct {
		name          string
		dests, limits bool
	}{{"plain", false, false}, {"destinations", true, false}, {"destinations+limiter", true, true}} {
		b.Run(tc.name, func(b *testing.B) {
			h := &benchSink{Handler: &webhook.Handler{}}
			reg := fanout.NewRegistry()
			if err := reg.Register("t", h, fanout.TypeOptions{}); err != nil {
				b.Fatal(err)
			}
			a := &Activities{Registry: reg, DeliverConcurrency: 512}
			if tc.dests {
				a.Destinations = NewDestinations(nil, nil, nil)
			}
			if tc.limits {
				// A limiter whose Redis is not there: the host has no rate,
				// so it must never be asked (a Take would fail the batch).
				rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
				b.Cleanup(func() { _ = rdb.Close() })
				a.Destinations.Limiter = limits.NewLimiter(rdb)
			}
			var s testsuite.WorkflowTestSuite
			s.SetLogger(log.NewStructuredLogger(slog.New(slog.DiscardHandler)))
			env := s.NewTestActivityEnvironment()
			in := DeliverBatchInput{Event: fanout.Event{ID: "e", Type: "t"}, AttemptID: "e#1", Recipients: rs,
				MaxAttempts: 3, Concurrency: 512}
			var delivered int
			env.RegisterActivityWithOptions(func(ctx context.Context) (int, error) {
				res, err := a.DeliverBatch(ctx, in)
				delivered = res.Delivered
				return res.Delivered, err
			}, activity.RegisterOptions{Name: "DeliverBench"})
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if _, err := env.ExecuteActivity("DeliverBench"); err != nil {
					b.Fatal(err)
				}
				if delivered != n {
					b.Fatalf("delivered %d of %d", delivered, n)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/delivery")
		})
	}
}
