package activities

import (
	"cmp"
	"container/heap"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sony/gobreaker/v2"
	"go.temporal.io/sdk/activity"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/activities/limits"
)

// Destinations holds a delivery worker's per-destination limits (shared by
// every worker through Redis) and circuit breakers (in process), see
// package limits. Without it (nil), deliveries are neither limited nor
// broken per destination.
type Destinations struct {
	// Limiter is the shared limiter; nil: no rate limits.
	Limiter *limits.Limiter
	// Overrides are the run-time limits (`starter limits`); nil: the
	// types' DestinationRate only.
	Overrides *limits.Cache
	Breakers  *limits.Breakers
}

// NewDestinations returns the destinations of a worker whose Redis is
// rdb-backed by lim and store (either may be nil), with breakers whose
// changes are counted in the metrics and logged.
func NewDestinations(lim *limits.Limiter, ov *limits.Cache, log func(msg string, args ...any)) *Destinations {
	d := &Destinations{Limiter: lim, Overrides: ov, Breakers: &limits.Breakers{}}
	d.Breakers.OnChange = func(eventType, dest string, from, to gobreaker.State) {
		observeBreaker(eventType, from, to)
		if log != nil {
			log("destination breaker "+to.String(), "event_type", eventType, "destination", dest, "from", from.String())
		}
	}
	return d
}

// MaxDestinationStats bounds DeliverBatchResult.Destinations.
const MaxDestinationStats = 5

// DestinationStat is what one destination did to a batch: in the batch
// result (the busiest MaxDestinationStats), the heartbeat and the event's
// details.
type DestinationStat struct {
	Key string
	// Rate is its limit (calls per second; 0 none).
	Rate float64 `json:",omitempty"`
	// Throttled counts the deliveries that waited for its limit, Waited
	// the longest such wait.
	Throttled int           `json:",omitempty"`
	Waited    time.Duration `json:",omitempty"`
	// Rejected counts the deliveries not made because its breaker was
	// open; BreakerOpen is the breaker's state at the batch's end.
	Rejected    int  `json:",omitempty"`
	BreakerOpen bool `json:",omitempty"`
}

// String is the stat as the UI shows it.
func (s DestinationStat) String() string {
	var parts []string
	if s.Throttled > 0 {
		parts = append(parts, fmt.Sprintf("%s %s (%d waited, up to %v)", s.Key, limits.FormatRate(s.Rate), s.Throttled, s.Waited.Round(100*time.Millisecond)))
	}
	if s.BreakerOpen || s.Rejected > 0 {
		parts = append(parts, fmt.Sprintf("%s breaker open (%d not called)", s.Key, s.Rejected))
	}
	return strings.Join(parts, ", ")
}

// destKeyer returns the function naming a recipient's destination: the
// handler's DestinationKey, cleaned, or the event type's for every
// recipient.
func destKeyer(h fanout.Handler, eventType string) func(fanout.Recipient) string {
	if k, ok := h.(fanout.DestinationKeyer); ok {
		return func(r fanout.Recipient) string { return limits.CleanKey(k.DestinationKey(r)) }
	}
	key := limits.CleanKey(eventType)
	return func(fanout.Recipient) string { return key }
}

// destQueue is the recipients of one throttled destination, waiting their
// turn in order.
type destQueue struct {
	key  string
	rate float64
	rs   []fanout.Recipient
	// since is when each waiting recipient was queued.
	since []time.Time
	next  time.Time
	idx   int
}

type destHeap []*destQueue

func (h destHeap) Len() int           { return len(h) }
func (h destHeap) Less(i, j int) bool { return h[i].next.Before(h[j].next) }
func (h destHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i]; h[i].idx, h[j].idx = i, j }
func (h *destHeap) Push(x any)        { q := x.(*destQueue); q.idx = len(*h); *h = append(*h, q) }
func (h *destHeap) Pop() any {
	old := *h
	q := old[len(old)-1]
	*h = old[:len(old)-1]
	return q
}

// destFeed hands a batch's recipients to its deliveries in order, except
// that a recipient whose destination is over its limit waits in that
// destination's queue (asking the limiter again when it said to) while the
// recipients behind it, of other destinations, go on: a throttled host
// never holds a delivery slot or the feed.
type destFeed struct {
	d         *Destinations
	eventType string
	key       func(fanout.Recipient) string
	def       float64
	ov        limits.Overrides
	todo      []fanout.Recipient
	i         int
	queues    map[string]*destQueue
	due       destHeap
	queued    int
	rates     map[string]float64
	// brs are the breakers of the batch's destinations, resolved once per
	// key (nil: none), so that a delivery takes no registry lock.
	brs  map[string]*limits.Breaker
	beat func()
	// take asks the limiter for one call (Limiter.Take); nil: no limits.
	take func(ctx context.Context, eventType, dest string, perSecond float64) (time.Duration, error)

	mu    sync.Mutex
	stats map[string]*DestinationStat
	bs    limits.BreakerSettings
}

// newDestFeed returns the feed of todo (nil when there is nothing to limit
// or break: the plain loop feeds the batch).
func (a *Activities) newDestFeed(ctx context.Context, h fanout.Handler, in DeliverBatchInput, todo []fanout.Recipient, beat func()) *destFeed {
	d := a.Destinations
	if d == nil {
		return nil
	}
	opts := in.live
	f := &destFeed{d: d, eventType: in.Event.Type, key: destKeyer(h, in.Event.Type), def: opts.DestinationRate,
		todo: todo, queues: map[string]*destQueue{}, rates: map[string]float64{}, brs: map[string]*limits.Breaker{}, beat: beat,
		stats: map[string]*DestinationStat{}, bs: limits.ResolveBreaker(opts)}
	if d.Limiter != nil {
		f.take = d.Limiter.Take
	}
	// A retry goes on from the stats of the attempts before it (their last
	// heartbeat, flushed when they failed), so the batch's result counts
	// the throttling of every attempt.
	for _, s := range lastProgress(ctx).Destinations {
		if s.Key != "" {
			f.stats[s.Key] = &s
		}
	}
	if d.Overrides != nil {
		var err error
		if f.ov, err = d.Overrides.Get(ctx, in.Event.Type); err != nil && a.Logger != nil {
			a.Logger.WarnContext(ctx, "destination limits unreadable; using the last read", "event_type", in.Event.Type, "err", err)
		}
	}
	return f
}

// rate is key's limit (0: none), resolved once per attempt.
func (f *destFeed) rate(key string) float64 {
	r, ok := f.rates[key]
	if !ok {
		r = f.ov.Rate(key, f.def)
		f.rates[key] = r
	}
	return r
}

// next returns the next recipient to deliver, waiting when only throttled
// ones are left. ok is false when none is left, or when the next one is
// due after ctx's deadline less paceYieldMargin (errPaceDeadline: the rest
// is left to the next attempt, see remaining).
func (f *destFeed) next(ctx context.Context) (j delivery, ok bool, err error) {
	for {
		// time.Now only with destinations waiting (the common case has
		// none: no limit configured).
		var now time.Time
		if len(f.due) > 0 || len(f.queues) > 0 {
			now = time.Now()
		}
		// A throttled destination whose time has come goes first.
		for len(f.due) > 0 && !f.due[0].next.After(now) {
			q := f.due[0]
			wait, err := f.take(ctx, f.eventType, q.key, q.rate)
			if err != nil {
				return j, false, err
			}
			if wait > 0 {
				q.next = now.Add(wait)
				heap.Fix(&f.due, 0)
				continue
			}
			j = f.delivery(q.rs[0], q.key)
			f.waited(q.key, now.Sub(q.since[0]))
			q.rs, q.since = q.rs[1:], q.since[1:]
			f.queued--
			if len(q.rs) == 0 {
				heap.Pop(&f.due)
				delete(f.queues, q.key)
			}
			return j, true, nil
		}
		if f.i < len(f.todo) {
			r := f.todo[f.i]
			f.i++
			key := f.key(r)
			if len(f.queues) > 0 {
				if q, ok := f.queues[key]; ok {
					f.enqueue(q, r, now)
					continue
				}
			}
			if f.take == nil {
				return f.delivery(r, key), true, nil
			}
			rate := f.rate(key)
			if rate <= 0 {
				return f.delivery(r, key), true, nil
			}
			wait, err := f.take(ctx, f.eventType, key, rate)
			if err != nil {
				return j, false, err
			}
			if wait == 0 {
				return f.delivery(r, key), true, nil
			}
			now = time.Now()
			q := &destQueue{key: key, rate: rate, next: now.Add(wait)}
			f.queues[key] = q
			heap.Push(&f.due, q)
			f.enqueue(q, r, now)
			continue
		}
		if len(f.due) == 0 {
			return j, false, nil
		}
		// Only throttled destinations are left: wait for the first.
		until := f.due[0].next
		if dl, ok := ctx.Deadline(); ok && until.After(dl.Add(-paceYieldMargin)) {
			return j, false, &paceDeadline{due: until}
		}
		if err := sleepBeating(ctx, time.Until(until), f.beat); err != nil {
			return j, false, err
		}
	}
}

func (f *destFeed) enqueue(q *destQueue, r fanout.Recipient, now time.Time) {
	q.rs = append(q.rs, r)
	q.since = append(q.since, now)
	f.queued++
	f.mu.Lock()
	s := f.stat(q.key)
	s.Rate = q.rate
	s.Throttled++
	f.mu.Unlock()
	observeThrottled(f.eventType)
}

func (f *destFeed) waited(key string, d time.Duration) {
	f.mu.Lock()
	s := f.stat(key)
	s.Waited = max(s.Waited, d)
	f.mu.Unlock()
}

// stat is key's stat (f.mu held).
func (f *destFeed) stat(key string) *DestinationStat {
	s, ok := f.stats[key]
	if !ok {
		s = &DestinationStat{Key: key}
		f.stats[key] = s
	}
	return s
}

// remaining counts the recipients not yet handed out.
func (f *destFeed) remaining() int { return len(f.todo) - f.i + f.queued }

// deliver calls the handler for r through its destination's breaker: a
// delivery to a destination whose breaker is open is not made and fails
// transiently (limits.ErrOpen, Retry-After the cooldown), so it counts as
// a failed try and is retried with the batch, then dead-lettered after
// MaxAttempts if the destination stays down.
//
// Closed with no failure counted (the common case), the call takes no
// lock (limits.Breaker.Begin).
func (f *destFeed) deliver(ctx context.Context, h fanout.Handler, in *DeliverBatchInput, j delivery) error {
	if g, ok := j.br.Begin(); ok {
		err := observeDeliver(ctx, h, in, j.r)
		j.br.End(g, err)
		return err
	}
	rejected, err := j.br.Do(func() error { return observeDeliver(ctx, h, in, j.r) })
	if rejected {
		f.mu.Lock()
		f.stat(j.key).Rejected++
		f.mu.Unlock()
		observeRejected(f.eventType)
		return fmt.Errorf("destination %s: %w", j.key, err)
	}
	return err
}

// delivery is one recipient handed to a delivery: its destination's key
// and breaker (nil: none) resolved by the feed, once.
type delivery struct {
	r   fanout.Recipient
	key string
	br  *limits.Breaker
}

// delivery returns r's delivery to key, with key's breaker.
func (f *destFeed) delivery(r fanout.Recipient, key string) delivery {
	if f.d.Breakers == nil {
		return delivery{r: r, key: key}
	}
	br, ok := f.brs[key]
	if !ok {
		br = f.d.Breakers.Get(f.eventType, key, f.bs)
		f.brs[key] = br
	}
	return delivery{r: r, key: key, br: br}
}

// results returns the busiest destinations' stats, at most
// MaxDestinationStats, sorted (breakers open first, then by throttled and
// rejected deliveries, then by key), with each breaker's state now.
func (f *destFeed) results() []DestinationStat {
	if f == nil {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]DestinationStat, 0, len(f.stats))
	for _, s := range f.stats {
		if f.d.Breakers != nil {
			s.BreakerOpen = f.d.Breakers.Open(f.eventType, s.Key)
		}
		out = append(out, *s)
	}
	SortDestinationStats(out)
	return out[:min(len(out), MaxDestinationStats)]
}

// SortDestinationStats sorts stats busiest first: open breakers, then by
// deliveries throttled and not called, then by key.
func SortDestinationStats(s []DestinationStat) {
	slices.SortFunc(s, func(a, b DestinationStat) int {
		if a.BreakerOpen != b.BreakerOpen {
			if a.BreakerOpen {
				return -1
			}
			return 1
		}
		if c := cmp.Compare(b.Throttled+b.Rejected, a.Throttled+a.Rejected); c != 0 {
			return c
		}
		return strings.Compare(a.Key, b.Key)
	})
}

// finalBeat records the attempt's last heartbeat with its stats: when the
// attempt fails (a retry), the SDK flushes it, and the next attempt starts
// from it.
func (f *destFeed) finalBeat(ctx context.Context, p deliverProgress) {
	if f == nil || len(f.stats) == 0 {
		return
	}
	heartbeatDetail(ctx, f, p)
}

// sleepBeating sleeps d in steps of at most a second, calling beat between
// them.
func sleepBeating(ctx context.Context, d time.Duration, beat func()) error {
	for d > 0 {
		step := min(d, time.Second)
		t := time.NewTimer(step)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		d -= step
		if d > 0 && beat != nil {
			beat()
		}
	}
	return nil
}

// heartbeatDetail is the destinations part of DeliverBatch's heartbeat.
func heartbeatDetail(ctx context.Context, f *destFeed, p deliverProgress) {
	if f != nil {
		p.Destinations = f.results()
	}
	activity.RecordHeartbeat(ctx, p)
}

// feeder is deliverAll's source of recipients: the destFeed, or todo in
// order without one.
type feeder struct {
	f    *destFeed
	todo []fanout.Recipient
	i    int
}

func (s *feeder) next(ctx context.Context) (delivery, bool, error) {
	if s.f != nil {
		return s.f.next(ctx)
	}
	if s.i >= len(s.todo) {
		return delivery{}, false, nil
	}
	s.i++
	return delivery{r: s.todo[s.i-1]}, true, nil
}

// more reports whether a recipient is left to hand out.
func (s *feeder) more() bool { return s.remaining() > 0 }

func (s *feeder) remaining() int {
	if s.f != nil {
		return s.f.remaining()
	}
	return len(s.todo) - s.i
}

// leftWhy says why a batch left recipients to its next attempt: its rate
// cap, its destinations' limits, both, or neither (its deliveries were
// slower than its attempt's timeout allows: see yieldAt).
func leftWhy(in DeliverBatchInput, stats []DestinationStat) string {
	throttled := destSummary(stats)
	switch {
	case in.Rate > 0:
		return fmt.Sprintf("paced at %.4g/s, throttled (%s)", in.Rate, throttled)
	case throttled != "none":
		return "throttled (" + throttled + ")"
	}
	return "slower than the attempt's timeout allows"
}

// destSummary is stats in a line ("none" without any).
func destSummary(stats []DestinationStat) string {
	var parts []string
	for _, s := range stats {
		if t := s.String(); t != "" {
			parts = append(parts, t)
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "; ")
}

// DestinationStats are an event's busiest destinations (the Fanout
// workflow's progress): an array, so that the progress stays comparable;
// unused entries have no Key.
type DestinationStats [MaxDestinationStats]DestinationStat

// MergeDestinationStats adds a batch's stats to an event's (deterministic,
// no map): counts add up, the longest wait and the latest rate and breaker
// state are kept, and the busiest MaxDestinationStats stay.
func MergeDestinationStats(acc DestinationStats, batch []DestinationStat) DestinationStats {
	if len(batch) == 0 {
		return acc
	}
	all := make([]DestinationStat, 0, len(acc)+len(batch))
	for _, s := range acc {
		if s.Key != "" {
			all = append(all, s)
		}
	}
	for _, b := range batch {
		i := slices.IndexFunc(all, func(s DestinationStat) bool { return s.Key == b.Key })
		if i < 0 {
			all = append(all, b)
			continue
		}
		s := &all[i]
		s.Throttled += b.Throttled
		s.Rejected += b.Rejected
		s.Waited = max(s.Waited, b.Waited)
		if b.Rate > 0 {
			s.Rate = b.Rate
		}
		s.BreakerOpen = b.BreakerOpen
	}
	SortDestinationStats(all)
	var out DestinationStats
	copy(out[:], all)
	return out
}

// DestinationDetails is the part of an event's details line (the Temporal
// UI) on its destinations: " · throttled: host 200/s (n waited) · breaker
// open: host", or "" when none was throttled or broken.
func DestinationDetails(stats DestinationStats) string {
	var throttled, open []string
	for _, s := range stats {
		if s.Throttled > 0 {
			throttled = append(throttled, fmt.Sprintf("%s %s (%d waited)", s.Key, limits.FormatRate(s.Rate), s.Throttled))
		}
		if s.BreakerOpen {
			open = append(open, fmt.Sprintf("%s (%d not called)", s.Key, s.Rejected))
		}
	}
	out := ""
	if len(throttled) > 0 {
		out += " · throttled: " + strings.Join(throttled, ", ")
	}
	if len(open) > 0 {
		out += " · breaker open: " + strings.Join(open, ", ")
	}
	return out
}
