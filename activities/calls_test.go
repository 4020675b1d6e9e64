package activities

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fanout/fanout"
)

// A free call goes to the highest priority waiting, within one to a small
// batch before a large one (a big event's page), first come first served
// among equals; a waiter that gives up takes nothing with it.
func TestCallsServePrioritiesFirst(t *testing.T) {
	c := NewCalls(1)
	ctx := context.Background()
	if err := c.acquire(ctx, fanout.PriorityLow, share{}, 0); err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 8)
	queued := 0
	wait := func(name string, p fanout.Priority) {
		sh := share{large: strings.Contains(name, "large")}
		go func() {
			if err := c.acquire(ctx, p, sh, 0); err != nil {
				got <- "error " + err.Error()
				return
			}
			got <- name
		}()
		// Queue in this order.
		deadline := time.Now().Add(5 * time.Second)
		for {
			c.mu.Lock()
			n := c.queued()
			c.mu.Unlock()
			if n == queued+1 {
				queued++
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s never queued", name)
			}
			time.Sleep(time.Millisecond)
		}
	}
	wait("low-large-1", fanout.PriorityLow)
	wait("low-1", fanout.PriorityLow)
	wait("normal-large-1", fanout.PriorityNormal)
	wait("normal-1", fanout.PriorityNormal)
	wait("low-2", fanout.PriorityLow)
	wait("high-large-1", fanout.PriorityHigh)
	wait("high-1", fanout.PriorityHigh)
	wait("normal-2", fanout.PriorityNormal)

	// A high waiter that gives up leaves the others' order alone.
	cctx, cancel := context.WithCancel(ctx)
	gaveUp := make(chan error, 1)
	go func() { gaveUp <- c.acquire(cctx, fanout.PriorityHigh, share{}, 0) }()
	for {
		c.mu.Lock()
		n := c.ranks[rankOf(fanout.PriorityHigh, share{})].len()
		c.mu.Unlock()
		if n == 2 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-gaveUp; !errors.Is(err, context.Canceled) {
		t.Fatalf("a canceled wait returned %v", err)
	}

	want := []string{"high-1", "high-large-1", "normal-1", "normal-2", "normal-large-1", "low-1", "low-2", "low-large-1"}
	prio := map[string]fanout.Priority{"high": fanout.PriorityHigh, "normal": fanout.PriorityNormal, "low": fanout.PriorityLow}
	holder, holderShare := fanout.PriorityLow, share{}
	for _, w := range want {
		c.release(holder, holderShare)
		holder, holderShare = prio[strings.SplitN(w, "-", 2)[0]], share{large: strings.Contains(w, "large")}
		select {
		case g := <-got:
			if g != w {
				t.Fatalf("the call went to %s, want %s (order %v)", g, w, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no waiter got the call, want %s", w)
		}
	}
	c.release(holder, holderShare)
	if c.free != 1 || c.holders() != 0 {
		t.Fatalf("%d calls free after all returned (want 1), held by %v", c.free, c.held)
	}
}

// Within a priority, a free call goes to the batch with the fewest
// recipients left: batches end one after another, and a small batch is not
// held back by big ones.
func TestCallsServeTheShortestBatchFirst(t *testing.T) {
	c := NewCalls(1)
	ctx := context.Background()
	if err := c.acquire(ctx, fanout.PriorityNormal, share{}, 0); err != nil {
		t.Fatal(err)
	}
	got := make(chan int, 4)
	for i, left := range []int{9000, 40, 700} {
		go func() {
			if err := c.acquire(ctx, fanout.PriorityNormal, share{}, left); err == nil {
				got <- left
			}
		}()
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
			c.mu.Lock()
			n := c.ranks[normalRank].len()
			c.mu.Unlock()
			if n == i+1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("waiter %d never queued", i)
			}
		}
	}
	for _, want := range []int{40, 700, 9000} {
		c.release(fanout.PriorityNormal, share{})
		if g := <-got; g != want {
			t.Fatalf("the call went to the batch with %d left, want %d", g, want)
		}
	}
}

// Within a priority, events take turns by fairness key in proportion to
// their weights: a small event that starts waiting beside a big one gets
// every other call at once (not after the big one's queued calls, nor a
// burst for the turns it was not waiting), a key of weight 2 gets two
// calls for one, and within a key the shortest batch still goes first.
func TestCallsTakeTurnsByFairnessKey(t *testing.T) {
	c := NewCalls(1)
	ctx := context.Background()
	if err := c.acquire(ctx, fanout.PriorityNormal, share{}, 0); err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 64)
	queued := 0
	wait := func(name string, sh share, left int) {
		go func() {
			if err := c.acquire(ctx, fanout.PriorityNormal, sh, left); err == nil {
				got <- name
			}
		}()
		queued++
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
			c.mu.Lock()
			n := c.ranks[normalRank].len()
			c.mu.Unlock()
			if n == queued {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s never queued", name)
			}
		}
	}
	big, small, heavy := share{key: "big", weight: 1}, share{key: "small", weight: 1}, share{key: "heavy", weight: 2}
	holder := share{}
	next := func() string {
		t.Helper()
		c.release(fanout.PriorityNormal, holder)
		select {
		case g := <-got:
			queued--
			holder = map[string]share{"big": big, "small": small, "heavy": heavy}[strings.SplitN(g, "-", 2)[0]]
			return g
		case <-time.After(5 * time.Second):
			t.Fatal("no waiter got the call")
			return ""
		}
	}
	for i := range 6 {
		wait(fmt.Sprintf("big-%d", i), big, 100+i)
	}
	// The big event alone: its shortest batch first.
	if g := next(); g != "big-0" {
		t.Fatalf("first call to %s, want big-0", g)
	}
	if g := next(); g != "big-1" {
		t.Fatalf("second call to %s, want big-1", g)
	}
	// The small event joins: every other call, starting at once, its
	// shortest batch first although the big one's are shorter.
	wait("small-b", small, 900)
	wait("small-a", small, 800)
	var order []string
	for range 4 {
		order = append(order, next())
	}
	if want := []string{"small-a", "big-2", "small-b", "big-3"}; !slices.Equal(order, want) {
		t.Fatalf("calls went to %v, want %v", order, want)
	}
	// A key of weight 2 beside one of weight 1: two calls for one.
	for i := range 6 {
		wait(fmt.Sprintf("heavy-%d", i), heavy, i)
	}
	counts := map[string]int{}
	for range 6 {
		counts[strings.SplitN(next(), "-", 2)[0]]++
	}
	if counts["heavy"] != 4 || counts["big"] != 2 {
		t.Fatalf("six calls shared %v, want heavy 4, big 2", counts)
	}
	for queued > 0 {
		next()
	}
	c.release(fanout.PriorityNormal, holder)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.free != 1 || c.holders() != 0 || len(c.ranks[normalRank].byKey) != 0 || c.ranks[normalRank].keys.Len() != 0 {
		t.Fatalf("after every waiter was served: %d free, %d keys left", c.free, len(c.ranks[normalRank].byKey))
	}
}

// A batch grows beyond its concurrency while no one waits for a call, or
// while its event holds less than its share of the pool: the pool's size
// by weight among the events holding or waiting at its rank or above.
// A small event beside a big one grows to half the pool (three quarters at
// weight 3); a high one beside normal ones, or a small batch beside large
// ones, to all of it; the big one, over its share, does not.
func TestCallsGrowToTheEventsShare(t *testing.T) {
	ctx := context.Background()
	n := fanout.PriorityNormal
	big, small, heavySmall, urgent := share{key: "big", weight: 1}, share{key: "small", weight: 1}, share{key: "small", weight: 3}, share{key: "urgent", weight: 1}
	bigPage := share{key: "big", weight: 1, large: true}
	// pool holds calls for each (priority, share, count), then queues a
	// waiter of the big event: the pool is full and contended.
	pool := func(holds ...any) *Calls {
		c := NewCalls(8)
		waiter := holds[1].(share) // the first holder's event waits
		for i := 0; i < len(holds); i += 3 {
			for range holds[i+2].(int) {
				if err := c.acquire(ctx, holds[i].(fanout.Priority), holds[i+1].(share), 100); err != nil {
					t.Fatal(err)
				}
			}
		}
		if !c.mayGrow(n, waiter) {
			t.Fatal("with no one waiting, a batch may not grow")
		}
		go func() { _ = c.acquire(ctx, n, waiter, 900) }()
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
			c.mu.Lock()
			w := c.ranks[rankOf(n, waiter)].len()
			c.mu.Unlock()
			if w == 1 {
				return c
			}
			if time.Now().After(deadline) {
				t.Fatal("the big event's wait never queued")
			}
		}
	}
	for _, tc := range []struct {
		name  string
		c     *Calls
		p     fanout.Priority
		sh    share
		grows bool
	}{
		{"big event over its half", pool(n, big, 6, n, small, 2), n, big, false},
		{"small event under its half", pool(n, big, 6, n, small, 2), n, small, true},
		{"small event at its half", pool(n, big, 4, n, small, 4), n, small, false},
		{"small event of weight 3 under its three quarters", pool(n, big, 4, n, heavySmall, 4), n, heavySmall, true},
		{"small event of weight 3 at its three quarters", pool(n, big, 2, n, heavySmall, 6), n, heavySmall, false},
		{"a third event holding nothing", pool(n, big, 6, n, small, 2), n, share{key: "new", weight: 1}, true},
		{"high event beside normal ones", pool(n, big, 5, fanout.PriorityHigh, urgent, 3), fanout.PriorityHigh, urgent, true},
		// Beside a big event's large batches, a small batch of its
		// priority grows to the whole pool, as a high one does.
		{"small batch beside large ones, over half", pool(n, bigPage, 3, n, small, 5), n, small, true},
		{"small batch beside small ones, over half", pool(n, big, 3, n, small, 5), n, small, false},
	} {
		if got := tc.c.mayGrow(tc.p, tc.sh); got != tc.grows {
			t.Errorf("%s: mayGrow %v, want %v", tc.name, got, tc.grows)
		}
	}
}

// normalRank is the rank of a small normal-priority batch's waiters.
var normalRank = rankOf(fanout.PriorityNormal, share{})

// queued is how many wait at every rank.
func (c *Calls) queued() int {
	n := 0
	for i := range c.ranks {
		n += c.ranks[i].len()
	}
	return n
}

// holders is how many (rank, key) hold calls.
func (c *Calls) holders() int {
	n := 0
	for r := range c.held {
		n += len(c.held[r])
	}
	return n
}

// While another event holds calls at a rank before theirs (a small batch
// of their priority, or a higher priority), the batches behind it yield:
// together they take free calls only up to an eighth of the pool, and the
// calls they return go to the pool. An event's own first batches do not
// hold back its pages, and the yield ends with the other event's last call.
func TestCallsYieldToAnEarlierRank(t *testing.T) {
	ctx := context.Background()
	n := fanout.PriorityNormal
	page, ownFirst, small := share{key: "big", large: true}, share{key: "big"}, share{key: "small"}
	c := NewCalls(16) // the pages' part while they yield, after the burst: 2
	c.burst = 0
	take := func(sh share, k int) {
		for range k {
			if err := c.acquire(ctx, n, sh, 100); err != nil {
				t.Fatal(err)
			}
		}
	}
	waiting := func(sh share) int {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.ranks[rankOf(n, sh)].len()
	}
	take(page, 12)
	take(ownFirst, 1) // the big event's own small batch: no yield
	if !func() bool { c.mu.Lock(); defer c.mu.Unlock(); return c.mayTake(rankOf(n, page), page.key) }() {
		t.Fatal("a big event's pages yield to its own first batches")
	}
	take(small, 1)
	granted := make(chan struct{})
	go func() { take(page, 1); close(granted) }()
	for deadline := time.Now().Add(5 * time.Second); waiting(page) != 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the page's wait never queued although 2 of 16 calls are free")
		}
	}
	// The pages give back calls: they go to the pool until the pages hold
	// less than their part (2), then one goes to the page waiting.
	for held := 12; held > 1; held-- {
		if waiting(page) != 1 {
			t.Fatalf("the waiting page got a call while the pages held %d (their part is 2)", held)
		}
		c.release(n, page)
	}
	<-granted
	c.mu.Lock()
	free, pages := c.free, c.held[rankOf(n, page)]["big"].n
	c.mu.Unlock()
	if pages != 2 || free != 16-2-2 {
		t.Fatalf("the pages hold %d calls, %d free; want 2 and 12", pages, free)
	}
	// The small event's batch takes from the pool at once, and beyond the
	// pages' part.
	take(small, 10)
	// Once the small event returns its calls, the pages take them again.
	go func() { take(page, 1) }()
	for deadline := time.Now().Add(5 * time.Second); waiting(page) != 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the page's second wait never queued")
		}
	}
	for range 11 {
		c.release(n, small)
	}
	if waiting(page) != 0 {
		t.Fatal("the small event returned its calls and the waiting page still waits")
	}
}

// An event that signals on another worker (Yields) makes the pages here
// yield as one delivering here does; when its signal ends (the set read
// changes), the calls are handed to the pages waiting.
func TestCallsYieldToAnotherWorkersEvent(t *testing.T) {
	ctx := context.Background()
	n := fanout.PriorityNormal
	page := share{key: "big", large: true}
	y, signals := &Yields{}, &yieldSet{}
	signals[rankOf(n, share{})] = map[string]bool{"small": true}
	y.active.Store(signals)
	c := NewCalls(16) // the pages' part while they yield, after the burst: 2
	c.burst = 0
	c.YieldTo(y)
	for range 2 {
		if err := c.acquire(ctx, n, page, 100); err != nil {
			t.Fatal(err)
		}
	}
	granted := acquireQueued(t, c, n, page, "the page took a third call while another worker's event signals")
	if c.mayGrow(n, page) {
		t.Error("a yielding page may grow")
	}
	// The signal ends: the next read finds none and says so.
	y.active.Store(&yieldSet{})
	(*y.changed.Load())()
	if err := <-granted; err != nil {
		t.Fatal(err)
	}
}

// For the first yieldBurst of a yield the pages hold one call between them
// (the small event gets the worker); once the yield has lasted that long,
// their part is an eighth of the pool again.
func TestCallsYieldHardAtFirst(t *testing.T) {
	ctx := context.Background()
	n := fanout.PriorityNormal
	page, small := share{key: "big", large: true}, share{key: "small"}
	c := NewCalls(16) // the pages' part while they yield: 1, then 2
	c.burst = 200 * time.Millisecond
	for _, sh := range []share{small, small, page} {
		if err := c.acquire(ctx, n, sh, 100); err != nil {
			t.Fatal(err)
		}
	}
	granted := acquireQueued(t, c, n, page, "the page took a second call at the start of a yield, with 13 of 16 free")
	c.release(n, small) // still within the burst: nothing for the page
	select {
	case err := <-granted:
		t.Fatalf("the page took a second call within the burst (err %v)", err)
	case <-time.After(50 * time.Millisecond):
	}
	time.Sleep(200 * time.Millisecond)
	if err := c.acquire(ctx, n, small, 100); err != nil { // a dispatch, past the burst
		t.Fatal(err)
	}
	c.release(n, small)
	select {
	case err := <-granted:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the yield outlasted its burst and the page still waits for its second call")
	}
	c.mu.Lock()
	pages := c.held[rankOf(n, page)]["big"].n
	c.mu.Unlock()
	if pages != 2 {
		t.Fatalf("the pages hold %d calls after the burst, want their eighth (2)", pages)
	}
}

// Small batches that yield to a higher priority keep their eighth from the
// start: the burst's single call is for the pages.
func TestCallsSmallBatchesKeepTheirEighth(t *testing.T) {
	ctx := context.Background()
	c := NewCalls(16) // the eighth: 2
	if err := c.acquire(ctx, fanout.PriorityHigh, share{key: "high"}, 100); err != nil {
		t.Fatal(err)
	}
	small := share{key: "normal"}
	for i := range 2 {
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := c.acquire(actx, fanout.PriorityNormal, small, 100)
		cancel()
		if err != nil {
			t.Fatalf("a small normal batch beside a high one got %d calls, want its eighth (2): %v", i, err)
		}
	}
	actx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := c.acquire(actx, fanout.PriorityNormal, small, 100); err == nil {
		t.Fatal("a small normal batch beside a high one took a third call, over its eighth")
	}
}

// acquireQueued starts an acquire for sh and waits until it is queued, the
// only waiter of its rank; it fails the test with msg if the acquire is
// granted at once instead. The acquire's result comes on the channel.
func acquireQueued(t *testing.T, c *Calls, p fanout.Priority, sh share, msg string) <-chan error {
	t.Helper()
	granted := make(chan error, 1)
	go func() { granted <- c.acquire(context.Background(), p, sh, 100) }()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		c.mu.Lock()
		w := c.ranks[rankOf(p, sh)].len()
		c.mu.Unlock()
		if w == 1 {
			return granted
		}
		select {
		case err := <-granted:
			t.Fatalf("%s (err %v)", msg, err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal(msg)
		}
	}
}
