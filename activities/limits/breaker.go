package limits

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/sony/gobreaker/v2"

	"github.com/fanout/fanout"
)

// MaxBreakers bounds the breakers a worker keeps (destinations come from
// hostile input): past it, the least recently used one is dropped, whatever
// its state (github.com/hashicorp/golang-lru: O(1) per new key). A failing
// host whose breaker was dropped is learnt again after BreakerFailures
// calls; one in use (asked for by a batch) is the most recently used.
const MaxBreakers = 10_000

// Breakers are a worker's circuit breakers, one per event type and
// destination, in process (each delivery worker learns a failing host on
// its own, after BreakerFailures calls of its own: no Redis round trip per
// call, and a worker that cannot reach a host does not stop the others).
type Breakers struct {
	// OnChange, when set, is told of every state change (metrics, logs).
	OnChange func(eventType, dest string, from, to gobreaker.State)
	once     sync.Once
	m        *lru.Cache[breakerID, *Breaker]
}

// cache is the registry, made on first use (a zero Breakers is ready).
func (b *Breakers) cache() *lru.Cache[breakerID, *Breaker] {
	b.once.Do(func() { b.m, _ = lru.New[breakerID, *Breaker](MaxBreakers) }) // errs only for a size <= 0
	return b.m
}

// Len is the number of breakers kept.
func (b *Breakers) Len() int { return b.cache().Len() }

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
// breaker is open: transient, with the cooldown as its Retry-After, and
// marked fanout.NotSent (it was never sent), so an at-most-once delivery
// is retried after the cooldown too.
var ErrOpen = errors.New("circuit_open")

// IsFailure reports whether a call's error counts against its destination:
// transient errors (5xx, 408, 429, timeouts, connection errors) do; a
// permanent answer (another 4xx: the host is up and answered) does not, nor
// does what says nothing of the destination (excluded).
func IsFailure(err error) bool {
	return err != nil && !fanout.IsPermanent(err) && !excluded(err)
}

// excluded reports whether a call's error says nothing of its destination:
// our own cancellation, or a failure before the request left the process
// (fanout.NotSent without a network error: the client refused the call, as
// net/http refuses a header with a control byte). Such a call counts
// neither as a failure nor as a success, so one event's bad request cannot
// open a breaker that other events share. A refused connection is a
// network error: it counts.
func excluded(err error) bool {
	if errors.Is(err, context.Canceled) {
		return true
	}
	var ne net.Error
	return fanout.IsNotSent(err) && !errors.As(err, &ne)
}

// Breaker is one destination's breaker: gobreaker, behind a lock-free
// fast path. While it is closed and has seen no failure since its last
// success (slow false), a call goes without gobreaker (no mutex: every
// delivery of a batch to one host shares this breaker); only a counted
// failure, and the calls after it until a success, go through gobreaker,
// which alone decides to open, let the trial call through and close.
type Breaker struct {
	cb       *gobreaker.CircuitBreaker[struct{}]
	cooldown time.Duration
	// slow: calls must go through gobreaker (not closed, or consecutive
	// failures counted). Set under mu from gobreaker's own state after each
	// call through it, so the last setting always reflects the last call.
	slow atomic.Bool
	mu   sync.Mutex
	// gen counts gobreaker's state changes: the outcome of a fast call is
	// handed to gobreaker only if its state did not change during the call
	// (as gobreaker ignores a call of an earlier generation).
	gen atomic.Uint64
}

// Do calls call through the breaker of dest of the type. It returns
// rejected and ErrOpen (wrapped with the cooldown as Retry-After, not sent) without
// calling when the breaker is open, or half-open with its trial call under
// way.
func (b *Breakers) Do(eventType, dest string, s BreakerSettings, call func() error) (rejected bool, err error) {
	br := b.Get(eventType, dest, s)
	if g, ok := br.Begin(); ok {
		err = call()
		br.End(g, err)
		return false, err
	}
	return br.Do(call)
}

// Begin reports whether a call may go on the fast path (b nil: no
// breaker, closed with no failure counted); the caller then makes the
// call and hands its outcome to End with gen. Otherwise it uses Do.
func (b *Breaker) Begin() (gen uint64, ok bool) {
	if b == nil {
		return 0, true
	}
	if b.slow.Load() {
		return 0, false
	}
	return b.gen.Load(), true
}

// End records the outcome of a fast call: nothing when it succeeded and no
// failure was counted meanwhile (the common case); else it is handed to
// gobreaker, as if it had been made through it.
func (b *Breaker) End(gen uint64, err error) {
	if b == nil {
		return
	}
	switch {
	case err == nil || fanout.IsPermanent(err):
		if !b.slow.Load() {
			return // a success with no failure counted to reset
		}
	case excluded(err):
		return // as gobreaker does
	}
	if b.gen.Load() != gen {
		return // its state changed during the call
	}
	_, _ = b.cb.Execute(func() (struct{}, error) { return struct{}{}, err })
	b.sync()
}

// Do calls call through gobreaker (see Breakers.Do). b nil: no breaker.
func (b *Breaker) Do(call func() error) (rejected bool, err error) {
	if b == nil {
		return false, call()
	}
	called := false
	_, err = b.cb.Execute(func() (struct{}, error) {
		called = true
		return struct{}{}, call()
	})
	b.sync()
	if !called && (errors.Is(err, gobreaker.ErrOpenState) || errors.Is(err, gobreaker.ErrTooManyRequests)) {
		return true, fanout.NotSent(fanout.RetryAfter(b.cooldown, ErrOpen))
	}
	return false, err
}

// sync sets slow from gobreaker's state after a call through it.
func (b *Breaker) sync() {
	b.mu.Lock()
	b.slow.Store(b.cb.State() != gobreaker.StateClosed || b.cb.Counts().ConsecutiveFailures > 0)
	b.mu.Unlock()
}

// Open reports whether the breaker is open or half-open.
func (b *Breaker) Open() bool { return b != nil && b.cb.State() != gobreaker.StateClosed }

// Open reports whether dest's breaker of the type is open or half-open.
func (b *Breakers) Open(eventType, dest string) bool {
	br, _ := b.cache().Peek(breakerID{eventType, dest})
	return br.Open()
}

// Get returns dest's breaker of the type (nil when s disables breakers),
// made on first use, and marks it the most recently used. A caller may keep
// it for a batch: a breaker dropped past MaxBreakers goes on working for it.
func (b *Breakers) Get(eventType, dest string, s BreakerSettings) *Breaker {
	if s.Failures <= 0 {
		return nil
	}
	id := breakerID{eventType, dest}
	c := b.cache()
	if br, ok := c.Get(id); ok {
		return br
	}
	br := b.newBreaker(eventType, dest, s)
	if prev, ok, _ := c.PeekOrAdd(id, br); ok {
		return prev // made meanwhile by another caller
	}
	return br
}

// newBreaker makes dest's breaker of the type.
func (b *Breakers) newBreaker(eventType, dest string, s BreakerSettings) *Breaker {
	n := uint32(s.Failures)
	br := &Breaker{cooldown: s.Cooldown}
	br.cb = gobreaker.NewCircuitBreaker[struct{}](gobreaker.Settings{
		Name:         dest,
		MaxRequests:  1, // one trial call when the cooldown is over
		Timeout:      s.Cooldown,
		ReadyToTrip:  func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= n },
		IsSuccessful: func(err error) bool { return err == nil || fanout.IsPermanent(err) },
		IsExcluded:   excluded,
		OnStateChange: func(_ string, from, to gobreaker.State) {
			br.gen.Add(1)
			if b.OnChange != nil {
				b.OnChange(eventType, dest, from, to)
			}
		},
	})
	return br
}
