package limits

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/fanout/fanout"
)

// MaxBreakers bounds the breakers a worker keeps (destinations come from
// hostile input): past it, closed breakers are dropped (an open one is
// kept, so a flood of new hosts cannot reset a failing host's breaker).
const MaxBreakers = 10_000

// Breakers are a worker's circuit breakers, one per event type and
// destination, in process (each delivery worker learns a failing host on
// its own, after BreakerFailures calls of its own: no Redis round trip per
// call, and a worker that cannot reach a host does not stop the others).
type Breakers struct {
	// OnChange, when set, is told of every state change (metrics, logs).
	OnChange func(eventType, dest string, from, to gobreaker.State)
	mu       sync.Mutex
	m        map[breakerID]*gobreaker.CircuitBreaker[struct{}]
}

type breakerID struct{ eventType, dest string }

// BreakerSettings are a type's breaker options, resolved.
type BreakerSettings struct {
	Failures int // consecutive failures that open it; <= 0: no breaker
	Cooldown time.Duration
}

// ResolveBreaker resolves the type's options' breaker defaults.
func ResolveBreaker(o fanout.TypeOptions) BreakerSettings {
	s := BreakerSettings{Failures: o.BreakerFailures, Cooldown: o.BreakerCooldown}
	if s.Failures == 0 {
		s.Failures = fanout.DefaultBreakerFailures
	}
	if s.Cooldown <= 0 {
		s.Cooldown = fanout.DefaultBreakerCooldown
	}
	return s
}

// ErrOpen is the error of a delivery not made because its destination's
// breaker is open: transient, with the cooldown as its Retry-After.
var ErrOpen = errors.New("circuit_open")

// IsFailure reports whether a call's error counts against its destination:
// transient errors (5xx, 408, 429, timeouts, connection errors) do; a
// permanent answer (another 4xx: the host is up and answered) and our own
// cancellation do not.
func IsFailure(err error) bool {
	return err != nil && !fanout.IsPermanent(err) && !errors.Is(err, context.Canceled)
}

// Do calls call through the breaker of dest of the type. It returns
// rejected and ErrOpen (wrapped with the cooldown as Retry-After) without
// calling when the breaker is open, or half-open with its trial call under
// way.
func (b *Breakers) Do(eventType, dest string, s BreakerSettings, call func() error) (rejected bool, err error) {
	if s.Failures <= 0 {
		return false, call()
	}
	cb := b.get(eventType, dest, s)
	called := false
	_, err = cb.Execute(func() (struct{}, error) {
		called = true
		return struct{}{}, call()
	})
	if !called && (errors.Is(err, gobreaker.ErrOpenState) || errors.Is(err, gobreaker.ErrTooManyRequests)) {
		return true, fanout.RetryAfter(s.Cooldown, ErrOpen)
	}
	return false, err
}

// Open reports whether dest's breaker of the type is open or half-open.
func (b *Breakers) Open(eventType, dest string) bool {
	b.mu.Lock()
	cb := b.m[breakerID{eventType, dest}]
	b.mu.Unlock()
	return cb != nil && cb.State() != gobreaker.StateClosed
}

func (b *Breakers) get(eventType, dest string, s BreakerSettings) *gobreaker.CircuitBreaker[struct{}] {
	id := breakerID{eventType, dest}
	b.mu.Lock()
	defer b.mu.Unlock()
	if cb, ok := b.m[id]; ok {
		return cb
	}
	if b.m == nil {
		b.m = map[breakerID]*gobreaker.CircuitBreaker[struct{}]{}
	}
	if len(b.m) >= MaxBreakers {
		for k, cb := range b.m {
			if cb.State() == gobreaker.StateClosed {
				delete(b.m, k)
			}
		}
	}
	n := uint32(s.Failures)
	cb := gobreaker.NewCircuitBreaker[struct{}](gobreaker.Settings{
		Name:         dest,
		MaxRequests:  1, // one trial call when the cooldown is over
		Timeout:      s.Cooldown,
		ReadyToTrip:  func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= n },
		IsSuccessful: func(err error) bool { return err == nil || fanout.IsPermanent(err) },
		// Our own cancellation says nothing of the host.
		IsExcluded: func(err error) bool { return errors.Is(err, context.Canceled) },
		OnStateChange: func(_ string, from, to gobreaker.State) {
			if b.OnChange != nil {
				b.OnChange(eventType, dest, from, to)
			}
		},
	})
	b.m[id] = cb
	return cb
}
