//go:build integration

// Package observability_test checks fanout's OpenTelemetry on the real stack
// (the temporal dev server, kfake over TCP, redis-server, a loopback sink,
// workers and bridge in-process, as in dev/e2e): one trace from a Kafka
// record's traceparent through the bridge, the workflows and activities to
// every delivery request, and the fanout and Temporal SDK metrics on /metrics.
package observability_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/dev/demo"
	"github.com/fanout/fanout/dev/stack"
	"github.com/fanout/fanout/internal/backoff"
	"github.com/fanout/fanout/internal/telemetry"
	"github.com/fanout/fanout/starter"
	"github.com/fanout/fanout/workers"
	"github.com/fanout/fanout/workers/webhook"
	"github.com/fanout/fanout/workflows"
	"github.com/fanout/fanout/workflows/vocab"
)

const eventsTopic = starter.DefaultEventsTopic

// Batches of 50, pages of 100: an event of 130 recipients has two batches
// staged from its first page and one from its second.
var typeOptions = fanout.TypeOptions{BatchSize: 50, PageSize: 100, Window: 10, MaxAttempts: 2}

var (
	st      *stack.Stack
	tel     *telemetry.Telemetry
	rec     = tracetest.NewSpanRecorder()
	headers = &traceHeaders{byEvent: map[string][]string{}}
	runID   = time.Now().UTC().Format("150405")
)

// traceHeaders keeps the traceparent of every delivery request, per event.
type traceHeaders struct {
	mu      sync.Mutex
	byEvent map[string][]string
}

func (h *traceHeaders) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ev := r.Header.Get(webhook.HeaderEventID); ev != "" {
			h.mu.Lock()
			h.byEvent[ev] = append(h.byEvent[ev], r.Header.Get("traceparent"))
			h.mu.Unlock()
		}
		next.ServeHTTP(w, r)
	})
}

func (h *traceHeaders) get(ev string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.byEvent[ev]...)
}

func TestMain(m *testing.M) {
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "observability:", err)
		os.Exit(1)
	}
	os.Exit(code)
}

func run(m *testing.M) (int, error) {
	ctx := context.Background()
	level := slog.LevelWarn
	if os.Getenv("FANOUT_TEST_VERBOSE") != "" {
		level = slog.LevelDebug
	}
	logger := telemetry.Logger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})))

	// Spans go to the in-process recorder, metrics to /metrics on a free port.
	var err error
	tel, err = telemetry.Setup(ctx, "fanout-e2e", telemetry.WithSpanProcessor(rec), telemetry.WithMetricsAddr("127.0.0.1:0"), telemetry.WithLogger(logger))
	if err != nil {
		return 0, err
	}
	defer func() { _ = tel.Shutdown(context.Background()) }()

	// The tracing interceptor and the metrics handler are on the client;
	// the workers inherit them.
	copts := client.Options{Logger: tlog.NewStructuredLogger(logger)}
	tel.ClientOptions(&copts)
	// The dev server serves its metrics too: the backlog panels and alert
	// read the matching service's approximate_backlog_*.
	st, err = stack.Start(ctx, stack.Options{InMemory: true, TemporalMetrics: true, Client: copts, DemoHandler: headers.wrap, Log: os.Stderr})
	if err != nil {
		return 0, err
	}
	defer st.Close()

	reg := fanout.NewRegistry()
	reg.MustRegister(webhook.EventType, &webhook.Handler{
		RecipientsURL: st.DemoURL + "/recipients",
		Client:        webhook.NewClient(10*time.Second, 64, webhook.Loopback...),
	}, typeOptions)
	stopWorkers := st.RunWorkers(workers.Options{
		Registry: reg, Logger: logger,
		Backoff: backoff.Policy{Initial: 20 * time.Millisecond, Max: 100 * time.Millisecond, Jitter: 0.5},
	})
	defer stopWorkers()
	_, stopBridge := st.RunBridge(starter.Config{
		Validator:      starter.Validator{Types: []string{webhook.EventType}, MaxPayloadBytes: 4096},
		Logger:         logger,
		TracerProvider: tel.TracerProvider,
		MeterProvider:  tel.MeterProvider,
	})
	defer stopBridge()
	return m.Run(), nil
}

// publish writes demo events to the events topic.
func publish(t *testing.T, evs ...stack.Event) {
	t.Helper()
	if err := st.Publish(context.Background(), evs...); err != nil {
		t.Fatalf("publish: %v", err)
	}
}

// waitResult waits for the event's Fanout workflow to complete.
func waitResult(t *testing.T, eventID string) workflows.FanoutResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := st.Wait(ctx, eventID)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func randomHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func attr(s sdktrace.ReadOnlySpan, key string) string {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value.String()
		}
	}
	return ""
}

// eventSpans waits until done holds for the recorded spans (the workflow
// spans end when the worker finishes the workflow task, just after the
// client sees the result) and returns them.
func eventSpans(t *testing.T, done func([]sdktrace.ReadOnlySpan) error) []sdktrace.ReadOnlySpan {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		spans := rec.Ended()
		err := done(spans)
		if err == nil {
			return spans
		}
		if time.Now().After(deadline) {
			t.Fatalf("spans: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func named(spans []sdktrace.ReadOnlySpan, name string, pred func(sdktrace.ReadOnlySpan) bool) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Name() == name && (pred == nil || pred(s)) {
			out = append(out, s)
		}
	}
	return out
}

// checkOneTrace asserts that the event's spans form one trace with traceID:
// the bridge span, the workflow and activity spans of the event's workflows
// (the Fanout run and its DeliveryBatch children), and a delivery span per
// recipient, each linked to a parent in the trace (or to the record's own
// span, parentOfBridge, when the record carried one). It also checks that
// every delivery request carried the trace, with the delivery span as parent.
func checkOneTrace(t *testing.T, eventID string, audience, batches int, traceID trace.TraceID, parentOfBridge trace.SpanID) {
	t.Helper()
	wid := vocab.WorkflowID(webhook.EventType, eventID)
	// A small event's one batch is delivered inside the local activity
	// that opens it (the fast path), a bigger one's by DeliverBatch
	// activities.
	deliverSpan := "RunActivity:DeliverBatch"
	if batches == 1 && audience <= fanout.DefaultLocalDeliveryMax {
		deliverSpan = "RunActivity:Open"
	}
	ofEvent := func(s sdktrace.ReadOnlySpan) bool { return strings.HasPrefix(attr(s, "temporalWorkflowID"), wid) }
	inTrace := func(s sdktrace.ReadOnlySpan) bool { return s.SpanContext().TraceID() == traceID }
	spans := eventSpans(t, func(spans []sdktrace.ReadOnlySpan) error {
		var all []sdktrace.ReadOnlySpan
		for _, s := range spans {
			if inTrace(s) {
				all = append(all, s)
			}
		}
		want := map[string]int{
			"process " + eventsTopic:                1,
			"StartWorkflow:" + vocab.FanoutWorkflow: 1,
			"RunWorkflow:" + vocab.FanoutWorkflow:   1,
			deliverSpan:                             batches,
			"webhook deliver":                       audience,
		}
		if batches > 1 {
			want["RunWorkflow:"+vocab.DeliveryBatchWorkflow] = batches
		}
		for name, n := range want {
			if got := len(named(all, name, nil)); got < n {
				return fmt.Errorf("%d %q spans in trace %s, want %d", got, name, traceID, n)
			}
		}
		return nil
	})

	// The bridge span: a consumer span, child of the record's context.
	bs := named(spans, "process "+eventsTopic, func(s sdktrace.ReadOnlySpan) bool { return attr(s, "fanout.event.id") == eventID })
	if len(bs) != 1 {
		t.Fatalf("%d bridge spans for event %s, want 1", len(bs), eventID)
	}
	bspan := bs[0]
	if bspan.SpanContext().TraceID() != traceID {
		t.Errorf("bridge span in trace %s, want the record's %s", bspan.SpanContext().TraceID(), traceID)
	}
	if bspan.Parent().SpanID() != parentOfBridge {
		t.Errorf("bridge span's parent is %s, want %s", bspan.Parent().SpanID(), parentOfBridge)
	}
	if bspan.SpanKind() != trace.SpanKindConsumer || attr(bspan, "fanout.outcome") != starter.OutcomeStarted {
		t.Errorf("bridge span: kind %v, outcome %q", bspan.SpanKind(), attr(bspan, "fanout.outcome"))
	}

	// Every Temporal span of the event's workflows is in the trace.
	ids := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	temporalSpans := 0
	for _, s := range spans {
		if ofEvent(s) {
			temporalSpans++
			if !inTrace(s) {
				t.Errorf("span %s of workflow %s is in trace %s, not %s", s.Name(), attr(s, "temporalWorkflowID"), s.SpanContext().TraceID(), traceID)
			}
		}
		if inTrace(s) {
			ids[s.SpanContext().SpanID()] = s
		}
	}
	// ... and the trace is connected: each span's parent is in it, except
	// the bridge span's (the producer's span, not recorded here).
	names := map[string]int{}
	for _, s := range ids {
		names[s.Name()]++
		if s.SpanContext().SpanID() == bspan.SpanContext().SpanID() {
			continue
		}
		if _, ok := ids[s.Parent().SpanID()]; !ok {
			t.Errorf("span %s (%s) has parent %s, which is not in the trace", s.Name(), s.SpanContext().SpanID(), s.Parent().SpanID())
		}
	}
	t.Logf("trace %s: %d spans: %v", traceID, len(ids), names)
	if temporalSpans == 0 {
		t.Errorf("no Temporal spans carry workflow id %s", wid)
	}

	// Delivery spans: HTTP client spans under the activity span that
	// delivered them.
	deliveries := named(spans, "webhook deliver", inTrace)
	if len(deliveries) != audience {
		t.Errorf("%d delivery spans, want %d", len(deliveries), audience)
	}
	for _, d := range deliveries {
		if d.SpanKind() != trace.SpanKindClient || attr(d, "http.request.method") != http.MethodPost {
			t.Errorf("delivery span: kind %v, method %q", d.SpanKind(), attr(d, "http.request.method"))
			break
		}
		if p := ids[d.Parent().SpanID()]; p == nil || p.Name() != deliverSpan {
			t.Errorf("delivery span's parent is not a %s span", deliverSpan)
			break
		}
	}

	// The sink saw the trace on every delivery, the delivery span as parent.
	tps := headers.get(eventID)
	if len(tps) != audience {
		t.Errorf("sink got %d deliveries of %s, want %d", len(tps), eventID, audience)
	}
	for _, tp := range tps {
		parts := strings.Split(tp, "-")
		if len(parts) != 4 || parts[1] != traceID.String() {
			t.Errorf("delivery traceparent %q, want trace %s", tp, traceID)
			break
		}
		sid, _ := trace.SpanIDFromHex(parts[2])
		if p := ids[sid]; p == nil || p.Name() != "webhook deliver" {
			t.Errorf("delivery traceparent %q: parent is not a delivery span", tp)
			break
		}
	}
}

// A record with a W3C traceparent header: the bridge span, the Fanout and
// DeliveryBatch workflows and their activities (Temporal's interceptor), and
// every delivery call (the webhook's client spans) are one trace, the record's, and each
// recipient receives it in its traceparent header.
func TestOneTraceFromRecordToDeliveries(t *testing.T) {
	id := "trace-" + runID
	traceID, spanID := randomHex(t, 16), randomHex(t, 8)
	m := stack.Event{ID: id, Audience: 130}.Record()
	m.Headers = append(m.Headers, kafka.Header{Key: "traceparent", Value: []byte("00-" + traceID + "-" + spanID + "-01")})
	if err := st.Publisher.PublishRecords(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	res := waitResult(t, id)
	if res.Delivered != 130 || res.BatchesCompleted != 3 {
		t.Fatalf("result %+v, want 130 delivered in 3 batches", res.Progress)
	}
	tid, _ := trace.TraceIDFromHex(traceID)
	sid, _ := trace.SpanIDFromHex(spanID)
	checkOneTrace(t, id, 130, 3, tid, sid)
}

// A record without trace context: the bridge span starts the event's trace
// (a single-batch event: its batch runs as an activity of Fanout).
func TestRecordWithoutTraceparentStartsOneTrace(t *testing.T) {
	id := "notrace-" + runID
	publish(t, stack.Event{ID: id, Audience: 7})
	if res := waitResult(t, id); res.Delivered != 7 {
		t.Fatalf("result %+v, want 7 delivered", res.Progress)
	}
	var bspan sdktrace.ReadOnlySpan
	eventSpans(t, func(spans []sdktrace.ReadOnlySpan) error {
		if bs := named(spans, "process "+eventsTopic, func(s sdktrace.ReadOnlySpan) bool { return attr(s, "fanout.event.id") == id }); len(bs) == 1 {
			bspan = bs[0]
			return nil
		}
		return fmt.Errorf("no bridge span for %s", id)
	})
	if bspan.Parent().IsValid() {
		t.Fatalf("bridge span has parent %s; want a root", bspan.Parent().SpanID())
	}
	checkOneTrace(t, id, 7, 1, bspan.SpanContext().TraceID(), trace.SpanID{})
}

// `starter publish` writes the trace context into the record: the
// -traceparent given (passed on as it is when nothing exports spans), or a
// trace of its own per event, whose id it prints.
func TestStarterPublishWritesTraceContext(t *testing.T) {
	if err := st.Build(context.Background()); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(st.Bin, "starter")
	publishCmd := func(args ...string) string {
		cmd := exec.Command(bin, append([]string{"publish", "-payload", `{"audience":3}`}, args...)...)
		cmd.Env = append(os.Environ(), "FANOUT_KAFKA_BROKERS="+st.KafkaAddr, "OTEL_EXPORTER_OTLP_ENDPOINT=", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("starter publish %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	bridgeSpan := func(id string) sdktrace.ReadOnlySpan {
		var b sdktrace.ReadOnlySpan
		eventSpans(t, func(spans []sdktrace.ReadOnlySpan) error {
			if bs := named(spans, "process "+eventsTopic, func(s sdktrace.ReadOnlySpan) bool { return attr(s, "fanout.event.id") == id }); len(bs) == 1 {
				b = bs[0]
				return nil
			}
			return fmt.Errorf("no bridge span for %s", id)
		})
		return b
	}

	withTP := "pub-tp-" + runID
	traceID, spanID := randomHex(t, 16), randomHex(t, 8)
	publishCmd("-id", withTP, "-traceparent", "00-"+traceID+"-"+spanID+"-01")
	if res := waitResult(t, withTP); res.Delivered != 3 {
		t.Fatalf("%s: %+v", withTP, res.Progress)
	}
	tid, _ := trace.TraceIDFromHex(traceID)
	sid, _ := trace.SpanIDFromHex(spanID)
	if b := bridgeSpan(withTP); b.SpanContext().TraceID() != tid || b.Parent().SpanID() != sid {
		t.Errorf("publish -traceparent: bridge span in trace %s under %s, want %s under %s", b.SpanContext().TraceID(), b.Parent().SpanID(), tid, sid)
	}
	checkOneTrace(t, withTP, 3, 1, tid, sid)

	own := "pub-own-" + runID
	out := publishCmd("-id", own)
	mm := regexp.MustCompile(`trace id ([0-9a-f]{32})`).FindStringSubmatch(out)
	if mm == nil {
		t.Fatalf("publish printed no trace id:\n%s", out)
	}
	if res := waitResult(t, own); res.Delivered != 3 {
		t.Fatalf("%s: %+v", own, res.Progress)
	}
	b := bridgeSpan(own)
	if b.SpanContext().TraceID().String() != mm[1] || !b.Parent().IsValid() {
		t.Errorf("publish without -traceparent: bridge span in trace %s (parent %s), want %s under publish's span", b.SpanContext().TraceID(), b.Parent().SpanID(), mm[1])
	}
	checkOneTrace(t, own, 3, 1, b.SpanContext().TraceID(), b.Parent().SpanID())

	cmd := exec.Command(bin, "publish", "-id", "x", "-traceparent", "garbage")
	cmd.Env = append(os.Environ(), "FANOUT_KAFKA_BROKERS="+st.KafkaAddr)
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "traceparent") {
		t.Errorf("publish -traceparent garbage: %v\n%s", err, out)
	}
}

// /metrics serves the fanout counters and histograms and the Temporal SDK's
// metrics after deliveries: started, duplicate and dead-lettered events;
// delivered, duplicate and failed recipients (final outcomes only), retries
// on a counter of their own; dead letters.
func TestMetricsEndpoint(t *testing.T) {
	runMetricsEvents(t)
	checkMetrics(t)
}

var metricsEvents sync.Once

// runMetricsEvents runs, once per test binary, events that make every
// series exist: delivered, duplicate (recipients and a whole event), retried,
// failed and dead-lettered recipients, a bad record.
func runMetricsEvents(t *testing.T) {
	t.Helper()
	metricsEvents.Do(func() { metricsEventsOnce(t) })
}

func metricsEventsOnce(t *testing.T) {
	ok, dupEv, failEv := "metrics-ok-"+runID, "metrics-dup-"+runID, "metrics-fail-"+runID
	st.Sink.Fail = func(ev, r string) (int, time.Duration) {
		if ev != failEv {
			return 0, 0
		}
		switch r {
		case demo.RecipientID(3):
			return http.StatusServiceUnavailable, 0 // retried, then dead-lettered after MaxAttempts (2)
		case demo.RecipientID(4):
			return http.StatusNotFound, 0 // permanent: dead-lettered at once
		}
		return 0, 0
	}
	t.Cleanup(func() { st.Sink.Fail = nil })
	publish(t,
		stack.Event{ID: ok, Audience: 60},
		stack.Event{ID: dupEv, Audience: 130, DuplicateEvery: 10}, // r9, r19, r29 again on page 2
		stack.Event{ID: failEv, Audience: 10},
	)
	if err := st.Publisher.PublishRecords(context.Background(), kafka.Message{Key: []byte("bad"), Value: []byte("{not json")}); err != nil {
		t.Fatal(err)
	}
	if res := waitResult(t, ok); res.Delivered != 60 {
		t.Fatalf("%s: %+v", ok, res.Progress)
	}
	if res := waitResult(t, dupEv); res.Delivered != 130 || res.Duplicates != 3 {
		t.Fatalf("%s: %+v, want 130 delivered, 3 duplicates", dupEv, res.Progress)
	}
	if res := waitResult(t, failEv); res.Delivered != 8 || res.Failed != 2 || res.DeadLettered != 2 {
		t.Fatalf("%s: %+v, want 8 delivered, 2 failed and dead-lettered", failEv, res.Progress)
	}
	publish(t, stack.Event{ID: ok, Audience: 60}) // again: a duplicate event
}

// checkMetrics waits for the series runMetricsEvents makes on /metrics.
func checkMetrics(t *testing.T) {
	type want struct {
		name   string
		labels map[string]string
		min    float64
	}
	wants := []want{
		{"fanout_events_total", map[string]string{"outcome": "started"}, 3},
		{"fanout_events_total", map[string]string{"outcome": "duplicate"}, 1},
		{"fanout_events_total", map[string]string{"outcome": "dead_lettered", "reason": "invalid_json"}, 1},
		{"fanout_deliveries_total", map[string]string{"outcome": "delivered", "event_type": "webhook", "priority": "normal"}, 60 + 130 + 8},
		{"fanout_deliveries_total", map[string]string{"outcome": "duplicate"}, 3},
		{"fanout_deliveries_total", map[string]string{"outcome": "failed"}, 2},
		{"fanout_delivery_retries_total", map[string]string{"event_type": "webhook", "priority": "normal"}, 1},
		{"fanout_duplicates_skipped_total", nil, 3},
		{"fanout_dead_letters_total", nil, 2},
		{"fanout_delivery_duration_seconds_count", map[string]string{"result": "ok", "event_type": "webhook"}, 60 + 130 + 8},
		{"fanout_delivery_duration_seconds_count", map[string]string{"result": "error"}, 2},
		{"fanout_delivery_duration_seconds_count", map[string]string{"result": "permanent_error"}, 1},
		{"fanout_delivery_duration_seconds_bucket", map[string]string{"result": "ok", "le": "+Inf"}, 60 + 130 + 8},
		{"fanout_batch_duration_seconds_count", map[string]string{"result": "completed"}, 1 + 3 + 1},
		{"fanout_batch_duration_seconds_count", map[string]string{"result": "retry"}, 1},
		// Temporal SDK metrics, through the client's metrics handler.
		{"temporal_workflow_completed_total", map[string]string{"workflow_type": vocab.FanoutWorkflow}, 3},
		{"temporal_activity_execution_latency_seconds_count", map[string]string{"activity_type": "DeliverBatch"}, 1},
		{"temporal_request_total", nil, 1},
	}
	var body string
	deadline := time.Now().Add(20 * time.Second)
	for {
		body = scrape(t)
		var missing []string
		for _, w := range wants {
			if got := sum(body, w.name, w.labels); got < w.min {
				missing = append(missing, fmt.Sprintf("%s%v = %v, want >= %v", w.name, w.labels, got, w.min))
			}
		}
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/metrics after deliveries:\n%s", strings.Join(missing, "\n"))
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Retries are not an outcome: fanout_deliveries_total holds each
	// recipient once, so failed over all of it is a failure ratio.
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, "fanout_deliveries_total{") && !regexp.MustCompile(`outcome="(delivered|duplicate|failed)"`).MatchString(l) {
			t.Errorf("fanout_deliveries_total series with an outcome that is not final: %s", l)
		}
	}
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, "fanout_") && !strings.Contains(l, "_bucket") {
			t.Log(l)
		}
	}
}

func scrape(t *testing.T) string {
	t.Helper()
	resp, err := http.Get("http://" + tel.MetricsAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d %v", resp.StatusCode, err)
	}
	return string(b)
}

var labelRE = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)

// sum adds the values of the series of metric name whose labels include
// labels, in a Prometheus text exposition.
func sum(body, name string, labels map[string]string) float64 {
	var total float64
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) {
			continue
		}
		rest := line[len(name):]
		var lbls string
		switch {
		case strings.HasPrefix(rest, "{"):
			end := strings.LastIndex(rest, "}")
			if end < 0 {
				continue
			}
			lbls, rest = rest[1:end], rest[end+1:]
		case strings.HasPrefix(rest, " "):
		default:
			continue // another metric with this prefix
		}
		got := map[string]string{}
		for _, m := range labelRE.FindAllStringSubmatch(lbls, -1) {
			got[m[1]] = m[2]
		}
		match := true
		for k, v := range labels {
			if got[k] != v {
				match = false
				break
			}
		}
		if !match {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			continue
		}
		if v, err := strconv.ParseFloat(fields[0], 64); err == nil {
			total += v
		}
	}
	return total
}
