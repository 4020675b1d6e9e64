package starter

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/baggage"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/fanout/fanout/internal/telemetry"
)

const testTP = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

// Record writes the context's trace (and baggage) into the record headers,
// RecordContext reads it back, and Parse copies it into the event.
func TestRecordCarriesTraceContext(t *testing.T) {
	ctx, ok := telemetry.ContextWithTraceparent(context.Background(), testTP, "vendor=x")
	if !ok {
		t.Fatal("bad test traceparent")
	}
	mem, _ := baggage.NewMember("tenant", "t1")
	bag, _ := baggage.New(mem)
	ctx = baggage.ContextWithBaggage(ctx, bag)

	m, err := Record(ctx, Envelope{ID: "e1", Type: "webhook", Payload: json.RawMessage(`{"a":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	if string(m.Key) != "e1" {
		t.Errorf("key %q", m.Key)
	}
	got := map[string]string{}
	for _, h := range m.Headers {
		got[h.Key] = string(h.Value)
	}
	if got["traceparent"] != testTP || got["tracestate"] != "vendor=x" || got["baggage"] != "tenant=t1" {
		t.Errorf("headers %v", got)
	}

	rctx := RecordContext(context.Background(), m)
	if sc := trace.SpanContextFromContext(rctx); sc.TraceID().String() != "0af7651916cd43dd8448eb211c80319c" || !sc.IsRemote() {
		t.Errorf("extracted span context %v", sc)
	}
	if v := baggage.FromContext(rctx).Member("tenant").Value(); v != "t1" {
		t.Errorf("extracted baggage tenant=%q", v)
	}

	ev, err := testValidator().Parse(m)
	if err != nil {
		t.Fatal(err)
	}
	if ev.Headers["traceparent"] != testTP || ev.Headers["tracestate"] != "vendor=x" {
		t.Errorf("event headers %v", ev.Headers)
	}

	// No trace in ctx: no trace headers.
	m, _ = Record(context.Background(), Envelope{ID: "e2", Type: "webhook"})
	if len(m.Headers) != 0 {
		t.Errorf("headers without a trace: %v", m.Headers)
	}
}

// Header names are matched case-insensitively, as Kafka clients vary.
func TestRecordContextHeaderCase(t *testing.T) {
	m := kafka.Message{Headers: []kafka.Header{{Key: "Traceparent", Value: []byte(testTP)}}}
	if sc := trace.SpanContextFromContext(RecordContext(context.Background(), m)); !sc.IsValid() {
		t.Fatal("Traceparent header not read")
	}
}

// The record's span is a consumer span, child of the record's context; the
// outcome is on it.
func TestRecordSpan(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	b := New(Config{Kafka: KafkaConn{Brokers: []string{"127.0.0.1:1"}}, Topic: "ev", GroupID: "g", DLQTopic: "dlq", TracerProvider: tp}, nil)
	defer func() { _ = b.dlq.Close() }()
	m := kafka.Message{Topic: "ev", Partition: 2, Offset: 7, Key: []byte("e1"),
		Headers: []kafka.Header{{Key: "traceparent", Value: []byte(testTP)}}}
	ctx, span := b.startSpan(context.Background(), m)
	b.count(ctx, OutcomeStarted, "")
	span.End()
	ended := rec.Ended()
	if len(ended) != 1 {
		t.Fatalf("%d spans", len(ended))
	}
	s := ended[0]
	if s.Name() != "process ev" || s.SpanKind() != trace.SpanKindConsumer ||
		s.SpanContext().TraceID().String() != "0af7651916cd43dd8448eb211c80319c" || s.Parent().SpanID().String() != "b7ad6b7169203331" {
		t.Errorf("span %s kind %v trace %s parent %s", s.Name(), s.SpanKind(), s.SpanContext().TraceID(), s.Parent().SpanID())
	}
	attrs := map[string]string{}
	for _, kv := range s.Attributes() {
		attrs[string(kv.Key)] = kv.Value.String()
	}
	if attrs["fanout.outcome"] != OutcomeStarted || attrs["messaging.destination.partition.id"] != "2" || attrs["messaging.kafka.offset"] != "7" {
		t.Errorf("attributes %v", attrs)
	}
}
