//go:build integration

package gate_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fanout/fanout/activities/gate"
)

// TestAtMostOnceStates walks the at-most-once states of one recipient: held
// → sending (MarkSending) → delivered, or a later try finding it sending
// (Unconfirmed; an at-most-once batch then marks it unconfirmed, which a
// redrive of the same attempt delivers again), or a not-sent failure moving
// it back to held (Unsend), which the retry delivers.
func TestAtMostOnceStates(t *testing.T) {
	g, rdb := newGate(t, time.Hour)
	ctx := context.Background()
	read := func(t *testing.T, ev string) (string, gate.State) {
		t.Helper()
		v, err := rdb.Get(ctx, g.Key(ev, "r1")).Result()
		if err != nil {
			t.Fatalf("GET: %v", err)
		}
		return gate.ParseState(v)
	}
	send := func(t *testing.T, ev, attempt string, want bool) {
		t.Helper()
		ok, err := g.MarkSending(ctx, ev, attempt, "r1")
		if err != nil || ok != want {
			t.Fatalf("MarkSending(%s) = %v, %v; want %v", attempt, ok, err, want)
		}
	}

	t.Run("sending then delivered", func(t *testing.T) {
		ev := eventID(t)
		if v := acquireOne(t, g, ev, "e#0", "r1"); v != gate.Deliver {
			t.Fatalf("Acquire = %s", verdictName(v))
		}
		send(t, ev, "e#0", true)
		if a, st := read(t, ev); a != "e#0" || st != gate.StateSending {
			t.Fatalf("after MarkSending: %q %d", a, st)
		}
		// Another attempt is a duplicate; the same attempt's second
		// execution may not mark it again.
		if v := acquireOne(t, g, ev, "e#1", "r1"); v != gate.Duplicate {
			t.Fatalf("other attempt: %s", verdictName(v))
		}
		send(t, ev, "e#1", false)
		send(t, ev, "e#0", false)
		if err := g.MarkDelivered(ctx, ev, "e#0", "r1"); err != nil {
			t.Fatal(err)
		}
		if v := acquireOne(t, g, ev, "e#0", "r1"); v != gate.DeliveredByUs {
			t.Fatalf("after delivered: %s", verdictName(v))
		}
		send(t, ev, "e#0", false)
	})

	t.Run("interrupted call is unconfirmed, then redriven", func(t *testing.T) {
		ev := eventID(t)
		acquireOne(t, g, ev, "e#0", "r1")
		send(t, ev, "e#0", true)
		// The worker dies here. The retry finds its own sending mark.
		if v := acquireOne(t, g, ev, "e#0", "r1"); v != gate.Unconfirmed || v.ShouldDeliver() {
			t.Fatalf("retry: %s, ShouldDeliver %v", verdictName(v), v.ShouldDeliver())
		}
		if err := g.MarkUnconfirmed(ctx, ev, "e#0", "r1"); err != nil {
			t.Fatal(err)
		}
		if a, st := read(t, ev); a != "e#0" || st != gate.StateUnconfirmed {
			t.Fatalf("after MarkUnconfirmed: %q %d", a, st)
		}
		if _, delivered, dead := gate.ParseValue("unconfirmed:e#0"); delivered || !dead {
			t.Errorf("ParseValue(unconfirmed) = delivered %v, dead-lettered %v; want a dead letter", delivered, dead)
		}
		if v := acquireOne(t, g, ev, "e#0", "r1"); v != gate.UnconfirmedByUs {
			t.Fatalf("later try: %s", verdictName(v))
		}
		if v := acquireOne(t, g, ev, "e#1", "r1"); v != gate.Duplicate {
			t.Fatalf("other attempt: %s", verdictName(v))
		}
		// A redrive (same attempt id) delivers it: the operator's choice.
		vs, err := g.Acquire(ctx, ev, "e#0", []string{"r1"}, true)
		if err != nil || vs[0] != gate.Redeliver {
			t.Fatalf("redrive: %v %v", vs, err)
		}
		send(t, ev, "e#0", true)
	})

	t.Run("a redrive marks its dead letter sending", func(t *testing.T) {
		ev := eventID(t)
		if err := g.MarkDeadLettered(ctx, ev, "e#0", "r1"); err != nil {
			t.Fatal(err)
		}
		send(t, ev, "e#1", false)
		send(t, ev, "e#0", true)
	})

	t.Run("unsend returns a not-sent call to held", func(t *testing.T) {
		ev := eventID(t)
		acquireOne(t, g, ev, "e#0", "r1")
		send(t, ev, "e#0", true)
		if err := g.Unsend(ctx, ev, "e#0", "r1"); err != nil {
			t.Fatal(err)
		}
		if a, st := read(t, ev); a != "e#0" || st != gate.StateHeld {
			t.Fatalf("after Unsend: %q %d", a, st)
		}
		if v := acquireOne(t, g, ev, "e#0", "r1"); v != gate.Redeliver {
			t.Fatalf("retry: %s", verdictName(v))
		}
		// Unsend touches only its own sending mark.
		if err := g.MarkDelivered(ctx, ev, "e#0", "r1"); err != nil {
			t.Fatal(err)
		}
		if err := g.Unsend(ctx, ev, "e#0", "r1"); err != nil {
			t.Fatal(err)
		}
		if _, st := read(t, ev); st != gate.StateDelivered {
			t.Fatalf("Unsend changed a delivered mark: %d", st)
		}
	})

	t.Run("marks keep the TTL", func(t *testing.T) {
		ev := eventID(t)
		acquireOne(t, g, ev, "e#0", "r1")
		send(t, ev, "e#0", true)
		if ttl := rdb.TTL(ctx, g.Key(ev, "r1")).Val(); ttl < 59*time.Minute || ttl > time.Hour {
			t.Errorf("TTL after MarkSending = %v, want ~1h", ttl)
		}
		if err := g.Unsend(ctx, ev, "e#0", "r1"); err != nil {
			t.Fatal(err)
		}
		if ttl := rdb.TTL(ctx, g.Key(ev, "r1")).Val(); ttl < 59*time.Minute || ttl > time.Hour {
			t.Errorf("TTL after Unsend = %v, want ~1h", ttl)
		}
	})
}

// TestMarkSendingOnceAmongConcurrentExecutions: two executions of one
// attempt id (an activity timed out while its first execution still runs)
// race to call the same recipients: each recipient is marked, so called,
// by exactly one of them.
func TestMarkSendingOnceAmongConcurrentExecutions(t *testing.T) {
	g, _ := newGate(t, time.Hour)
	ctx := context.Background()
	ev := eventID(t)
	const n = 200
	ids := make([]string, n)
	for i := range ids {
		ids[i] = "r" + strconv.Itoa(i)
	}
	if _, err := g.Acquire(ctx, ev, "e#0", ids, false); err != nil {
		t.Fatal(err)
	}
	var wins atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, id := range ids {
				ok, err := g.MarkSending(ctx, ev, "e#0", id)
				if err != nil {
					t.Error(err)
					return
				}
				if ok {
					wins.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if wins.Load() != n {
		t.Errorf("%d MarkSending wins for %d recipients, want exactly one each", wins.Load(), n)
	}
}
