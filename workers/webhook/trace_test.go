package webhook

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

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
