package starter

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// EventRecord is the Redis record of the events the bridge started (design
// §3): Temporal's id policies reject a second start of an event only within
// the namespace's retention; this record, kept longer than the events
// topic's retention, covers the time after it, so a replay of the whole topic
// starts nothing again.
type EventRecord struct {
	rdb redis.UniversalClient
	ttl time.Duration
}

// eventRecordPrefix prefixes the record's keys: fanout:e:<workflow id>.
const eventRecordPrefix = "fanout:e:"

// NewEventRecord returns the record on rdb, keeping each event for ttl.
func NewEventRecord(rdb redis.UniversalClient, ttl time.Duration) *EventRecord {
	return &EventRecord{rdb: rdb, ttl: ttl}
}

// Seen reports whether the event of workflow id wid was started before.
func (r *EventRecord) Seen(ctx context.Context, wid string) (bool, error) {
	n, err := r.rdb.Exists(ctx, eventRecordPrefix+wid).Result()
	if err != nil {
		return false, fmt.Errorf("event record: %w", err)
	}
	return n == 1, nil
}

// Record writes the record of workflow id wid (SET NX GET with the TTL) and
// reports whether it already existed.
func (r *EventRecord) Record(ctx context.Context, wid, value string) (existed bool, err error) {
	_, err = r.rdb.SetArgs(ctx, eventRecordPrefix+wid, value, redis.SetArgs{Mode: "NX", Get: true, TTL: r.ttl}).Result()
	if errors.Is(err, redis.Nil) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("event record: %w", err)
	}
	return true, nil
}
