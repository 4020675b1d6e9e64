package activities

import (
	"sync/atomic"
	"time"
)

// every lets something happen at most once per interval, from any number
// of goroutines at once without a lock: a Redis signal, a background read,
// a warning about a failing Redis. The zero value is ready, and its first
// due is at once.
type every struct{ last atomic.Int64 } // unix ns of the last time due

// due reports whether d has passed since the last time it was due, and
// if so makes now that time: of callers racing, one gets true.
func (e *every) due(d time.Duration) bool {
	now := time.Now().UnixNano()
	last := e.last.Load()
	return now-last >= int64(d) && e.last.CompareAndSwap(last, now)
}
