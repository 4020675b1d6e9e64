package limits

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/fanout/fanout"
)

func fanoutOpts(failures int, cooldown time.Duration) fanout.TypeOptions {
	return fanout.TypeOptions{BreakerFailures: failures, BreakerCooldown: cooldown}
}

// TestBreakerCountsOnlyHostFailures: permanent answers (the host is up)
// and our own cancellation never open it; transient failures in a row do;
// after the cooldown one trial call goes through and its success closes it.
func TestBreakerCountsOnlyHostFailures(t *testing.T) {
	var b Breakers
	var changes []string
	b.OnChange = func(_, dest string, from, to gobreaker.State) { changes = append(changes, dest+":"+to.String()) }
	s := BreakerSettings{Failures: 2, Cooldown: 50 * time.Millisecond}
	do := func(err error) (bool, error) { return b.Do("t", "h", s, func() error { return err }) }
	for range 5 {
		_, _ = do(fanout.Permanent(errors.New("HTTP 404")))
		_, _ = do(context.Canceled)
	}
	if b.Open("t", "h") {
		t.Fatal("opened on permanent answers or cancellation")
	}
	_, _ = do(errors.New("HTTP 503"))
	_, _ = do(errors.New("timeout"))
	if !b.Open("t", "h") || b.Open("t", "other") || b.Open("u", "h") {
		t.Fatal("want only t/h open after 2 failures in a row")
	}
	called := false
	rej, err := b.Do("t", "h", s, func() error { called = true; return nil })
	if !rej || called || !errors.Is(err, ErrOpen) {
		t.Fatalf("open: rejected %v called %v err %v", rej, called, err)
	}
	time.Sleep(60 * time.Millisecond)
	if rej, err := do(nil); rej || err != nil || b.Open("t", "h") {
		t.Fatalf("trial after the cooldown: rejected %v err %v open %v", rej, err, b.Open("t", "h"))
	}
	if want := "[h:open h:half-open h:closed]"; fmt.Sprint(changes) != want {
		t.Errorf("changes %v, want %s", changes, want)
	}
	// Off: every call goes through.
	for range 5 {
		if rej, _ := b.Do("t", "off", BreakerSettings{Failures: -1}, func() error { return errors.New("x") }); rej {
			t.Fatal("a disabled breaker rejected a call")
		}
	}
}

// TestBreakerFastPathMatchesGobreaker: one call at a time, a random run of
// outcomes (successes, permanent answers, cancellations, failures) through
// Breakers.Do (the lock-free path while closed) leaves the breaker in the
// state plain gobreaker with the same settings is in after each call, and
// rejects the same calls.
func TestBreakerFastPathMatchesGobreaker(t *testing.T) {
	s := BreakerSettings{Failures: 3, Cooldown: time.Hour}
	var b Breakers
	ref := gobreaker.NewCircuitBreaker[struct{}](gobreaker.Settings{
		MaxRequests:  1,
		Timeout:      time.Hour,
		ReadyToTrip:  func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= 3 },
		IsSuccessful: func(err error) bool { return err == nil || fanout.IsPermanent(err) },
		IsExcluded:   func(err error) bool { return errors.Is(err, context.Canceled) },
	})
	outcomes := []error{nil, fanout.Permanent(errors.New("HTTP 404")), context.Canceled, errors.New("HTTP 503")}
	rnd := uint64(1)
	opened := false
	for i := range 2000 {
		rnd = rnd*6364136223846793005 + 1442695040888963407
		// Failures more often than not, so that runs of 3 happen.
		e := outcomes[3]
		if rnd>>62 == 0 {
			e = outcomes[(rnd>>40)%3]
		}
		_, refErr := ref.Execute(func() (struct{}, error) { return struct{}{}, e })
		rej, _ := b.Do("t", "h", s, func() error { return e })
		refRej := errors.Is(refErr, gobreaker.ErrOpenState)
		if rej != refRej || b.Open("t", "h") != (ref.State() != gobreaker.StateClosed) {
			t.Fatalf("call %d (%v): rejected %v open %v, gobreaker rejected %v state %v", i, e, rej, b.Open("t", "h"), refRej, ref.State())
		}
		opened = opened || rej
		if rej { // start again: a new breaker and reference
			b = Breakers{}
			ref = gobreaker.NewCircuitBreaker[struct{}](gobreaker.Settings{
				MaxRequests:  1,
				Timeout:      time.Hour,
				ReadyToTrip:  func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= 3 },
				IsSuccessful: func(err error) bool { return err == nil || fanout.IsPermanent(err) },
				IsExcluded:   func(err error) bool { return errors.Is(err, context.Canceled) },
			})
		}
	}
	if !opened {
		t.Fatal("the run never opened the breaker: the test proves nothing")
	}
}

// TestBreakerConcurrentFailuresOpenIt: 64 goroutines calling a host that
// fails every call open its breaker (reported once), after which calls
// are rejected; a host that always answers never opens, and its calls
// take the fast path (gobreaker saw none of them).
func TestBreakerConcurrentFailuresOpenIt(t *testing.T) {
	var b Breakers
	var mu sync.Mutex
	opens := 0
	b.OnChange = func(_, _ string, _, to gobreaker.State) {
		if to == gobreaker.StateOpen {
			mu.Lock()
			opens++
			mu.Unlock()
		}
	}
	s := BreakerSettings{Failures: 5, Cooldown: time.Hour}
	var wg sync.WaitGroup
	var rejected, calls atomic.Int64
	for range 64 {
		wg.Go(func() {
			for range 50 {
				rej, _ := b.Do("t", "down", s, func() error { calls.Add(1); return errors.New("HTTP 503") })
				if rej {
					rejected.Add(1)
				}
				_, _ = b.Do("t", "up", s, func() error { return nil })
			}
		})
	}
	wg.Wait()
	if !b.Open("t", "down") || opens != 1 || rejected.Load() == 0 || calls.Load()+rejected.Load() != 64*50 {
		t.Fatalf("down: open %v, opened %d times, %d calls, %d rejected", b.Open("t", "down"), opens, calls.Load(), rejected.Load())
	}
	up := b.Get("t", "up", s)
	if b.Open("t", "up") || up.cb.Counts().Requests != 0 {
		t.Fatalf("up: open %v, %d calls through gobreaker (want 0: the fast path)", b.Open("t", "up"), up.cb.Counts().Requests)
	}
}

// BenchmarkBreakerClosed: calls through one closed breaker from every
// goroutine (a batch's deliveries to one host).
func BenchmarkBreakerClosed(b *testing.B) {
	var br Breakers
	s := BreakerSettings{Failures: 5, Cooldown: time.Minute}
	call := func() error { return nil }
	b.ReportAllocs()
	b.SetParallelism(256)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if rej, _ := br.Do("t", "h", s, call); rej {
				b.Fatal("rejected")
			}
		}
	})
}

// TestBreakerRegistryEvictsLeastRecentlyUsed (issue 23, item 7): the
// registry stays within MaxBreakers whatever the breakers' states: past it,
// the least recently used one goes, open or not (a flood of failing hosts
// cannot grow it), and a breaker in use is kept.
func TestBreakerRegistryEvictsLeastRecentlyUsed(t *testing.T) {
	var b Breakers
	s := BreakerSettings{Failures: 1, Cooldown: time.Hour}
	fail := func() error { return errors.New("HTTP 503") }
	for i := range MaxBreakers {
		_, _ = b.Do("t", fmt.Sprint("h", i), s, fail) // each opens at once
	}
	if !b.Open("t", "h0") || !b.Open("t", "h1") {
		t.Fatal("want h0 and h1 open")
	}
	b.Get("t", "h0", s) // h0 used again: h1 is now the least recent
	_, _ = b.Do("t", "new", s, fail)
	if b.Open("t", "h1") {
		t.Error("h1 (open, least recently used) was kept past MaxBreakers")
	}
	if !b.Open("t", "h0") || !b.Open("t", "new") {
		t.Error("h0 (used again) or the new breaker is gone")
	}
	if n := b.Len(); n > MaxBreakers {
		t.Errorf("%d breakers kept, over MaxBreakers %d", n, MaxBreakers)
	}
}

// TestBreakerIgnoresFailuresBeforeTheRequestLeft (issue 23, item 2): a call
// its client refused before sending it (fanout.NotSent with no network
// error: an invalid header, a full provider queue) says nothing of the
// destination and never opens its breaker; a refused connection
// (NotSent too, but a network error) does.
func TestBreakerIgnoresFailuresBeforeTheRequestLeft(t *testing.T) {
	var b Breakers
	s := BreakerSettings{Failures: 2, Cooldown: time.Hour}
	local := fanout.NotSent(errors.New(`net/http: invalid header field value for "Content-Type"`))
	for range 5 {
		if _, err := b.Do("t", "h", s, func() error { return local }); err != local {
			t.Fatalf("err %v, want the call's own", err)
		}
	}
	g, ok := b.Get("t", "h", s).Begin()
	if !ok {
		t.Fatal("the fast path is off after calls not sent")
	}
	b.Get("t", "h", s).End(g, local)
	if b.Open("t", "h") {
		t.Fatal("calls never sent opened the breaker")
	}
	refused := fanout.NotSent(&net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")})
	for range 2 {
		_, _ = b.Do("t", "h", s, func() error { return refused })
	}
	if !b.Open("t", "h") {
		t.Error("refused connections did not open the breaker")
	}
}
