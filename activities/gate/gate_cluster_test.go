//go:build integration

package gate_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/fanout/fanout/activities/gate"
	"github.com/fanout/fanout/dev/stack"
)

// TestGateOnRedisCluster: the gate behaves on a Redis Cluster of three
// masters as on one server (verdicts in order over several pipelines,
// marks, redrive, failure counts, holder, TTL), and one event's keys are
// spread over every master, not pinned to one slot.
func TestGateOnRedisCluster(t *testing.T) {
	rdb, _ := stack.TestRedisCluster(t)
	ctx := context.Background()
	g := gate.New(rdb, time.Hour)
	const ev = "webhook/cluster-event"
	const n = 1_234 // three pipelines, the last partial
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("r-%d", i)
	}

	// Another batch holds every third recipient first.
	var held []string
	for i := 0; i < n; i += 3 {
		held = append(held, ids[i])
	}
	if v, err := g.Acquire(ctx, ev, "webhook/cluster-event#1", held, false); err != nil || len(v) != len(held) {
		t.Fatalf("Acquire by #1: %d verdicts, %v", len(v), err)
	}
	v, err := g.Acquire(ctx, ev, "webhook/cluster-event#0", ids, false)
	if err != nil {
		t.Fatal(err)
	}
	for i, got := range v {
		want := gate.Deliver
		if i%3 == 0 {
			want = gate.Duplicate
		}
		if got != want {
			t.Fatalf("recipient %d: %s, want %s", i, verdictName(got), verdictName(want))
		}
	}
	// A retry of the batch: redeliver what it held, skip the others.
	v, err = g.Acquire(ctx, ev, "webhook/cluster-event#0", ids, false)
	if err != nil {
		t.Fatal(err)
	}
	for i, got := range v {
		if want := map[bool]gate.Verdict{true: gate.Duplicate, false: gate.Redeliver}[i%3 == 0]; got != want {
			t.Fatalf("retry, recipient %d: %s, want %s", i, verdictName(got), verdictName(want))
		}
	}

	// Marks across the shards: delivered, then dead-lettered and redriven.
	var mine []string
	for i := range ids {
		if i%3 != 0 {
			mine = append(mine, ids[i])
		}
	}
	delivered, dead := mine[:len(mine)/2], mine[len(mine)/2:]
	if err := g.MarkDelivered(ctx, ev, "webhook/cluster-event#0", delivered...); err != nil {
		t.Fatal(err)
	}
	if err := g.MarkDeadLettered(ctx, ev, "webhook/cluster-event#0", dead...); err != nil {
		t.Fatal(err)
	}
	for _, redrive := range []bool{false, true} {
		v, err := g.Acquire(ctx, ev, "webhook/cluster-event#0", mine, redrive)
		if err != nil {
			t.Fatal(err)
		}
		for i, got := range v {
			want := gate.DeliveredByUs
			if i >= len(delivered) {
				want = map[bool]gate.Verdict{false: gate.DeadLetteredByUs, true: gate.Redeliver}[redrive]
			}
			if got != want {
				t.Fatalf("redrive %v, recipient %s: %s, want %s", redrive, mine[i], verdictName(got), verdictName(want))
			}
		}
	}
	if a, isDelivered, ok, err := g.Holder(ctx, ev, delivered[len(delivered)-1]); err != nil || !ok || !isDelivered || a != "webhook/cluster-event#0" {
		t.Errorf("Holder: %q delivered %v found %v, %v", a, isDelivered, ok, err)
	}

	// Failure counts: one hash per batch round, counted across retries.
	for round := 1; round <= 2; round++ {
		counts, err := g.CountFailures(ctx, ev, "webhook/cluster-event#0", "0", dead)
		if err != nil {
			t.Fatal(err)
		}
		if len(counts) != len(dead) || slices.ContainsFunc(counts, func(c int) bool { return c != round }) {
			t.Fatalf("round %d: counts %v", round, counts[:min(5, len(counts))])
		}
	}

	// Every key carries the TTL, wherever it lives.
	for _, id := range []string{ids[0], ids[1], ids[n-1]} {
		if ttl, err := rdb.TTL(ctx, g.Key(ev, id)).Result(); err != nil || ttl <= 0 || ttl > time.Hour {
			t.Errorf("TTL of %s: %v %v", id, ttl, err)
		}
	}

	// The event's keys are spread: many slots, and keys on every master.
	slots := map[int64]bool{}
	for _, id := range ids {
		s, err := rdb.ClusterKeySlot(ctx, g.Key(ev, id)).Result()
		if err != nil {
			t.Fatal(err)
		}
		slots[s] = true
	}
	if len(slots) < n/2 {
		t.Errorf("%d recipients' keys in %d slots; want them spread", n, len(slots))
	}
	counts, err := stack.MasterKeyCounts(ctx, rdb)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for addr, c := range counts {
		if c < n/10 {
			t.Errorf("master %s holds %d keys of %d; want the event's keys on every master", addr, c, n)
		}
		total += c
	}
	if len(counts) != 3 || total != n+1 { // the gate keys and one failure-count hash
		t.Errorf("keys per master %v (total %d); want 3 masters, %d keys", counts, total, n+1)
	}
}
