package stack

import (
	"context"
	"strings"

	"github.com/fanout/fanout/activities/gate"
	"github.com/fanout/fanout/workers/webhook"
	"github.com/fanout/fanout/workflows/vocab"
)

// GateStates returns the gate state of each recipient of a webhook event
// that has a gate key, by recipient id.
func (s *Stack) GateStates(ctx context.Context, eventID string) (map[string]gate.State, error) {
	g := gate.New(s.RDB, 0)
	ek := vocab.EventKey(webhook.EventType, eventID)
	prefix := g.Key(ek, "")
	out := map[string]gate.State{}
	iter := s.RDB.Scan(ctx, 0, g.Key(ek, "*"), 1000).Iterator()
	var keys []string
	flush := func() error {
		if len(keys) == 0 {
			return nil
		}
		vals, err := s.RDB.MGet(ctx, keys...).Result()
		if err != nil {
			return err
		}
		for i, v := range vals {
			if str, ok := v.(string); ok {
				_, st := gate.ParseState(str)
				out[strings.TrimPrefix(keys[i], prefix)] = st
			}
		}
		keys = keys[:0]
		return nil
	}
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
		if len(keys) == 1000 {
			if err := flush(); err != nil {
				return nil, err
			}
		}
	}
	if err := iter.Err(); err != nil {
		return nil, err
	}
	return out, flush()
}
