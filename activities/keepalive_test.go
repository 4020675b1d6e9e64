package activities

import (
	"context"
	"sync"
	"testing"
	"time"
)

// TestBeatWhileIdle: a batch's keeper beats every interval in which nothing
// else beat, none while the batch beats by itself, and none once stop has
// returned (which may be called twice):
// deliveries.keepBeating heartbeats a batch that waits (for a call, behind
// its event's other batches) so that it is not timed out for the wait.
func TestBeatWhileIdle(t *testing.T) {
	var (
		mu    sync.Mutex
		last  time.Time
		beats int
	)
	lastBeat := func() time.Time { mu.Lock(); defer mu.Unlock(); return last }
	beat := func() { mu.Lock(); beats++; last = time.Now(); mu.Unlock() }
	count := func() int { mu.Lock(); defer mu.Unlock(); return beats }

	stop := beatWhileIdle(context.Background(), 5*time.Millisecond, lastBeat, beat)
	for deadline := time.Now().Add(5 * time.Second); count() < 5; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d beats in 5 s of waiting, want 5", count())
		}
	}
	stop()
	n := count()
	stop() // again: a no-op
	time.Sleep(30 * time.Millisecond)
	if count() != n {
		t.Errorf("%d beats after stop", count()-n)
	}

	// The batch beats by itself (calls end) more often than every: the
	// keeper adds none.
	beats = 0
	busy, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for busy.Err() == nil {
			mu.Lock()
			last = time.Now()
			mu.Unlock()
			time.Sleep(time.Millisecond)
		}
	}()
	stop = beatWhileIdle(busy, 20*time.Millisecond, lastBeat, beat)
	time.Sleep(100 * time.Millisecond)
	stop()
	if c := count(); c != 0 {
		t.Errorf("%d beats while the batch beat every millisecond", c)
	}
}
