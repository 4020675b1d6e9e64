package telemetry

import (
	"context"
	"fmt"
	"log/slog"

	"go.opentelemetry.io/otel/trace"
)

// Log attribute keys of the span a record was logged in.
const (
	TraceIDKey = "trace_id"
	SpanIDKey  = "span_id"
)

// Logger returns l with its handler wrapped by LogHandler. The mains build
// their logger with it; the same logger reaches the Temporal SDK through
// log.NewStructuredLogger (config.DialTemporal).
func Logger(l *slog.Logger) *slog.Logger {
	if _, ok := l.Handler().(*logHandler); ok {
		return l
	}
	return slog.New(LogHandler(l.Handler()))
}

// LogHandler wraps h so that a record logged with a context holding a valid
// span (slog's *Context methods, as fanout's activities log) carries the
// span's trace_id and span_id, which join the log line to its trace. The
// Temporal SDK's workflow and activity loggers add the ids themselves as
// TraceID and SpanID (its OpenTelemetry interceptor, logging without a
// context): those are renamed trace_id and span_id, so every line of a trace
// has the same keys.
func LogHandler(h slog.Handler) slog.Handler { return &logHandler{next: h} }

type logHandler struct {
	next slog.Handler
	// hasIDs: WithAttrs already gave the records trace ids (the Temporal
	// SDK's), which the context's span must not duplicate.
	hasIDs bool
}

func (h *logHandler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

func (h *logHandler) Handle(ctx context.Context, r slog.Record) error {
	renamed := false
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "TraceID" || a.Key == "SpanID" {
			renamed = true
			return false
		}
		return true
	})
	if renamed {
		nr := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
		r.Attrs(func(a slog.Attr) bool {
			nr.AddAttrs(renameID(a))
			return true
		})
		r = nr
	}
	if !h.hasIDs && !renamed {
		if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
			r = r.Clone()
			r.AddAttrs(slog.String(TraceIDKey, sc.TraceID().String()), slog.String(SpanIDKey, sc.SpanID().String()))
		}
	}
	return h.next.Handle(ctx, r)
}

func (h *logHandler) WithAttrs(as []slog.Attr) slog.Handler {
	out := make([]slog.Attr, len(as))
	has := h.hasIDs
	for i, a := range as {
		out[i] = renameID(a)
		if out[i].Key == TraceIDKey {
			has = true
		}
	}
	return &logHandler{next: h.next.WithAttrs(out), hasIDs: has}
}

func (h *logHandler) WithGroup(name string) slog.Handler {
	return &logHandler{next: h.next.WithGroup(name), hasIDs: h.hasIDs}
}

// renameID names the Temporal SDK's TraceID and SpanID attributes (values of
// trace.TraceID and trace.SpanID) trace_id and span_id, as hex strings.
func renameID(a slog.Attr) slog.Attr {
	switch a.Key {
	case "TraceID":
		a.Key = TraceIDKey
	case "SpanID":
		a.Key = SpanIDKey
	default:
		return a
	}
	if s, ok := a.Value.Any().(fmt.Stringer); ok {
		a.Value = slog.StringValue(s.String())
	}
	return a
}
