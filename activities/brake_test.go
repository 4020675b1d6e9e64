package activities_test

import (
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fanout/fanout/activities"
)

// TestBrakeOffWithoutRateOrRedis: no brake for a rate of 0 or less, or
// without Redis.
func TestBrakeOffWithoutRateOrRedis(t *testing.T) {
	rc := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rc.Close()
	for _, b := range []*activities.Brake{activities.NewBrake(rc, 0, nil), activities.NewBrake(rc, -1, nil), activities.NewBrake(nil, 100, nil)} {
		if b != nil {
			t.Fatalf("got a brake %p; want none", b)
		}
		b.Signal() // nil-safe
		if b.Engaged() {
			t.Fatal("a nil brake is engaged")
		}
	}
}

// TestBrakeReleasedWhenRedisFails: a brake that cannot read its key lets
// low-priority deliveries run (it never stops them), and signals without
// Redis do not block the caller.
func TestBrakeReleasedWhenRedisFails(t *testing.T) {
	rc := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", DialTimeout: 100 * time.Millisecond, MaxRetries: -1})
	defer rc.Close()
	var (
		mu     sync.Mutex
		warned []string
	)
	b := activities.NewBrake(rc, 100, func(msg string, _ ...any) { mu.Lock(); warned = append(warned, msg); mu.Unlock() })
	start := time.Now()
	for range 1000 {
		b.Signal()
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("1000 signals took %v: they must not wait for Redis", d)
	}
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		if b.Engaged() {
			t.Fatal("engaged although its key cannot be read")
		}
		time.Sleep(20 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(warned) != 1 { // one per 10 s, not one per read
		t.Errorf("warned %d times in a second: %q", len(warned), warned)
	}
}
