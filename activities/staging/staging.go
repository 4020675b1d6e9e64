// Package staging keeps the batches of a big event in Redis between the page
// activity that fetched them and the delivery batch that delivers them, so
// the recipients never pass through the workflow's history (which then holds
// only a key and a count per batch and stays small). A batch whose staged
// copy is gone is fetched again from get_recipients by its page cursor.
package staging

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/internal/codec"
)

// DefaultTTL is how long a staged batch lives when nobody drops it: it must
// outlast a paused or slow event's window.
const DefaultTTL = 7 * 24 * time.Hour

// Store stages batches in Redis.
type Store struct {
	rdb redis.UniversalClient
	ttl time.Duration
	// sealer, when set, encrypts each batch before SET and decrypts it
	// after GET (WithSealer).
	sealer Sealer
}

// Sealer encrypts and decrypts values (internal/codec's Keyring is one).
type Sealer interface {
	Seal(plaintext []byte) []byte
	Open(sealed []byte) ([]byte, error)
}

// WithSealer has s store every batch sealed by sl (nil: in clear, as
// before) and returns s.
func (s *Store) WithSealer(sl Sealer) *Store {
	s.sealer = sl
	return s
}

// ErrUnreadable: a staged batch is there but cannot be read as this store
// writes them: in clear while the store seals (staged before encryption was
// turned on), sealed while it does not, or sealed with a key it lacks or
// changed since. The caller fetches the batch again from get_recipients,
// as for a batch that is gone.
var ErrUnreadable = errors.New("staged batch unreadable")

// New returns a store whose batches live ttl (DefaultTTL when zero).
func New(rdb redis.UniversalClient, ttl time.Duration) *Store {
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	return &Store{rdb: rdb, ttl: ttl}
}

// Key is the staging key of the n-th batch of an event (eventKey:
// vocab.EventKey, type and id).
func (s *Store) Key(eventKey string, n int) string {
	return "fanout:b:" + eventKey + ":" + strconv.Itoa(n)
}

// Stage writes batches (numbered from first) in one pipeline.
func (s *Store) Stage(ctx context.Context, eventKey string, first int, batches [][]fanout.Recipient) error {
	pipe := s.rdb.Pipeline()
	for i, b := range batches {
		v, err := json.Marshal(b)
		if err != nil {
			return err
		}
		if s.sealer != nil {
			v = s.sealer.Seal(v)
		}
		pipe.Set(ctx, s.Key(eventKey, first+i), v, s.ttl)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("stage batches: %w", err)
	}
	return nil
}

// Load reads a staged batch; ok is false when it is gone. An error
// wrapping ErrUnreadable means it is there but cannot be read (see there).
func (s *Store) Load(ctx context.Context, key string) (rs []fanout.Recipient, ok bool, err error) {
	v, err := s.rdb.Get(ctx, key).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("load batch: %w", err)
	}
	if s.sealer != nil {
		if v, err = s.sealer.Open(v); err != nil {
			return nil, false, fmt.Errorf("load batch %s: %w: %w", key, ErrUnreadable, err)
		}
	} else if codec.IsSealed(v) {
		return nil, false, fmt.Errorf("load batch %s: %w: sealed, and this worker has no keys (FANOUT_CODEC_KEYS)", key, ErrUnreadable)
	}
	if err := json.Unmarshal(v, &rs); err != nil {
		return nil, false, fmt.Errorf("load batch %s: %w", key, err)
	}
	return rs, true, nil
}

// Drop deletes a staged batch once it is delivered.
func (s *Store) Drop(ctx context.Context, key string) error {
	return s.rdb.Del(ctx, key).Err()
}
