//go:build integration

package staging_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/activities/staging"
	"github.com/fanout/fanout/dev/stack"
)

// TestStagingOnRedisCluster: on a Redis Cluster of three masters, one
// pipeline stages an event's batches on every master (each key in its own
// slot), each batch loads back whole with its TTL, and a dropped batch is
// gone.
func TestStagingOnRedisCluster(t *testing.T) {
	rdb, _ := stack.TestRedisCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	s := staging.New(rdb, time.Hour)
	const ev, batches, size = "webhook/cluster-staged", 60, 50
	in := make([][]fanout.Recipient, batches)
	for b := range in {
		for r := range size {
			in[b] = append(in[b], fanout.Recipient{ID: fmt.Sprintf("b%d-r%d", b, r)})
		}
	}
	if err := s.Stage(ctx, ev, 3, in); err != nil {
		t.Fatal(err)
	}
	for b := range in {
		key := s.Key(ev, 3+b)
		got, ok, err := s.Load(ctx, key)
		if err != nil || !ok {
			t.Fatalf("Load(%s): ok %v, %v", key, ok, err)
		}
		if !slices.EqualFunc(got, in[b], func(a, b fanout.Recipient) bool { return a.ID == b.ID }) {
			t.Fatalf("Load(%s): %d recipients, first %v; want %d, first %v", key, len(got), got[:1], len(in[b]), in[b][:1])
		}
		if ttl, err := rdb.TTL(ctx, key).Result(); err != nil || ttl <= 0 || ttl > time.Hour {
			t.Errorf("TTL of %s: %v %v", key, ttl, err)
		}
	}
	counts, err := stack.MasterKeyCounts(ctx, rdb)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for addr, c := range counts {
		if c == 0 {
			t.Errorf("master %s holds none of the %d batches; want them spread", addr, batches)
		}
		total += c
	}
	if len(counts) != 3 || total != batches {
		t.Errorf("batches per master %v; want %d over 3 masters", counts, batches)
	}
	for b := range in {
		if err := s.Drop(ctx, s.Key(ev, 3+b)); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok, err := s.Load(ctx, s.Key(ev, 3)); ok || err != nil {
		t.Errorf("Load after Drop: ok %v, %v; want gone", ok, err)
	}
	if counts, err := stack.MasterKeyCounts(ctx, rdb); err != nil || slices.ContainsFunc(mapValues(counts), func(c int64) bool { return c != 0 }) {
		t.Errorf("keys per master after dropping every batch: %v, %v", counts, err)
	}
}

func mapValues(m map[string]int64) []int64 {
	var out []int64
	for _, v := range m {
		out = append(out, v)
	}
	return out
}
