package activities

import (
	"context"
	"sync"
	"time"

	"github.com/sony/gobreaker/v2"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/interceptor"

	"github.com/fanout/fanout"
)

// Metrics of the delivery activities, recorded through the global
// OpenTelemetry meter provider (telemetry.Setup installs it; without it they
// are no-ops). Their Prometheus names are in the README ("Observability").
//
//	fanout.deliveries          counter   recipients by final outcome: delivered, duplicate, failed, expired
//	                                     (counted when their batch completes, every recipient once)
//	fanout.expired             counter   recipients not delivered because their event expired, counted by
//	                                     the event's workflow (ExpiredMetric) when it learns of them: those
//	                                     of batches it did not start and those its batches left
//	fanout.delivery.retries    counter   recipients a batch attempt left to its retry after a transient
//	                                     failure (one recipient may count several times; not an outcome)
//	fanout.duplicates.skipped  counter   recipients the gate skipped: another batch of the event delivered them
//	fanout.dead_letters        counter   recipients written to the deliveries DLQ
//	fanout.delivery.duration   histogram seconds per deliver_to_recipient call, by result (ok, error, permanent_error)
//	fanout.batch.duration      histogram seconds per DeliverBatch attempt, by result (completed, retry, error)
//
// All carry event_type; the batch ones also priority. Retries are a counter
// of their own so that a ratio over fanout_deliveries_total is a ratio over
// final outcomes (failed / (delivered + duplicate + failed)).
const meterName = "github.com/fanout/fanout/activities"

// ExpiredMetric is the name of the expired counter, which the Fanout
// workflow records through the Temporal SDK's metrics handler (which
// records nothing while a history replays), with the attributes event_type
// and priority: the workflow is the one place that learns of every expired
// recipient, those of the batches it did not start included. A batch's
// own expired recipients are also its final outcome "expired" in
// fanout.deliveries.
const ExpiredMetric = "fanout.expired"

type instruments struct {
	deliveries  metric.Int64Counter
	retries     metric.Int64Counter
	duplicates  metric.Int64Counter
	deadLetters metric.Int64Counter
	deliverDur  metric.Float64Histogram
	batchDur    metric.Float64Histogram
}

var (
	instOnce sync.Once
	inst     instruments
	// attrSets caches the attribute options of the hot path (per delivery).
	attrSets sync.Map // attrKey -> metric.MeasurementOption
)

type attrKey struct{ eventType, priority, name, value string }

func meters() *instruments {
	instOnce.Do(func() {
		m := otel.GetMeterProvider().Meter(meterName)
		inst.deliveries, _ = m.Int64Counter("fanout.deliveries", metric.WithUnit("{recipient}"),
			metric.WithDescription("Recipients by final delivery outcome: delivered, duplicate, failed (once per recipient, when its batch completes)"))
		inst.retries, _ = m.Int64Counter("fanout.delivery.retries", metric.WithUnit("{recipient}"),
			metric.WithDescription("Recipients a DeliverBatch attempt left to its retry after a transient failure (5xx, 429, timeout)"))
		inst.duplicates, _ = m.Int64Counter("fanout.duplicates.skipped", metric.WithUnit("{recipient}"),
			metric.WithDescription("Recipients skipped by the attempt-id gate because another batch of the event delivered them"))
		inst.deadLetters, _ = m.Int64Counter("fanout.dead_letters", metric.WithUnit("{recipient}"),
			metric.WithDescription("Recipients given up and written to the deliveries DLQ"))
		inst.deliverDur, _ = m.Float64Histogram("fanout.delivery.duration", metric.WithUnit("s"),
			metric.WithDescription("Duration of each deliver_to_recipient call, by result"),
			metric.WithExplicitBucketBoundaries(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
		inst.batchDur, _ = m.Float64Histogram("fanout.batch.duration", metric.WithUnit("s"),
			metric.WithDescription("Duration of each DeliverBatch activity attempt, by result"),
			metric.WithExplicitBucketBoundaries(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600))
	})
	return &inst
}

// attrs returns the (cached) attribute option {event_type, priority?, name=value?}.
func attrs(eventType string, priority fanout.Priority, name, value string) metric.MeasurementOption {
	k := attrKey{eventType, string(priority), name, value}
	if o, ok := attrSets.Load(k); ok {
		return o.(metric.MeasurementOption)
	}
	kv := []attribute.KeyValue{attribute.String("event_type", eventType)}
	if name != "" {
		kv = append(kv, attribute.String(name, value))
	}
	if priority != "" {
		kv = append(kv, attribute.String("priority", string(priority)))
	}
	o, _ := attrSets.LoadOrStore(k, metric.WithAttributeSet(attribute.NewSet(kv...)))
	return o.(metric.MeasurementOption)
}

// deliverObs are the options of fanout.delivery.duration by result, as
// the variadic slices Record takes: made once per batch (deliverAll), so
// that a delivery neither looks them up nor allocates them.
type deliverObs struct{ ok, err, perm []metric.RecordOption }

func newDeliverObs(eventType string) *deliverObs {
	o := func(result string) []metric.RecordOption {
		return []metric.RecordOption{attrs(eventType, "", "result", result)}
	}
	return &deliverObs{ok: o("ok"), err: o("error"), perm: o("permanent_error")}
}

// observeDeliver calls the handler's Deliver and records its duration.
func observeDeliver(ctx context.Context, h fanout.Handler, in *DeliverBatchInput, r fanout.Recipient) error {
	obs := in.obs
	if obs == nil {
		obs = newDeliverObs(in.Event.Type)
	}
	start := time.Now()
	err := h.Deliver(ctx, in.Event, r, in.Message)
	opts := obs.ok
	switch {
	case err == nil:
	case fanout.IsPermanent(err):
		opts = obs.perm
	default:
		opts = obs.err
	}
	meters().deliverDur.Record(ctx, time.Since(start).Seconds(), opts...)
	return err
}

// observeRetried counts the recipients a batch attempt leaves to its retry
// (fanout_delivery_retries_total, not an outcome: their final outcome is
// counted when a later attempt completes the batch).
func observeRetried(ctx context.Context, in DeliverBatchInput, n int) {
	meters().retries.Add(ctx, int64(n), attrs(in.Event.Type, in.Priority, "", ""))
}

// observeBatch records a finished DeliverBatch attempt: its duration and,
// when it completed, the final outcome of each of its recipients.
func observeBatch(ctx context.Context, in DeliverBatchInput, res DeliverBatchResult, err error, d time.Duration) {
	m := meters()
	result := "completed"
	switch {
	case err == nil:
	case IsDeliveryRetry(err):
		result = "retry"
	default:
		result = "error"
	}
	m.batchDur.Record(ctx, d.Seconds(), attrs(in.Event.Type, in.Priority, "result", result))
	if err != nil {
		return
	}
	for _, c := range []struct {
		outcome string
		n       int
	}{{"delivered", res.Delivered}, {"duplicate", res.Duplicates}, {"failed", res.Failed}, {"expired", res.Expired}} {
		if c.n > 0 {
			m.deliveries.Add(ctx, int64(c.n), attrs(in.Event.Type, in.Priority, "outcome", c.outcome))
		}
	}
	if res.Duplicates > 0 {
		m.duplicates.Add(ctx, int64(res.Duplicates), attrs(in.Event.Type, in.Priority, "", ""))
	}
	if res.DeadLettered > 0 {
		m.deadLetters.Add(ctx, int64(res.DeadLettered), attrs(in.Event.Type, in.Priority, "", ""))
	}
}

// MetricsInterceptor is a worker interceptor that records the outcome and
// duration of every DeliverBatch attempt (workers.Run installs it).
func MetricsInterceptor() interceptor.WorkerInterceptor { return &metricsInterceptor{} }

type metricsInterceptor struct {
	interceptor.WorkerInterceptorBase
}

func (*metricsInterceptor) InterceptActivity(_ context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	i := &metricsActivityInbound{}
	i.Next = next
	return i
}

type metricsActivityInbound struct {
	interceptor.ActivityInboundInterceptorBase
}

func (i *metricsActivityInbound) ExecuteActivity(ctx context.Context, in *interceptor.ExecuteActivityInput) (any, error) {
	if activity.GetInfo(ctx).ActivityType.Name != "DeliverBatch" || len(in.Args) != 1 {
		return i.Next.ExecuteActivity(ctx, in)
	}
	var bin DeliverBatchInput
	switch a := in.Args[0].(type) {
	case DeliverBatchInput:
		bin = a
	case *DeliverBatchInput:
		bin = *a
	default:
		return i.Next.ExecuteActivity(ctx, in)
	}
	start := time.Now()
	ret, err := i.Next.ExecuteActivity(ctx, in)
	var res DeliverBatchResult
	switch r := ret.(type) {
	case DeliverBatchResult:
		res = r
	case *DeliverBatchResult:
		if r != nil {
			res = *r
		}
	}
	observeBatch(ctx, bin, res, err, time.Since(start))
	return ret, err
}

// Destination metrics (bounded: by event type only, never by destination,
// which comes from hostile input; the hosts are in the batch results, the
// heartbeats and the logs).
//
//	fanout.destination.throttled        counter  deliveries that waited for their destination's rate limit
//	fanout.destination.breaker.rejected counter  deliveries not made because their destination's breaker was open
//	fanout.destination.breaker.opened   counter  breakers that opened (after consecutive failures, or a failed trial)
//	fanout.destination.breakers.open    gauge    breakers open or half-open now, per worker
var (
	destOnce sync.Once
	destInst struct {
		throttled, rejected, opened metric.Int64Counter
		open                        metric.Int64UpDownCounter
	}
)

func destMeters() *struct {
	throttled, rejected, opened metric.Int64Counter
	open                        metric.Int64UpDownCounter
} {
	destOnce.Do(func() {
		m := otel.GetMeterProvider().Meter(meterName)
		destInst.throttled, _ = m.Int64Counter("fanout.destination.throttled", metric.WithUnit("{recipient}"),
			metric.WithDescription("Deliveries that waited for their destination's rate limit"))
		destInst.rejected, _ = m.Int64Counter("fanout.destination.breaker.rejected", metric.WithUnit("{recipient}"),
			metric.WithDescription("Deliveries not made because their destination's circuit breaker was open"))
		destInst.opened, _ = m.Int64Counter("fanout.destination.breaker.opened", metric.WithUnit("{breaker}"),
			metric.WithDescription("Destination circuit breakers that opened"))
		destInst.open, _ = m.Int64UpDownCounter("fanout.destination.breakers.open", metric.WithUnit("{breaker}"),
			metric.WithDescription("Destination circuit breakers open or half-open now"))
	})
	return &destInst
}

// fanout.low_priority.braked counts the low-priority deliveries the brake
// held to its rate (brake.go), by event type.
var braked = sync.OnceValue(func() metric.Int64Counter {
	c, _ := otel.GetMeterProvider().Meter(meterName).Int64Counter("fanout.low_priority.braked", metric.WithUnit("{recipient}"),
		metric.WithDescription("Low-priority deliveries held to the brake's rate while other priorities delivered"))
	return c
})

func observeBraked(eventType string) {
	braked().Add(context.Background(), 1, attrs(eventType, "", "", ""))
}

func observeThrottled(eventType string) {
	destMeters().throttled.Add(context.Background(), 1, attrs(eventType, "", "", ""))
}

func observeRejected(eventType string) {
	destMeters().rejected.Add(context.Background(), 1, attrs(eventType, "", "", ""))
}

// observeBreaker counts a breaker's state change.
func observeBreaker(eventType string, from, to gobreaker.State) {
	m, ctx, o := destMeters(), context.Background(), attrs(eventType, "", "", "")
	switch {
	case to == gobreaker.StateOpen && from == gobreaker.StateClosed:
		m.opened.Add(ctx, 1, o)
		m.open.Add(ctx, 1, o)
	case to == gobreaker.StateOpen:
		m.opened.Add(ctx, 1, o)
	case to == gobreaker.StateClosed:
		m.open.Add(ctx, -1, o)
	}
}
