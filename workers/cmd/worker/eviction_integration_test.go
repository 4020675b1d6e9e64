//go:build integration

package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fanout/fanout/dev/stack"
)

// The worker against a real redis-server whose maxmemory-policy can evict
// fanout's keys exits at start-up, naming FANOUT_REDIS_ACCEPT_EVICTION,
// before it connects to Temporal.
func TestWorkerRefusesAnEvictingRedis(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	addr, stop, err := stack.StartRedisArgs(ctx, t.TempDir(), "--maxmemory-policy", "volatile-lru")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	temporal, accepted := countingListener(t)
	code, _, errOut := runWorker(t, append(env(temporal, "info"), "FANOUT_REDIS_URL=redis://"+addr+"/0"))
	if code == 0 || !strings.Contains(errOut, "FANOUT_REDIS_ACCEPT_EVICTION") || !strings.Contains(errOut, "volatile-lru") {
		t.Fatalf("worker: exit %d, stderr %q; want a refusal naming FANOUT_REDIS_ACCEPT_EVICTION and volatile-lru", code, errOut)
	}
	if n := accepted.Load(); n != 0 {
		t.Errorf("worker connected to Temporal %d times before refusing Redis", n)
	}
}
