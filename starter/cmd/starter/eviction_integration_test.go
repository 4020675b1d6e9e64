//go:build integration

package main

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fanout/fanout/dev/stack"
)

// `starter setup` against a real redis-server whose maxmemory-policy can
// evict fanout's keys fails, naming FANOUT_REDIS_ACCEPT_EVICTION, before it
// connects to Temporal.
func TestSetupRefusesAnEvictingRedis(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	addr, stop, err := stack.StartRedisArgs(ctx, t.TempDir(), "--maxmemory-policy", "allkeys-lru")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	temporal := listen(t)
	r := run(t, append(os.Environ(), "TEMPORAL_ADDRESS="+temporal.addr, "FANOUT_REDIS_URL=redis://"+addr+"/0",
		"FANOUT_CODEC_KEYS=", "FANOUT_CODEC_KEYS_FILE="), "setup")
	if r.code == 0 || !strings.Contains(r.stderr, "FANOUT_REDIS_ACCEPT_EVICTION") || !strings.Contains(r.stderr, "allkeys-lru") {
		t.Fatalf("setup: exit %d, stderr %q; want a refusal naming FANOUT_REDIS_ACCEPT_EVICTION and allkeys-lru", r.code, r.stderr)
	}
	if n := temporal.accepted.Load(); n != 0 {
		t.Errorf("setup connected to Temporal %d times before refusing Redis", n)
	}
}
