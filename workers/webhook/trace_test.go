package webhook

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/fanout/fanout"
)

// Deliver passes the trace context of its ctx to the recipient in the W3C
// traceparent header (here without any tracer provider installed: the
// context passes through unchanged).
func TestDeliverSendsTraceparent(t *testing.T) {
	const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Get("traceparent"))
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	h := &Handler{Client: NewClient(5*time.Second, 4, Loopback...)}
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": tp})
	if !trace.SpanContextFromContext(ctx).IsValid() {
		t.Fatal("bad test traceparent")
	}
	ev := fanout.Event{ID: "e1", Type: EventType}
	msg := fanout.Message{ContentType: "application/json", Body: []byte(`{}`)}
	if err := h.Deliver(ctx, ev, fanout.Recipient{ID: "r1", Address: srv.URL}, msg); err != nil {
		t.Fatal(err)
	}
	// Without a trace in ctx, no traceparent.
	if err := h.Deliver(context.Background(), ev, fanout.Recipient{ID: "r2", Address: srv.URL}, msg); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 || !strings.HasPrefix(got[0], "00-0af7651916cd43dd8448eb211c80319c-") || got[1] != "" {
		t.Fatalf("traceparent headers %q", got)
	}
}

// TestDeliverSpan: with a tracer provider, each delivery is a client span,
// child of the caller's span, that keeps the method, scheme, host, port and
// status but not the path or query (they may hold a secret), and the
// destination gets the delivery span as traceparent parent but never the
// caller's baggage.
func TestDeliverSpan(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	otel.SetTracerProvider(tp)
	defer otel.SetTracerProvider(noop.NewTracerProvider())
	var got http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Clone()
		w.WriteHeader(http.StatusGone)
	}))
	defer srv.Close()

	h := &Handler{Client: NewClient(5*time.Second, 4, Loopback...)}
	m, _ := baggage.NewMember("tenant-secret", "s3cr3t")
	bag, _ := baggage.New(m)
	ctx, parent := tp.Tracer("test").Start(baggage.ContextWithBaggage(context.Background(), bag), "RunActivity:DeliverBatch")
	err := h.Deliver(ctx, fanout.Event{ID: "e1", Type: EventType}, fanout.Recipient{ID: "r1", Address: srv.URL + "/hooks/TOKEN?key=SECRET"},
		fanout.Message{ContentType: "application/json", Body: []byte(`{}`)})
	parent.End()
	if !fanout.IsPermanent(err) {
		t.Fatalf("Deliver to a 410: %v, want a permanent error", err)
	}
	var span sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == spanDeliver {
			span = s
		}
	}
	if span == nil || span.SpanKind() != trace.SpanKindClient || span.Parent().SpanID() != parent.SpanContext().SpanID() || span.Status().Code != codes.Error {
		t.Fatalf("delivery span %+v", span)
	}
	attrs := map[string]string{}
	for _, kv := range span.Attributes() {
		attrs[string(kv.Key)] = kv.Value.String()
		if strings.Contains(kv.Value.String(), "TOKEN") || strings.Contains(kv.Value.String(), "SECRET") {
			t.Errorf("span attribute %s = %q holds the URL's path or query", kv.Key, kv.Value.String())
		}
	}
	if attrs["http.request.method"] != "POST" || attrs["server.address"] != "127.0.0.1" || attrs["http.response.status_code"] != "410" {
		t.Errorf("span attributes %v", attrs)
	}
	if tpHeader := got.Get("traceparent"); !strings.Contains(tpHeader, span.SpanContext().SpanID().String()) {
		t.Errorf("traceparent %q, want the delivery span %s as parent", tpHeader, span.SpanContext().SpanID())
	}
	if b := got.Get("baggage"); b != "" {
		t.Errorf("the destination got the caller's baggage %q", b)
	}
}

// TestRecipientsEndpointGetsNoBaggage: the recipients endpoint may get the
// event's trace context (its traceparent header and the event's
// traceparent), never baggage: not the caller's, and not the event's
// baggage header from the Kafka record.
func TestRecipientsEndpointGetsNoBaggage(t *testing.T) {
	const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	var header http.Header
	var body []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		header, body = r.Header.Clone(), readAll(r)
		_, _ = w.Write([]byte(`{"recipients":[]}`))
	}))
	defer srv.Close()
	h := &Handler{RecipientsURL: srv.URL, Client: NewClient(5*time.Second, 4, Loopback...)}
	m, _ := baggage.NewMember("tenant-secret", "s3cr3t")
	bag, _ := baggage.New(m)
	ctx := propagation.TraceContext{}.Extract(baggage.ContextWithBaggage(context.Background(), bag), propagation.MapCarrier{"traceparent": tp})
	ev := fanout.Event{ID: "e1", Type: EventType, Headers: map[string]string{"traceparent": tp, "baggage": "user-email=a%40b.example"}}
	if _, err := h.GetRecipients(ctx, ev, "", 10); err != nil {
		t.Fatal(err)
	}
	if header.Get("baggage") != "" || strings.Contains(string(body), "baggage") || strings.Contains(string(body), "a%40b.example") {
		t.Errorf("the recipients endpoint got baggage: header %q, body %s", header.Get("baggage"), body)
	}
	if !strings.Contains(string(body), tp) || header.Get("traceparent") == "" {
		t.Errorf("the recipients endpoint lost the trace context: header %q, body %s", header.Get("traceparent"), body)
	}
	if ev.Headers["baggage"] == "" {
		t.Error("GetRecipients changed the caller's event")
	}
}

func readAll(r *http.Request) []byte {
	b, _ := io.ReadAll(r.Body)
	return b
}
