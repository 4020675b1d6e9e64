package main

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/worker"
	"golang.org/x/sync/errgroup"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/dev/demo"
	"github.com/fanout/fanout/dev/stack"
	"github.com/fanout/fanout/workers/webhook"
	"github.com/fanout/fanout/workflows/vocab"
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

	traced []traced // events whose timelines the scenario prints (fairness)

	heavyRate float64 // deliveries/s of the heavy scenario
	heavyCPU  float64 // its CPU µs per delivery, every process
	floorRate float64 // deliveries/s of the floor
	floorCPU  float64 // its CPU µs per delivery, client and sink
	lastHeavy string  // event id of the last heavyRun
	burstRate float64 // events/s of light-burst: the machine's capacity for small events

	typesFile string // heavy-file's types file, which the workers serve; "" without heavy-file
	secure    bool   // -secure: the webhook type signs throughout

	noopWorker  worker.Worker // runs the no-op workflows of the noop scenarios (noop.go)
	noopStarted int           // no-op workflows started in this run
}

func (b *bench) id(prefix string) string {
	b.seq++
	return fmt.Sprintf("%s-%s-%d", prefix, b.stamp, b.seq)
}

// startWorkers starts the events worker, the delivery workers (one for
// high and normal, one for low: each priority's pool is its own process, as
// deployed) and the bridge: inside the events worker (eager starts) unless
// separate. env is added to each one's environment.
func (b *bench) startWorkers(separateBridge bool, env ...string) error {
	var evEnv, delEnv []string
	if os.Getenv("FANOUT_BENCH_PPROF") != "" {
		// For profiling: go tool pprof http://127.0.0.1:6061/debug/pprof/profile
		evEnv, delEnv = []string{"FANOUT_PPROF_ADDR=127.0.0.1:6062"}, []string{"FANOUT_PPROF_ADDR=127.0.0.1:6061"}
	}
	if !separateBridge {
		evEnv = append(evEnv, "FANOUT_BRIDGE=true")
	}
	if err := b.st.StartWorker("events", "events", append(evEnv, env...)...); err != nil {
		return err
	}
	if err := b.st.StartWorker("delivery", "high,normal", append(delEnv, env...)...); err != nil {
		return err
	}
	if err := b.st.StartWorker("delivery-low", "low", env...); err != nil {
		return err
	}
	if !separateBridge {
		return nil
	}
	return b.st.StartBridge("bridge", env...)
}

// waitDelivered waits until every event reached its audience at the sink,
// printing progress every two seconds, and returns each event's last
// delivery time (the sink's clock, so the poll interval does not count).
func (b *bench) waitDelivered(ctx context.Context, label string, evs []stack.Event, timeout time.Duration) (map[string]time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	total := 0
	audience := make(map[string]int, len(evs))
	for _, e := range evs {
		total += e.Audience
		audience[e.ID] = e.Audience
	}
	done := map[string]time.Time{}
	reached := map[string]int{} // recipients reached by events not done yet
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	lastPrint, lastN, failures := time.Now(), 0, 0
	for {
		pending := make([]string, 0, len(evs)-len(done))
		for _, e := range evs {
			if _, ok := done[e.ID]; !ok {
				pending = append(pending, e.ID)
			}
		}
		// One request for every pending event: the sink is another process,
		// and polling must not be what loads it.
		stats, err := b.st.SinkClient.Events(ctx, pending)
		if err != nil {
			if failures++; failures >= 5 || ctx.Err() != nil {
				return done, fmt.Errorf("%s: reading the sink: %w", label, err)
			}
		} else {
			failures = 0
		}
		for id, st := range stats {
			reached[id] = min(st.Unique, audience[id])
			if st.Unique >= audience[id] {
				done[id] = st.Last
				delete(reached, id)
			}
		}
		if len(done) == len(evs) {
			return done, nil
		}
		n := 0
		for id := range done {
			n += audience[id]
		}
		for _, r := range reached {
			n += r
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

// heavyRun publishes one event of n recipients and measures it: publish
// to last delivery, the CPU every process spent from publish until the
// workflow completed (per delivery too), and the TIME_WAIT sockets towards
// the sink, which count the connections the delivery client closed instead
// of reusing (at their peak, sampled, and after the run).
func (b *bench) heavyRun(ctx context.Context, label string, n int) (Row, error) {
	return b.heavyRunType(ctx, label, n, webhook.EventType)
}

// heavyRunType is heavyRun with an event of type typ: the webhook type's
// payload (audience and message) under another type.
func (b *bench) heavyRunType(ctx context.Context, label string, n int, typ string) (Row, error) {
	ev := stack.Event{ID: b.id(label), Audience: n, Priority: fanout.PriorityNormal}
	if typ == webhook.EventType {
		b.lastHeavy = ev.ID
	}
	env := ev.Envelope()
	env.Type = typ
	tw := b.startTimeWait()
	cpu0 := b.cpuTimes()
	t0 := time.Now()
	if err := b.st.Publisher.Publish(ctx, env); err != nil {
		tw.stop()
		return Row{}, err
	}
	done, err := b.waitDelivered(ctx, label, []stack.Event{ev}, 60*time.Minute)
	if err != nil {
		tw.stop()
		return Row{}, err
	}
	res, err := b.st.WaitWorkflow(ctx, vocab.WorkflowID(typ, ev.ID), ev.ID)
	cpu := diffCPU(cpu0, b.cpuTimes())
	tw.stop()
	if err != nil {
		return Row{}, err
	}
	secs := done[ev.ID].Sub(t0).Seconds()
	b.printRamp(ctx, label, ev.ID, secs)
	sink, err := b.st.SinkClient.Event(ctx, ev.ID)
	if err != nil {
		return Row{}, err
	}
	r := Row{
		Size: n, Seconds: secs, DeliveriesPerSec: float64(n) / secs, PeakRSSMB: b.peakRSS(), CPUSeconds: roundCPU(cpu),
		Notes: fmt.Sprintf("%d batches, %d runs, %d duplicates at the sink", res.BatchesStarted, res.Runs, sink.Deliveries-sink.Unique),
	}
	r.CPUUsPerDelivery, r.CPUUsPerDeliveryTotal = perDelivery(cpu, n)
	tw.record(&r)
	return r, nil
}

func (b *bench) heavy(ctx context.Context) (Row, error) {
	r, err := b.heavyRun(ctx, "heavy", b.sz.heavy)
	b.heavyRate, b.heavyCPU = r.DeliveriesPerSec, r.CPUUsPerDeliveryTotal
	return r, err
}

// floor makes heavy's deliveries with the loop a competent engineer would
// write without fanout, the physical limit fanout chases, so nothing here
// may handicap it: plain net/http with an idle pool as large as its
// concurrency (so every connection is reused), no tracing, no outbound
// guard, no Kafka, Temporal or Redis; as many goroutines as the delivery
// worker's slots (batchSlots × concurrency), each posting the same body
// with the same method and content type to the same sink process, draining
// and closing every answer. Its CPU is this process's (the client; the
// broker and the recipients source in it are idle meanwhile) and the
// sink's, measured around the loop.
func (b *bench) floor(ctx context.Context) (Row, error) {
	if b.heavyRate == 0 {
		if _, err := b.heavy(ctx); err != nil {
			return Row{}, err
		}
	}
	n, c := b.sz.heavy, batchSlots*concurrency
	tw := b.startTimeWait()
	secs, cpu, err := b.bareLoop(ctx, "floor", n, c)
	tw.stop()
	if err != nil {
		return Row{}, err
	}
	// The rest of the stack idles during the floor: its CPU is in
	// cpu_seconds, not in the floor's cost per delivery.
	floorCPU := map[string]float64{benchProc: cpu[benchProc], "sink": cpu["sink"]}
	rate := float64(n) / secs
	b.floorRate = rate
	r := Row{Size: n, Seconds: secs, DeliveriesPerSec: rate, Ratio: b.heavyRate / rate, RatioOf: "heavy/floor", CPUSeconds: roundCPU(cpu),
		Notes: fmt.Sprintf("plain net/http, concurrency %d, idle pool %d; CPU per delivery: the client (%s) and the sink", c, c, benchProc)}
	r.CPUUsPerDelivery, r.CPUUsPerDeliveryTotal = perDelivery(floorCPU, n)
	b.floorCPU = r.CPUUsPerDeliveryTotal
	if b.heavyCPU > 0 {
		r.CPURatio, r.CPURatioOf = b.heavyCPU/b.floorCPU, "heavy/floor"
	}
	tw.record(&r)
	return r, nil
}

// bareLoop delivers n recipients of a new event to the sink with the loop
// of the floor: plain net/http, an idle pool as large as its c goroutines,
// each posting until the n are done. It returns the loop's seconds and the
// CPU each process spent meanwhile, after checking that the sink counted
// every recipient.
func (b *bench) bareLoop(ctx context.Context, label string, n, c int) (float64, map[string]float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
	defer cancel()
	tr := &http.Transport{MaxIdleConns: c, MaxIdleConnsPerHost: c}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	eventID, url := b.id(label), b.st.SinkURL+"/deliver"
	var next, delivered atomic.Int64
	stopProgress := b.progress(label, n, func() int { return int(delivered.Load()) })
	defer stopProgress()
	cpu0 := b.cpuTimes()
	t0 := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	for range c {
		g.Go(func() error {
			for i := next.Add(1) - 1; i < int64(n); i = next.Add(1) - 1 {
				if err := post(gctx, hc, url, eventID, demo.RecipientID(int(i))); err != nil {
					return err
				}
				delivered.Add(1)
			}
			return nil
		})
	}
	err := g.Wait()
	secs := time.Since(t0).Seconds()
	cpu := diffCPU(cpu0, b.cpuTimes())
	if err != nil {
		return 0, nil, err
	}
	if st, err := b.st.SinkClient.Event(ctx, eventID); err != nil || st.Unique != n {
		return 0, nil, fmt.Errorf("%s: the sink counted %d of the loop's %d recipients (%v)", label, st.Unique, n, err)
	}
	return secs, cpu, nil
}

// floorBody is the message the heavy scenario's events carry.
var floorBody = []byte(`{"text":"hi"}`)

// post is one delivery of the floor: a POST of the message with the two
// headers the sink counts by.
func post(ctx context.Context, hc *http.Client, url, eventID, recipientID string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(floorBody))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(webhook.HeaderEventID, eventID)
	req.Header.Set(webhook.HeaderRecipientID, recipientID)
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("floor: HTTP %d from the sink", resp.StatusCode)
	}
	return nil
}

// heavyStock runs the heavy event (at heavyStock's size) against a dev
// server started as users start it: plain `temporal server start-dev
// --db-filename`, none of the stack's WAL, synchronous=off or
// one-partition flags. Only the server changes: the tuned one is stopped
// and a stock one (on a fresh database) takes its port, while the workers,
// Redis, the broker and the sink process stay up and reconnect as after any
// server restart. That is the simplest honest comparison — the same
// processes, binaries and sink, the server's flags the one difference — and
// cheaper than a second stack. The tuned server comes back afterwards for
// the scenarios that follow.
func (b *bench) heavyStock(ctx context.Context) (_ Row, err error) {
	fmt.Fprintln(b.out, "[bench heavy-stock] restarting the temporal dev server without tuning flags")
	if err := b.st.SwitchTemporal(ctx, true); err != nil {
		return Row{}, err
	}
	defer func() {
		fmt.Fprintln(b.out, "[bench heavy-stock] back to the tuned temporal dev server")
		rerr := b.st.SwitchTemporal(ctx, false)
		if rerr == nil {
			rerr = b.waitPollers(ctx)
		}
		err = cmp.Or(err, rerr)
	}()
	if err := b.waitPollers(ctx); err != nil {
		return Row{}, err
	}
	r, err := b.heavyRun(ctx, "heavy-stock", b.sz.heavyStock)
	if err != nil {
		return Row{}, err
	}
	r.Notes = "temporal server start-dev --db-filename (stock flags); " + r.Notes
	if b.floorRate > 0 {
		r.Ratio, r.RatioOf = r.DeliveriesPerSec/b.floorRate, "heavy-stock/floor"
		r.CPURatio, r.CPURatioOf = r.CPUUsPerDeliveryTotal/b.floorCPU, "heavy-stock/floor"
	}
	return r, nil
}

// waitPollers waits (at most two minutes) until the events worker and the
// delivery worker poll the server again after it restarted, so that a run
// measures deliveries, not the workers' reconnection back-off.
func (b *bench) waitPollers(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	queues := []string{vocab.EventsTaskQueue, vocab.DeliveryTaskQueue(fanout.PriorityNormal), vocab.LargeDeliveryTaskQueue(fanout.PriorityNormal)}
	for {
		ready := 0
		for _, q := range queues {
			d, err := b.st.TC.DescribeTaskQueue(ctx, q, enums.TASK_QUEUE_TYPE_WORKFLOW)
			if err == nil && len(d.GetPollers()) > 0 {
				ready++
			}
		}
		if ready == len(queues) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("workers not polling %v after the server restart: %w", queues, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
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
	r, err := b.lightRun(ctx, "light-burst", 0, fanout.PriorityHigh)
	b.burstRate = r.EventsPerSec
	return r, err
}

// relativeRate is half the machine's measured burst capacity for small
// events: light-burst's events/s, measured first if this run has not.
func (b *bench) relativeRate(ctx context.Context) (float64, error) {
	if b.burstRate == 0 {
		fmt.Fprintln(b.out, "[bench] measuring the burst capacity first (light-burst)")
		if _, err := b.lightBurst(ctx); err != nil {
			return 0, err
		}
	}
	return b.burstRate / 2, nil
}

// atRelativeRate runs a scenario at half the measured burst capacity and
// says so in its notes.
func (b *bench) atRelativeRate(ctx context.Context, run func(context.Context, float64) (Row, error)) (Row, error) {
	rate, err := b.relativeRate(ctx)
	if err != nil {
		return Row{}, err
	}
	r, err := run(ctx, rate)
	r.Notes += fmt.Sprintf("; half of light-burst's %.0f events/s", b.burstRate)
	return r, err
}

// lightRelative is light at half the measured burst capacity: a load any
// machine sustains, whatever its speed.
func (b *bench) lightRelative(ctx context.Context) (Row, error) {
	return b.atRelativeRate(ctx, func(ctx context.Context, rate float64) (Row, error) {
		return b.lightRun(ctx, "light-relative", rate, fanout.PriorityHigh)
	})
}

// isolationRelative is isolation at half the measured burst capacity.
func (b *bench) isolationRelative(ctx context.Context) (Row, error) {
	return b.atRelativeRate(ctx, func(ctx context.Context, rate float64) (Row, error) {
		return b.isolationAt(ctx, "isolation-relative", rate)
	})
}

// isolation runs the light scenario at the isolation rate alone, then again
// while a heavy event delivers on the low-priority queue, and divides the
// second p99 by the first.
func (b *bench) isolation(ctx context.Context) (Row, error) {
	return b.isolationAt(ctx, "isolation", b.sz.isoRate)
}

// isolationAt is the isolation scenario with the light events published
// at rate per second.
func (b *bench) isolationAt(ctx context.Context, label string, rate float64) (Row, error) {
	base, err := b.lightRun(ctx, label+"-alone", rate, fanout.PriorityHigh)
	if err != nil {
		return Row{}, err
	}
	fmt.Fprintf(b.out, "[bench %s] alone at %.0f events/s: p50 %.0f ms, p99 %.0f ms\n", label, rate, base.P50Ms, base.P99Ms)
	heavy := stack.Event{ID: b.id(label + "-heavy"), Audience: b.sz.isolationAud, Priority: fanout.PriorityLow}
	if err := b.st.Publish(ctx, heavy); err != nil {
		return Row{}, err
	}
	// Let the heavy event get going.
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	for b.unique(wctx, heavy.ID) < min(5000, heavy.Audience/10) && wctx.Err() == nil {
		time.Sleep(100 * time.Millisecond)
	}
	cancel()
	before := b.unique(ctx, heavy.ID)
	r, err := b.lightRun(ctx, label, rate, fanout.PriorityHigh)
	if err != nil {
		return Row{}, err
	}
	during := b.unique(ctx, heavy.ID) - before
	// Stop the heavy event: terminating the workflow terminates its batches.
	if err := b.st.TC.TerminateWorkflow(ctx, stack.WorkflowID(heavy.ID), "", "bench: isolation scenario done"); err != nil {
		fmt.Fprintf(b.out, "[bench %s] terminate heavy: %v\n", label, err)
	}
	b.settle(ctx)
	r.Ratio, r.RatioOf = r.P99Ms/base.P99Ms, "p99 beside heavy/alone"
	r.Notes += fmt.Sprintf("; alone: p50 %.0f ms, p99 %.0f ms; a %d-recipient low-priority event delivered %d meanwhile", base.P50Ms, base.P99Ms, heavy.Audience, during)
	return r, nil
}

// unique is how many recipients of an event the sink reached (0 when the
// sink cannot be read: the callers wait for a number, bounded in time).
func (b *bench) unique(ctx context.Context, eventID string) int {
	st, err := b.st.SinkClient.Event(ctx, eventID)
	if err != nil {
		fmt.Fprintf(b.out, "[bench] reading the sink: %v\n", err)
	}
	return st.Unique
}

// settle waits (at most a minute) until the sink has been idle for a second.
func (b *bench) settle(ctx context.Context) {
	deadline := time.Now().Add(time.Minute)
	total := func() int64 {
		t, _ := b.st.SinkClient.Totals(ctx)
		return t.Deliveries
	}
	last, idleSince := total(), time.Now()
	for time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(200 * time.Millisecond)
		if n := total(); n != last {
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
	if err := b.st.SinkClient.SetDelay(ctx, b.sz.scaleDelay); err != nil {
		return Row{}, err
	}
	defer func() {
		if err := b.st.SinkClient.SetDelay(context.Background(), 0); err != nil {
			fmt.Fprintf(b.out, "[bench scaling] resetting the sink's delay: %v\n", err)
		}
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

// benchProc names this process among the bench's processes: it hosts the
// kfake broker and the recipients source, and in the floor it is the
// client.
const benchProc = "bench"

// pids are the stack's processes (the sink process among them) and this
// one.
func (b *bench) pids() map[string]int {
	pids := b.st.Pids()
	pids[benchProc] = os.Getpid()
	return pids
}

// peakRSS reads VmHWM of every process of the stack and of this one.
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

// procCPU is a process's user+system CPU seconds so far.
type procCPU struct {
	pid  int
	secs float64
}

// cpuTimes reads user+system CPU seconds of every process of the stack and
// of this one, from /proc/<pid>/stat.
func (b *bench) cpuTimes() map[string]procCPU {
	out := map[string]procCPU{}
	for name, pid := range b.pids() {
		if secs, ok := cpuSeconds(pid); ok {
			out[name] = procCPU{pid, secs}
		}
	}
	return out
}

func cpuSeconds(pid int) (float64, bool) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	// Fields after the command name (which may hold spaces).
	rest := string(data)
	if i := strings.LastIndexByte(rest, ')'); i >= 0 {
		rest = rest[i+1:]
	}
	f := strings.Fields(rest)
	if len(f) < 13 {
		return 0, false
	}
	ut, err1 := strconv.ParseFloat(f[11], 64)
	st, err2 := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100, err1 == nil && err2 == nil // clock ticks (USER_HZ = 100)
}

// diffCPU is the CPU seconds each process spent between two readings; a
// process restarted in between (another pid under the same name) counts
// from its start.
func diffCPU(before, after map[string]procCPU) map[string]float64 {
	out := map[string]float64{}
	for k, a := range after {
		d := a.secs
		if b, ok := before[k]; ok && b.pid == a.pid {
			d -= b.secs
		}
		if d > 0 {
			out[k] = d
		}
	}
	return out
}

// roundCPU keeps the processes that spent at least 0.05 s, to 0.1 s.
func roundCPU(cpu map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range cpu {
		if v >= 0.05 {
			out[k] = math.Round(v*10) / 10
		}
	}
	return out
}

// perDelivery divides each process's CPU by n deliveries, in microseconds
// (to 0.1), and sums them.
func perDelivery(cpu map[string]float64, n int) (map[string]float64, float64) {
	out := map[string]float64{}
	total := 0.0
	for k, v := range cpu {
		us := v * 1e6 / float64(n)
		total += us
		if us >= 0.05 {
			out[k] = math.Round(us*10) / 10
		}
	}
	return out, math.Round(total*10) / 10
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
