//go:build integration

package config_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/fanout/fanout/dev/stack"
	"github.com/fanout/fanout/internal/config"
)

// TestCheckEvictionRealRedis: against a real redis-server started with each
// maxmemory-policy, config.CheckEviction refuses every policy that can evict
// fanout's keys, naming FANOUT_REDIS_ACCEPT_EVICTION, unless accepted (then
// it warns), and lets noeviction through; with CONFIG renamed away (managed
// Redis) it reads INFO memory; when neither is allowed it warns and goes on.
func TestCheckEvictionRealRedis(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	check := func(t *testing.T, url string, accept bool) (string, error) {
		t.Helper()
		rdb, err := config.RedisClient(config.RedisConn{URL: url})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = rdb.Close() }()
		var logs bytes.Buffer
		err = config.CheckEviction(ctx, rdb, config.RedisConn{URL: url, AcceptEviction: accept}, slog.New(slog.NewTextHandler(&logs, nil)))
		return logs.String(), err
	}
	policies := []string{"noeviction", "volatile-lru", "volatile-lfu", "volatile-random", "volatile-ttl", "allkeys-lru", "allkeys-lfu", "allkeys-random"}
	for _, p := range policies {
		t.Run(p, func(t *testing.T) {
			addr, stop, err := stack.StartRedisArgs(ctx, t.TempDir(), "--maxmemory-policy", p)
			if err != nil {
				t.Fatal(err)
			}
			defer stop()
			_, err = check(t, "redis://"+addr, false)
			if p == "noeviction" {
				if err != nil {
					t.Fatalf("noeviction refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), "FANOUT_REDIS_ACCEPT_EVICTION") || !strings.Contains(err.Error(), p) {
				t.Fatalf("policy %s: %v; want a refusal naming FANOUT_REDIS_ACCEPT_EVICTION and the policy", p, err)
			}
			logs, err := check(t, "redis://"+addr, true)
			if err != nil || !strings.Contains(logs, p) {
				t.Fatalf("policy %s accepted: %v, logs %q; want nil and a warning naming it", p, err, logs)
			}
		})
	}
	t.Run("CONFIG renamed", func(t *testing.T) {
		addr, stop, err := stack.StartRedisArgs(ctx, t.TempDir(), "--maxmemory-policy", "allkeys-lru", "--rename-command", "CONFIG", "")
		if err != nil {
			t.Fatal(err)
		}
		defer stop()
		if _, err := check(t, "redis://"+addr, false); err == nil || !strings.Contains(err.Error(), "allkeys-lru") {
			t.Fatalf("with CONFIG renamed: %v; want allkeys-lru (from INFO memory) refused", err)
		}
	})
	t.Run("unreadable", func(t *testing.T) {
		addr, stop, err := stack.StartRedisArgs(ctx, t.TempDir(), "--maxmemory-policy", "allkeys-lru",
			"--user", "app", "on", ">pw", "~*", "&*", "+@all", "-config", "-info")
		if err != nil {
			t.Fatal(err)
		}
		defer stop()
		logs, err := check(t, "redis://app:pw@"+addr, false)
		if err != nil || !strings.Contains(logs, "maxmemory-policy") {
			t.Fatalf("policy unreadable: %v, logs %q; want nil and a warning", err, logs)
		}
	})
}
