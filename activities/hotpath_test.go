package activities

import (
	"context"
	"testing"
	"time"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/activities/limits"
)

// TestHotPathAllocatesNothing: per delivery, at least once to a
// destination with no limit and a closed breaker, the feed's hand-out,
// markSending and the breaker add no allocation (Deliver itself aside).
func TestHotPathAllocatesNothing(t *testing.T) {
	a := &Activities{}
	in := &DeliverBatchInput{Event: fanout.Event{ID: "e", Type: "t"}}
	ctx := context.Background()
	if n := testing.AllocsPerRun(100, func() {
		if call, err := a.markSending(ctx, in, "r1"); !call || err != nil {
			t.Fatal(call, err)
		}
	}); n != 0 {
		t.Errorf("markSending at least once: %v allocations, want 0", n)
	}
	br := (&limits.Breakers{}).Get("t", "h", limits.BreakerSettings{Failures: 5, Cooldown: time.Minute})
	if n := testing.AllocsPerRun(100, func() {
		g, ok := br.Begin()
		if !ok {
			t.Fatal("closed breaker off the fast path")
		}
		br.End(g, nil)
	}); n != 0 {
		t.Errorf("closed breaker: %v allocations, want 0", n)
	}
	rs := mixed(1000, "sink:8080") // hostKeyed: the address is the key
	f := testFeed(rs, limits.Overrides{}, 0, &localTaker{})
	f.take = nil
	if n := testing.AllocsPerRun(1, func() {
		for range 500 {
			if _, ok, err := f.next(ctx); !ok || err != nil {
				t.Fatal(ok, err)
			}
		}
	}); n != 0 {
		t.Errorf("the feed: %v allocations per 500 recipients to one host, want 0", n)
	}
}
