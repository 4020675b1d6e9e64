//go:build integration

// The footprint tests count what Temporal does per small event and per
// delivery batch on the real stack (the dev server with the stack's flags,
// the worker binaries, the bridge in the events worker with eager starts):
// requests, workflow tasks, commands, history events and visibility writes,
// from the dev server's own metrics and the events' histories, and the dev
// server's CPU per event. The counts are asserted; the CPU is logged (it
// depends on the machine).
//
//	go test -tags integration ./dev/e2e/footprint -v
//
// FOOTPRINT_RATE=N publishes the small events at N per second instead of
// all at once. FOOTPRINT_FLAGS and FOOTPRINT_ENV add flags and environment to the dev
// server (stack.Options.TemporalFlags, TemporalEnv) to try its dynamic
// config; FOOTPRINT_PERF=FILE records a perf profile of it during the small
// events, and into FILE.noop during the no-op workflows.
//
// They also count the Temporal Cloud Actions of that work from the
// histories (CountActions, ActionRules) and check them against the server's
// own `action` metric; FOOTPRINT_FIGURES=FILE writes the figures as JSON
// (Figures) when every test passed, for dev/cmd/pictures to render into
// docs/performance-figures.md.
package footprint

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"golang.org/x/sync/errgroup"

	"github.com/fanout/fanout/dev/stack"
)

var st *stack.Stack

// figs collects what the tests measured, for FOOTPRINT_FIGURES.
var figs = Figures{HandCount: map[string][]HandEvent{}}

func TestMain(m *testing.M) {
	ctx := context.Background()
	var err error
	st, err = stack.Start(ctx, stack.Options{TemporalMetrics: true, Log: os.Stderr,
		TemporalFlags: strings.Fields(os.Getenv("FOOTPRINT_FLAGS")), TemporalEnv: strings.Fields(os.Getenv("FOOTPRINT_ENV"))})
	if err == nil {
		err = st.StartWorker("events", "events", "FANOUT_BRIDGE=true")
	}
	if err == nil {
		err = st.StartWorker("delivery", "high,normal,low")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "footprint:", err)
		if st != nil {
			st.Close()
		}
		os.Exit(1)
	}
	code := m.Run()
	st.Close()
	if path := os.Getenv("FOOTPRINT_FIGURES"); path != "" && code == 0 {
		figs.Rules = ActionRules
		if err := figs.Write(path); err != nil {
			fmt.Fprintln(os.Stderr, "footprint:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// metrics are the dev server's counters (histograms by their count), summed
// per name and the labels that say what was done.
type metrics map[string]float64

func scrape(t *testing.T) metrics {
	t.Helper()
	resp, err := http.Get(st.TemporalMetricsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	out := metrics{}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "operation", "service_name", "task_type", "action_type":
					labels = append(labels, l.GetName()+"="+l.GetValue())
				}
			}
			var v float64
			switch {
			case m.Counter != nil:
				v = m.Counter.GetValue()
			case m.Histogram != nil:
				v = float64(m.Histogram.GetSampleCount())
			default:
				continue
			}
			out[name+"{"+strings.Join(labels, ",")+"}"] += v
		}
	}
	return out
}

// closedKey counts the visibility records of closed workflows.
const closedKey = "visibility_persistence_requests{operation=RecordWorkflowExecutionClosed,service_name=history}"

// waitClosed scrapes until the server has recorded n more closed
// workflows in visibility than in before (at most 30 s), and returns the
// last scrape. A scrape of the dev server's metrics costs it CPU too, so
// it scrapes once a second, after the visibility queue's interval.
func waitClosed(t *testing.T, before metrics, n int) metrics {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	time.Sleep(3 * time.Second / stack.VisibilityPollRPS)
	for {
		m := scrape(t)
		if m[closedKey]-before[closedKey] >= float64(n) || time.Now().After(deadline) {
			return m
		}
		time.Sleep(time.Second)
	}
}

// timerTasks is how many timer tasks the history service processed per
// event between two scrapes.
func timerTasks(before, after metrics, n int) float64 {
	sum := 0.0
	for k, v := range after {
		if strings.HasPrefix(k, "task_requests{") && strings.Contains(k, "operation=TimerActive") {
			sum += v - before[k]
		}
	}
	return sum / float64(n)
}

// per is (after - before) / n for one series.
func per(before, after metrics, key string, n int) float64 {
	return (after[key] - before[key]) / float64(n)
}

// temporalCPU is the dev server's CPU seconds so far.
func temporalCPU(t *testing.T) float64 {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", st.Pids()["temporal"]))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
	ut, _ := strconv.ParseFloat(f[11], 64)
	sy, _ := strconv.ParseFloat(f[12], 64)
	return (ut + sy) / 100
}

// publishAndWait publishes events and waits (bounded) until the sink has
// every recipient of each.
func publishAndWait(t *testing.T, evs []stack.Event, timeout time.Duration) {
	t.Helper()
	if err := st.Publish(context.Background(), evs...); err != nil {
		t.Fatal(err)
	}
	waitDelivered(t, evs, timeout)
}

// waitDelivered waits (bounded) until the sink has every recipient of
// each event.
func waitDelivered(t *testing.T, evs []stack.Event, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for _, e := range evs {
		for st.Sink.Event(e.ID).Unique < e.Audience {
			if time.Now().After(deadline) {
				t.Fatalf("event %s: %d of %d delivered after %v", e.ID, st.Sink.Event(e.ID).Unique, e.Audience, timeout)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// eventTypes counts the history events of a workflow by type.
func eventTypes(t *testing.T, wid string) map[string]int {
	t.Helper()
	raw, err := st.ShowHistory(context.Background(), wid)
	if err != nil {
		t.Fatal(err)
	}
	var h struct {
		Events []struct {
			EventType string `json:"eventType"`
		} `json:"events"`
	}
	if err := json.Unmarshal(raw, &h); err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, e := range h.Events {
		out[strings.TrimPrefix(e.EventType, "EVENT_TYPE_")]++
	}
	return out
}

func total(m map[string]int) (n int) {
	for _, v := range m {
		n += v
	}
	return n
}

// logRates logs every series that moved by at least min per unit.
func logRates(t *testing.T, before, after metrics, n int, unit string, min float64) {
	t.Helper()
	var keys []string
	for k := range after {
		if per(before, after, k, n) >= min {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		t.Logf("%8.2f per %s  %s", per(before, after, k, n), unit, k)
	}
}

// A small event (20 recipients, one batch on the fast path) costs Temporal
// two requests (the eager start and the completion of its only workflow
// task), three commands (one marker, one upsert, the completion), seven
// history events and at most one visibility write besides its close.
func TestSmallEventFootprint(t *testing.T) {
	n, aud := 300, 20
	if v, _ := strconv.Atoi(os.Getenv("FOOTPRINT_EVENTS")); v > 0 {
		n = v
	}
	mk := func(prefix string, k int) []stack.Event {
		evs := make([]stack.Event, k)
		for i := range evs {
			evs[i] = stack.Event{ID: fmt.Sprintf("%s-%d", prefix, i), Audience: aud, Priority: "high"}
		}
		return evs
	}
	const warm = 20
	publishAndWait(t, mk("fp-warm", warm), time.Minute)
	time.Sleep(2 * time.Second) // the warm-up's visibility writes
	c0, t0 := temporalCPU(t), time.Now()
	time.Sleep(5 * time.Second)
	idle := (temporalCPU(t) - c0) / time.Since(t0).Seconds()

	m0 := scrape(t)
	c0, t0 = temporalCPU(t), time.Now()
	defer recordPerf(t, "")()
	evs := mk("fp", n)
	if rate, _ := strconv.ParseFloat(os.Getenv("FOOTPRINT_RATE"), 64); rate > 0 {
		// Paced, as the bench's light scenarios publish.
		for i := range evs {
			time.Sleep(time.Until(t0.Add(time.Duration(float64(i) / rate * float64(time.Second)))))
			if err := st.Publish(context.Background(), evs[i]); err != nil {
				t.Fatal(err)
			}
		}
		waitDelivered(t, evs, 3*time.Minute)
	} else {
		publishAndWait(t, evs, 3*time.Minute)
	}
	tLast := time.Now() // after the last start
	// The closes' visibility writes come later (the queue is read every
	// 1/VisibilityPollRPS s, and the server reports its counters about
	// once a second): they are part of an event's cost, so wait for them
	// (bounded) before reading the CPU.
	m1 := waitClosed(t, m0, n)
	busy, secs := temporalCPU(t)-c0, time.Since(t0).Seconds()
	t.Logf("dev server CPU: %.2f ms per small event (%d events in %.1f s; idle %.1f ms/s, subtracted)", (busy-idle*secs)/float64(n)*1000, n, secs, idle*1000)
	logRates(t, m0, m1, n, "event", 0.5)
	// Each event's workflow task timeout timer (10 s from its start) fires
	// after the event has closed: the server looks the workflow up (from
	// the database once it has left the cache), finds nothing to do and
	// deletes the timer. That is the event's cost too; the window above
	// ends before most of them fire.
	time.Sleep(time.Until(tLast.Add(12 * time.Second)))
	m2 := scrape(t)
	busy2, secs2 := temporalCPU(t)-c0, time.Since(t0).Seconds()
	timers := timerTasks(m0, m2, n)
	t.Logf("with the workflow task timeout timers fired: %.2f ms per small event (%d events in %.1f s; idle subtracted); %.2f timer tasks per event",
		(busy2-idle*secs2)/float64(n)*1000, n, secs2, timers)
	// One per event (its workflow task's timeout); the warm-up's fire in
	// the window too.
	if want := float64(n+warm) / float64(n); timers < want-0.1 || timers > want+0.1 {
		t.Errorf("%.2f timer tasks per small event, want %.2f: one each, the warm-up's included", timers, want)
	}
	for k := range m2 {
		if os.Getenv("FOOTPRINT_DUMP") != "" && strings.Contains(k, "Timer") && m2[k] != m0[k] {
			t.Logf("%s: %.2f per event", k, per(m0, m2, k, n))
		}
	}

	h := eventTypes(t, stack.WorkflowID("fp-7"))
	t.Logf("history of one small event: %d events %v", total(h), h)
	checks := []struct {
		what      string
		got, want float64
	}{
		{"frontend StartWorkflowExecution", per(m0, m1, "service_requests{operation=StartWorkflowExecution,service_name=frontend}", n), 1},
		{"frontend RespondWorkflowTaskCompleted", per(m0, m1, "service_requests{operation=RespondWorkflowTaskCompleted,service_name=frontend}", n), 1},
		{"eager workflow tasks", per(m0, m1, "workflow_eager_execution{service_name=history}", n), 1},
		{"workflow tasks completed", per(m0, m1, "workflow_tasks_completed{operation=WorkflowContext,service_name=history}", n), 1},
		{"commands", per(m0, m1, "command{operation=RespondWorkflowTaskCompleted,service_name=history}", n), 3},
		{"visibility closed records", per(m0, m1, closedKey, n), 1},
		{"history events", float64(total(h)), 7},
		{"markers", float64(h["MARKER_RECORDED"]), 1},
		{"search attribute upserts", float64(h["UPSERT_WORKFLOW_SEARCH_ATTRIBUTES"]), 1},
	}
	for _, c := range checks {
		if c.got < c.want-0.01 || c.got > c.want+0.01 {
			t.Errorf("%s per small event: %.2f, want %.0f", c.what, c.got, c.want)
		}
	}
	// Every frontend request is one of the two above (the test reads the
	// sink, not Temporal).
	for k := range m1 {
		if strings.HasPrefix(k, "service_requests{") && strings.Contains(k, "service_name=frontend") &&
			!strings.Contains(k, "=StartWorkflowExecution,") && !strings.Contains(k, "=RespondWorkflowTaskCompleted,") &&
			!strings.Contains(k, "=Poll") && per(m0, m1, k, n) >= 0.05 {
			t.Errorf("%.2f per small event: %s", per(m0, m1, k, n), k)
		}
	}
	// The started record is skipped for an event that closed before the
	// visibility queue was read; at most one per event either way.
	started := per(m0, m1, "visibility_persistence_requests{operation=RecordWorkflowExecutionStarted,service_name=history}", n)
	t.Logf("visibility started records: %.2f per small event (skipped when the event closed first)", started)
	if started > 1.01 {
		t.Errorf("%.2f started visibility records per small event", started)
	}

	// Temporal Cloud Actions, from every event's history (plus what the
	// server metered outside them), against the server's own meter. A
	// small event is three: its start, its workflow task's markers (the
	// local activity that delivers) and the final search-attribute upsert.
	acts, exempt := Actions{}, 0
	for _, e := range evs {
		var tr tree
		tr.actions = Actions{}
		tr.add(history(t, stack.WorkflowID(e.ID), ""))
		acts.Add(tr.actions)
		exempt += tr.exemptUpserts
	}
	acts.Add(notInHistory(m0, m1))
	checkActions(t, "per small event", acts, exempt, serverActions(m0, m1), float64(n))
	if a := acts.Total() / float64(n); a > smallActionsMax+0.01 {
		t.Errorf("%.2f Actions per small event, want at most %d", a, smallActionsMax)
	}
	one := history(t, stack.WorkflowID("fp-7"), "")
	figs.HandCount["small event"] = HandCount(one)
	handLog(t, "one small event", figs.HandCount["small event"])
	figs.SmallAudience = aud
	figs.Small = &Cost{Actions: acts.Per(float64(n)), ActionsTotal: acts.Total() / float64(n), ServerActions: serverActions(m0, m1) / float64(n),
		Requests: requests(m0, m1) / float64(n), WorkflowTasks: per(m0, m1, "workflow_tasks_completed{operation=WorkflowContext,service_name=history}", n),
		HistoryEvents: float64(len(one)), VisibilityWrites: visibilityWrites(m0, m1) / float64(n)}
}

// Bounds on Actions that would catch a regression. Measured: 3 per small
// event (its start, its markers, its final upsert); 7 in the histories of an
// event of 2,000 recipients (its start, its two DeliverBatch activities, its
// markers, its upsert; 9 when its batches were children: 2 × 2 for them)
// and one heartbeat per batch; per
// batch of a big event 2 for the child, 1 for its activity and the parent's
// share of pages, markers and upserts (about 0.2), and its heartbeat: 3.55
// per 1,000 deliveries in batches of about 1,200. One activity or child more
// per batch, or batches half the size, break them.
const (
	smallActionsMax          = 3   // per small event
	batchedHistoryActionsMax = 7   // per event of 2,000 recipients, in its histories
	heartbeatsPerBatchMax    = 2   // the first heartbeat, and one more for a slow batch
	batchHistoryActionsMax   = 3.5 // per batch of a big event, in its histories
	per1000ActionsMax        = 4.5 // per 1,000 deliveries of a big event, heartbeats included
)

// checkHeartbeats bounds the heartbeats per batch.
func checkHeartbeats(t *testing.T, hb Actions, batches int) {
	t.Helper()
	if h := hb[ActHeartbeat] / float64(batches); h > heartbeatsPerBatchMax {
		t.Errorf("%.2f heartbeats per batch, want at most %d", h, heartbeatsPerBatchMax)
	}
}

// An event past the fast path (2,000 recipients, one page: two DeliverBatch
// activities of 1,000 of its own): its Actions, counted from its histories
// (and its children's, if any), against the server's meter.
func TestBatchedEventFootprint(t *testing.T) {
	const k, aud = 5, 2000
	evs := make([]stack.Event, k)
	for i := range evs {
		evs[i] = stack.Event{ID: fmt.Sprintf("fp-mid-%d", i), Audience: aud, Priority: "normal"}
	}
	m0 := scrape(t)
	publishAndWait(t, evs, 3*time.Minute)
	for _, e := range evs {
		if _, err := st.Wait(context.Background(), e.ID); err != nil {
			t.Fatal(err)
		}
	}
	m1 := waitClosed(t, m0, k)
	acts, exempt, events, batches := Actions{}, 0, 0, 0
	var child []*historypb.HistoryEvent
	for _, e := range evs {
		tr := eventTree(t, stack.WorkflowID(e.ID))
		acts.Add(tr.actions)
		exempt += tr.exemptUpserts
		events += tr.events
		batches += tr.children + tr.ownBatches
		if child == nil {
			child = tr.child
		}
	}
	if a := acts.Total() / k; a > batchedHistoryActionsMax {
		t.Errorf("%.2f Actions in the histories per event of %d recipients, want at most %d", a, aud, batchedHistoryActionsMax)
	}
	hb := notInHistory(m0, m1)
	checkHeartbeats(t, hb, batches)
	acts.Add(hb)
	checkActions(t, fmt.Sprintf("per event of %d recipients", aud), acts, exempt, serverActions(m0, m1), k)
	if batches != 2*k {
		t.Errorf("%d batches for %d events of %d recipients, want 2 each", batches, k, aud)
	}
	figs.BatchedAudience, figs.BatchedBatches = aud, batches/k
	figs.Batched = &Cost{Actions: acts.Per(k), ActionsTotal: acts.Total() / k, ServerActions: serverActions(m0, m1) / k,
		Requests: requests(m0, m1) / k, WorkflowTasks: per(m0, m1, "workflow_tasks_completed{operation=WorkflowContext,service_name=history}", k),
		HistoryEvents: float64(events) / k, VisibilityWrites: visibilityWrites(m0, m1) / k}
	if child != nil {
		t.Errorf("an event of one page started %d children; want its batches as activities of its own", batches)
	}
}

// A big event's batches: what Temporal does per batch (the child, its
// workflow tasks, its activity, the parent's task per completion) and per
// 1,000 deliveries.
func TestBatchFootprint(t *testing.T) {
	const aud = 60_000
	m0 := scrape(t)
	c0 := temporalCPU(t)
	ev := stack.Event{ID: "fp-big", Audience: aud, Priority: "normal"}
	publishAndWait(t, []stack.Event{ev}, 5*time.Minute)
	res, err := st.Wait(context.Background(), ev.ID)
	if err != nil {
		t.Fatal(err)
	}
	busy := temporalCPU(t) - c0
	time.Sleep(3 * time.Second / stack.VisibilityPollRPS)
	m1 := scrape(t)
	b := res.BatchesCompleted
	t.Logf("%d recipients in %d batches over %d pages and %d runs; dev server CPU %.1f ms per 1,000 deliveries, %.2f ms per batch",
		aud, b, res.Pages, res.Runs, busy/aud*1e6, busy/float64(b)*1000)
	logRates(t, m0, m1, b, "batch", 0.5)
	parent := eventTypes(t, stack.WorkflowID(ev.ID))
	t.Logf("parent history (last run): %d events %v", total(parent), parent)
	if res.Delivered != aud || b < 2 {
		t.Fatalf("result %+v", res.Progress)
	}
	// Per batch: the child's start and completion and its activity, and at
	// most a few workflow tasks between them (the child's two, the parent's
	// per completion, shared when completions coincide).
	wft := per(m0, m1, "workflow_tasks_completed{operation=WorkflowContext,service_name=history}", b)
	acts := per(m0, m1, "service_requests{operation=RespondActivityTaskCompleted,service_name=frontend}", b)
	t.Logf("per batch: %.2f workflow tasks, %.2f activity completions", wft, acts)
	if wft > 4 || acts < 1 || acts > 1.5 {
		t.Errorf("per batch: %.2f workflow tasks (want <= 4), %.2f activity completions (want 1)", wft, acts)
	}

	// Actions per batch and per 1,000 deliveries, from every run's history
	// and every child's, against the server's meter.
	tr := eventTree(t, stack.WorkflowID(ev.ID))
	if tr.children != b || tr.runs != res.Runs {
		t.Errorf("histories: %d children over %d runs, the result says %d batches over %d runs", tr.children, tr.runs, b, res.Runs)
	}
	if tr.child != nil {
		figs.HandCount["batch"] = HandCount(tr.child)
		handLog(t, "one batch (its child's history; its parent adds 2 for the start)", figs.HandCount["batch"])
	}
	if a := tr.actions.Total() / float64(b); a > batchHistoryActionsMax {
		t.Errorf("%.2f Actions in the histories per batch, want at most %g", a, batchHistoryActionsMax)
	}
	hb := notInHistory(m0, m1)
	checkHeartbeats(t, hb, b)
	all := Actions{}
	all.Add(tr.actions)
	all.Add(hb)
	server := serverActions(m0, m1)
	checkActions(t, "per batch", all, tr.exemptUpserts, server, float64(b))
	checkActions(t, "per 1,000 deliveries", all, tr.exemptUpserts, server, aud/1000.0)
	if a := all.Total() / (aud / 1000.0); a > per1000ActionsMax {
		t.Errorf("%.2f Actions per 1,000 deliveries, want at most %g", a, per1000ActionsMax)
	}
	figs.BigAudience, figs.BigBatches, figs.BigRuns = aud, b, res.Runs
	cost := func(n float64) *Cost {
		return &Cost{Actions: all.Per(n), ActionsTotal: all.Total() / n, ServerActions: server / n, Requests: requests(m0, m1) / n,
			WorkflowTasks: wft * float64(b) / n, HistoryEvents: float64(tr.events) / n, VisibilityWrites: visibilityWrites(m0, m1) / n}
	}
	figs.PerBatch, figs.Per1000 = cost(float64(b)), cost(aud/1000.0)
}

// recordPerf records a perf profile of the dev server into
// $FOOTPRINT_PERF+suffix until the returned func is called (nothing
// without FOOTPRINT_PERF).
func recordPerf(t *testing.T, suffix string) (stop func()) {
	out := os.Getenv("FOOTPRINT_PERF")
	if out == "" {
		return func() {}
	}
	perf := exec.Command("perf", "record", "-F", "999", "-g", "-o", out+suffix, "-p", strconv.Itoa(st.Pids()["temporal"]))
	if err := perf.Start(); err != nil {
		t.Fatal(err)
	}
	return func() { _ = perf.Process.Signal(os.Interrupt); _ = perf.Wait() }
}

// noop is the least a workflow can be: one workflow task that completes it.
func noop(workflow.Context) error { return nil }

// The floor under a small event: the dev server's CPU per workflow that
// does nothing, started eagerly (as the bridge in the events worker starts
// events), measured like TestSmallEventFootprint. A small event costs this
// plus its marker, its search attributes and its history; the difference
// is what fanout adds.
func TestNoopWorkflowFloor(t *testing.T) {
	n := 1000
	if v, _ := strconv.Atoi(os.Getenv("FOOTPRINT_EVENTS")); v > 0 {
		n = v
	}
	const queue = "footprint-noop"
	w := worker.New(st.TC, queue, worker.Options{})
	w.RegisterWorkflow(noop)
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	ctx := context.Background()
	// Only the last workflow's result is waited for, so that waiting
	// costs the server one request; waitClosed then checks every one
	// closed.
	// Started from 16 goroutines, as the bridge starts events from its
	// partitions' lanes at once.
	// FOOTPRINT_RATE paces them as TestSmallEventFootprint paces events.
	rate, _ := strconv.ParseFloat(os.Getenv("FOOTPRINT_RATE"), 64)
	start := func(prefix string, k int) {
		var g errgroup.Group
		g.SetLimit(16)
		t0 := time.Now()
		for i := range k {
			if rate > 0 {
				time.Sleep(time.Until(t0.Add(time.Duration(float64(i) / rate * float64(time.Second)))))
			}
			g.Go(func() error {
				_, err := st.TC.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: fmt.Sprintf("%s-%d", prefix, i), TaskQueue: queue, EnableEagerStart: true}, noop)
				return err
			})
		}
		if err := g.Wait(); err != nil {
			t.Fatal(err)
		}
		if err := st.TC.GetWorkflow(ctx, fmt.Sprintf("%s-%d", prefix, k-1), "").Get(ctx, nil); err != nil {
			t.Fatal(err)
		}
	}
	start("noop-warm", 20)
	time.Sleep(2 * time.Second)
	c0, t0 := temporalCPU(t), time.Now()
	m0 := scrape(t)
	stopPerf := recordPerf(t, ".noop")
	start("noop", n)
	m1 := waitClosed(t, m0, n) // as TestSmallEventFootprint measures
	stopPerf()
	if c := per(m0, m1, closedKey, n); c < 0.99 {
		t.Fatalf("%.2f of the no-op workflows closed", c)
	}
	busy, secs := temporalCPU(t)-c0, time.Since(t0).Seconds()
	t.Logf("dev server CPU: %.2f ms per no-op workflow (%d in %.1f s, %.2f requests each)", busy/float64(n)*1000, n, secs,
		per(m0, m1, "service_requests{operation=StartWorkflowExecution,service_name=frontend}", n)+per(m0, m1, "service_requests{operation=RespondWorkflowTaskCompleted,service_name=frontend}", n))
	if eager := per(m0, m1, "workflow_eager_execution{service_name=history}", n); eager < 0.99 {
		t.Errorf("%.2f eager starts per no-op workflow, want 1", eager)
	}
	if h := eventTypes(t, "noop-7"); total(h) != 5 {
		t.Errorf("no-op history: %v, want 5 events", h)
	}
}

// history is one run's history (runID "": the latest run).
func history(t *testing.T, wid, runID string) []*historypb.HistoryEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	it := st.TC.GetWorkflowHistory(ctx, wid, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	var out []*historypb.HistoryEvent
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			t.Fatalf("history of %s: %v", wid, err)
		}
		out = append(out, e)
	}
	if len(out) == 0 {
		t.Fatalf("history of %s: no events", wid)
	}
	return out
}

// tree is what an event's workflow left in its histories: every run's
// (through continue-as-new) and every child's.
type tree struct {
	actions        Actions
	exemptUpserts  int // TemporalChangeVersion-only upserts: metered by the server, not billed
	events         int
	runs, children int
	ownBatches     int                       // DeliverBatch activities of the event's own (an event of one page)
	child          []*historypb.HistoryEvent // the first child's history
}

func (tr *tree) add(h []*historypb.HistoryEvent) {
	tr.actions.Add(CountActions(h))
	tr.events += len(h)
	for _, e := range h {
		if e.GetEventType() == enumspb.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES {
			if f := e.GetUpsertWorkflowSearchAttributesEventAttributes().GetSearchAttributes().GetIndexedFields(); len(f) == 1 && f[changeVersionKey] != nil {
				tr.exemptUpserts++
			}
		}
	}
}

func eventTree(t *testing.T, wid string) tree {
	t.Helper()
	tr := tree{actions: Actions{}}
	for runID := ""; ; {
		h := history(t, wid, runID)
		tr.add(h)
		tr.runs++
		for _, e := range h {
			if e.GetActivityTaskScheduledEventAttributes().GetActivityType().GetName() == "DeliverBatch" {
				tr.ownBatches++
			}
			if e.GetEventType() == enumspb.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED {
				ch := history(t, e.GetStartChildWorkflowExecutionInitiatedEventAttributes().GetWorkflowId(), "")
				tr.add(ch)
				tr.children++
				if tr.child == nil {
					tr.child = ch
				}
			}
		}
		if runID = h[0].GetWorkflowExecutionStartedEventAttributes().GetContinuedExecutionRunId(); runID == "" {
			return tr
		}
	}
}

// sumWhere sums the moves of the series whose key has prefix and, when
// keep is set, passes it.
func sumWhere(before, after metrics, prefix string, keep func(string) bool) float64 {
	var n float64
	for k, v := range after {
		if strings.HasPrefix(k, prefix) && (keep == nil || keep(k)) {
			n += v - before[k]
		}
	}
	return n
}

// serverActions is what the server metered as Actions (its `action`
// metric, every type).
func serverActions(before, after metrics) float64 {
	return sumWhere(before, after, "action{", nil)
}

// notInHistory are the Actions a history does not show, as the server
// metered them: heartbeats and queries.
func notInHistory(before, after metrics) Actions {
	a := Actions{}
	if n := sumWhere(before, after, "action{", func(k string) bool { return strings.Contains(k, "action_type=grpc_RecordActivityTaskHeartbeat") }); n > 0 {
		a[ActHeartbeat] = n
	}
	if n := sumWhere(before, after, "action{", func(k string) bool { return strings.Contains(k, "action_type=grpc_QueryWorkflow") }); n > 0 {
		a[ActQuery] = n
	}
	return a
}

// requests are the frontend's requests other than polls and history reads
// (the test's wait for a result reads the history).
func requests(before, after metrics) float64 {
	return sumWhere(before, after, "service_requests{", func(k string) bool {
		return strings.Contains(k, "service_name=frontend") && !strings.Contains(k, "=Poll") && !strings.Contains(k, "=GetWorkflowExecutionHistory,")
	})
}

// visibilityWrites are the records written to visibility.
func visibilityWrites(before, after metrics) float64 {
	return sumWhere(before, after, "visibility_persistence_requests{", func(k string) bool {
		return strings.Contains(k, "operation=Record") || strings.Contains(k, "operation=Upsert") || strings.Contains(k, "operation=Delete")
	})
}

// checkActions compares the Actions counted from the histories (plus the
// heartbeats and queries the server metered) with the server's own meter,
// which also counts the exempt upserts, and logs them per unit.
func checkActions(t *testing.T, what string, acts Actions, exempt int, server float64, n float64) {
	t.Helper()
	per := acts.Per(n)
	for _, k := range per.Kinds() {
		t.Logf("%s: %6.2f Actions  %s", what, per[k], k)
	}
	t.Logf("%s: %.2f Actions from the histories, the server metered %.2f (%.2f exempt TemporalChangeVersion upserts)", what, per.Total(), server/n, float64(exempt)/n)
	if d := acts.Total() + float64(exempt) - server; d > 0.02*n || d < -0.02*n {
		t.Errorf("%s: the histories give %.2f Actions (+%.2f exempt upserts), the server metered %.2f", what, acts.Total()/n, float64(exempt)/n, server/n)
	}
}

// handLog logs a history's events with their Actions.
func handLog(t *testing.T, what string, h []HandEvent) {
	t.Helper()
	var parts []string
	var sum float64
	for _, e := range h {
		parts = append(parts, fmt.Sprintf("%s=%g", strings.TrimPrefix(e.Event, "EVENT_TYPE_"), e.Actions))
		sum += e.Actions
	}
	t.Logf("%s, event by event (%g Actions): %s", what, sum, strings.Join(parts, " "))
}
