package telemetry

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	collmetrics "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	colltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
)

// otlpGRPC is an OTLP/gRPC receiver (the collector's trace and metrics
// services) on 127.0.0.1: it records the span and metric names it gets and
// the service.name of their resources.
type otlpGRPC struct {
	colltrace.UnimplementedTraceServiceServer
	mu       sync.Mutex
	spans    []string
	metrics  []string
	services []string
}

func (o *otlpGRPC) Export(_ context.Context, req *colltrace.ExportTraceServiceRequest) (*colltrace.ExportTraceServiceResponse, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				o.services = append(o.services, kv.GetValue().GetStringValue())
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				o.spans = append(o.spans, s.GetName())
			}
		}
	}
	return &colltrace.ExportTraceServiceResponse{}, nil
}

// metricsService is the receiver's metrics service (its Export method
// cannot share otlpGRPC's name).
type metricsService struct {
	collmetrics.UnimplementedMetricsServiceServer
	o *otlpGRPC
}

func (m metricsService) Export(_ context.Context, req *collmetrics.ExportMetricsServiceRequest) (*collmetrics.ExportMetricsServiceResponse, error) {
	m.o.mu.Lock()
	defer m.o.mu.Unlock()
	for _, rm := range req.GetResourceMetrics() {
		for _, sm := range rm.GetScopeMetrics() {
			for _, x := range sm.GetMetrics() {
				m.o.metrics = append(m.o.metrics, x.GetName())
			}
		}
	}
	return &collmetrics.ExportMetricsServiceResponse{}, nil
}

func startOTLPGRPC(t *testing.T) (*otlpGRPC, string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o := &otlpGRPC{}
	srv := grpc.NewServer()
	colltrace.RegisterTraceServiceServer(srv, o)
	collmetrics.RegisterMetricsServiceServer(srv, metricsService{o: o})
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	return o, l.Addr().String()
}

// OTEL_EXPORTER_OTLP_PROTOCOL=grpc exports spans and, with
// OTEL_METRICS_EXPORTER=otlp, metrics over OTLP/gRPC: a gRPC-only receiver
// gets both (an HTTP exporter could not talk to it), and /metrics is still
// served alongside.
func TestSetupExportsOTLPOverGRPC(t *testing.T) {
	clearOTelEnv(t)
	o, addr := startOTLPGRPC(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+addr)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	t.Setenv("OTEL_EXPORTER_OTLP_INSECURE", "true")
	t.Setenv("OTEL_METRICS_EXPORTER", "otlp")

	ctx := context.Background()
	tel, err := Setup(ctx, "grpc-svc", WithMetricsAddr("127.0.0.1:0"))
	if err != nil {
		t.Fatal(err)
	}
	if !tel.Exporting() || !tel.PushingMetrics() || tel.MetricsAddr() == "" {
		t.Fatalf("exporting %v, pushing metrics %v, metrics addr %q", tel.Exporting(), tel.PushingMetrics(), tel.MetricsAddr())
	}
	_, span := tel.TracerProvider.Tracer("t").Start(ctx, "grpc-exported-span")
	span.End()
	c, _ := tel.MeterProvider.Meter("t").Int64Counter("fanout.test.pushed_grpc")
	c.Add(ctx, 5)
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := tel.Shutdown(sctx); err != nil { // flushes both
		t.Fatal(err)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.spans) != 1 || o.spans[0] != "grpc-exported-span" || len(o.services) == 0 || o.services[0] != "grpc-svc" {
		t.Errorf("gRPC receiver got spans %v from services %v, want grpc-exported-span from grpc-svc", o.spans, o.services)
	}
	if !strings.Contains(strings.Join(o.metrics, " "), "fanout.test.pushed_grpc") {
		t.Errorf("gRPC receiver got metrics %v, want fanout.test.pushed_grpc", o.metrics)
	}
}

// A protocol fanout cannot speak, or OTEL_METRICS_EXPORTER=prometheus (the
// endpoint is FANOUT_METRICS_ADDR), fails Setup naming the variable rather
// than exporting with something else.
func TestSetupRejectsBadExportConfig(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, "OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL=\"http/json\""},
		{map[string]string{"OTEL_METRICS_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "thrift"}, "OTEL_EXPORTER_OTLP_[METRICS_]PROTOCOL=\"thrift\""},
		{map[string]string{"OTEL_METRICS_EXPORTER": "prometheus"}, "FANOUT_METRICS_ADDR"},
		{map[string]string{"OTEL_METRICS_EXPORTER": "statsd"}, "OTEL_METRICS_EXPORTER=\"statsd\""},
	} {
		t.Run(c.want, func(t *testing.T) {
			clearOTelEnv(t)
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			tel, err := Setup(context.Background(), "bad")
			if err == nil {
				_ = tel.Shutdown(context.Background())
				t.Fatalf("%v: Setup succeeded", c.env)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("%v: err %v, want one with %s", c.env, err, c.want)
			}
		})
	}
}
