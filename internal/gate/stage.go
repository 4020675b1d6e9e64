package gate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/fanout/fanout"
)

// Batches of a big event are staged in Redis between the page activity that
// fetched them and the delivery batch that delivers them, so the recipients
// never pass through the workflow's history (which then holds only a key
// and a count per batch and stays small). A batch whose staged copy is gone
// is fetched again from get_recipients by its page cursor.

// BatchKey is the staging key of the n-th batch of an event.
func (g *Gate) BatchKey(eventID string, n int) string {
	return "fanout:b:" + eventID + ":" + strconv.Itoa(n)
}

// StageBatches writes batches (numbered from first) in one pipeline.
func (g *Gate) StageBatches(ctx context.Context, eventID string, first int, batches [][]fanout.Recipient) error {
	pipe := g.rdb.Pipeline()
	for i, b := range batches {
		v, err := json.Marshal(b)
		if err != nil {
			return err
		}
		pipe.Set(ctx, g.BatchKey(eventID, first+i), v, g.ttl)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("stage batches: %w", err)
	}
	return nil
}

// LoadBatch reads a staged batch; ok is false when it is gone.
func (g *Gate) LoadBatch(ctx context.Context, key string) (rs []fanout.Recipient, ok bool, err error) {
	v, err := g.rdb.Get(ctx, key).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("load batch: %w", err)
	}
	if err := json.Unmarshal(v, &rs); err != nil {
		return nil, false, fmt.Errorf("load batch %s: %w", key, err)
	}
	return rs, true, nil
}

// DropBatch deletes a staged batch once it is delivered.
func (g *Gate) DropBatch(ctx context.Context, key string) error {
	return g.rdb.Del(ctx, key).Err()
}
