package vocab

import (
	"crypto/sha256"
	"encoding/hex"

	"go.temporal.io/sdk/temporal"

	"github.com/fanout/fanout"
)

// MaxFairnessKeyLen is Temporal's bound on a fairness key.
const MaxFairnessKeyLen = 64

// FairnessKey is the task-queue fairness key of an event's work: its
// workflow tasks, its batches and their activities. Where the server
// dispatches fairly (Temporal task-queue fairness), tasks of different keys
// in one queue are dispatched round-robin, weighted, so a small event's
// batch is not queued behind every batch a big one has waiting. An event
// with a tenant shares the tenant's key ("t:<tenant>"); any other has its
// own ("e:<type>/<id>", or, when that is longer than Temporal's 64 bytes,
// its first 30 bytes, "~" and 31 hex digits of its SHA-256, which keeps it
// distinct and still readable).
func FairnessKey(ev fanout.Event) string {
	if ev.Tenant != "" {
		return "t:" + ev.Tenant // ValidateTenant bounds it to 62 bytes
	}
	k := "e:" + ev.Type + "/" + ev.ID
	if len(k) <= MaxFairnessKeyLen {
		return k
	}
	sum := sha256.Sum256([]byte(k))
	return k[:30] + "~" + hex.EncodeToString(sum[:])[:MaxFairnessKeyLen-31]
}

// HighPriorityKey is the Temporal priority key of the work of an event
// that says it is high priority (Event.Priority). Where the server
// dispatches by priority (with fairness on, or its new matcher), a queue
// hands out its tasks of key 1 before those of the default, 3. Each
// fanout priority has delivery queues of its own, so the key only tells on
// the queue every event shares, the events queue: a high event's workflow
// tasks pass the backlog of normal and low events'. Normal and low keep the
// server's default, so that a stream of normal events cannot starve a low
// one's workflow tasks.
const HighPriorityKey = 1

// TaskPriority is the Temporal priority an event's work carries: its
// fairness key, weighted by its type's FairnessWeight (0: the server's
// default, 1), and HighPriorityKey if the event says it is high priority.
// (An event high by its type's default gets its own high delivery queues
// all the same, but its workflow tasks keep the default key: the start
// does not know its type's options.)
func TaskPriority(ev fanout.Event, weight float64) temporal.Priority {
	p := temporal.Priority{FairnessKey: FairnessKey(ev), FairnessWeight: float32(weight)}
	if ev.Priority == fanout.PriorityHigh {
		p.PriorityKey = HighPriorityKey
	}
	return p
}
