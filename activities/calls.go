package activities

import (
	"container/heap"
	"context"
	"sync"

	"github.com/fanout/fanout"
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
// A free call goes to the highest priority waiting; within a priority, to
// the batch with the fewest recipients left (first come first served among
// equals). So a high-priority batch waits only for calls to end, a small
// event's batch is not slowed by the big batches beside it, and batches
// finish one after another, each freeing its slot for the next (shared
// evenly, batches started together would all end together, late).
type Calls struct {
	size    int
	mu      sync.Mutex
	free    int
	seq     uint64
	waiters [3]waiterHeap // by priorityRank
}

// NewCalls is a pool of n calls in flight (at least 1).
func NewCalls(n int) *Calls { return &Calls{size: max(n, 1), free: max(n, 1)} }

// capacity is the pool's size (0: no pool).
func (c *Calls) capacity() int {
	if c == nil {
		return 0
	}
	return c.size
}

// spare reports whether no batch waits for a call: one more caller for a
// batch takes nothing from the others.
func (c *Calls) spare() bool {
	if c == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.noneWaitingUpTo(len(c.waiters) - 1)
}

// priorityRank orders the waiters: high first.
func priorityRank(p fanout.Priority) int {
	switch p {
	case fanout.PriorityHigh:
		return 0
	case fanout.PriorityLow:
		return 2
	default:
		return 1
	}
}

// acquire takes a call for a delivery of priority p from a batch with left
// recipients to go, waiting until one is free and no batch ahead of it
// waits; it fails only with ctx's error, holding nothing. A nil pool never
// waits.
func (c *Calls) acquire(ctx context.Context, p fanout.Priority, left int) error {
	if c == nil {
		return nil
	}
	rank := priorityRank(p)
	c.mu.Lock()
	if c.free > 0 && c.noneWaitingUpTo(rank) {
		c.free--
		c.mu.Unlock()
		return nil
	}
	c.seq++
	w := &waiter{ready: make(chan struct{}), left: left, seq: c.seq}
	heap.Push(&c.waiters[rank], w)
	c.mu.Unlock()
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
		c.mu.Lock()
		select {
		case <-w.ready: // granted as we gave up: hand it on
			c.mu.Unlock()
			c.release()
		default:
			heap.Remove(&c.waiters[rank], w.index)
			c.mu.Unlock()
		}
		return ctx.Err()
	}
}

// noneWaitingUpTo: no waiter of rank or a higher priority (mu held).
func (c *Calls) noneWaitingUpTo(rank int) bool {
	for r := 0; r <= rank; r++ {
		if c.waiters[r].Len() > 0 {
			return false
		}
	}
	return true
}

// release returns a call: to the first waiter of the highest priority
// waiting, else to the pool.
func (c *Calls) release() {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for r := range c.waiters {
		if c.waiters[r].Len() > 0 {
			close(heap.Pop(&c.waiters[r]).(*waiter).ready)
			return
		}
	}
	c.free++
}

// waiter is a batch waiting for a call.
type waiter struct {
	ready chan struct{}
	left  int    // the batch's recipients left
	seq   uint64 // arrival
	index int    // in its heap
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
