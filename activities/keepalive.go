package activities

import (
	"context"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"
)

// StepHeartbeat is the heartbeat timeout of the event's steps (Prepare,
// RecipientsPage) run as activities: a step whose worker died, or whose
// task never reached a worker, is tried again after it instead of after
// its start-to-close timeout (minutes). The steps heartbeat every third of
// it while they run (keepAlive), whatever they wait on; a step done sooner
// sends none.
const StepHeartbeat = 30 * time.Second

// keepAlive heartbeats the activity every third of its heartbeat timeout
// until stop is called: it tells Temporal that the worker running it is
// alive, not how far it got. A no-op in a local activity, or an activity
// without a heartbeat timeout.
func keepAlive(ctx context.Context) (stop func()) {
	if !activity.IsActivity(ctx) {
		return func() {}
	}
	info := activity.GetInfo(ctx)
	if info.IsLocalActivity || info.HeartbeatTimeout <= 0 {
		return func() {}
	}
	never := func() time.Time { return time.Time{} } // beat every time
	return beatWhileIdle(ctx, info.HeartbeatTimeout/3, never, func() { activity.RecordHeartbeat(ctx) })
}

// beatWhileIdle calls beat whenever every has passed since the last beat
// (last), checking every every, until stop is called or ctx ends: a
// DeliverBatch heartbeats its progress itself as calls end, and this keeps
// it alive while it waits instead (for a call from the worker's pool,
// behind its event's other batches; for a destination's limit), so the
// server does not time it out for the wait.
//
// stop returns once the keeper has stopped (no beat after it), and may be
// called again.
func beatWhileIdle(ctx context.Context, every time.Duration, last func() time.Time, beat func()) (stop func()) {
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				if time.Since(last()) >= every {
					beat()
				}
			}
		}
	}()
	return sync.OnceFunc(func() { close(done); <-exited })
}
