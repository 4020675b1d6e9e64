package activities

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"
	"golang.org/x/sync/errgroup"

	"github.com/fanout/fanout"
)

// deliverAll delivers to todo with bounded concurrency. Each success is
// marked delivered in the gate by a flusher that pipelines the marks that
// piled up while the previous flush was in flight (group commit: one round
// trip when idle, few under load). With in.Rate, deliveries start at that
// pace (pacer); left counts the recipients of todo not tried because the
// pace would outlast the attempt, or because the attempt neared its
// deadline (yieldAt): they are not failures, the retry delivers them.
//
// A recipient whose destination is over its limit or behind an open
// breaker does not hold the feed or a slot (destFeed, destinations.go).
func (a *Activities) deliverAll(ctx context.Context, h fanout.Handler, in DeliverBatchInput, todo []fanout.Recipient, skipped int) (_ []outcome, left leftOver, _ []DestinationStat, braked int, _ error) {
	conc := in.Concurrency
	if a.DeliverConcurrency > 0 {
		conc = a.DeliverConcurrency
	}
	conc = max(conc, 1)
	in.obs = newDeliverObs(in.Event.Type)
	// Callers beyond conc only with spare calls from the pool (handOver);
	// the flusher's queue holds a mark for each.
	maxCallers := min(max(a.Calls.capacity(), conc), len(todo))
	d := &deliveries{a: a, ctx: ctx, h: h, in: &in, share: shareOf(ctx, in.Event), out: make([]outcome, 0, len(todo)), done: skipped,
		marks: make(chan string, max(maxCallers, 1)), flushed: make(chan error, 1), work: make(chan delivery)}
	d.feed = a.newDestFeed(ctx, h, in, todo, d.beatLocked)
	stopBeats := d.keepBeating(ctx)
	defer stopBeats()
	// A failed flush stops the batch: what is delivered from then on could
	// not be marked, and the retry would deliver it again.
	dctx, stopDeliveries := context.WithCancelCause(ctx)
	defer stopDeliveries(nil)
	go d.flush(ctx, stopDeliveries)
	// conc long-lived callers rather than a goroutine per recipient: a
	// delivery's call depth (net/http) grows a fresh goroutine's stack
	// every time, which cost ~7% of the delivery worker's CPU.
	g, gctx := errgroup.WithContext(dctx)
	d.callers, d.maxCallers = min(conc, len(todo)), maxCallers
	for range d.callers {
		g.Go(func() error { return d.call(gctx) })
	}
	d.more = func() { g.Go(func() error { return d.call(gctx) }) }
	left, braked, feedErr := d.run(ctx, gctx, todo)
	close(d.work)
	werr := g.Wait()
	close(d.marks)
	stopBeats() // before the final heartbeat, which no keeper's may follow
	for _, err := range []error{<-d.flushed, werr, ctx.Err(), feedErr} {
		if err != nil {
			return nil, leftOver{}, nil, 0, err
		}
	}
	final := deliverProgress{Done: d.done, Total: len(in.Recipients)}
	if !left.due.IsZero() {
		final.PaceDue, final.PaceAttempt = left.due, activity.GetInfo(ctx).Attempt
		heartbeatDetail(ctx, d.feed, final) // the next attempt goes on from it
	} else {
		d.feed.finalBeat(ctx, final)
	}
	return d.out, left, d.feed.results(), braked, nil
}

// deliveries is what deliverAll's feed, callers and flusher share.
type deliveries struct {
	a    *Activities
	ctx  context.Context // the attempt's: heartbeats
	h    fanout.Handler
	in   *DeliverBatchInput
	feed *destFeed
	// share is the batch's turn in the worker's pool of calls: its
	// event's fairness key and weight.
	share share
	// yieldSignal spaces the batch's yield signals (Yields.Signal).
	yieldSignal every

	mu       sync.Mutex // guards out, done and lastBeat
	out      []outcome
	done     int
	lastBeat time.Time

	marks   chan string   // delivered ids, to the flusher
	flushed chan error    // the flusher's end
	work    chan delivery // the feed's, to the callers

	// callers run now, up to maxCallers (the pool's size): beyond the
	// batch's concurrency only with calls no other batch waits for (more
	// starts one).
	callers, maxCallers int
	more                func()
}

// beat heartbeats the progress (mu held).
func (d *deliveries) beat() {
	d.lastBeat = time.Now()
	heartbeatDetail(d.ctx, d.feed, deliverProgress{Done: d.done, Total: len(d.in.Recipients)})
}

// keepBeating heartbeats the progress every third of the activity's
// heartbeat timeout in which nothing else did (beatWhileIdle): a big
// event's batches are served one after another within its key, so a batch
// behind others of 10,000 may wait for its first call longer than its
// heartbeat timeout. Nothing in a local activity, or without a heartbeat
// timeout.
func (d *deliveries) keepBeating(ctx context.Context) (stop func()) {
	if !activity.IsActivity(ctx) {
		return func() {}
	}
	info := activity.GetInfo(ctx)
	if info.IsLocalActivity || info.HeartbeatTimeout <= 0 {
		return func() {}
	}
	last := func() time.Time {
		d.mu.Lock()
		defer d.mu.Unlock()
		return d.lastBeat
	}
	return beatWhileIdle(ctx, info.HeartbeatTimeout/3, last, d.beatLocked)
}

// beatLocked heartbeats, taking mu (for the waits of the feed).
func (d *deliveries) beatLocked() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.beat()
}

// flush marks the delivered ids in the gate in pipelines of what piled up
// since the last flush; a failed flush stops the deliveries (stop).
func (d *deliveries) flush(ctx context.Context, stop context.CancelCauseFunc) {
	var ferr error
	buf := make([]string, 0, 256)
	for id := range d.marks {
		buf = append(buf[:0], id)
	more:
		for len(buf) < cap(buf) {
			select {
			case id, ok := <-d.marks:
				if !ok {
					break more
				}
				buf = append(buf, id)
			default:
				break more
			}
		}
		if ferr == nil {
			// Delivered but not marked if this fails: the retry delivers
			// them again (their keys still hold our attempt id).
			if ferr = d.in.gate.markDelivered(ctx, buf...); ferr != nil {
				stop(ferr)
			}
		}
	}
	d.flushed <- ferr
}

// call is one caller: it delivers what the feed hands it, each with the
// call it took from the worker's pool, until the feed closes.
func (d *deliveries) call(ctx context.Context) error {
	a := d.a
	for j := range d.work {
		r := j.r
		derr := errNotCalled
		call, err := a.markSending(ctx, d.in, r.ID) // at most once: mark, then call
		if err != nil {
			a.Calls.release(d.in.Priority, d.share)
			return err
		}
		if call {
			derr = d.feed.deliver(ctx, d.h, d.in, j) // h.Deliver, timed (metrics.go), through the breaker
		}
		a.Calls.release(d.in.Priority, d.share)
		o := outcome{r: r, err: derr}
		if derr != nil {
			o.retryAfter, _ = fanout.RetryAfterOf(derr)
		} else {
			d.marks <- r.ID
		}
		d.mu.Lock()
		d.out = append(d.out, o)
		d.done++
		if time.Since(d.lastBeat) > time.Second {
			d.beat()
		}
		d.mu.Unlock()
	}
	return nil
}

// run is the feed: it hands todo's recipients to the callers, each once
// its rate cap, the low-priority brake, a call from the pool and its
// destination allow, until todo is done, the attempt must yield (left), or
// the callers stop (gctx). Its error is the limiter's (Redis): the batch
// is retried.
func (d *deliveries) run(ctx, gctx context.Context, todo []fanout.Recipient) (left leftOver, braked int, _ error) {
	a, in := d.a, d.in
	pace := d.pacer(ctx)
	low := in.Priority == fanout.PriorityLow
	src := &feeder{f: d.feed, todo: todo}
	yield, hasDeadline := yieldAt(ctx, time.Now(), in.callTimeout)
	fctx, stopFeed := feedContext(gctx, yield, hasDeadline)
	defer stopFeed()
	// yielded: the feed stopped at the yield (its waits end there), not
	// for an error or a cancel.
	yielded := func(err error) bool {
		return errors.Is(err, errPaceDeadline) || (fctx.Err() != nil && gctx.Err() == nil)
	}
	leave := func(err error) leftOver {
		due, _ := paceDue(err) // zero: the yield itself, go on at once
		return leftOver{n: src.remaining(), due: due}
	}
	for {
		if hasDeadline && src.more() && time.Now().After(yield) {
			return leftOver{n: src.remaining()}, braked, nil
		}
		if src.more() {
			// The event's rate cap, then (low priority) the brake, which
			// is on while other priorities deliver (brake.go).
			var err error
			if pace != nil {
				err = pace.wait(fctx)
			}
			if err == nil && low {
				var held bool
				if held, err = a.Brake.wait(fctx, in.Event.Type, d.beatLocked); held {
					braked++
				}
			}
			if err != nil {
				if yielded(err) {
					left = leave(err)
				}
				return left, braked, nil
			}
		}
		if !low {
			a.Brake.Signal()
		}
		if !d.share.large && a.Yields != nil && d.yieldSignal.due(YieldHold/4) {
			a.Yields.Signal(in.Priority, d.share.key)
		}
		// A call from the worker's pool (calls.go), before the feed picks
		// a recipient: a wait for a destination's limit holds at most one
		// call per batch.
		if err := a.Calls.acquire(fctx, in.Priority, d.share, src.remaining()); err != nil {
			if yielded(err) {
				left = leftOver{n: src.remaining()}
			}
			return left, braked, nil
		}
		if hasDeadline && time.Now().After(yield) { // waited for the call past the yield
			a.Calls.release(d.in.Priority, d.share)
			return leftOver{n: src.remaining()}, braked, nil
		}
		j, ok, err := src.next(fctx)
		if !ok {
			a.Calls.release(d.in.Priority, d.share)
			switch {
			case yielded(err):
				return leave(err), braked, nil
			case err != nil && gctx.Err() == nil:
				return leftOver{}, braked, err // the limiter's Redis: retry the batch
			}
			return leftOver{}, braked, nil
		}
		if !d.handOver(gctx, j) {
			return leftOver{}, braked, nil
		}
	}
}

// handOver gives j, with the call the feed took for it, to a free caller.
// When every caller is busy it starts one more caller (up to maxCallers)
// if no other batch waits for a call or its event holds less than its
// share of the pool (Calls.mayGrow): a batch uses what the worker's budget
// has spare beyond its concurrency (the tail of an event, a lone big
// batch), and a small or high event beside big ones takes its share of the
// calls rather than its concurrency. false: the callers stopped.
func (d *deliveries) handOver(gctx context.Context, j delivery) bool {
	select {
	case d.work <- j:
		return true
	default:
	}
	if d.callers < d.maxCallers && d.a.Calls.mayGrow(d.in.Priority, d.share) {
		d.callers++
		d.more()
	}
	select {
	case d.work <- j:
		return true
	case <-gctx.Done():
		d.a.Calls.release(d.in.Priority, d.share)
		return false
	}
}

// pacer is the batch's rate cap (nil: none); an attempt that follows one
// which yielded to the cap goes on with its schedule.
func (d *deliveries) pacer(ctx context.Context) *pacer {
	in, attempt := d.in, activity.GetInfo(ctx).Attempt
	if prev := lastProgress(ctx); !prev.PaceDue.IsZero() && prev.PaceAttempt+1 == attempt {
		// The attempt before yielded to the cap and this one waited until
		// its next delivery was due.
		return newPacer(in.Rate, resumeFrom(prev.PaceDue, in.Rate), time.Now(), 1, d.beatLocked)
	}
	return newPacer(in.Rate, in.PaceFrom, time.Now(), attempt, d.beatLocked)
}
