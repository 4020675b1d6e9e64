// Package gate is the per-recipient Redis attempt-id gate of design.md §3,
// through which the DeliverBatch activity decides, per recipient, whether to
// deliver.
//
// Before delivering to a recipient, a batch runs
//
//	SET fanout:r:<event type>/<event id>:<recipient> <attempt id> NX GET EX <ttl>
//
// and acts on what was there: nothing → deliver; its own attempt id → an
// earlier try of this batch died mid-way → deliver again (the at-least-once
// case); another attempt id → another batch holds this recipient → skip as a
// duplicate. After a delivery succeeds the key is overwritten with a delivered
// mark, so later tries of any batch skip it. All keys of a batch go to Redis
// in one pipeline.
//
// An at-most-once event type (fanout.AtMostOnce) adds one state: right
// before its call, a recipient's key goes from the attempt id to a sending
// mark (MarkSending, atomic, one per call), and the delivered mark replaces
// it after the call. A later try that finds its own sending mark gets
// Unconfirmed: the call was made, or may have been, and its outcome is
// unknown, so an at-most-once batch does not call it again (it records it
// with MarkUnconfirmed and dead-letters it); an at-least-once one delivers it
// again, as it does a held key.
package gate

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Verdict is the gate's answer for one recipient.
type Verdict uint8

const (
	// Deliver: nobody held the recipient; this attempt now does.
	Deliver Verdict = iota
	// Redeliver: this attempt id already held it; an earlier try died.
	Redeliver
	// DeliveredByUs: this attempt id already delivered it.
	DeliveredByUs
	// Duplicate: another attempt holds, delivered or dead-lettered it.
	Duplicate
	// DeadLetteredByUs: this attempt id gave up on it and sent it to the
	// deliveries DLQ. A redrive (same attempt id) delivers it again.
	DeadLetteredByUs
	// Unconfirmed: this attempt id marked it sending (at-most-once) and
	// never confirmed the call: a crash or a lost mark interrupted it.
	Unconfirmed
	// UnconfirmedByUs: this attempt id dead-lettered it as unconfirmed
	// (MarkUnconfirmed). A redrive (same attempt id) delivers it again.
	UnconfirmedByUs
)

// ShouldDeliver reports whether the recipient must be delivered now.
func (v Verdict) ShouldDeliver() bool { return v == Deliver || v == Redeliver }

const (
	deliveredPrefix    = "delivered:"
	deadLetteredPrefix = "dead:"
	sendingPrefix      = "sending:"
	unconfirmedPrefix  = "unconfirmed:"
)

// DefaultTTL is how long a recipient's gate key lives: it must outlast every
// retry and reset of an event.
const DefaultTTL = 7 * 24 * time.Hour

// Gate is the Redis attempt-id gate.
type Gate struct {
	rdb    redis.UniversalClient
	ttl    time.Duration
	prefix string
}

// New returns a gate with keys living ttl (DefaultTTL when zero).
func New(rdb redis.UniversalClient, ttl time.Duration) *Gate {
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	return &Gate{rdb: rdb, ttl: ttl, prefix: "fanout:r:"}
}

// Key is the gate key of (event, recipient); eventKey is vocab.EventKey (type
// and id), so events of two types never share a key.
func (g *Gate) Key(eventKey, recipientID string) string {
	return g.prefix + eventKey + ":" + recipientID
}

// Acquire runs SET NX GET for every recipient of a batch in one pipeline
// and returns one verdict per recipient, in order. With redrive, recipients
// this attempt id dead-lettered come back as Redeliver.
func (g *Gate) Acquire(ctx context.Context, eventKey, attemptID string, recipientIDs []string, redrive bool) ([]Verdict, error) {
	if len(recipientIDs) == 0 {
		return nil, nil
	}
	cmds := make([]*redis.StatusCmd, len(recipientIDs))
	// Pipelines of at most pipelineMax commands: Redis runs one client's
	// pipeline in order, so a batch of 5,000 in one would hold other
	// events' gate calls (a small event's whole delivery) behind it.
	for start := 0; start < len(recipientIDs); start += pipelineMax {
		pipe := g.rdb.Pipeline()
		for i := start; i < min(start+pipelineMax, len(recipientIDs)); i++ {
			cmds[i] = pipe.SetArgs(ctx, g.Key(eventKey, recipientIDs[i]), attemptID, redis.SetArgs{Mode: "NX", Get: true, TTL: g.ttl})
		}
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("gate acquire: %w", err)
		}
	}
	return verdicts(func(i int) (string, error) { return cmds[i].Result() }, recipientIDs, attemptID, redrive)
}

// verdicts reads what SET NX GET (or the resend script) found.
func verdicts(result func(i int) (string, error), recipientIDs []string, attemptID string, redrive bool) ([]Verdict, error) {
	delivered := deliveredPrefix + attemptID
	out := make([]Verdict, len(recipientIDs))
	for i := range recipientIDs {
		prev, err := result(i)
		switch {
		case errors.Is(err, redis.Nil):
			out[i] = Deliver
		case err != nil:
			return nil, fmt.Errorf("gate acquire %s: %w", recipientIDs[i], err)
		case prev == attemptID:
			out[i] = Redeliver
		case isDeliveredMark(prev, delivered):
			out[i] = DeliveredByUs
		case prev == deadLetteredPrefix+attemptID && redrive:
			out[i] = Redeliver
		case prev == deadLetteredPrefix+attemptID:
			out[i] = DeadLetteredByUs
		case prev == sendingPrefix+attemptID:
			out[i] = Unconfirmed
		case prev == unconfirmedPrefix+attemptID && redrive:
			out[i] = Redeliver
		case prev == unconfirmedPrefix+attemptID:
			out[i] = UnconfirmedByUs
		default:
			out[i] = Duplicate
		}
	}
	return out, nil
}

// isDeliveredMark reports whether v is the delivered mark whose prefix and
// attempt id are delivered: as written before marks recorded the time and
// attempts ("delivered:<attempt id>"), or since
// ("delivered:<attempt id>;<time>;<attempts>").
func isDeliveredMark(v, delivered string) bool {
	rest, ok := strings.CutPrefix(v, delivered)
	return ok && (rest == "" || rest[0] == markSep)
}

// MarkDelivered records that attemptID delivered to the recipients now,
// each at its first try.
func (g *Gate) MarkDelivered(ctx context.Context, eventKey, attemptID string, recipientIDs ...string) error {
	return g.MarkDeliveredAt(ctx, eventKey, attemptID, time.Now(), nil, recipientIDs...)
}

// MarkDeliveredAt records that attemptID delivered to the recipients at
// at, each after attempts(id) tries, the successful one included (nil: 1
// each). The mark is the one written before, with the time and the tries
// after it (DeliveredValue): a few bytes on the key already written, in the
// same pipeline.
func (g *Gate) MarkDeliveredAt(ctx context.Context, eventKey, attemptID string, at time.Time, attempts func(id string) int, recipientIDs ...string) error {
	first := DeliveredValue(attemptID, at, 1)
	for start := 0; start < len(recipientIDs); start += pipelineMax {
		pipe := g.rdb.Pipeline()
		for _, id := range recipientIDs[start:min(start+pipelineMax, len(recipientIDs))] {
			v := first
			if attempts != nil {
				if n := attempts(id); n > 1 {
					v = DeliveredValue(attemptID, at, n)
				}
			}
			pipe.Set(ctx, g.Key(eventKey, id), v, g.ttl)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return fmt.Errorf("gate mark delivered: %w", err)
		}
	}
	return nil
}

// MarkDeadLettered records that attemptID gave up on the recipients (they
// are in the deliveries DLQ), so retries of the batch skip them.
func (g *Gate) MarkDeadLettered(ctx context.Context, eventKey, attemptID string, recipientIDs ...string) error {
	if err := g.mark(ctx, eventKey, deadLetteredPrefix+attemptID, recipientIDs); err != nil {
		return fmt.Errorf("gate mark dead-lettered: %w", err)
	}
	return nil
}

// MarkUnconfirmed records that attemptID gave up on the recipients it found
// marked sending (at-most-once: their call's outcome is unknown; they are in
// the deliveries DLQ), so retries of the batch skip them and count them.
func (g *Gate) MarkUnconfirmed(ctx context.Context, eventKey, attemptID string, recipientIDs ...string) error {
	if err := g.mark(ctx, eventKey, unconfirmedPrefix+attemptID, recipientIDs); err != nil {
		return fmt.Errorf("gate mark unconfirmed: %w", err)
	}
	return nil
}

// sendScript moves a key from ARGV[1] (the attempt id), or from the
// attempt's dead-lettered or unconfirmed mark (a redrive), to the sending
// mark ARGV[2]; any other value stays and the script returns 0. Atomic, so
// of two executions of the same attempt id at once (an activity timed out
// while its first execution still runs) only one calls the recipient.
var sendScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] or v == ARGV[3] or v == ARGV[4] then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[5])
  return 1
end
return 0`)

// unsendScript moves a key from the sending mark ARGV[1] back to the attempt
// id ARGV[2]; any other value stays.
var unsendScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
end
return 0`)

// MarkSending marks the recipient sending right before its at-most-once
// call: the key must be held by attemptID (or, in a redrive, dead-lettered
// or unconfirmed by it). It reports false, and marks nothing, when the key
// holds anything else: the recipient must not be called.
func (g *Gate) MarkSending(ctx context.Context, eventKey, attemptID, recipientID string) (bool, error) {
	n, err := sendScript.Run(ctx, g.rdb, []string{g.Key(eventKey, recipientID)},
		attemptID, sendingPrefix+attemptID, deadLetteredPrefix+attemptID, unconfirmedPrefix+attemptID, g.ttl.Milliseconds()).Int()
	if err != nil {
		return false, fmt.Errorf("gate mark sending: %w", err)
	}
	return n == 1, nil
}

// Unsend moves recipients this attempt marked sending back to held by it:
// their call failed in a way that proves the destination never got it
// (fanout.NotSent), so a retry may call them.
func (g *Gate) Unsend(ctx context.Context, eventKey, attemptID string, recipientIDs ...string) error {
	for start := 0; start < len(recipientIDs); start += pipelineMax {
		pipe := g.rdb.Pipeline()
		for _, id := range recipientIDs[start:min(start+pipelineMax, len(recipientIDs))] {
			unsendScript.Eval(ctx, pipe, []string{g.Key(eventKey, id)}, sendingPrefix+attemptID, attemptID, g.ttl.Milliseconds())
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return fmt.Errorf("gate unsend: %w", err)
		}
	}
	return nil
}

// mark sets the recipients' keys to value in pipelines of at most
// pipelineMax commands.
func (g *Gate) mark(ctx context.Context, eventKey, value string, recipientIDs []string) error {
	for start := 0; start < len(recipientIDs); start += pipelineMax {
		pipe := g.rdb.Pipeline()
		for _, id := range recipientIDs[start:min(start+pipelineMax, len(recipientIDs))] {
			pipe.Set(ctx, g.Key(eventKey, id), value, g.ttl)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return err
		}
	}
	return nil
}

// pipelineMax bounds the commands of one pipeline to Redis.
const pipelineMax = 500

// CountFailures adds one failed attempt for each recipient of a batch's
// round (a round is the first run of the batch or one redrive of it) and
// returns the totals, so attempts are counted per recipient across activity
// retries and worker crashes.
func (g *Gate) CountFailures(ctx context.Context, eventKey, attemptID, round string, recipientIDs []string) ([]int, error) {
	return g.CountFailed(ctx, eventKey, attemptID, round, recipientIDs, nil)
}

// Holder returns who holds a recipient's key: the attempt id, whether it
// delivered, and whether the key exists. For tests and operators.
func (g *Gate) Holder(ctx context.Context, eventKey, recipientID string) (attemptID string, delivered, ok bool, err error) {
	v, err := g.rdb.Get(ctx, g.Key(eventKey, recipientID)).Result()
	if errors.Is(err, redis.Nil) {
		return "", false, false, nil
	}
	if err != nil {
		return "", false, false, err
	}
	attemptID, delivered, _ = ParseValue(v)
	return attemptID, delivered, true, nil
}

// ParseValue reads a gate key's value: the attempt id that holds it, and
// whether that attempt delivered or dead-lettered the recipient (as
// unconfirmed too). A value that is neither is held by an attempt that has
// not finished with it (a delivery in flight, or one a crash interrupted).
func ParseValue(v string) (attemptID string, delivered, deadLettered bool) {
	attemptID, st := ParseState(v)
	return attemptID, st == StateDelivered, st == StateDeadLettered || st == StateUnconfirmed
}

// State is what a gate key's value says of its recipient.
type State uint8

const (
	// StateHeld: an attempt holds it and has not called it yet (or, at
	// least-once, is calling it).
	StateHeld State = iota
	// StateSending: an at-most-once attempt is calling it, or was when it
	// died.
	StateSending
	// StateDelivered: delivered.
	StateDelivered
	// StateDeadLettered: given up, in the deliveries DLQ.
	StateDeadLettered
	// StateUnconfirmed: found sending by a later try of its attempt and
	// given up (at-most-once), in the deliveries DLQ.
	StateUnconfirmed
)

// ParseState reads a gate key's value: the attempt id and its state.
func ParseState(v string) (attemptID string, st State) {
	for _, p := range []struct {
		prefix string
		st     State
	}{{deliveredPrefix, StateDelivered}, {deadLetteredPrefix, StateDeadLettered}, {sendingPrefix, StateSending}, {unconfirmedPrefix, StateUnconfirmed}} {
		if rest, found := strings.CutPrefix(v, p.prefix); found {
			if p.st == StateDelivered {
				rest, _, _ = strings.Cut(rest, string(markSep))
			}
			return rest, p.st
		}
	}
	return v, StateHeld
}
