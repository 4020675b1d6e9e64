package activities

import "github.com/fanout/fanout/internal/backoff"

// Backoff describes the delays between delivery retries: exponential, with
// jitter (Temporal's RetryPolicy has none, so DeliverBatch returns each delay
// as its error's next-retry delay), capped, and overridden by a destination's
// Retry-After. A worker main sets it through workers.Options.Backoff.
type Backoff = backoff.Policy

// DefaultBackoff is the delivery retry backoff: 1s doubling to 1m, half of
// each delay jittered, Retry-After honoured up to 10m.
var DefaultBackoff = backoff.Default
