package telemetry

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/client"
)

// clearOTelEnv unsets the OTEL_* variables Setup and the exporter read.
func clearOTelEnv(t *testing.T) {
	t.Helper()
	for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_TRACES_EXPORTER",
		"OTEL_SDK_DISABLED", "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
		"OTEL_METRICS_EXPORTER", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "OTEL_EXPORTER_OTLP_INSECURE"} {
		t.Setenv(k, "")
	}
}

const parentTP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// Without an exporter nothing is recorded, but a remote parent's context
// passes through spans unchanged, and the Temporal pieces are there.
func TestSetupWithoutExporterPassesTraceContextThrough(t *testing.T) {
	clearOTelEnv(t)
	ctx := context.Background()
	tel, err := Setup(ctx, "test")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tel.Shutdown(ctx) }()
	if tel.Exporting() || tel.MetricsHandler != nil || tel.MetricsAddr() != "" || tel.Interceptor == nil {
		t.Fatalf("exporting %v, metrics handler %v, metrics addr %q, interceptor %v", tel.Exporting(), tel.MetricsHandler, tel.MetricsAddr(), tel.Interceptor)
	}
	pctx, ok := ContextWithTraceparent(ctx, parentTP, "")
	if !ok {
		t.Fatal("valid traceparent rejected")
	}
	sctx, span := tel.TracerProvider.Tracer("t").Start(pctx, "s")
	defer span.End()
	if span.IsRecording() {
		t.Error("span records without an exporter")
	}
	c := propagation.MapCarrier{}
	otel.GetTextMapPropagator().Inject(sctx, c)
	if c["traceparent"] != parentTP {
		t.Errorf("injected traceparent %q, want the parent's %q", c["traceparent"], parentTP)
	}
	var opts client.Options
	tel.ClientOptions(&opts)
	if len(opts.Interceptors) != 1 || opts.MetricsHandler != nil {
		t.Errorf("client options: %d interceptors, metrics handler %v", len(opts.Interceptors), opts.MetricsHandler)
	}
	if _, ok := ContextWithTraceparent(ctx, "00-nope", ""); ok {
		t.Error("invalid traceparent accepted")
	}
}

// OTEL_EXPORTER_OTLP_ENDPOINT turns on the OTLP/HTTP exporter (the
// default protocol) for spans, OTEL_METRICS_EXPORTER=otlp for metrics; the
// resource takes OTEL_SERVICE_NAME.
func TestSetupExportsOTLPOverHTTP(t *testing.T) {
	clearOTelEnv(t)
	var mu sync.Mutex
	var paths []string
	var bodies bytes.Buffer
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var rd io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, err.Error(), 400)
				return
			}
			rd = zr
		}
		b, _ := io.ReadAll(rd)
		mu.Lock()
		paths = append(paths, r.URL.Path)
		bodies.Write(b)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer srv.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	t.Setenv("OTEL_SERVICE_NAME", "svc-from-env")
	t.Setenv("OTEL_METRICS_EXPORTER", "otlp")

	ctx := context.Background()
	tel, err := Setup(ctx, "default-name")
	if err != nil {
		t.Fatal(err)
	}
	if !tel.Exporting() || !tel.PushingMetrics() {
		t.Fatalf("exporting spans %v, pushing metrics %v with OTEL_EXPORTER_OTLP_ENDPOINT and OTEL_METRICS_EXPORTER=otlp set", tel.Exporting(), tel.PushingMetrics())
	}
	_, span := tel.TracerProvider.Tracer("t").Start(ctx, "exported-span")
	span.End()
	c, _ := tel.MeterProvider.Meter("t").Int64Counter("fanout.test.pushed_http")
	c.Add(ctx, 1)
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := tel.Shutdown(sctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Contains(paths, "/v1/traces") || !slices.Contains(paths, "/v1/metrics") {
		t.Fatalf("exporter requests: %v, want /v1/traces and /v1/metrics", paths)
	}
	for _, s := range []string{"exported-span", "svc-from-env", "fanout.test.pushed_http"} {
		if !bytes.Contains(bodies.Bytes(), []byte(s)) {
			t.Errorf("export has no %q", s)
		}
	}
	if bytes.Contains(bodies.Bytes(), []byte("default-name")) {
		t.Error("OTEL_SERVICE_NAME did not override the default service name")
	}
}

func TestSetupRejectsUnsupportedExporter(t *testing.T) {
	clearOTelEnv(t)
	t.Setenv("OTEL_TRACES_EXPORTER", "zipkin")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
	if _, err := Setup(context.Background(), "test"); err == nil || !strings.Contains(err.Error(), "OTEL_TRACES_EXPORTER") {
		t.Fatalf("err = %v, want one naming OTEL_TRACES_EXPORTER", err)
	}
	t.Setenv("OTEL_TRACES_EXPORTER", "none")
	tel, err := Setup(context.Background(), "test")
	if err != nil || tel.Exporting() {
		t.Fatalf("OTEL_TRACES_EXPORTER=none: exporting %v, err %v", tel != nil && tel.Exporting(), err)
	}
}

// A span processor (the tests' recorder) gets the spans without an exporter.
func TestSetupWithSpanProcessor(t *testing.T) {
	clearOTelEnv(t)
	rec := tracetest.NewSpanRecorder()
	tel, err := Setup(context.Background(), "test", WithSpanProcessor(rec))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tel.Shutdown(context.Background()) }()
	pctx, _ := ContextWithTraceparent(context.Background(), parentTP, "")
	_, span := otel.Tracer("t").Start(pctx, "child")
	span.End()
	ended := rec.Ended()
	if len(ended) != 1 || ended[0].SpanContext().TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" ||
		ended[0].Parent().SpanID().String() != "00f067aa0ba902b7" || ended[0].SpanKind() != trace.SpanKindInternal {
		t.Fatalf("recorded %v", ended)
	}
}

// WithMetricsAddr serves the OpenTelemetry metrics, the Temporal SDK's
// (through MetricsHandler) and the Go runtime's at /metrics.
func TestMetricsServed(t *testing.T) {
	clearOTelEnv(t)
	ctx := context.Background()
	tel, err := Setup(ctx, "metrics-test", WithMetricsAddr("127.0.0.1:0"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := tel.MeterProvider.Meter("t").Int64Counter("fanout.test.things")
	if err != nil {
		t.Fatal(err)
	}
	c.Add(ctx, 3)
	tel.MetricsHandler.WithTags(map[string]string{"namespace": "default"}).Counter("temporal_test_counter").Inc(2)
	tel.MetricsHandler.Timer("temporal_test_latency").Record(40 * time.Millisecond)

	resp, err := http.Get("http://" + tel.MetricsAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	body := string(b)
	for _, want := range []string{
		"fanout_test_things_total{",
		`temporal_test_counter_total{namespace="default"`,
		"temporal_test_latency_seconds_bucket{",
		`target_info{service_name="metrics-test"`,
		"go_goroutines ",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics has no %s", want)
		}
	}
	// The SDK's latencies are in seconds: the 40 ms one is above the
	// 25 ms bucket and within the 50 ms one (OpenTelemetry's default
	// boundaries, made for milliseconds, put it below 5 s).
	for _, want := range []string{`le="0.025"[^}]*\} 0\b`, `le="0.05"[^}]*\} 1\b`} {
		if !regexp.MustCompile(`temporal_test_latency_seconds_bucket\{[^}]*` + want).MatchString(body) {
			t.Errorf("/metrics has no temporal_test_latency_seconds_bucket matching %s", want)
		}
	}
	if t.Failed() {
		t.Log(body)
	}
	addr := tel.MetricsAddr()
	if err := tel.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get("http://" + addr + "/metrics"); err == nil {
		t.Error("/metrics still served after Shutdown")
	}
}

func TestMetricsAddrInUse(t *testing.T) {
	clearOTelEnv(t)
	tel, err := Setup(context.Background(), "a", WithMetricsAddr("127.0.0.1:0"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tel.Shutdown(context.Background()) }()
	if _, err := Setup(context.Background(), "b", WithMetricsAddr(tel.MetricsAddr())); err == nil || !strings.Contains(err.Error(), "FANOUT_METRICS_ADDR") {
		t.Fatalf("second listener on %s: err %v, want one naming FANOUT_METRICS_ADDR", tel.MetricsAddr(), err)
	}
}
