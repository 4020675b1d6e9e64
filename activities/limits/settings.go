package limits

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/fanout/fanout"
)

// DestinationSettings are an event type's flow control per destination
// host as the environment sets them (the stock webhook type's: embedded in
// webhook.Config): the default rate limit and the circuit breaker. They
// become the type's fanout.TypeOptions of the same names.
type DestinationSettings struct {
	// DestinationRate: the type's default limit per destination host, in
	// calls per second shared by every delivery worker (0: none; `starter
	// limits` overrides it at run time).
	DestinationRate float64 `env:"FANOUT_DESTINATION_RATE"`
	// BreakerFailures: calls in a row that fail before a host's breaker
	// opens (0: fanout.DefaultBreakerFailures; -1: no breaker); BreakerCooldown: how long it stays open (0: fanout.DefaultBreakerCooldown).
	BreakerFailures int           `env:"FANOUT_BREAKER_FAILURES"`
	BreakerCooldown time.Duration `env:"FANOUT_BREAKER_COOLDOWN"`
}

// SetDefaults sets the breaker's defaults, fanout's (the struct that
// embeds d calls it).
func (d *DestinationSettings) SetDefaults() {
	d.BreakerFailures, d.BreakerCooldown = fanout.DefaultBreakerFailures, fanout.DefaultBreakerCooldown
}

// Check checks the rate's upper bound (fanout.TypeOptions.Validate checks
// the rest of the fields).
func (d DestinationSettings) Check() error {
	if math.IsNaN(d.DestinationRate) || d.DestinationRate > MaxRate {
		return fmt.Errorf("FANOUT_DESTINATION_RATE: %v outside 0..%v", d.DestinationRate, MaxRate)
	}
	return nil
}

// BrakeSettings are the low-priority brake of a worker as the environment
// sets it (embedded in workers.Config): while events of a higher priority
// deliver, the worker delivers low-priority events at most this fast (the
// rate grammar of ParseRate: 1000/s, 60000/m; off: no brake). See
// activities/brake.go.
type BrakeSettings struct {
	LowPriorityBrake string `env:"FANOUT_LOW_PRIORITY_BRAKE"`
}

// LowPriorityBrakeRate is FANOUT_LOW_PRIORITY_BRAKE as workers.Options
// takes it: recipients per second, 0 for the default (empty), -1 for off.
func (b BrakeSettings) LowPriorityBrakeRate() (float64, error) {
	if strings.TrimSpace(b.LowPriorityBrake) == "" {
		return 0, nil
	}
	r, err := ParseRate(b.LowPriorityBrake)
	if err != nil {
		return 0, fmt.Errorf("FANOUT_LOW_PRIORITY_BRAKE: %w", err)
	}
	if r == 0 {
		return -1, nil
	}
	return r, nil
}
