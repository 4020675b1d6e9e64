package activities_test

import (
	"bytes"
	"log/slog"
	"strings"
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
	defer func() { _ = rc.Close() }()
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
	defer func() { _ = rc.Close() }()
	var logs syncBuffer
	b := activities.NewBrake(rc, 100, slog.New(slog.NewTextHandler(&logs, nil)))
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
	if n := strings.Count(logs.String(), "level=WARN"); n != 1 { // one per 10 s, not one per read
		t.Errorf("warned %d times in a second:\n%s", n, logs.String())
	}
}

// syncBuffer is a bytes.Buffer for a logger written from goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
