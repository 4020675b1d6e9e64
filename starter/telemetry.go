package starter

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/fanout/fanout/internal/telemetry"
)

const instrumentation = "github.com/fanout/fanout/starter"

// Outcomes of a record, the outcome attribute of the fanout.events counter
// and of the record's span.
const (
	OutcomeStarted      = "started"
	OutcomeDuplicate    = "duplicate"
	OutcomeDeadLettered = "dead_lettered"
)

// headerCarrier adapts Kafka record headers to a propagation.TextMapCarrier.
type headerCarrier struct{ h *[]kafka.Header }

func (c headerCarrier) Get(key string) string {
	for _, h := range *c.h {
		if strings.EqualFold(h.Key, key) {
			return string(h.Value)
		}
	}
	return ""
}

func (c headerCarrier) Set(key, value string) {
	for i, h := range *c.h {
		if strings.EqualFold(h.Key, key) {
			(*c.h)[i].Value = []byte(value)
			return
		}
	}
	*c.h = append(*c.h, kafka.Header{Key: key, Value: []byte(value)})
}

func (c headerCarrier) Keys() []string {
	keys := make([]string, len(*c.h))
	for i, h := range *c.h {
		keys[i] = h.Key
	}
	return keys
}

// Record is the Kafka record of an event: the envelope as JSON, the event id
// as key, and the W3C trace context of ctx (traceparent, tracestate,
// baggage) in its headers.
func Record(ctx context.Context, env Envelope) (kafka.Message, error) {
	v, err := json.Marshal(env)
	if err != nil {
		return kafka.Message{}, err
	}
	m := kafka.Message{Key: []byte(env.ID), Value: v}
	telemetry.Propagator.Inject(ctx, headerCarrier{&m.Headers})
	return m, nil
}

// RecordContext returns ctx with the trace context of the record's headers.
func RecordContext(ctx context.Context, m kafka.Message) context.Context {
	hs := m.Headers
	return telemetry.Propagator.Extract(ctx, headerCarrier{&hs})
}

// instruments are the bridge's tracer and counters.
type instruments struct {
	tracer trace.Tracer
	events metric.Int64Counter
}

func newInstruments(tp trace.TracerProvider, mp metric.MeterProvider) instruments {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	events, _ := mp.Meter(instrumentation).Int64Counter("fanout.events",
		metric.WithDescription("Event records handled by the bridge, by outcome: started (a Fanout workflow was started or found running), duplicate (already fanned out), dead_lettered (invalid; written to the events DLQ)"),
		metric.WithUnit("{event}"))
	return instruments{tracer: tp.Tracer(instrumentation), events: events}
}

// startSpan starts the span of one record, a child of the trace context in
// the record's headers.
func (b *Bridge) startSpan(ctx context.Context, m kafka.Message) (context.Context, trace.Span) {
	ctx = RecordContext(ctx, m)
	return b.inst.tracer.Start(ctx, "process "+m.Topic,
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			attribute.String("messaging.system", "kafka"),
			attribute.String("messaging.operation.type", "process"),
			attribute.String("messaging.destination.name", m.Topic),
			attribute.String("messaging.destination.partition.id", strconv.Itoa(m.Partition)),
			attribute.Int64("messaging.kafka.offset", m.Offset),
			attribute.String("messaging.kafka.message.key", string(m.Key)),
			attribute.String("messaging.consumer.group.name", b.cfg.GroupID),
		))
}

// count records a record's outcome on the counter and its span.
func (b *Bridge) count(ctx context.Context, outcome, reason string) {
	attrs := []attribute.KeyValue{attribute.String("outcome", outcome)}
	if reason != "" {
		attrs = append(attrs, attribute.String("reason", reason))
	}
	b.inst.events.Add(ctx, 1, metric.WithAttributes(attrs...))
	trace.SpanFromContext(ctx).SetAttributes(attribute.String("fanout.outcome", outcome))
	if reason != "" {
		trace.SpanFromContext(ctx).SetAttributes(attribute.String("fanout.dlq.reason", reason))
	}
}
