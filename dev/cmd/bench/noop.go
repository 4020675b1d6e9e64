package main

import (
	"context"
	"fmt"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"golang.org/x/sync/errgroup"
)

// The floor under a small event's Temporal cost is what one workflow per
// event costs the server when the workflow does nothing: what a competent
// engineer would run without fanout. The noop scenarios start that many
// such workflows at the rate of the light scenario they stand beside,
// eagerly, from a worker in this process (as the bridge in the events
// worker starts events), and the light rows report their Temporal CPU per
// event as a ratio of it.

// noopQueue is the task queue of the bench's no-op workflows (bench only:
// no fanout process polls it).
const noopQueue = "bench-noop"

// noopWorkflowName is the no-op workflow's registered name.
const noopWorkflowName = "BenchNoop"

func noopWorkflow(workflow.Context) error { return nil }

// noopFloors pairs each light scenario with its no-op floor.
var noopFloors = map[string]string{"light-burst": "noop-burst", "light-relative": "noop-relative"}

// startNoopWorker starts the no-op workflows' worker once per bench run.
func (b *bench) startNoopWorker() error {
	if b.noopWorker != nil {
		return nil
	}
	w := worker.New(b.st.TC, noopQueue, worker.Options{})
	w.RegisterWorkflowWithOptions(noopWorkflow, workflow.RegisterOptions{Name: noopWorkflowName})
	if err := w.Start(); err != nil {
		return fmt.Errorf("no-op worker: %w", err)
	}
	b.noopWorker = w
	return nil
}

func (b *bench) noopBurst(ctx context.Context) (Row, error) {
	return b.noopRun(ctx, "noop-burst", 0)
}

func (b *bench) noopRelative(ctx context.Context) (Row, error) {
	return b.atRelativeRate(ctx, func(ctx context.Context, rate float64) (Row, error) {
		return b.noopRun(ctx, "noop-relative", rate)
	})
}

// noopRun starts as many no-op workflows as the light scenarios have
// events, paced at rate per second (0: all at once) from 16 goroutines (as
// the bridge starts events from its partitions' lanes), and measures the
// stack's CPU from the first start until visibility counts every one
// closed (after a warm-up of 20 that it leaves out): a small event's
// window ends at its last delivery, long after most closed records are
// written, and the dev server writes them at most twice a second. Only
// the last workflow's result is waited for, so that waiting costs the
// server one request.
func (b *bench) noopRun(ctx context.Context, label string, rate float64) (Row, error) {
	if err := b.startNoopWorker(); err != nil {
		return Row{}, err
	}
	start := func(prefix string, n int) (time.Duration, error) {
		var g errgroup.Group
		g.SetLimit(16)
		t0, lastPrint := time.Now(), time.Now()
		for i := range n {
			if rate > 0 {
				if d := time.Until(t0.Add(time.Duration(float64(i) / rate * float64(time.Second)))); d > 0 {
					time.Sleep(d)
				}
			}
			if time.Since(lastPrint) >= 2*time.Second {
				lastPrint = time.Now()
				fmt.Fprintf(b.out, "[bench %s] started %d/%d no-op workflows\n", label, i, n)
			}
			g.Go(func() error {
				opts := client.StartWorkflowOptions{ID: fmt.Sprintf("%s-%d", prefix, i), TaskQueue: noopQueue, EnableEagerStart: true}
				_, err := b.st.TC.ExecuteWorkflow(ctx, opts, noopWorkflowName)
				return err
			})
		}
		if err := g.Wait(); err != nil {
			return 0, fmt.Errorf("%s: start: %w", label, err)
		}
		b.noopStarted += n
		if err := b.st.TC.GetWorkflow(ctx, fmt.Sprintf("%s-%d", prefix, n-1), "").Get(ctx, nil); err != nil {
			return 0, fmt.Errorf("%s: %w", label, err)
		}
		return time.Since(t0), nil
	}
	if _, err := start(b.id(label+"-warm"), 20); err != nil {
		return Row{}, err
	}
	if err := b.waitNoopClosed(ctx, label); err != nil {
		return Row{}, err
	}
	n := b.sz.lightEvents
	cpu0 := b.cpuTimes()
	took, err := start(b.id(label), n)
	if err != nil {
		return Row{}, err
	}
	if err := b.waitNoopClosed(ctx, label); err != nil {
		return Row{}, err
	}
	cpu := diffCPU(cpu0, b.cpuTimes())
	secs := took.Seconds()
	note := "started at once"
	if rate > 0 {
		note = fmt.Sprintf("started at %.0f/s", rate)
	}
	return Row{Size: n, Seconds: secs, EventsPerSec: float64(n) / secs, CPUSeconds: roundCPU(cpu), PeakRSSMB: b.peakRSS(),
		Notes: "workflows that do nothing, one per event, started eagerly: the server's floor for one workflow per event; " + note}, nil
}

// waitNoopClosed waits (at most a minute) until visibility counts every
// no-op workflow this run started as completed.
func (b *bench) waitNoopClosed(ctx context.Context, label string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	q := fmt.Sprintf("TaskQueue = '%s' AND ExecutionStatus = 'Completed'", noopQueue)
	for {
		res, err := b.st.TC.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Query: q})
		if err == nil && res.GetCount() >= int64(b.noopStarted) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %d of %d no-op workflows completed after a minute (%v)", label, res.GetCount(), b.noopStarted, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// floorRatios sets, on each light row whose no-op floor ran too, its
// Temporal CPU per event divided by the floor's.
func floorRatios(rows []Row) {
	for i, r := range rows {
		floor, ok := noopFloors[r.Scenario]
		if !ok || r.TemporalMsPerEvent == 0 {
			continue
		}
		for _, f := range rows {
			if f.Scenario == floor && f.TemporalMsPerEvent > 0 {
				rows[i].Ratio, rows[i].RatioOf = r.TemporalMsPerEvent/f.TemporalMsPerEvent, "Temporal ms/event / "+floor+"'s"
			}
		}
	}
}
