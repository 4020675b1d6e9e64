//go:build integration

package activities_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/activities"
)

// waitEngaged polls b.Engaged (which reads the key in the background)
// until it reports want, for at most limit.
func waitEngaged(t *testing.T, b *activities.Brake, want bool, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for b.Engaged() != want {
		if time.Now().After(deadline) {
			t.Fatalf("brake engaged: want %v within %v", want, limit)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestBrakeHoldsLowPriorityWhileHighDelivers: a high-priority batch puts the
// brake on (BrakeKey in Redis); while it is on, a low-priority batch on a
// worker braked at 200/s delivers at most that; once the higher priority
// stops, the key expires after BrakeHold and the brake comes off.
func TestBrakeHoldsLowPriorityWhileHighDelivers(t *testing.T) {
	if err := rdb.Del(context.Background(), activities.BrakeKey).Err(); err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		times []time.Time
	)
	h := &audience{fail: func(fanout.Recipient) error {
		mu.Lock()
		times = append(times, time.Now())
		mu.Unlock()
		return nil
	}}
	env, acts, _ := setup(t, h)
	const braked = 200
	acts.Brake = activities.NewBrake(rdb, braked, nil)
	if acts.Brake.Engaged() {
		t.Fatal("brake on before any higher-priority delivery")
	}

	// A high-priority batch: not braked, and it sets the key.
	high := activities.DeliverBatchInput{Event: event("brake-high", 0), Priority: fanout.PriorityHigh, AttemptID: "a1",
		Recipients: recipients(300), MaxAttempts: 3, Concurrency: 16}
	hv, err := env.ExecuteActivity(acts.DeliverBatch, high)
	if err != nil {
		t.Fatal(err)
	}
	var hres activities.DeliverBatchResult
	if err := hv.Get(&hres); err != nil || hres.Delivered != 300 || hres.Braked != 0 {
		t.Fatalf("high batch: %+v, %v; want 300 delivered, none braked", hres, err)
	}
	waitEngaged(t, acts.Brake, true, 2*time.Second)
	if ttl := rdb.PTTL(context.Background(), activities.BrakeKey).Val(); ttl <= 0 || ttl > activities.BrakeHold {
		t.Fatalf("%s TTL %v: want (0, %v]", activities.BrakeKey, ttl, activities.BrakeHold)
	}

	// Higher-priority work goes on for 2 s (as a worker's batches signal
	// while they feed) while a low-priority batch delivers.
	signalFor := 2 * time.Second
	stop := make(chan struct{})
	go func() {
		tk := time.NewTicker(50 * time.Millisecond)
		defer tk.Stop()
		end := time.After(signalFor)
		for {
			select {
			case <-tk.C:
				acts.Brake.Signal()
			case <-end:
				close(stop)
				return
			}
		}
	}()
	mu.Lock()
	times = nil
	mu.Unlock()
	t0 := time.Now()
	low := activities.DeliverBatchInput{Event: event("brake-low", 0), Priority: fanout.PriorityLow, AttemptID: "a1",
		Recipients: recipients(1500), MaxAttempts: 3, Concurrency: 64}
	v, err := env.ExecuteActivity(acts.DeliverBatch, low)
	if err != nil {
		t.Fatal(err)
	}
	var res activities.DeliverBatchResult
	if err := v.Get(&res); err != nil {
		t.Fatal(err)
	}
	<-stop
	if res.Delivered != 1500 {
		t.Fatalf("low batch delivered %d of 1500", res.Delivered)
	}
	if res.Braked < braked || res.Braked >= 1500 { // reported, for the event's details
		t.Errorf("low batch reports %d deliveries braked; want those the brake held (>= %d, < 1500)", res.Braked, braked)
	}
	// While the signals went on (and BrakeHold after, less a poll), at most
	// the braked rate plus its burst (a twentieth of a second's worth).
	window := signalFor + activities.BrakeHold/2
	n := 0
	mu.Lock()
	for _, at := range times {
		if at.Sub(t0) < window {
			n++
		}
	}
	mu.Unlock()
	if limit := int(braked*window.Seconds()) + braked/20 + 1; n > limit {
		t.Errorf("low priority delivered %d in the first %v with the brake on; want <= %d (%d/s)", n, window, limit, braked)
	}
	if n < braked { // it was braked, not stopped
		t.Errorf("low priority delivered only %d in %v braked at %d/s", n, window, braked)
	}
	t.Logf("low priority: %d delivered in the first %v braked at %d/s; all 1500 in %v", n, window, braked, time.Since(t0).Round(time.Millisecond))

	// The signals stopped: the key expires and the brake comes off.
	waitEngaged(t, acts.Brake, false, activities.BrakeHold+2*time.Second)
	if rdb.Exists(context.Background(), activities.BrakeKey).Val() != 0 {
		t.Fatalf("%s still set after the higher priority stopped", activities.BrakeKey)
	}
}
