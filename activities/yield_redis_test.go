//go:build integration

package activities_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/activities"
)

// waitYielding polls y.Yielding (read in the background every 50 ms)
// until it reports want, for at most limit.
func waitYielding(t *testing.T, y *activities.Yields, p fanout.Priority, large bool, key string, want bool, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for y.Yielding(p, large, key) != want {
		if time.Now().After(deadline) {
			t.Fatalf("%s %s (large %v) yielding: want %v within %v", key, p, large, want, limit)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestYieldsAcrossWorkers: an event that opens on one worker makes the big
// events' pages on another yield (not its own pages, not small batches of
// its priority); a high-priority event makes normal small batches yield
// too; YieldHold after the last signal, no one yields.
func TestYieldsAcrossWorkers(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := rdb.Del(ctx, activities.YieldKey).Err(); err != nil {
		t.Fatal(err)
	}
	events, delivery := activities.NewYields(ctx, rdb, nil), activities.NewYields(ctx, rdb, nil)
	n := fanout.PriorityNormal
	if delivery.Yielding(n, true, "e:t/big") {
		t.Fatal("a page yields before any signal")
	}
	events.Signal(n, "e:t/small")
	waitYielding(t, delivery, n, true, "e:t/big", true, 5*time.Second)
	for _, tc := range []struct {
		large bool
		key   string
	}{{false, "e:t/other"}, {true, "e:t/small"}, {false, "e:t/small"}} {
		if delivery.Yielding(n, tc.large, tc.key) {
			t.Errorf("%s (large %v) yields to e:t/small", tc.key, tc.large)
		}
	}
	events.Signal(fanout.PriorityHigh, "e:t/urgent")
	waitYielding(t, delivery, n, false, "e:t/other", true, 5*time.Second)
	if delivery.Yielding(fanout.PriorityHigh, true, "e:t/big-high") == false {
		t.Error("a high event's page does not yield to another high event's signal")
	}
	// No more signals: within YieldHold (and a read) no one yields.
	waitYielding(t, delivery, n, true, "e:t/big", false, activities.YieldHold+5*time.Second)
	waitYielding(t, delivery, n, false, "e:t/other", false, time.Second)
}

// TestYieldsIgnoreWhatTheyDoNotWrite: members of YieldKey that are not
// "<rank> <key>" (a rank out of range, no key, a key over the fairness
// key's bound) are ignored; a worker whose Redis is down reads no signal.
func TestYieldsIgnoreWhatTheyDoNotWrite(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	until := float64(time.Now().Add(time.Minute).UnixMilli())
	bad := []string{"garbage", "9 e:t/x", "-1 e:t/x", "0 ", "x e:t/x", "0 " + strings.Repeat("k", 10_000)}
	for _, m := range bad {
		if err := rdb.ZAdd(ctx, activities.YieldKey, redis.Z{Score: until, Member: m}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { rdb.Del(context.Background(), activities.YieldKey) })
	y := activities.NewYields(ctx, rdb, nil)
	time.Sleep(300 * time.Millisecond) // several reads
	for _, p := range fanout.Priorities {
		if y.Yielding(p, true, "e:t/big") {
			t.Errorf("a %s page yields to members %q", p, bad)
		}
	}
	// A real signal among them is read.
	y.Signal(fanout.PriorityHigh, "e:t/real")
	waitYielding(t, y, fanout.PriorityLow, true, "e:t/big", true, 5*time.Second)

	down := activities.NewYields(ctx, redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", DialTimeout: 100 * time.Millisecond, MaxRetries: -1}), nil)
	down.Signal(fanout.PriorityHigh, "e:t/real")
	time.Sleep(300 * time.Millisecond)
	if down.Yielding(fanout.PriorityLow, true, "e:t/big") {
		t.Error("a worker without Redis yields")
	}
}
