package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"golang.org/x/sync/errgroup"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/internal/dev/demo"
	"github.com/fanout/fanout/internal/dev/stack"
	"github.com/fanout/fanout/workers/webhook"
)

// Delivery worker settings of the bench (the stock defaults).
const (
	batchSlots  = 8
	concurrency = fanout.DefaultDeliverConcurrency
)

type bench struct {
	st    *stack.Stack
	sz    sizes
	out   io.Writer
	stamp string
	seq   int

	heavyRate float64 // deliveries/s of the heavy scenario
	lastHeavy string  // event id of the last heavyRun
}

func (b *bench) id(prefix string) string {
	b.seq++
	return fmt.Sprintf("%s-%s-%d", prefix, b.stamp, b.seq)
}

// startWorkers starts the events worker, the delivery workers (one for
// high and normal, one for low: each priority's pool is its own process, as
// deployed) and the bridge: inside the events worker (eager starts) unless
// separate.
func (b *bench) startWorkers(separateBridge bool) error {
	var evEnv, delEnv []string
	if os.Getenv("FANOUT_BENCH_PPROF") != "" {
		// For profiling: go tool pprof http://127.0.0.1:6061/debug/pprof/profile
		evEnv, delEnv = []string{"FANOUT_PPROF_ADDR=127.0.0.1:6062"}, []string{"FANOUT_PPROF_ADDR=127.0.0.1:6061"}
	}
	if !separateBridge {
		evEnv = append(evEnv, "FANOUT_BRIDGE=true")
	}
	if err := b.st.StartWorker("events", "events", evEnv...); err != nil {
		return err
	}
	if err := b.st.StartWorker("delivery", "high,normal", delEnv...); err != nil {
		return err
	}
	if err := b.st.StartWorker("delivery-low", "low"); err != nil {
		return err
	}
	if !separateBridge {
		return nil
	}
	return b.st.StartBridge("bridge")
}

// waitDelivered waits until every event reached its audience at the sink,
// printing progress every two seconds, and returns each event's last
// delivery time.
func (b *bench) waitDelivered(ctx context.Context, label string, evs []stack.Event, timeout time.Duration) (map[string]time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	total := 0
	for _, e := range evs {
		total += e.Audience
	}
	done := map[string]time.Time{}
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	lastPrint := time.Now()
	var lastN int
	for {
		n := 0
		for _, e := range evs {
			st := b.st.Sink.Event(e.ID)
			n += min(st.Unique, e.Audience)
			if _, ok := done[e.ID]; !ok && st.Unique >= e.Audience {
				done[e.ID] = st.Last
			}
		}
		if len(done) == len(evs) {
			return done, nil
		}
		if time.Since(lastPrint) >= 2*time.Second {
			rate := float64(n-lastN) / time.Since(lastPrint).Seconds()
			fmt.Fprintf(b.out, "[bench %s] delivered %d/%d (%.0f/s), events done %d/%d\n", label, n, total, rate, len(done), len(evs))
			lastPrint, lastN = time.Now(), n
		}
		select {
		case <-ctx.Done():
			return done, fmt.Errorf("%s: %d/%d delivered, %d/%d events done after %v", label, n, total, len(done), len(evs), timeout)
		case <-tick.C:
		}
	}
}

// heavyRun publishes one event of n recipients and measures it.
func (b *bench) heavyRun(ctx context.Context, label string, n int) (Row, error) {
	ev := stack.Event{ID: b.id(label), Audience: n, Priority: fanout.PriorityNormal}
	b.lastHeavy = ev.ID
	t0 := time.Now()
	if err := b.st.Publish(ctx, ev); err != nil {
		return Row{}, err
	}
	done, err := b.waitDelivered(ctx, label, []stack.Event{ev}, 60*time.Minute)
	if err != nil {
		return Row{}, err
	}
	res, err := b.st.Wait(ctx, ev.ID)
	if err != nil {
		return Row{}, err
	}
	secs := done[ev.ID].Sub(t0).Seconds()
	sink := b.st.Sink.Event(ev.ID)
	return Row{
		Size: n, Seconds: secs, DeliveriesPerSec: float64(n) / secs, PeakRSSMB: b.peakRSS(),
		Notes: fmt.Sprintf("%d batches, %d runs, %d duplicates at the sink", res.BatchesStarted, res.Runs, sink.Deliveries-sink.Unique),
	}, nil
}

func (b *bench) heavy(ctx context.Context) (Row, error) {
	r, err := b.heavyRun(ctx, "heavy", b.sz.heavy)
	b.heavyRate = r.DeliveriesPerSec
	return r, err
}

// floor makes the same deliveries with a bare loop: the same HTTP client
// and request, the delivery worker's concurrency, no Kafka, Temporal or Redis.
func (b *bench) floor(ctx context.Context) (Row, error) {
	if b.heavyRate == 0 {
		if _, err := b.heavy(ctx); err != nil {
			return Row{}, err
		}
	}
	n := b.sz.heavy
	h := &webhook.Handler{Client: webhook.NewClient(10*time.Second, 256, webhook.Loopback...)}
	ev := fanout.Event{ID: b.id("floor"), Type: webhook.EventType}
	msg := fanout.Message{ContentType: "application/json", Body: []byte(`{"text":"hi"}`)}
	addr := b.st.DemoURL + "/deliver"
	t0 := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(batchSlots * concurrency)
	stopProgress := b.progress("floor", n, func() int { return b.st.Sink.Event(ev.ID).Unique })
	for i := range n {
		r := fanout.Recipient{ID: demo.RecipientID(i), Address: addr}
		g.Go(func() error { return h.Deliver(gctx, ev, r, msg) })
	}
	err := g.Wait()
	stopProgress()
	if err != nil {
		return Row{}, err
	}
	secs := time.Since(t0).Seconds()
	rate := float64(n) / secs
	return Row{Size: n, Seconds: secs, DeliveriesPerSec: rate, Ratio: b.heavyRate / rate, RatioOf: "heavy/floor",
		Notes: fmt.Sprintf("concurrency %d", batchSlots*concurrency)}, nil
}

func (b *bench) progress(label string, total int, count func() int) (stop func()) {
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(2 * time.Second)
		defer t.Stop()
		last, lastT := 0, time.Now()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				n := count()
				fmt.Fprintf(b.out, "[bench %s] %d/%d (%.0f/s)\n", label, n, total, float64(n-last)/time.Since(lastT).Seconds())
				last, lastT = n, time.Now()
			}
		}
	}()
	return func() { close(done) }
}

// lightRun publishes n small events, paced at rate per second (0: all at
// once), and measures event latency from publish to last delivery.
func (b *bench) lightRun(ctx context.Context, label string, rate float64, prio fanout.Priority) (Row, error) {
	n := b.sz.lightEvents
	evs := make([]stack.Event, n)
	for i := range evs {
		evs[i] = stack.Event{ID: b.id(label), Audience: b.sz.lightAud, Priority: prio}
	}
	published := make(map[string]time.Time, n)
	t0 := time.Now()
	if rate <= 0 {
		for _, e := range evs {
			published[e.ID] = t0
		}
		if err := b.st.Publish(ctx, evs...); err != nil {
			return Row{}, err
		}
	} else {
		interval := time.Duration(float64(time.Second) / rate)
		lastPrint := time.Now()
		for i, e := range evs {
			if time.Since(lastPrint) >= 2*time.Second {
				lastPrint = time.Now()
				fmt.Fprintf(b.out, "[bench %s] published %d/%d events\n", label, i, n)
			}
			if d := time.Until(t0.Add(time.Duration(i) * interval)); d > 0 {
				time.Sleep(d)
			}
			published[e.ID] = time.Now()
			if err := b.st.Publish(ctx, e); err != nil {
				return Row{}, err
			}
		}
	}
	done, err := b.waitDelivered(ctx, label, evs, 20*time.Minute)
	if err != nil {
		return Row{}, err
	}
	lat := make([]float64, 0, n)
	var last time.Time
	for _, e := range evs {
		lat = append(lat, float64(done[e.ID].Sub(published[e.ID]).Microseconds())/1000)
		if done[e.ID].After(last) {
			last = done[e.ID]
		}
	}
	slices.Sort(lat)
	secs := last.Sub(t0).Seconds()
	note := "published at once"
	if rate > 0 {
		note = fmt.Sprintf("published at %.0f events/s", rate)
	}
	return Row{Size: n, Seconds: secs, EventsPerSec: float64(n) / secs, DeliveriesPerSec: float64(n*b.sz.lightAud) / secs,
		P50Ms: pct(lat, 0.50), P99Ms: pct(lat, 0.99), Notes: fmt.Sprintf("%s, %d recipients each", note, b.sz.lightAud)}, nil
}

func pct(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p*float64(len(sorted)-1) + 0.5)
	return sorted[i]
}

func (b *bench) lightPaced(ctx context.Context) (Row, error) {
	return b.lightRun(ctx, "light", b.sz.lightRate, fanout.PriorityHigh)
}

func (b *bench) lightBurst(ctx context.Context) (Row, error) {
	return b.lightRun(ctx, "light-burst", 0, fanout.PriorityHigh)
}

// isolation runs the light scenario at the isolation rate alone, then again
// while a heavy event delivers on the low-priority queue, and divides the
// second p99 by the first.
func (b *bench) isolation(ctx context.Context) (Row, error) {
	base, err := b.lightRun(ctx, "isolation-alone", b.sz.isoRate, fanout.PriorityHigh)
	if err != nil {
		return Row{}, err
	}
	fmt.Fprintf(b.out, "[bench isolation] alone at %.0f events/s: p50 %.0f ms, p99 %.0f ms\n", b.sz.isoRate, base.P50Ms, base.P99Ms)
	heavy := stack.Event{ID: b.id("isolation-heavy"), Audience: b.sz.isolationAud, Priority: fanout.PriorityLow}
	if err := b.st.Publish(ctx, heavy); err != nil {
		return Row{}, err
	}
	// Let the heavy event get going.
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	for b.st.Sink.Event(heavy.ID).Unique < min(5000, heavy.Audience/10) && wctx.Err() == nil {
		time.Sleep(100 * time.Millisecond)
	}
	cancel()
	before := b.st.Sink.Event(heavy.ID).Unique
	r, err := b.lightRun(ctx, "isolation", b.sz.isoRate, fanout.PriorityHigh)
	if err != nil {
		return Row{}, err
	}
	during := b.st.Sink.Event(heavy.ID).Unique - before
	// Stop the heavy event: terminating the workflow terminates its batches.
	if err := b.st.TC.TerminateWorkflow(ctx, stack.WorkflowID(heavy.ID), "", "bench: isolation scenario done"); err != nil {
		fmt.Fprintf(b.out, "[bench isolation] terminate heavy: %v\n", err)
	}
	b.settle(ctx)
	r.Ratio, r.RatioOf = r.P99Ms/base.P99Ms, "p99 beside heavy/alone"
	r.Notes += fmt.Sprintf("; alone: p50 %.0f ms, p99 %.0f ms; a %d-recipient low-priority event delivered %d meanwhile", base.P50Ms, base.P99Ms, heavy.Audience, during)
	return r, nil
}

// settle waits until the sink has been idle for a second.
func (b *bench) settle(ctx context.Context) {
	deadline := time.Now().Add(time.Minute)
	last, idleSince := b.st.Sink.Total(), time.Now()
	for time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(200 * time.Millisecond)
		if n := b.st.Sink.Total(); n != last {
			last, idleSince = n, time.Now()
		} else if time.Since(idleSince) > time.Second {
			return
		}
	}
}

// scaling measures throughput against a slow sink with 1, 2 and 4 delivery
// worker processes of fixed concurrency each.
func (b *bench) scaling(ctx context.Context) (Row, error) {
	const slots, conc = 2, 16
	b.st.Stop("delivery")
	b.st.Sink.Delay = b.sz.scaleDelay
	defer func() {
		b.st.Sink.Delay = 0
		_ = b.st.Restart("delivery")
	}()
	rates := map[int]float64{}
	var parts []string
	var secs float64
	for _, k := range []int{1, 2, 4} {
		names := make([]string, k)
		for i := range k {
			names[i] = "scale-" + strconv.Itoa(i)
			if err := b.st.StartWorker(names[i], "high,normal,low", "FANOUT_BATCH_SLOTS="+strconv.Itoa(slots), "FANOUT_DELIVER_CONCURRENCY="+strconv.Itoa(conc)); err != nil {
				return Row{}, err
			}
		}
		time.Sleep(time.Second) // let the pollers connect
		r, err := b.heavyRun(ctx, fmt.Sprintf("scaling-%d", k), b.sz.scaling)
		for _, n := range names {
			b.st.Stop(n)
		}
		if err != nil {
			return Row{}, err
		}
		rates[k] = r.DeliveriesPerSec
		secs += r.Seconds
		parts = append(parts, fmt.Sprintf("%d worker(s) %.0f/s (%.2fx)", k, r.DeliveriesPerSec, r.DeliveriesPerSec/rates[1]))
	}
	return Row{Size: b.sz.scaling, Seconds: secs, DeliveriesPerSec: rates[4], Ratio: rates[4] / rates[1], RatioOf: "4 workers/1",
		Notes: fmt.Sprintf("sink %v per call, %d×%d concurrency per worker: %s", b.sz.scaleDelay, slots, conc, strings.Join(parts, ", "))}, nil
}

// dedup runs heavy with the Redis gate off and compares.
func (b *bench) dedup(ctx context.Context) (Row, error) {
	if b.heavyRate == 0 {
		if _, err := b.heavy(ctx); err != nil {
			return Row{}, err
		}
	}
	b.st.Stop("delivery")
	if err := b.st.StartWorker("delivery-nodedup", "high,normal,low", "FANOUT_DEDUP=false"); err != nil {
		return Row{}, err
	}
	r, err := b.heavyRun(ctx, "dedup-off", b.sz.heavy)
	b.st.Stop("delivery-nodedup")
	if rerr := b.st.Restart("delivery"); rerr != nil && err == nil {
		err = rerr
	}
	if err != nil {
		return Row{}, err
	}
	r.Ratio, r.RatioOf = r.DeliveriesPerSec/b.heavyRate, "gate off/on"
	r.Notes = "heavy without the Redis gate; " + r.Notes
	return r, nil
}

// pids are the stack's processes and this one (which hosts the sink and
// the kfake broker).
func (b *bench) pids() map[string]int {
	pids := b.st.Pids()
	pids["bench+sink+kafka"] = os.Getpid()
	return pids
}

// peakRSS reads VmHWM of every process of the stack and of this one (which
// hosts the sink and the kfake broker).
func (b *bench) peakRSS() map[string]float64 {
	out := map[string]float64{}
	for name, pid := range b.pids() {
		if mb, ok := vmHWM(pid); ok {
			out[name] = mb
		}
	}
	return out
}

func vmHWM(pid int) (float64, bool) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			f := strings.Fields(rest)
			if len(f) >= 1 {
				kb, err := strconv.ParseFloat(f[0], 64)
				return kb / 1024, err == nil
			}
		}
	}
	return 0, false
}

// cpuTimes reads user+system CPU seconds of every process of the stack.
func (b *bench) cpuTimes() map[string]float64 {
	out := map[string]float64{}
	for name, pid := range b.pids() {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// Fields after the command name (which may hold spaces).
		rest := string(data)
		if i := strings.LastIndexByte(rest, ')'); i >= 0 {
			rest = rest[i+1:]
		}
		f := strings.Fields(rest)
		if len(f) < 13 {
			continue
		}
		ut, _ := strconv.ParseFloat(f[11], 64)
		stt, _ := strconv.ParseFloat(f[12], 64)
		out[name] = (ut + stt) / 100 // clock ticks (USER_HZ = 100)
	}
	return out
}

func diffCPU(before, after map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range after {
		if d := v - before[k]; d >= 0.05 {
			out[k] = float64(int(d*10+0.5)) / 10
		}
	}
	return out
}

// huge fans out the 5,000,000-recipient event and reports the largest
// history of its runs and the peak worker RSS.
func (b *bench) huge(ctx context.Context) (Row, error) {
	r, err := b.heavyRun(ctx, "huge", b.sz.huge)
	if err != nil {
		return r, err
	}
	runs, largest, err := b.historySizes(ctx, stack.WorkflowID(b.lastHeavy))
	if err != nil {
		return r, err
	}
	r.Notes += fmt.Sprintf("; %d runs, largest history %d events (limit 51,200)", runs, largest)
	return r, nil
}

// historySizes lists the runs of a workflow id and the largest history.
func (b *bench) historySizes(ctx context.Context, wid string) (runs int, largest int64, err error) {
	var token []byte
	for {
		resp, err := b.st.TC.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Query: fmt.Sprintf("WorkflowId = '%s'", wid), NextPageToken: token})
		if err != nil {
			return 0, 0, err
		}
		for _, e := range resp.Executions {
			runs++
			largest = max(largest, e.GetHistoryLength())
		}
		if token = resp.NextPageToken; len(token) == 0 {
			return runs, largest, nil
		}
	}
}
