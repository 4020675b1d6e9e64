package activities

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/fanout/fanout"
)

// The pacer's bucket starts with what the lane is owed since PaceFrom, at
// most MaxPaceCatchUp's worth, and empty for a retry or a schedule that
// starts now or later.
func TestPacerStartsWithWhatTheLaneIsOwed(t *testing.T) {
	now := time.Now()
	const r = 500.0
	for _, c := range []struct {
		name    string
		from    time.Time
		attempt int32
		want    float64
	}{
		{"no schedule", time.Time{}, 1, 0},
		{"starts now", now, 1, 0},
		{"starts later", now.Add(3 * time.Second), 1, 0},
		{"lane gap of 400ms", now.Add(-400 * time.Millisecond), 1, 200},
		{"gap over the catch-up bound", now.Add(-10 * time.Second), 1, r * MaxPaceCatchUp.Seconds()},
		{"retry", now.Add(-400 * time.Millisecond), 2, 0},
	} {
		p := newPacer(r, c.from, now, c.attempt, nil)
		if got := p.lim.TokensAt(now); math.Abs(got-c.want) > 1 {
			t.Errorf("%s: %.1f tokens at the start, want %.0f", c.name, got, c.want)
		}
	}
	if newPacer(0, now, now, 1, nil) != nil || newPacer(math.Inf(1), now, now, 1, nil) != nil {
		t.Error("a pacer without a finite positive rate")
	}
}

// A paced run never goes faster than its rate: n deliveries from an empty
// bucket take at least (n-1)/rate.
func TestPacerHoldsTheRate(t *testing.T) {
	const r, n = 400.0, 200
	start := time.Now()
	p := newPacer(r, start, start, 1, nil)
	for range n {
		if err := p.wait(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if took, least := time.Since(start), time.Duration(float64(n-1)/r*float64(time.Second)); took < least-5*time.Millisecond {
		t.Fatalf("%d waits at %v/s took %v, under the %v the rate allows", n, r, took, least)
	}
}

// A delivery due after the attempt's deadline (less paceYieldMargin) is not
// waited for: wait says so at once and leaves the token for the next
// attempt. A canceled context ends a wait.
func TestPacerYieldsBeforeTheDeadlineAndStopsOnCancel(t *testing.T) {
	now := time.Now()
	p := newPacer(1, now, now, 1, nil) // next token in 1s
	ctx, cancel := context.WithDeadline(context.Background(), now.Add(paceYieldMargin+500*time.Millisecond))
	defer cancel()
	t0 := time.Now()
	if err := p.wait(ctx); !errors.Is(err, errPaceDeadline) {
		t.Fatalf("wait past the deadline: %v, want errPaceDeadline", err)
	}
	if d := time.Since(t0); d > 500*time.Millisecond {
		t.Errorf("the yield waited %v", d)
	}
	if got := p.lim.TokensAt(time.Now()); got < -0.01 {
		t.Errorf("the yield took a token: %.2f left", got)
	}

	// No deadline: the wait for a token 5s away beats each second until
	// the cancel.
	beats := 0
	ctx2, cancel2 := context.WithCancel(context.Background())
	go func() { time.Sleep(2200 * time.Millisecond); cancel2() }()
	p = newPacer(0.2, time.Now(), time.Now(), 1, func() { beats++ })
	if err := p.wait(ctx2); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled wait: %v", err)
	}
	if beats < 1 {
		t.Errorf("%d heartbeats during a wait of over 2s, want one a second", beats)
	}
}

// TestYieldAt: a batch stops starting deliveries a tenth of its attempt's
// time before the deadline, at least paceYieldMargin, at most half the
// attempt, but always at least a call's time (its CallTimeout and
// CallSlack), so the calls it started end before it; never without a
// deadline.
func TestYieldAt(t *testing.T) {
	start := time.Now()
	for _, tc := range []struct {
		timeout, call, before time.Duration
	}{
		{5 * time.Minute, 0, 30 * time.Second},
		{5 * time.Minute, time.Minute, time.Minute + fanout.CallSlack},
		{40 * time.Second, time.Second, time.Second + fanout.CallSlack},
		{20 * time.Minute, time.Second, 2 * time.Minute},
		{4 * time.Second, time.Second, time.Second + fanout.CallSlack},
	} {
		ctx, cancel := context.WithDeadline(context.Background(), start.Add(tc.timeout))
		at, ok := yieldAt(ctx, start, tc.call)
		cancel()
		if want := start.Add(tc.timeout - tc.before); !ok || !at.Equal(want) {
			t.Errorf("timeout %v, calls of %v: yield at %v (%v), want %v before the deadline", tc.timeout, tc.call, at.Sub(start), ok, tc.before)
		}
	}
	if _, ok := yieldAt(context.Background(), start, 0); ok {
		t.Error("a context without a deadline yields")
	}
}

// TestSlowRateWaitsForItsDueTime (issue 23, item 8): a rate slower than one
// call per attempt yields with the time its next call is due, so the
// attempt's retry waits until then (not 100 ms), and the retry, resumed
// from that time, is owed the call at once instead of yielding again.
func TestSlowRateWaitsForItsDueTime(t *testing.T) {
	now := time.Now()
	p := newPacer(1.0/60, now, now, 1, nil) // one call a minute: next in 60s
	ctx, cancel := context.WithDeadline(context.Background(), now.Add(paceYieldMargin+time.Second))
	defer cancel()
	err := p.wait(ctx)
	due, ok := paceDue(err)
	if !errors.Is(err, errPaceDeadline) || !ok || due.Sub(now) < 59*time.Second || due.Sub(now) > 61*time.Second {
		t.Fatalf("wait: %v, due %v after the start; want errPaceDeadline due in ~60s", err, due.Sub(now))
	}
	// The retry starts when it is due, resumed from the yield.
	later := due.Add(10 * time.Millisecond)
	r := newPacer(1.0/60, resumeFrom(due, 1.0/60), later, 1, nil)
	if got := r.lim.TokensAt(later); got < 0.99 {
		t.Errorf("the resumed retry holds %.2f tokens, want the call it was due", got)
	}
}
