package telemetry

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	tlog "go.temporal.io/sdk/log"
)

func jsonLines(t *testing.T, b *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	dec := json.NewDecoder(b)
	for dec.More() {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

// A record logged in a span's context carries the span's trace_id and
// span_id; one logged without a span carries neither.
func TestLogRecordInSpanHasIDs(t *testing.T) {
	var buf bytes.Buffer
	log := Logger(slog.New(slog.NewJSONHandler(&buf, nil)))
	tp := sdktrace.NewTracerProvider()
	defer func() { _ = tp.Shutdown(context.Background()) }()
	ctx, span := tp.Tracer("t").Start(context.Background(), "s")
	defer span.End()
	sc := span.SpanContext()

	log.With("k", "v").WithGroup("g").InfoContext(ctx, "in span", "x", 1)
	log.InfoContext(context.Background(), "no span")
	log.Info("no context")

	lines := jsonLines(t, &buf)
	if len(lines) != 3 {
		t.Fatalf("%d lines, want 3", len(lines))
	}
	in := lines[0]
	if g, _ := in["g"].(map[string]any); g == nil || g[TraceIDKey] != sc.TraceID().String() || g[SpanIDKey] != sc.SpanID().String() || in["k"] != "v" {
		t.Errorf("record in span: %v, want trace_id %s and span_id %s", in, sc.TraceID(), sc.SpanID())
	}
	for _, l := range lines[1:] {
		if _, ok := l[TraceIDKey]; ok {
			t.Errorf("record without a span has a trace_id: %v", l)
		}
	}
	if Logger(log) != log {
		t.Error("Logger wraps an already wrapped logger again")
	}
}

// The Temporal SDK's loggers (log.NewStructuredLogger over fanout's logger)
// add the span's ids as TraceID and SpanID (its OpenTelemetry interceptor's
// GetLogger): they come out as trace_id and span_id in hex, once.
func TestTemporalLoggerIDsRenamed(t *testing.T) {
	var buf bytes.Buffer
	tp := sdktrace.NewTracerProvider()
	defer func() { _ = tp.Shutdown(context.Background()) }()
	ctx, span := tp.Tracer("t").Start(context.Background(), "s")
	defer span.End()
	sc := span.SpanContext()

	tl := tlog.NewStructuredLogger(Logger(slog.New(slog.NewJSONHandler(&buf, nil))))
	tlog.With(tl, "TraceID", sc.TraceID(), "SpanID", sc.SpanID()).Info("activity line", "Attempt", 1)
	tl.Info("record-level ids", "TraceID", sc.TraceID(), "SpanID", sc.SpanID())
	// A context logger whose handler already has the ids does not add the
	// context's span again.
	slog.New(LogHandler(slog.NewJSONHandler(&buf, nil))).With("TraceID", sc.TraceID()).InfoContext(ctx, "once")

	lines := jsonLines(t, &buf)
	if len(lines) != 3 {
		t.Fatalf("%d lines, want 3", len(lines))
	}
	for _, l := range lines[:2] {
		if l[TraceIDKey] != sc.TraceID().String() || l[SpanIDKey] != sc.SpanID().String() {
			t.Errorf("%v: want trace_id %s, span_id %s", l, sc.TraceID(), sc.SpanID())
		}
		if _, ok := l["TraceID"]; ok {
			t.Errorf("%v: TraceID not renamed", l)
		}
	}
	if _, dup := lines[2][SpanIDKey]; dup || lines[2][TraceIDKey] != sc.TraceID().String() {
		t.Errorf("%v: want the handler's trace_id only", lines[2])
	}
}
