// Package telemetry sets up OpenTelemetry for fanout's processes: traces
// (W3C trace context carried from the Kafka record through the bridge, the
// Temporal workflows and activities to the delivery HTTP call), metrics on a
// Prometheus /metrics endpoint, and the Temporal SDK's tracing interceptor and
// metrics handler that carry both through Temporal.
//
// Exporters are made by go.opentelemetry.io/contrib/exporters/autoexport
// from the standard variables: OTEL_TRACES_EXPORTER and OTEL_METRICS_EXPORTER
// (otlp, console, none), OTLP over gRPC or HTTP as
// OTEL_EXPORTER_OTLP_[TRACES_|METRICS_]PROTOCOL says (grpc, http/protobuf;
// default http/protobuf), and the other OTEL_EXPORTER_OTLP_* variables
// (endpoint, headers, TLS, compression, timeout), which the exporters read
// themselves. OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES name the
// resource; OTEL_TRACES_SAMPLER samples.
//
// Traces: with OTEL_TRACES_EXPORTER unset, spans are exported with OTLP when
// OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set,
// and not at all otherwise. Without an exporter no spans are recorded, but
// trace context is still passed through unchanged: a record's traceparent
// reaches the delivery requests.
//
// Metrics: served for Prometheus at FANOUT_METRICS_ADDR (WithMetricsAddr);
// OTEL_METRICS_EXPORTER=otlp (or console) pushes them as well, every
// OTEL_METRIC_EXPORT_INTERVAL. Unset, nothing is pushed.
//
// Logs: LogHandler adds trace_id and span_id to the records logged in a
// span's context (and names the Temporal SDK's TraceID/SpanID fields so).
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"go.temporal.io/sdk/client"
	temporalotel "go.temporal.io/sdk/contrib/opentelemetry"
	"go.temporal.io/sdk/interceptor"
)

// Propagator is the W3C propagator (traceparent, tracestate, baggage) used
// for Kafka record headers, the Temporal header and delivery requests. Setup
// also installs it as the global propagator.
var Propagator propagation.TextMapPropagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// DefaultMetricsAddr is the documented production address of /metrics
// (FANOUT_METRICS_ADDR); unset, no metrics are served.
const DefaultMetricsAddr = ":9464"

// Telemetry is the set-up of one process.
type Telemetry struct {
	// TracerProvider is the SDK provider when spans are exported (or a test
	// span processor is set), a no-op one otherwise (which still passes
	// trace context through).
	TracerProvider trace.TracerProvider
	// MeterProvider is the SDK provider when metrics are on, no-op otherwise.
	MeterProvider metric.MeterProvider
	// Interceptor is Temporal's OpenTelemetry tracing interceptor: set on
	// the client, it carries the span through workflow starts, workflows,
	// child workflows and activities (workers inherit it from the client).
	Interceptor interceptor.ClientInterceptor
	// MetricsHandler emits the Temporal SDK's metrics into MeterProvider;
	// nil when metrics are off.
	MetricsHandler client.MetricsHandler

	exporting   bool
	pushing     bool
	registry    *prometheus.Registry
	server      *http.Server
	metricsAddr string
	shutdown    []func(context.Context) error
}

type options struct {
	metricsAddr    string
	metricsOn      bool
	readers        []sdkmetric.Reader
	spanProcessors []sdktrace.SpanProcessor
	sdkTracer      bool
	logger         *slog.Logger
}

// Option configures Setup.
type Option func(*options)

// WithMetricsAddr turns metrics on and serves them for Prometheus at
// http://addr/metrics ("" leaves metrics off; port 0 picks a free port, see
// MetricsAddr).
func WithMetricsAddr(addr string) Option {
	return func(o *options) {
		o.metricsAddr = addr
		o.metricsOn = o.metricsOn || addr != ""
	}
}

// WithMetricReader adds a metric reader (tests: sdkmetric.NewManualReader)
// and turns metrics on.
func WithMetricReader(r sdkmetric.Reader) Option {
	return func(o *options) { o.readers = append(o.readers, r); o.metricsOn = true }
}

// WithSpanProcessor adds a span processor (tests: tracetest.SpanRecorder);
// spans are then recorded even without an exporter.
func WithSpanProcessor(sp sdktrace.SpanProcessor) Option {
	return func(o *options) { o.spanProcessors = append(o.spanProcessors, sp) }
}

// WithSDKTracer uses the SDK tracer provider even when nothing exports, so
// new root spans get real trace ids (the publisher uses it to start a trace
// per event).
func WithSDKTracer() Option { return func(o *options) { o.sdkTracer = true } }

// WithLogger logs OpenTelemetry errors (export failures) and the set-up.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// Setup configures OpenTelemetry for a process named serviceName
// (OTEL_SERVICE_NAME overrides it) and installs the global tracer provider,
// meter provider and propagator that instrumentation without explicit
// providers (the activities' metrics, the webhook's client spans) uses.
// Shutdown flushes and stops everything.
func Setup(ctx context.Context, serviceName string, opts ...Option) (*Telemetry, error) {
	var o options
	for _, f := range opts {
		f(&o)
	}
	log := o.logger
	if log == nil {
		log = slog.Default()
	}
	t := &Telemetry{}
	otel.SetTextMapPropagator(Propagator)
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warn("opentelemetry", "err", err) }))

	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", serviceName)),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
		resource.WithTelemetrySDK(),
	)
	if err != nil && res == nil {
		return nil, fmt.Errorf("telemetry resource: %w", err)
	}
	if err := t.setupTraces(ctx, res, o); err != nil {
		return nil, err
	}
	if err := t.setupMetrics(ctx, res, o, log); err != nil {
		return nil, err
	}
	if o.metricsAddr != "" {
		if err := t.serve(o.metricsAddr, log); err != nil {
			_ = t.Shutdown(ctx)
			return nil, err
		}
	}
	log.Debug("telemetry", "service", serviceName, "exporting_traces", t.exporting, "pushing_metrics", t.pushing, "metrics_addr", t.metricsAddr)
	return t, nil
}

// setupTraces sets the tracer provider (the SDK's, installed globally,
// when spans are exported or recorded; a no-op one otherwise) and
// Temporal's tracing interceptor on it.
func (t *Telemetry) setupTraces(ctx context.Context, res *resource.Resource, o options) error {
	exporter, err := spanExporter(ctx)
	if err != nil {
		return err
	}
	if exporter != nil || len(o.spanProcessors) > 0 || o.sdkTracer {
		topts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
		if exporter != nil {
			topts = append(topts, sdktrace.WithBatcher(exporter))
			t.exporting = true
		}
		for _, sp := range o.spanProcessors {
			topts = append(topts, sdktrace.WithSpanProcessor(sp))
		}
		tp := sdktrace.NewTracerProvider(topts...)
		otel.SetTracerProvider(tp)
		t.TracerProvider = tp
		t.shutdown = append(t.shutdown, tp.Shutdown)
	} else {
		t.TracerProvider = tracenoop.NewTracerProvider()
	}
	t.Interceptor, err = temporalotel.NewTracingInterceptor(temporalotel.TracerOptions{
		Tracer:            t.TracerProvider.Tracer("temporal-sdk-go"),
		TextMapPropagator: Propagator,
		// A workflow started by an older, differently traced version must
		// still run.
		AllowInvalidParentSpans: true,
		// Progress queries (UIs, dashboards polling) would each make a
		// trace of their own: noise.
		DisableQueryTracing: true,
	})
	if err != nil {
		return fmt.Errorf("temporal tracing interceptor: %w", err)
	}
	return nil
}

// setupMetrics sets the meter provider (the SDK's, installed globally,
// with the Prometheus registry, the pushing reader and the options'
// readers, when metrics are on; a no-op one otherwise) and the Temporal
// SDK's metrics handler on it.
func (t *Telemetry) setupMetrics(ctx context.Context, res *resource.Resource, o options, log *slog.Logger) error {
	push, err := metricReader(ctx)
	if err != nil {
		_ = t.Shutdown(ctx)
		return err
	}
	if push != nil {
		o.readers = append(o.readers, push)
		o.metricsOn = true
		t.pushing = true
	}
	if !o.metricsOn {
		t.MeterProvider = metricnoop.NewMeterProvider()
		return nil
	}
	mopts := []sdkmetric.Option{sdkmetric.WithResource(res), sdkmetric.WithView(sdkLatencyView)}
	if o.metricsAddr != "" {
		pe, err := t.prometheusReader()
		if err != nil {
			return err
		}
		mopts = append(mopts, sdkmetric.WithReader(pe))
	}
	for _, r := range o.readers {
		mopts = append(mopts, sdkmetric.WithReader(r))
	}
	mp := sdkmetric.NewMeterProvider(mopts...)
	otel.SetMeterProvider(mp)
	t.MeterProvider = mp
	t.shutdown = append(t.shutdown, mp.Shutdown)
	t.MetricsHandler = temporalotel.NewMetricsHandler(temporalotel.MetricsHandlerOptions{
		Meter:                mp.Meter(sdkMeter),
		UseMonotonicCounters: true,
		OnError:              func(err error) { log.Warn("temporal metrics", "err", err) },
	})
	return nil
}

// sdkMeter is the meter the Temporal SDK's metrics are recorded by.
const sdkMeter = "temporal-sdk-go"

// sdkLatencyBuckets are the boundaries, in seconds, of the Temporal SDK's
// latency histograms (schedule-to-start, execution, poll and request
// latencies). The SDK gives its timers no boundaries, and OpenTelemetry's
// default ones (0, 5, 10, 25, ... 10000) suit milliseconds: every latency
// fell in the first bucket, and the dashboard's percentiles read ~4.75 s.
var sdkLatencyBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}

// sdkLatencyView gives the SDK's histograms sdkLatencyBuckets.
var sdkLatencyView = sdkmetric.NewView(
	sdkmetric.Instrument{Kind: sdkmetric.InstrumentKindHistogram, Scope: instrumentation.Scope{Name: sdkMeter}},
	sdkmetric.Stream{Aggregation: sdkmetric.AggregationExplicitBucketHistogram{Boundaries: sdkLatencyBuckets}},
)

// prometheusReader makes the registry /metrics serves, with the Go runtime
// and process collectors, and the reader that exports the meter
// provider's metrics into it.
func (t *Telemetry) prometheusReader() (sdkmetric.Reader, error) {
	t.registry = prometheus.NewRegistry()
	t.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	pe, err := otelprom.New(otelprom.WithRegisterer(t.registry))
	if err != nil {
		return nil, fmt.Errorf("prometheus exporter: %w", err)
	}
	return pe, nil
}

// sdkDisabled reports OTEL_SDK_DISABLED=true: nothing is exported.
func sdkDisabled() bool { return strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") }

// spanExporter returns the exporter autoexport makes from OTEL_TRACES_EXPORTER
// and the OTLP variables (grpc or http/protobuf), or nil when nothing is to
// be exported: OTEL_TRACES_EXPORTER=none, OTEL_SDK_DISABLED=true, or
// OTEL_TRACES_EXPORTER unset and no OTLP endpoint set (autoexport would
// otherwise send to localhost:4318 on every process without a collector).
func spanExporter(ctx context.Context) (sdktrace.SpanExporter, error) {
	if sdkDisabled() {
		return nil, nil
	}
	name := os.Getenv("OTEL_TRACES_EXPORTER")
	if name == "" && os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		return nil, nil
	}
	exp, err := autoexport.NewSpanExporter(ctx)
	if err != nil {
		return nil, fmt.Errorf("span exporter (OTEL_TRACES_EXPORTER=%q, OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL=%q): %w",
			name, otlpProtocol("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"), err)
	}
	if autoexport.IsNoneSpanExporter(exp) {
		return nil, nil
	}
	return exp, nil
}

// metricReader returns the periodic reader autoexport makes from
// OTEL_METRICS_EXPORTER (otlp over grpc or http/protobuf, console), or nil
// when it is unset or none: fanout's metrics are then only served for
// Prometheus at FANOUT_METRICS_ADDR. OTEL_METRICS_EXPORTER=prometheus is
// refused: autoexport would serve a second /metrics on :9464, the port
// FANOUT_METRICS_ADDR documents.
func metricReader(ctx context.Context) (sdkmetric.Reader, error) {
	name := os.Getenv("OTEL_METRICS_EXPORTER")
	switch name {
	case "", "none":
		return nil, nil
	case "prometheus":
		return nil, errors.New("OTEL_METRICS_EXPORTER=prometheus: fanout serves Prometheus metrics itself at FANOUT_METRICS_ADDR; unset OTEL_METRICS_EXPORTER (or set otlp to push them too)")
	}
	if sdkDisabled() {
		return nil, nil
	}
	r, err := autoexport.NewMetricReader(ctx)
	if err != nil {
		return nil, fmt.Errorf("metric exporter (OTEL_METRICS_EXPORTER=%q, OTEL_EXPORTER_OTLP_[METRICS_]PROTOCOL=%q): %w",
			name, otlpProtocol("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL"), err)
	}
	if autoexport.IsNoneMetricReader(r) {
		return nil, nil
	}
	return r, nil
}

// otlpProtocol is the OTLP protocol a signal's exporter uses: its own
// variable, else OTEL_EXPORTER_OTLP_PROTOCOL ("" means http/protobuf).
func otlpProtocol(signalVar string) string {
	if p := os.Getenv(signalVar); p != "" {
		return p
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
}

func (t *Telemetry) serve(addr string, log *slog.Logger) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("FANOUT_METRICS_ADDR: listen on %s: %w", addr, err)
	}
	t.metricsAddr = l.Addr().String()
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", t.MetricsHTTPHandler())
	t.server = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := t.server.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", "addr", t.metricsAddr, "err", err)
		}
	}()
	log.Info("serving metrics", "url", "http://"+t.metricsAddr+"/metrics")
	return nil
}

// MetricsHTTPHandler serves the Prometheus exposition of this process's
// metrics (404 when they are off).
func (t *Telemetry) MetricsHTTPHandler() http.Handler {
	if t.registry == nil {
		return http.NotFoundHandler()
	}
	return promhttp.HandlerFor(t.registry, promhttp.HandlerOpts{})
}

// MetricsAddr is the address /metrics is served on ("" when not served).
func (t *Telemetry) MetricsAddr() string { return t.metricsAddr }

// Exporting reports whether spans are exported.
func (t *Telemetry) Exporting() bool { return t.exporting }

// PushingMetrics reports whether metrics are pushed (OTEL_METRICS_EXPORTER).
func (t *Telemetry) PushingMetrics() bool { return t.pushing }

// ClientOptions adds the tracing interceptor and the metrics handler to
// Temporal client options (pass it to config.DialTemporal).
func (t *Telemetry) ClientOptions(o *client.Options) {
	o.Interceptors = append(o.Interceptors, t.Interceptor)
	if t.MetricsHandler != nil {
		o.MetricsHandler = t.MetricsHandler
	}
}

// Shutdown stops the metrics server and flushes and stops the providers.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	var errs []error
	if t.server != nil {
		errs = append(errs, t.server.Shutdown(ctx))
	}
	for _, f := range t.shutdown {
		errs = append(errs, f(ctx))
	}
	return errors.Join(errs...)
}

// ContextWithTraceparent returns ctx carrying the remote span context of a
// W3C traceparent (and tracestate) value; ok is false when it is not valid.
func ContextWithTraceparent(ctx context.Context, traceparent, tracestate string) (context.Context, bool) {
	c := propagation.MapCarrier{"traceparent": traceparent}
	if tracestate != "" {
		c["tracestate"] = tracestate
	}
	ctx = propagation.TraceContext{}.Extract(ctx, c)
	return ctx, trace.SpanContextFromContext(ctx).IsValid()
}
