package activities

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fanout/fanout"
)

// A free call goes to the highest priority waiting, first come first
// served within one; a waiter that gives up takes nothing with it.
func TestCallsServePrioritiesFirst(t *testing.T) {
	c := NewCalls(1)
	ctx := context.Background()
	if err := c.acquire(ctx, fanout.PriorityLow, 0); err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 8)
	queued := 0
	wait := func(name string, p fanout.Priority) {
		go func() {
			if err := c.acquire(ctx, p, 0); err != nil {
				got <- "error " + err.Error()
				return
			}
			got <- name
		}()
		// Queue in this order.
		deadline := time.Now().Add(5 * time.Second)
		for {
			c.mu.Lock()
			n := c.waiters[0].Len() + c.waiters[1].Len() + c.waiters[2].Len()
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
	wait("low-1", fanout.PriorityLow)
	wait("normal-1", fanout.PriorityNormal)
	wait("low-2", fanout.PriorityLow)
	wait("high-1", fanout.PriorityHigh)
	wait("normal-2", fanout.PriorityNormal)

	// A high waiter that gives up leaves the others' order alone.
	cctx, cancel := context.WithCancel(ctx)
	gaveUp := make(chan error, 1)
	go func() { gaveUp <- c.acquire(cctx, fanout.PriorityHigh, 0) }()
	for {
		c.mu.Lock()
		n := c.waiters[0].Len()
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

	want := []string{"high-1", "normal-1", "normal-2", "low-1", "low-2"}
	for _, w := range want {
		c.release()
		select {
		case g := <-got:
			if g != w {
				t.Fatalf("the call went to %s, want %s (order %v)", g, w, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no waiter got the call, want %s", w)
		}
	}
	c.release()
	if c.free != 1 {
		t.Fatalf("%d calls free after all returned, want 1", c.free)
	}
}

// Within a priority, a free call goes to the batch with the fewest
// recipients left: batches end one after another, and a small batch is not
// held back by big ones.
func TestCallsServeTheShortestBatchFirst(t *testing.T) {
	c := NewCalls(1)
	ctx := context.Background()
	if err := c.acquire(ctx, fanout.PriorityNormal, 0); err != nil {
		t.Fatal(err)
	}
	got := make(chan int, 4)
	for i, left := range []int{9000, 40, 700} {
		go func() {
			if err := c.acquire(ctx, fanout.PriorityNormal, left); err == nil {
				got <- left
			}
		}()
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
			c.mu.Lock()
			n := c.waiters[1].Len()
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
		c.release()
		if g := <-got; g != want {
			t.Fatalf("the call went to the batch with %d left, want %d", g, want)
		}
	}
}
