// Package backoff computes delivery retry delays: exponential growth with
// jitter, capped, and overridden by a destination's Retry-After. Temporal's
// RetryPolicy has no jitter, so the delivery activity returns this delay as
// the next-retry delay of its application error.
package backoff

import (
	"math/rand/v2"
	"time"
)

// Policy describes the retry delays.
type Policy struct {
	Initial time.Duration // delay before the 2nd attempt, before jitter
	Max     time.Duration // cap, before jitter
	// Jitter is the fraction of the delay that is randomised: the delay is
	// drawn uniformly from [d*(1-Jitter), d]. 0.5 ("equal jitter") by default.
	Jitter float64
	// MaxRetryAfter caps what a destination may ask for.
	MaxRetryAfter time.Duration
}

// Default is the delivery retry policy.
var Default = Policy{Initial: time.Second, Max: time.Minute, Jitter: 0.5, MaxRetryAfter: 10 * time.Minute}

// Delay returns the delay after the given failed attempt (1-based). A
// positive retryAfter wins over the computed delay (capped by MaxRetryAfter).
// r draws the jitter; nil uses the global source.
func (p Policy) Delay(attempt int, retryAfter time.Duration, r *rand.Rand) time.Duration {
	if retryAfter > 0 {
		if p.MaxRetryAfter > 0 && retryAfter > p.MaxRetryAfter {
			return p.MaxRetryAfter
		}
		return retryAfter
	}
	if attempt < 1 {
		attempt = 1
	}
	d := p.Initial
	for i := 1; i < attempt && d < p.Max; i++ {
		d *= 2
	}
	if p.Max > 0 && d > p.Max {
		d = p.Max
	}
	j := p.Jitter
	if j <= 0 {
		return d
	}
	if j > 1 {
		j = 1
	}
	var f float64
	if r != nil {
		f = r.Float64()
	} else {
		f = rand.Float64()
	}
	return d - time.Duration(float64(d)*j*f)
}
