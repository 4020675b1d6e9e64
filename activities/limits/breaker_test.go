package limits

import (
	"context"
	"errors"
	"fmt"
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
		do(fanout.Permanent(errors.New("HTTP 404")))
		do(context.Canceled)
	}
	if b.Open("t", "h") {
		t.Fatal("opened on permanent answers or cancellation")
	}
	do(errors.New("HTTP 503"))
	do(errors.New("timeout"))
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
