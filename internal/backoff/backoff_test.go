package backoff

import (
	"math/rand/v2"
	"testing"
	"time"
)

func TestDelayGrowsWithJitterAndCap(t *testing.T) {
	p := Policy{Initial: time.Second, Max: 16 * time.Second, Jitter: 0.5}
	r := rand.New(rand.NewPCG(1, 2))
	for attempt, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 5: 16 * time.Second, 9: 16 * time.Second} {
		lo, hi := want/2, want
		seen := map[time.Duration]bool{}
		for range 200 {
			d := p.Delay(attempt, 0, r)
			if d < lo || d > hi {
				t.Fatalf("attempt %d: delay %v outside [%v, %v]", attempt, d, lo, hi)
			}
			seen[d] = true
		}
		if len(seen) < 50 {
			t.Fatalf("attempt %d: only %d distinct delays in 200 draws; no jitter", attempt, len(seen))
		}
	}
}

func TestRetryAfterWinsAndIsCapped(t *testing.T) {
	p := Policy{Initial: time.Second, Max: time.Minute, Jitter: 0.5, MaxRetryAfter: 30 * time.Second}
	if d := p.Delay(1, 7*time.Second, nil); d != 7*time.Second {
		t.Fatalf("Retry-After 7s: got %v", d)
	}
	if d := p.Delay(1, time.Hour, nil); d != 30*time.Second {
		t.Fatalf("Retry-After 1h capped at 30s: got %v", d)
	}
}
