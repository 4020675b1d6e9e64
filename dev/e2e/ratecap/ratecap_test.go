//go:build integration

// Package ratecap checks the set-rate cap against what the destination
// receives: the real stack, the stock worker binary (events and delivery
// queues, the bridge inside) with the webhook type's default options, and
// the sink's per-second counts.
package ratecap

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/fanout/fanout/dev/stack"
	"github.com/fanout/fanout/workflows"
	"github.com/fanout/fanout/workflows/vocab"
)

// Tolerance is the issue's: within 10 % of the cap over any 10-second
// window once running.
const (
	window    = 10 // seconds
	tolerance = 0.10
	measure   = 24 * time.Second // per cap: 15 full windows
	warmUp    = 2 * time.Second  // after the batches of the previous cap end
)

// TestRateCapHoldsOverEveryWindow publishes a 120,000-recipient event,
// once it delivers caps it at 200/s and then at 1,000/s with the set-rate update (through
// the Temporal client, as the CLI sends it), and checks every full
// 10-second window of what the sink received under each cap (after the
// batches started under the previous one have finished) is within 10 % of
// it. The cap is then lifted; the event completes with every recipient
// delivered once. Going over the cap always fails the test; falling short
// fails it only if the machine was shown able to deliver faster (the
// uncapped tail's best second), else the test says the machine could not
// reach the cap.
func TestRateCapHoldsOverEveryWindow(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	s, err := stack.Start(ctx, stack.Options{InMemory: true, Log: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.StartWorker("worker", "events,high,normal,low", "FANOUT_BRIDGE=true"); err != nil {
		t.Fatal(err)
	}

	const n = 120_000
	id := "ratecap-" + time.Now().UTC().Format("150405")
	wid := stack.WorkflowID(id)
	if err := s.Publish(ctx, stack.Event{ID: id, Audience: n}); err != nil {
		t.Fatal(err)
	}
	// The first cap lands on a running event: its first batches deliver
	// at full speed.
	waitDelivering(ctx, t, s, id, 2000)

	type phase struct {
		cap           float64
		set, from, to time.Time
	}
	var phases []phase
	for _, c := range []float64{200, 1000} {
		set := time.Now()
		p := setRate(ctx, t, s, wid, c)
		// The batches open when the cap changed deliver at their own
		// pace (full speed before the first cap) until they end.
		waitBatchesDone(ctx, t, s, wid, p.BatchesStarted)
		from := time.Now().Add(warmUp)
		sleep(ctx, time.Until(from)+measure)
		phases = append(phases, phase{cap: c, set: set, from: from, to: from.Add(measure)})
	}
	setRate(ctx, t, s, wid, 0)
	tailFrom := time.Now().Add(time.Second)

	res, err := s.Wait(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if res.Delivered != n || res.Duplicates != 0 || res.Failed != 0 {
		t.Errorf("result %+v, want %d delivered, none duplicated or failed", res.Progress, n)
	}
	if got := s.Sink.Event(id); got.Unique != n || got.Duplicated != 0 {
		t.Errorf("sink: %+v, want %d recipients once each", got, n)
	}

	secs := s.Sink.PerSecond(id)
	best := 0
	for sec, c := range secs {
		if sec > tailFrom.Unix() {
			best = max(best, c)
		}
	}
	t.Logf("uncapped tail: best second %d deliveries", best)
	for _, p := range phases {
		lo, hi := p.cap*(1-tolerance)*window, p.cap*(1+tolerance)*window
		var sums []string
		short := 0
		// Full seconds only: [first, last] lie inside the phase.
		first, last := p.from.Unix()+1, p.to.Unix()-1
		for w := first; w+window-1 <= last; w++ {
			sum := 0
			for sec := w; sec < w+window; sec++ {
				sum += secs[sec]
			}
			rate := float64(sum) / window
			sums = append(sums, fmt.Sprintf("%.0f", rate))
			switch {
			case float64(sum) > hi:
				t.Errorf("cap %v/s: the 10 s from %s delivered %.0f/s, over %.0f/s", p.cap, time.Unix(w, 0).Format("15:04:05"), rate, hi/window)
			case float64(sum) < lo:
				short++
				if float64(best) >= p.cap*1.5 {
					t.Errorf("cap %v/s: the 10 s from %s delivered %.0f/s, under %.0f/s (the machine delivered %d in its best uncapped second)",
						p.cap, time.Unix(w, 0).Format("15:04:05"), rate, lo/window, best)
				}
			}
		}
		if len(sums) < 10 {
			t.Errorf("cap %v/s: only %d full windows measured", p.cap, len(sums))
		}
		t.Logf("cap %v/s: %d windows of 10 s, deliveries/s: %s", p.cap, len(sums), strings.Join(sums, " "))
		if short > 0 && float64(best) < p.cap*1.5 {
			t.Logf("cap %v/s: %d windows fell short, but this machine delivered at most %d/s uncapped: it could not reach the cap reliably", p.cap, short, best)
		}
	}
	// Per-second counts under each cap, for the record, and from each cap's
	// update to its measurement (the batches open before it finishing).
	for i, p := range phases {
		var before []int
		for sec := p.set.Unix(); sec <= p.from.Unix(); sec++ {
			before = append(before, secs[sec])
		}
		t.Logf("cap %v/s, per second from the update (%d s before the measurement): %v", phases[i].cap, len(before), before)
	}
	for _, p := range phases {
		var per []int
		for sec := p.from.Unix() + 1; sec < p.to.Unix(); sec++ {
			per = append(per, secs[sec])
		}
		t.Logf("cap %v/s, per second: %v (min %d, max %d)", p.cap, per, slices.Min(per), slices.Max(per))
	}
}

// waitDelivering waits (at most 60 s) until the sink has received atLeast
// deliveries of the event.
func waitDelivering(ctx context.Context, t *testing.T, s *stack.Stack, id string, atLeast int) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); sleep(ctx, 5*time.Millisecond) {
		if s.Sink.Event(id).Deliveries >= atLeast {
			return
		}
	}
	t.Fatalf("event %s: %d deliveries after a minute, want %d", id, s.Sink.Event(id).Deliveries, atLeast)
}

// setRate sends the set-rate update and returns the progress it answered.
func setRate(ctx context.Context, t *testing.T, s *stack.Stack, wid string, perSecond float64) workflows.Progress {
	t.Helper()
	h, err := s.TC.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID: wid, UpdateName: vocab.SetRateUpdate, Args: []any{perSecond},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	var p workflows.Progress
	if err == nil {
		err = h.Get(ctx, &p)
	}
	if err != nil {
		t.Fatalf("set-rate %v: %v", perSecond, err)
	}
	if p.Rate != perSecond {
		t.Fatalf("set-rate %v answered %+v", perSecond, p)
	}
	t.Logf("set-rate %v at %s: %d delivered, %d batches started", perSecond, time.Now().Format("15:04:05.000"), p.Delivered, p.BatchesStarted)
	return p
}

// waitBatchesDone waits (at most 60 s) until the first started batches of
// the event have completed.
func waitBatchesDone(ctx context.Context, t *testing.T, s *stack.Stack, wid string, started int) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); sleep(ctx, 100*time.Millisecond) {
		v, err := s.TC.QueryWorkflow(ctx, wid, "", vocab.ProgressQuery)
		if err != nil {
			continue
		}
		var p workflows.Progress
		if err := v.Get(&p); err == nil && p.BatchesCompleted >= started {
			return
		}
	}
	t.Fatalf("the %d batches started before the cap did not complete in a minute", started)
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
