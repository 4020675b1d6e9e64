package activities

import (
	"container/heap"
	"context"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/workflows/vocab"
)

// Calls is a worker's budget of delivery calls in flight, shared by every
// batch the worker runs (all priorities, and the fast path's local
// activities). A batch takes a call from the pool before each delivery; it
// runs up to its type's DeliverConcurrency calls at once, and more only
// with calls no other batch waits for (deliveries.handOver), so the budget
// stays busy at an event's tail or with one big batch, and when one batch
// is down to its last slow calls the others use the sockets it no longer
// needs; a worker runs more batches than the pool needs to stay full
// (workers.Options.BatchSlots).
//
// A free call goes to the highest priority waiting, and within a priority
// to a small batch before a large one (a big event's page, run from its
// priority's large-batch queue, vocab.LargeDeliveryTaskQueue): a small
// event beside big ones of its priority takes the calls as they come free,
// as a high event does beside normal ones. Within a priority and size,
// events take turns by their fairness key (the key and weight Temporal
// dispatches their batches by, vocab.TaskPriority): each key waiting gets calls
// in proportion to its weight, so a small event beside big ones of its
// priority gets its share of the sockets at once, not after them. Within a
// key, the batch with the fewest recipients left goes first (first come
// first served among equals), so an event's batches finish one after
// another, each freeing its slot for the next (shared evenly, batches
// started together would all end together, late).
//
// A batch runs more callers than its concurrency when the pool has calls
// no one waits for, or while its event holds less than its share of the
// pool (mayGrow): a small event beside big ones, or a high one beside
// normal ones, is not held to its concurrency while the others hold the
// rest of the budget.
//
// Going first for a free call is not enough on a busy worker: a batch's
// feed waits for one call at a time, and each call it does not wait for
// at that instant goes to the others, whose callers then keep the CPU
// busy. So while another event holds or waits for calls at a rank before
// theirs (a higher priority, or a small batch of their priority), here or
// on another worker (YieldTo), the batches behind it yield: together they
// hold at most an eighth of the pool (yieldShare), and a big event's pages
// among them one call for the first yieldBurst of a yield. An event's own
// first batches do not hold back its pages.
type Calls struct {
	size  int
	mu    sync.Mutex
	free  int
	seq   uint64
	ranks [2 * 3]turns // by rankOf
	// held counts the calls each event holds, by rank and fairness key.
	held [2 * 3]map[string]*holding
	// remote: the events of other workers the batches yield to (nil: none).
	remote *Yields
	// burst is yieldBurst (tests shorten it); yieldFrom is when the
	// batches last started to yield, yieldLast when they last did.
	burst                time.Duration
	yieldFrom, yieldLast time.Time
}

// YieldTo makes the pool's batches yield to the events y reports as well
// (see Yields), and hands out the calls they may take again when those
// stop.
func (c *Calls) YieldTo(y *Yields) {
	if c == nil || y == nil {
		return
	}
	c.mu.Lock()
	c.remote = y
	c.mu.Unlock()
	f := func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.dispatch()
	}
	y.changed.Store(&f)
}

// holding is the calls a holder has, and its weight.
type holding struct {
	n      int
	weight float64
}

// NewCalls is a pool of n calls in flight (at least 1).
func NewCalls(n int) *Calls { return &Calls{size: max(n, 1), free: max(n, 1), burst: yieldBurst} }

// share is whose turn a waiter takes: its event's fairness key and weight
// (0: 1), and whether its batch is a large one.
type share struct {
	key    string
	weight float64
	large  bool
}

// w is the share's weight (not positive: 1).
func (s share) w() float64 {
	if s.weight > 0 {
		return s.weight
	}
	return 1
}

// shareOf is the share of the batch running in ctx: the fairness of its
// task (set from the event and its type's FairnessWeight), else its
// event's key; large when it runs from a large-batch queue.
func shareOf(ctx context.Context, ev fanout.Event) share {
	s := share{key: vocab.FairnessKey(ev), weight: 1}
	if activity.IsActivity(ctx) {
		info := activity.GetInfo(ctx)
		s.large = vocab.IsLargeDeliveryTaskQueue(info.TaskQueue)
		if p := info.Priority; p.FairnessKey != "" {
			s.key = p.FairnessKey
			if p.FairnessWeight > 0 {
				s.weight = float64(p.FairnessWeight)
			}
		}
	}
	return s
}

// capacity is the pool's size (0: no pool).
func (c *Calls) capacity() int {
	if c == nil {
		return 0
	}
	return c.size
}

// yieldShare is the part of the pool the batches that yield (see Calls)
// hold at most together: enough to keep them going, little enough that
// the event they yield to has the worker.
const yieldShare = 8

// yieldBurst is how long a yield leaves the pages that yield (a big
// event's large batches) one call between them, rather than a part of the
// eighth. Even an eighth of the calls, to destinations that answer at
// once, keeps every core busy, and a small event's every step (its
// workflow tasks, its page, its deliveries) then waits for them: a small
// event's burst gets the workers to itself. A yield lasts until no event
// has signalled for YieldHold, so a steady stream of small events leaves
// the big ones an eighth after yieldBurst, not one call for ever. Small
// batches that yield (to a higher priority) are short: they keep the
// eighth.
const yieldBurst = 5 * time.Second

// pagesPart is what the pages that yield may hold together now, and notes
// that they yield (mu held).
func (c *Calls) pagesPart() int {
	now := time.Now()
	if now.Sub(c.yieldLast) > YieldHold {
		c.yieldFrom = now
	}
	c.yieldLast = now
	if now.Sub(c.yieldFrom) < c.burst {
		return 1
	}
	return max(c.size/yieldShare, 1)
}

// largeRank: rank is a priority's large batches' (rankOf).
func largeRank(rank int) bool { return rank%2 == 1 }

// yields reports whether rank's key k yields: another key holds or waits
// for calls at a rank before rank, here or on another worker (remote) (mu
// held).
func (c *Calls) yields(rank int, k string) bool {
	var before keysSeen
	remote := c.remote.set()
	for r := 0; r < rank && before.n < 2; r++ {
		before.addRank(c.held[r], c.ranks[r].byKey, remote.at(r))
	}
	return before.other(k)
}

// mayTake reports whether rank's key k may take a free call now: it does
// not yield, or those that yield hold less than their part of the pool and
// (for a page) the pages that yield less than theirs (pagesPart) (mu
// held). One pass over the ranks, first to last, counts the calls of the
// holders that yield.
func (c *Calls) mayTake(rank int, k string) bool {
	var before keysSeen
	remote := c.remote.set()
	yielding, pages := 0, 0
	for r := range c.held {
		if before.n > 0 {
			for key, x := range c.held[r] {
				if before.other(key) {
					yielding += x.n
					if largeRank(r) {
						pages += x.n
					}
				}
			}
		}
		if r == rank && !before.other(k) {
			return true
		}
		before.addRank(c.held[r], c.ranks[r].byKey, remote.at(r))
	}
	if yielding >= max(c.size/yieldShare, 1) {
		return false
	}
	return !largeRank(rank) || pages < c.pagesPart()
}

// keysSeen is the distinct keys that hold, wait or signal at the ranks
// passed so far, as far as yielding needs them: none, one (which) or more.
type keysSeen struct {
	n   int
	one string
}

func (s *keysSeen) add(k string) {
	switch {
	case s.n == 0:
		s.n, s.one = 1, k
	case s.n == 1 && k != s.one:
		s.n = 2
	}
}

// other: a key other than k was seen.
func (s *keysSeen) other(k string) bool { return s.n > 1 || (s.n == 1 && s.one != k) }

// addRank adds the keys that hold calls at a rank, wait for them, and
// those other workers signal at it.
func (s *keysSeen) addRank(held map[string]*holding, waits map[string]*keyTurn, remote map[string]bool) {
	for k := range held {
		if s.add(k); s.n > 1 {
			return
		}
	}
	for k := range waits {
		if s.add(k); s.n > 1 {
			return
		}
	}
	for k := range remote {
		if s.add(k); s.n > 1 {
			return
		}
	}
}

// mayGrow reports whether a batch of priority p and share sh, holding a
// call it has no free caller for, may start one more caller: when no
// batch waits for a call (the call takes nothing from the others), or
// when its event holds less than its share of the pool. The share is the
// pool's size in proportion to the event's weight among the events that
// hold or wait for calls at its rank or above (a high event beside
// normal ones, or a small event beside big ones' large batches: the whole
// pool).
func (c *Calls) mayGrow(p fanout.Priority, sh share) bool {
	if c == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.noneWaitingUpTo(len(c.ranks) - 1) {
		return true
	}
	rank := rankOf(p, sh)
	if c.yields(rank, sh.key) {
		return false
	}
	mine := c.held[rank][sh.key]
	if mine == nil {
		return true // holds nothing: under any share
	}
	total := 0.0
	for r := 0; r <= rank; r++ {
		for _, x := range c.held[r] {
			total += x.weight
		}
		for key, k := range c.ranks[r].byKey {
			if c.held[r][key] == nil {
				total += 1 / k.stride
			}
		}
	}
	return float64(mine.n) < float64(c.size)*mine.weight/total
}

// take counts a call granted to rank's sh (mu held).
func (c *Calls) take(rank int, sh share) {
	x := c.held[rank][sh.key]
	if x == nil {
		if c.held[rank] == nil {
			c.held[rank] = make(map[string]*holding)
		}
		x = &holding{weight: sh.w()}
		c.held[rank][sh.key] = x
	}
	x.n++
}

// give uncounts a call rank's sh returns (mu held).
func (c *Calls) give(rank int, sh share) {
	if x := c.held[rank][sh.key]; x != nil {
		if x.n--; x.n <= 0 {
			delete(c.held[rank], sh.key)
		}
	}
}

// rankOf orders the waiters: high first, and within a priority small
// batches before large ones.
func rankOf(p fanout.Priority, sh share) int {
	r := 2
	switch p {
	case fanout.PriorityHigh:
		r = 0
	case fanout.PriorityLow:
		r = 4
	}
	if sh.large {
		r++
	}
	return r
}

// acquire takes a call for a delivery of priority p, for share sh, from a
// batch with left recipients to go, waiting until one is free and it is
// the waiter's turn; it fails only with ctx's error, holding nothing. A nil
// pool never waits.
func (c *Calls) acquire(ctx context.Context, p fanout.Priority, sh share, left int) error {
	if c == nil {
		return nil
	}
	rank := rankOf(p, sh)
	c.mu.Lock()
	if c.free > 0 && c.noneWaitingUpTo(rank) && c.mayTake(rank, sh.key) {
		c.free--
		c.take(rank, sh)
		c.mu.Unlock()
		return nil
	}
	c.seq++
	w := &waiter{ready: make(chan struct{}), left: left, seq: c.seq, rank: rank, share: sh}
	c.ranks[rank].push(w, sh)
	c.dispatch() // free calls that those waiting before it may not take
	c.mu.Unlock()
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
		c.mu.Lock()
		select {
		case <-w.ready: // granted as we gave up: hand it on
			c.mu.Unlock()
			c.release(p, sh)
		default:
			c.ranks[rank].remove(w)
			c.dispatch() // others may have yielded to it
			c.mu.Unlock()
		}
		return ctx.Err()
	}
}

// noneWaitingUpTo: no waiter of rank or a higher priority (mu held).
func (c *Calls) noneWaitingUpTo(rank int) bool {
	for r := 0; r <= rank; r++ {
		if c.ranks[r].waiting() {
			return false
		}
	}
	return true
}

// release returns a call taken for priority p and share sh to the pool,
// and hands the free calls to the waiters whose turn it is in the highest
// priority waiting, as far as they may take them (mayTake).
func (c *Calls) release(p fanout.Priority, sh share) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.give(rankOf(p, sh), sh)
	c.free++
	c.dispatch()
}

// dispatch hands the free calls to the waiters that may take them (mu
// held).
func (c *Calls) dispatch() {
	for c.free > 0 {
		w := c.next()
		if w == nil {
			return
		}
		c.free--
		c.take(w.rank, w.share)
		close(w.ready)
	}
}

// next takes the waiter whose turn it is at the first rank waiting that may
// take a call (nil: none may) (mu held).
func (c *Calls) next() *waiter {
	for r := range c.ranks {
		t := &c.ranks[r]
		if !t.waiting() {
			continue
		}
		if c.mayTake(r, t.keys[0].key) {
			return t.pop()
		}
		// Those that yield are at their part of the pool: the turn goes
		// to the first key that does not yield (an event's pages beside
		// its own first batches).
		var best *keyTurn
		for _, k := range t.keys {
			if !c.yields(r, k.key) && (best == nil || t.keys.before(k, best)) {
				best = k
			}
		}
		if best != nil {
			return t.popFrom(best)
		}
	}
	return nil
}

// turns are one priority's waiters, grouped by fairness key. Keys take
// turns in proportion to their weights (stride scheduling): the key with
// the lowest pass goes next and its pass grows by 1/weight; a key that
// starts waiting joins at the pass of the last key served, so it neither
// waits for the others' past turns nor claims turns it did not wait for.
type turns struct {
	keys  keyHeap // keys with waiters, by pass
	byKey map[string]*keyTurn
	now   float64 // the pass of the key served last
}

// keyTurn is a fairness key's place in its priority's turns.
type keyTurn struct {
	key     string
	pass    float64
	stride  float64 // 1/weight
	first   uint64  // arrival of its oldest waiter when it joined: ties
	waiters waiterHeap
	index   int // in keys
}

func (t *turns) waiting() bool { return t.keys.Len() > 0 }

// len is how many wait.
func (t *turns) len() int {
	n := 0
	for _, k := range t.keys {
		n += k.waiters.Len()
	}
	return n
}

// push queues w under sh's key.
func (t *turns) push(w *waiter, sh share) {
	k := t.byKey[sh.key]
	if k == nil {
		if t.byKey == nil {
			t.byKey = make(map[string]*keyTurn)
		}
		k = &keyTurn{key: sh.key, pass: t.now, stride: 1 / sh.w(), first: w.seq}
		t.byKey[sh.key] = k
		heap.Push(&t.keys, k)
	}
	w.turn = k
	heap.Push(&k.waiters, w)
}

// pop takes the next waiter: the best of the key whose turn it is (nil:
// none waits).
func (t *turns) pop() *waiter {
	if t.keys.Len() == 0 {
		return nil
	}
	return t.popFrom(t.keys[0])
}

// popFrom takes k's best waiter, k's turn taken.
func (t *turns) popFrom(k *keyTurn) *waiter {
	w := heap.Pop(&k.waiters).(*waiter)
	t.now = k.pass
	k.pass += k.stride
	t.settle(k)
	return w
}

// remove takes w out of its key's waiters (a wait given up).
func (t *turns) remove(w *waiter) {
	k := w.turn
	heap.Remove(&k.waiters, w.index)
	t.settle(k)
}

// settle drops k from the turns once nothing of it waits, else reorders it.
func (t *turns) settle(k *keyTurn) {
	if k.waiters.Len() == 0 {
		heap.Remove(&t.keys, k.index)
		delete(t.byKey, k.key)
		return
	}
	heap.Fix(&t.keys, k.index)
}

// keyHeap orders keys by pass, then by arrival.
type keyHeap []*keyTurn

func (h keyHeap) Len() int           { return len(h) }
func (h keyHeap) Less(i, j int) bool { return h.before(h[i], h[j]) }

// before: a's turn comes before b's.
func (keyHeap) before(a, b *keyTurn) bool {
	if a.pass != b.pass {
		return a.pass < b.pass
	}
	return a.first < b.first
}
func (h keyHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *keyHeap) Push(x any) {
	k := x.(*keyTurn)
	k.index = len(*h)
	*h = append(*h, k)
}
func (h *keyHeap) Pop() any {
	old := *h
	k := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return k
}

// waiter is a batch waiting for a call.
type waiter struct {
	ready chan struct{}
	left  int    // the batch's recipients left
	seq   uint64 // arrival
	rank  int
	share share
	turn  *keyTurn
	index int // in its key's heap
}

// waiterHeap orders waiters by recipients left, then arrival.
type waiterHeap []*waiter

func (h waiterHeap) Len() int { return len(h) }
func (h waiterHeap) Less(i, j int) bool {
	if h[i].left != h[j].left {
		return h[i].left < h[j].left
	}
	return h[i].seq < h[j].seq
}
func (h waiterHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *waiterHeap) Push(x any) {
	w := x.(*waiter)
	w.index = len(*h)
	*h = append(*h, w)
}
func (h *waiterHeap) Pop() any {
	old := *h
	w := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return w
}
