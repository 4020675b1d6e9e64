package activities

import (
	"container/list"
	"context"
	"sync"

	"github.com/fanout/fanout"
)

// Calls is a worker's budget of delivery calls in flight, shared by every
// batch the worker runs (all priorities, and the fast path's local
// activities). A batch still runs at most its type's DeliverConcurrency
// calls at once, but takes a call from the pool before each one, so when
// one batch is down to its last slow calls the others use the sockets it
// no longer needs, and a worker runs more batches than the pool needs to
// stay full (workers.Options.BatchSlots).
//
// A free call goes to the highest priority waiting, first come first
// served within a priority: a high-priority batch waits only for calls
// to end, never behind normal or low batches' queued requests.
type Calls struct {
	mu      sync.Mutex
	free    int
	waiters [3]list.List // of chan struct{}, by priorityRank
}

// NewCalls is a pool of n calls in flight (at least 1).
func NewCalls(n int) *Calls { return &Calls{free: max(n, 1)} }

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

// acquire takes a call for a delivery of priority p, waiting until one is
// free and no batch of the same or a higher priority waited before; it
// fails only with ctx's error, holding nothing. A nil pool never waits.
func (c *Calls) acquire(ctx context.Context, p fanout.Priority) error {
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
	ready := make(chan struct{})
	e := c.waiters[rank].PushBack(ready)
	c.mu.Unlock()
	select {
	case <-ready:
		return nil
	case <-ctx.Done():
		c.mu.Lock()
		select {
		case <-ready: // granted as we gave up: hand it on
			c.mu.Unlock()
			c.release()
		default:
			c.waiters[rank].Remove(e)
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
		if e := c.waiters[r].Front(); e != nil {
			c.waiters[r].Remove(e)
			close(e.Value.(chan struct{}))
			return
		}
	}
	c.free++
}
