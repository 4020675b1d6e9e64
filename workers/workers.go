// Package workers runs fanout's Temporal workers: one per task queue the
// process is told to serve (the events queue, and the delivery queue of each
// priority), so each pool runs and scales on its own. Main is the stock
// binary's whole main (cmd/worker calls it): a user's own main registers its
// handlers in a fanout.Registry and calls Main with it, or wires everything
// itself and calls Run.
package workers

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/activities"
	"github.com/fanout/fanout/activities/gate"
	"github.com/fanout/fanout/activities/limits"
	"github.com/fanout/fanout/activities/staging"
	"github.com/fanout/fanout/workflows"
	"github.com/fanout/fanout/workflows/vocab"
)

// Options configure Run.
type Options struct {
	Client   client.Client
	Registry *fanout.Registry
	// Redis backs the per-recipient attempt-id gate and the staging of big
	// events' batches.
	Redis redis.UniversalClient
	// DisableDedup turns the gate off (only for measuring its cost;
	// duplicates are then not suppressed).
	DisableDedup bool
	GateTTL      time.Duration
	// Sealer, when set, encrypts big events' batches staged in Redis
	// (internal/codec's Keyring, from FANOUT_CODEC_KEYS); give the
	// DeadLetters writer the same (DeadLetterWriter.WithSealer).
	Sealer activities.Sealer
	// DeadLetters receives recipients given up after MaxAttempts (the
	// deliveries DLQ topic); nil only reports them in batch results.
	DeadLetters activities.DeadLetterPublisher
	// Backoff of delivery retries (activities.DefaultBackoff when zero).
	Backoff activities.Backoff
	// Queues to serve: vocab.QueueEvents and/or priorities ("high",
	// "normal", "low"); vocab.Queues() is all of them.
	Queues []string
	// BatchSlots sizes a worker's delivery budget: BatchSlots × the
	// default DeliverConcurrency (or DeliverConcurrency when set) calls in
	// flight, one pool shared by all the batches the worker runs
	// (activities.Calls), higher priorities first. Each delivery queue
	// (a priority's small-batch and large-batch queues alike, see
	// vocab.LargeDeliveryTaskQueue) runs up to twice BatchSlots batches at
	// once (SlotsPerBudget), so that when a batch is down to its last slow
	// calls others keep the budget busy.
	BatchSlots int
	// LowPrioritySlots is the same for the low-priority queue; 0 means an
	// eighth of BatchSlots (at least 1), so a huge low-priority event uses
	// only part of the machine and of what it shares with other events
	// (Redis, Temporal, the destinations). With large batches one slot
	// keeps a batch's concurrency busy for long: in the bench's isolation
	// scenario one low slot gave light events a p99 of 63 ms beside a
	// 1,000,000-recipient low event, two slots 374 ms, and the low event
	// delivered as much.
	LowPrioritySlots int
	// LowPriorityBrake is how many low-priority recipients per second this
	// worker delivers while events of a higher priority deliver anywhere
	// (activities.Brake): 0 is DefaultLowPriorityBrake, negative no brake.
	// Needs Redis.
	LowPriorityBrake float64
	// DeliverConcurrency, when set, is the number of concurrent deliveries
	// per batch on this worker, whatever the event type says.
	DeliverConcurrency int
	Logger             *slog.Logger
	// Interceptors are added to every worker's, after the client's (the
	// client carries the tracing interceptor, see internal/telemetry) and
	// the delivery metrics interceptor (activities.MetricsInterceptor).
	Interceptors []interceptor.WorkerInterceptor
}

// Run starts the workers and blocks until ctx is canceled, then stops them
// (in-flight activities get the worker's stop timeout to finish).
func Run(ctx context.Context, o Options) error {
	if o.Client == nil || o.Registry == nil {
		return fmt.Errorf("workers: Client and Registry are required")
	}
	if len(o.Registry.Types()) == 0 {
		return fmt.Errorf("workers: the registry has no event types")
	}
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	acts := &activities.Activities{Registry: o.Registry, Logger: log, DeadLetters: o.DeadLetters, Backoff: o.Backoff, DeliverConcurrency: o.DeliverConcurrency,
		Calls: activities.NewCalls(o.callBudget())}
	if o.Redis != nil {
		acts.Staging = staging.New(o.Redis, o.GateTTL).WithSealer(o.Sealer)
		if !o.DisableDedup {
			acts.Gate = gate.New(o.Redis, o.GateTTL)
		}
		// Per-destination limits (shared through Redis, overridden at run
		// time by `starter limits`) and breakers (in process).
		acts.Destinations = activities.NewDestinations(limits.NewLimiter(o.Redis), &limits.Cache{Store: limits.Store{RDB: o.Redis}},
			func(msg string, args ...any) { log.Warn(msg, args...) })
		brake := o.LowPriorityBrake
		if brake == 0 {
			brake = DefaultLowPriorityBrake
		}
		acts.Brake = activities.NewBrake(o.Redis, brake, log)
		// Events opening or delivering small batches anywhere: the
		// batches behind them yield here too (activities.Yields).
		acts.Yields = activities.NewYields(ctx, o.Redis, log)
		acts.Calls.YieldTo(acts.Yields)
	}
	if acts.Gate == nil {
		log.Warn("dedup gate is OFF: duplicates are not suppressed")
	}
	// DeliverBatch outcomes and durations go to the fanout.* metrics.
	icps := append([]interceptor.WorkerInterceptor{activities.MetricsInterceptor()}, o.Interceptors...)
	var started []worker.Worker
	defer func() {
		for _, w := range started {
			w.Stop()
		}
	}()
	for _, q := range o.Queues {
		tqs, err := vocab.TaskQueues(q)
		if err != nil {
			return err
		}
		// A priority's two queues (small and large batches) each get the
		// queue's batch slots; their calls share the pool (acts.Calls).
		for _, tq := range tqs {
			wo := workerOptions(q, o, icps)
			if vocab.IsLargeDeliveryTaskQueue(tq) {
				// Pages: their workflow tasks are few and wait for no one.
				wo.MaxConcurrentWorkflowTaskPollers = largeQueueWorkflowTaskPollers
			}
			w := worker.New(o.Client, tq, wo)
			if q == vocab.QueueEvents {
				w.RegisterWorkflowWithOptions(workflows.Fanout, workflow.RegisterOptions{Name: vocab.FanoutWorkflow})
			} else {
				w.RegisterWorkflowWithOptions(workflows.DeliveryBatch, workflow.RegisterOptions{Name: vocab.DeliveryBatchWorkflow})
			}
			w.RegisterActivity(acts)
			if err := w.Start(); err != nil {
				return fmt.Errorf("start worker on %s: %w", tq, err)
			}
			started = append(started, w)
			log.Info("worker started", "task_queue", tq)
		}
	}
	<-ctx.Done()
	return nil
}

// DefaultBatchSlots is Options.BatchSlots when 0 (FANOUT_BATCH_SLOTS's
// default).
const DefaultBatchSlots = 8

// batchSlots is BatchSlots, or its default.
func (o Options) batchSlots() int {
	if o.BatchSlots <= 0 {
		return DefaultBatchSlots
	}
	return o.BatchSlots
}

// SlotsPerBudget is how many batches a delivery queue runs at once per
// batch of the budget (BatchSlots): twice as many batches as the calls
// need, so a batch's tail (its last, slowest calls) never leaves the
// budget idle; the calls in flight stay bounded by the shared pool. (With
// one slot per budget batch, each slot waits for its batch's slowest call
// before it takes the next batch.)
const SlotsPerBudget = 2

// callBudget is the calls in flight the worker's batches share.
func (o Options) callBudget() int {
	return o.batchSlots() * cmp.Or(max(o.DeliverConcurrency, 0), fanout.DefaultDeliverConcurrency)
}

// workerOptions are the worker options of queue q (vocab.QueueEvents or a
// priority).
func workerOptions(q string, o Options, icps []interceptor.WorkerInterceptor) worker.Options {
	if q == vocab.QueueEvents {
		return worker.Options{
			MaxConcurrentActivityExecutionSize: 64,
			// The fast path delivers small events in local activities, each
			// with a batch's concurrency: as many at once as a delivery
			// queue's batch slots, so the calls in flight are bounded alike
			// (the SDK's default was 1,000). An event's Open waits for a
			// slot within its local activity's schedule-to-close timeout.
			MaxConcurrentLocalActivityExecutionSize: o.batchSlots(),
			// More pollers than the default two: event processing is
			// many short workflow tasks.
			MaxConcurrentWorkflowTaskPollers: 8,
			MaxConcurrentActivityTaskPollers: 4,
			WorkerStopTimeout:                10 * time.Second,
			Interceptors:                     icps,
		}
	}
	n := o.batchSlots() * SlotsPerBudget
	if q == string(fanout.PriorityLow) {
		n = o.LowPrioritySlots
		if n <= 0 {
			n = DefaultLowPrioritySlots(o.batchSlots())
		}
	}
	return worker.Options{
		MaxConcurrentActivityExecutionSize: n,
		MaxConcurrentActivityTaskPollers:   4,
		// A batch's workflow tasks (its start, its end) are on the path of
		// every small event. With 4 pollers, which the SDK splits between
		// the queue and the worker's sticky queue, a small event's batch
		// waited 1 to 2.5 s for its first workflow task beside two big
		// events (the bench's fairness run); with 16, 70 ms.
		MaxConcurrentWorkflowTaskPollers: 16,
		WorkerStopTimeout:                10 * time.Second,
		Interceptors:                     icps,
	}
}

// largeQueueWorkflowTaskPollers is the workflow-task pollers of a
// large-batch queue (vocab.LargeDeliveryTaskQueue): pages' workflow tasks
// are few and latency matters little for them, while each poller waiting
// on the server costs it work.
const largeQueueWorkflowTaskPollers = 4

// DefaultLowPrioritySlots is the low-priority queue's batch slots when
// Options.LowPrioritySlots is 0: an eighth of slots, at least 1.
func DefaultLowPrioritySlots(slots int) int { return max(1, slots/8) }

// DefaultLowPriorityBrake is Options.LowPriorityBrake when 0: recipients
// per second per worker of the low-priority events while others deliver.
const DefaultLowPriorityBrake = 1000
