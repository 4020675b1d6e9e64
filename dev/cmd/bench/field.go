package main

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/dev/stack"
)

// The field's conditions: destinations that answer in tens of milliseconds
// (slow) and many events of one priority at once (fairness).

// slowDelay is how long the sink takes to answer each delivery in the slow
// scenario: a real webhook destination's latency.
const slowDelay = 50 * time.Millisecond

// withSinkDelay runs fn with the sink answering every delivery after d,
// and puts it back to answering at once afterwards.
func (b *bench) withSinkDelay(ctx context.Context, d time.Duration, fn func() (Row, error)) (Row, error) {
	if err := b.st.SinkClient.SetDelay(ctx, d); err != nil {
		return Row{}, err
	}
	defer func() {
		if err := b.st.SinkClient.SetDelay(context.Background(), 0); err != nil {
			fmt.Fprintf(b.out, "[bench] resetting the sink's delay: %v\n", err)
		}
	}()
	return fn()
}

// slow delivers one event to destinations that answer in slowDelay, then
// makes the same deliveries with the bare loop of the floor holding the
// same calls in flight (the delivery worker's batchSlots × concurrency):
// latency-bound delivery, where an idle slot costs throughput directly.
func (b *bench) slow(ctx context.Context) (Row, error) {
	return b.withSinkDelay(ctx, slowDelay, func() (Row, error) {
		n, c := b.sz.slow, batchSlots*concurrency
		r, err := b.heavyRun(ctx, "slow", n)
		if err != nil {
			return Row{}, err
		}
		secs, cpu, err := b.bareLoop(ctx, "slow-loop", n, c)
		if err != nil {
			return Row{}, err
		}
		loopRate := float64(n) / secs
		_, loopCPU := perDelivery(map[string]float64{benchProc: cpu[benchProc], "sink": cpu["sink"]}, n)
		r.Ratio, r.RatioOf = r.DeliveriesPerSec/loopRate, "slow/bare loop"
		r.CPURatio, r.CPURatioOf = r.CPUUsPerDeliveryTotal/loopCPU, "slow/bare loop"
		r.Notes = fmt.Sprintf("sink answers in %v; bare loop with %d calls in flight: %.0f/s, %.0f CPU µs/delivery; %s", slowDelay, c, loopRate, loopCPU, r.Notes)
		return r, nil
	})
}

// fairness publishes two big events of one priority and, while they
// deliver, a small event of that priority and one of high priority; each
// small event's publish-to-last-delivery time is divided by the same
// event's alone. Each time is the median of fairSamples pairs, alone
// before the big events and beside them at fairSamples points of their
// progress. The row's deliveries/s is the two big events' combined rate.
func (b *bench) fairness(ctx context.Context) (Row, error) {
	pair := func(label string) []stack.Event {
		return []stack.Event{
			{ID: b.id("fair-normal" + label), Audience: b.sz.fairSmall, Priority: fanout.PriorityNormal},
			{ID: b.id("fair-high" + label), Audience: b.sz.fairSmall, Priority: fanout.PriorityHigh},
		}
	}
	// A first pair warms the stack (connections to the sink, the server's
	// caches), so that alone is the same whatever ran before.
	if err := b.warmUp(ctx, "fairness-warm-up", pair("-warm")...); err != nil {
		return Row{}, err
	}
	var alone, beside [2][]float64 // [normal, high][sample] ms
	for range fairSamples {
		ms, err := b.latencies(ctx, "fairness-alone", true, pair("-alone")...)
		if err != nil {
			return Row{}, err
		}
		alone[0], alone[1] = append(alone[0], ms[0]), append(alone[1], ms[1])
	}
	big := []stack.Event{
		{ID: b.id("fair-big"), Audience: b.sz.fairBig, Priority: fanout.PriorityNormal},
		{ID: b.id("fair-big"), Audience: b.sz.fairBig, Priority: fanout.PriorityNormal},
	}
	t0 := time.Now()
	if err := b.st.Publish(ctx, big...); err != nil {
		return Row{}, err
	}
	for i := range fairSamples {
		// Pair i comes once the big ones have (i+1)/(fairSamples+2) of
		// their audience delivered (their batches queued and running), or
		// after fairWait: the last pair well before their tail.
		wctx, cancel := context.WithTimeout(ctx, fairWait)
		for b.unique(wctx, big[0].ID)+b.unique(wctx, big[1].ID) < (i+1)*2*b.sz.fairBig/(fairSamples+2) && wctx.Err() == nil {
			time.Sleep(100 * time.Millisecond)
		}
		cancel()
		bigBefore, at := b.unique(ctx, big[0].ID)+b.unique(ctx, big[1].ID), time.Now()
		ms, err := b.latencies(ctx, "fairness", false, pair("")...)
		if err != nil {
			return Row{}, err
		}
		bigDuring := b.unique(ctx, big[0].ID) + b.unique(ctx, big[1].ID) - bigBefore
		fmt.Fprintf(b.out, "[bench fairness] the big events delivered %d in the %.0f ms of pair %d (%.0f/s)\n",
			bigDuring, float64(time.Since(at).Milliseconds()), i+1, float64(bigDuring)/time.Since(at).Seconds())
		beside[0], beside[1] = append(beside[0], ms[0]), append(beside[1], ms[1])
	}
	done, err := b.waitDelivered(ctx, "fairness-big", big, 60*time.Minute)
	if err != nil {
		return Row{}, err
	}
	b.settle(ctx)
	queued := b.overtakes(ctx, []string{big[0].ID, big[1].ID})
	b.printTimelines(ctx)
	last := done[big[0].ID]
	if t := done[big[1].ID]; t.After(last) {
		last = t
	}
	secs := last.Sub(t0).Seconds()
	var med [2][2]float64 // [alone, beside][normal, high]
	for i := range 2 {
		med[0][i], med[1][i] = median(alone[i]), median(beside[i])
	}
	same, high := med[1][0]/med[0][0], med[1][1]/med[0][1]
	fmt.Fprintf(b.out, "[bench fairness] normal ms alone %v, beside %v; high ms alone %v, beside %v\n",
		roundMs(alone[0]), roundMs(beside[0]), roundMs(alone[1]), roundMs(beside[1]))
	return Row{Size: 2*b.sz.fairBig + 2*fairSamples*b.sz.fairSmall, Seconds: secs, DeliveriesPerSec: float64(2*b.sz.fairBig) / secs,
		Ratio: same, RatioOf: "same priority beside/alone",
		Notes: fmt.Sprintf("two %d-recipient normal events (deliveries/s: theirs combined); medians of %d: a %d-recipient normal event %.0f ms beside them, %.0f ms alone (%.2fx); a high one %.0f ms, %.0f ms alone (%.2fx); %s",
			b.sz.fairBig, fairSamples, b.sz.fairSmall, med[1][0], med[0][0], same, med[1][1], med[0][1], high, queued)}, nil
}

// fairSamples is how many pairs of small events fairness times alone and
// beside the big events: one alone moved between 136 and 304 ms from run
// to run, a ratio of single samples with it, and with three pairs a run's
// ratio for high still moved from 1.0 to 1.8.
const fairSamples = 5

// roundMs rounds milliseconds to whole ones, for printing.
func roundMs(xs []float64) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = math.Round(x)
	}
	return out
}

// fairWait bounds the wait for the big events of fairness to get going.
const fairWait = 20 * time.Second

// warmUp publishes the events at once and waits for their deliveries:
// not measured, not traced.
func (b *bench) warmUp(ctx context.Context, label string, evs ...stack.Event) error {
	if err := b.st.Publish(ctx, evs...); err != nil {
		return err
	}
	if _, err := b.waitDelivered(ctx, label, evs, 10*time.Minute); err != nil {
		return err
	}
	b.settle(ctx)
	return nil
}

// latencies publishes the events at once and returns each one's time from
// publish to last delivery, in milliseconds, in their order; with settle,
// it then waits for the sink to go quiet (not beside events that go on).
func (b *bench) latencies(ctx context.Context, label string, settle bool, evs ...stack.Event) ([]float64, error) {
	// What each process spends meanwhile (read every 20 ms): beside other
	// events, whose work takes the cores from these.
	type sample struct {
		at  time.Time
		cpu map[string]procCPU
	}
	samples := []sample{{time.Now(), b.cpuTimes()}}
	sctx, stopSampling := context.WithCancel(ctx)
	sampled := make(chan []sample, 1)
	go func() {
		out, t := samples, time.NewTicker(20*time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-sctx.Done():
				sampled <- out
				return
			case <-t.C:
				out = append(out, sample{time.Now(), b.cpuTimes()})
			}
		}
	}()
	t0 := time.Now()
	if err := b.st.Publish(ctx, evs...); err != nil {
		stopSampling()
		return nil, err
	}
	done, err := b.waitDelivered(ctx, label, evs, 10*time.Minute)
	stopSampling()
	samples = <-sampled
	if err != nil {
		return nil, err
	}
	last := t0
	for _, e := range evs {
		if done[e.ID].After(last) {
			last = done[e.ID]
		}
	}
	end := samples[len(samples)-1]
	for _, s := range samples {
		if !s.at.Before(last) {
			end = s
			break
		}
	}
	cpu := diffCPU(samples[0].cpu, end.cpu)
	procs := slices.Sorted(maps.Keys(cpu))
	parts := make([]string, len(procs))
	for i, p := range procs {
		parts[i] = fmt.Sprintf("%s %.0f", p, cpu[p]*1000)
	}
	fmt.Fprintf(b.out, "[bench %s] CPU ms from the publish to the last delivery (%.0f ms): %s\n", label, float64(end.at.Sub(samples[0].at).Microseconds())/1000, strings.Join(parts, ", "))
	ms := make([]float64, len(evs))
	for i, e := range evs {
		ms[i] = float64(done[e.ID].Sub(t0).Microseconds()) / 1000
		b.traced = append(b.traced, traced{label, e.ID, t0})
	}
	if settle {
		b.settle(ctx)
	}
	return ms, nil
}

// printRamp prints when an event's first delivery came after its publish
// (secs: from the publish to its last delivery) and its deliveries in each
// second from then on: where a latency-bound run loses time (the ramp, the
// tail) against a loop that is full at once.
func (b *bench) printRamp(ctx context.Context, label, id string, secs float64) {
	st, err := b.st.SinkClient.Event(ctx, id)
	if err != nil {
		fmt.Fprintf(b.out, "[bench] %s: reading the sink: %v\n", label, err)
		return
	}
	per, err := b.st.SinkClient.PerSecond(ctx, id)
	if err != nil {
		fmt.Fprintf(b.out, "[bench] %s: reading the sink: %v\n", label, err)
		return
	}
	var at []int64
	for s := range per {
		at = append(at, s)
	}
	slices.Sort(at)
	counts := make([]string, 0, len(at))
	for i, s := range at {
		if i > 0 && s != at[i-1]+1 {
			counts = append(counts, "…")
		}
		counts = append(counts, strconv.Itoa(per[s]))
	}
	span := st.Last.Sub(st.First).Seconds()
	fmt.Fprintf(b.out, "[bench] %s: first delivery %.2f s after the publish, the last %.2f s after the first; by second: %s\n",
		label, secs-span, span, strings.Join(counts, " "))
}
