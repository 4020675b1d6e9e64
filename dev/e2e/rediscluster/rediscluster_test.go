//go:build integration

// Package rediscluster runs the real worker binary against a Redis Cluster.
package rediscluster

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fanout/fanout/dev/stack"
)

// TestWorkerOnRedisCluster: a worker process whose FANOUT_REDIS_URL lists
// the three masters of a Redis Cluster (auto mode: a cluster), running the
// bridge too, delivers a multi-batch event to every recipient exactly
// once, with its gate keys, staged batches and event record on the
// cluster, spread over every master.
func TestWorkerOnRedisCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	addrs, stopCluster, err := stack.StartRedisCluster(ctx, t.TempDir(), 3)
	if err != nil {
		t.Fatal(err)
	}
	defer stopCluster()
	s, err := stack.Start(ctx, stack.Options{InMemory: true, Log: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.StartWorker("worker", "events,high,normal,low",
		"FANOUT_REDIS_URL=redis://"+strings.Join(addrs, ",")+"/0", "FANOUT_BRIDGE=true",
		"FANOUT_BATCH_SIZE=200", "FANOUT_PAGE_SIZE=800", "FANOUT_LARGE_BATCH_SIZE=-1", "FANOUT_LOCAL_DELIVERY_MAX=-1"); err != nil {
		t.Fatal(err)
	}

	const id, n = "on-redis-cluster", 3_000
	if err := s.Publish(ctx, stack.Event{ID: id, Audience: n}); err != nil {
		t.Fatal(err)
	}
	res, err := s.Wait(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if res.Found != n || res.Delivered != n || res.Duplicates != 0 || res.Failed != 0 || res.BatchesStarted < 10 {
		t.Fatalf("result %+v; want %d delivered in %d batches, no duplicate or failure", res.Progress, n, n/200)
	}
	if got := s.Sink.Event(id); got.Unique != n || got.Deliveries != n {
		t.Fatalf("sink %+v; want %d recipients once each", got, n)
	}

	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	defer func() { _ = rdb.Close() }()
	counts, err := stack.MasterKeyCounts(ctx, rdb)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for addr, c := range counts {
		if c < n/10 {
			t.Errorf("master %s holds %d keys; want the event's %d gate keys spread over every master (%v)", addr, c, n, counts)
		}
		total += c
	}
	if total < n+1 {
		t.Errorf("%d keys on the cluster; want at least the %d gate keys and the event record", total, n)
	}
	if v, err := rdb.Exists(ctx, "fanout:e:fanout/webhook/"+id).Result(); err != nil || v != 1 {
		t.Errorf("event record on the cluster: %d, %v", v, err)
	}
	if n, err := s.RDB.DBSize(ctx).Result(); err != nil || n != 0 {
		t.Errorf("the stack's single Redis holds %d keys, %v; want none (the worker uses the cluster)", n, err)
	}
}
