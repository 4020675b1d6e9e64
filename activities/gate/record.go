package gate

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fanout/fanout/workflows/vocab"
)

// What one recipient's answer is read from (starter status): the gate key
// (its state, and for a delivered recipient the time and the tries, written
// with the mark), the failure count of its attempt (CountFailures), and the
// last-error record, written only when a call fails, with the gate's TTL:
//
//	fanout:r:<type>/<event id>:<recipient>   delivered:<attempt id>;<unix s>;<tries>
//	fanout:le:<type>/<event id>:<recipient>  <class>;<HTTP status>;<unix s>
//
// The last error holds a class and a status, never the address or the
// error's text. Everything read back is bounded and checked (Read): a value
// that does not parse is reported as unreadable, with the reason.

// markSep separates the fields of a mark and of a last-error record; the
// id and type grammar (fanout.ValidateID) leaves it out of attempt ids.
const markSep = ';'

// DeliveredValue is the delivered mark of attemptID at at after tries
// tries: "delivered:<attempt id>;<unix seconds>;<tries>".
func DeliveredValue(attemptID string, at time.Time, tries int) string {
	return deliveredPrefix + attemptID + string(markSep) + strconv.FormatInt(at.Unix(), 10) + string(markSep) + strconv.Itoa(tries)
}

// LastError is the last failed call of a recipient: its class (a short
// word, LastErrorClass grammar), the HTTP status when the destination
// answered (0: none), and when it failed.
type LastError struct {
	Class      string
	HTTPStatus int
	At         time.Time
}

// Bounds of what Read accepts.
const (
	// MaxValueLen bounds a gate value or last-error record read back.
	MaxValueLen = 600
	// MaxClassLen bounds a last error's class.
	MaxClassLen = 32
	// MaxTries bounds a recorded count of tries.
	MaxTries = 1_000_000
)

// encode is the record's value.
func (e LastError) encode() string {
	return e.Class + string(markSep) + strconv.Itoa(e.HTTPStatus) + string(markSep) + strconv.FormatInt(e.At.Unix(), 10)
}

// validClass reports whether c is a class: 1 to MaxClassLen of a-z and '_'.
func validClass(c string) bool {
	if c == "" || len(c) > MaxClassLen {
		return false
	}
	for i := 0; i < len(c); i++ {
		if (c[i] < 'a' || c[i] > 'z') && c[i] != '_' {
			return false
		}
	}
	return true
}

// ParseLastError reads a last-error record.
func ParseLastError(v string) (LastError, error) {
	if len(v) > MaxValueLen {
		return LastError{}, fmt.Errorf("last-error record of %d bytes, over %d", len(v), MaxValueLen)
	}
	f := strings.Split(v, string(markSep))
	if len(f) != 3 {
		return LastError{}, fmt.Errorf("last-error record has %d fields, want 3", len(f))
	}
	if !validClass(f[0]) {
		return LastError{}, fmt.Errorf("last-error class %.40q is not 1 to %d of a-z and _", f[0], MaxClassLen)
	}
	st, err := strconv.Atoi(f[1])
	if err != nil || (st != 0 && (st < 100 || st > 599)) {
		return LastError{}, fmt.Errorf("last-error HTTP status %.20q is not 0 or 100-599", f[1])
	}
	at, err := parseUnix(f[2])
	if err != nil {
		return LastError{}, fmt.Errorf("last-error time: %w", err)
	}
	return LastError{Class: f[0], HTTPStatus: st, At: at}, nil
}

// parseUnix reads unix seconds between 2020 and a day from now.
func parseUnix(s string) (time.Time, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || len(s) > 12 {
		return time.Time{}, fmt.Errorf("%.20q is not unix seconds", s)
	}
	t := time.Unix(n, 0).UTC()
	if t.Before(minTime) || t.After(time.Now().Add(24*time.Hour)) {
		return time.Time{}, fmt.Errorf("%d is out of range", n)
	}
	return t, nil
}

var minTime = time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)

// LastErrorKey is the key of (event, recipient)'s last-error record.
func (g *Gate) LastErrorKey(eventKey, recipientID string) string {
	return "fanout:le:" + eventKey + ":" + recipientID
}

// failuresKey is the hash of an attempt's failure counts in a round.
func failuresKey(eventKey, attemptID, round string) string {
	return "fanout:a:" + eventKey + ":" + attemptID + ":" + round
}

// FailureCounts returns the failed tries counted (CountFailures) for each
// recipient of an attempt's round, in one pipeline: 0 when none. A delivery
// that follows failures records them in its mark (MarkDeliveredAt); only a
// retry of a batch asks, so a first try costs no round trip more.
func (g *Gate) FailureCounts(ctx context.Context, eventKey, attemptID, round string, recipientIDs []string) ([]int, error) {
	if len(recipientIDs) == 0 {
		return nil, nil
	}
	cmds, err := g.rdb.HMGet(ctx, failuresKey(eventKey, attemptID, round), recipientIDs...).Result()
	if err != nil {
		return nil, fmt.Errorf("gate failure counts: %w", err)
	}
	out := make([]int, len(recipientIDs))
	for i, c := range cmds {
		if s, ok := c.(string); ok {
			if n, err := strconv.Atoi(s); err == nil && n > 0 && n <= MaxTries {
				out[i] = n
			}
		}
	}
	return out, nil
}

// resendScript is the gate of a resend (AcquireResend): a key that one of
// the resend's own marks holds (ARGV[1], the resend's attempt id) is left
// as it is and returned, so a retry of the resend skips what it delivered;
// any other value (the original delivery's mark, another attempt's hold)
// is replaced by the resend's attempt id and nil returned: deliver.
var resendScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v then
  local a = ARGV[1]
  local rest = v
  for _, p in ipairs({'delivered:', 'dead:', 'sending:', 'unconfirmed:'}) do
    if string.sub(v, 1, #p) == p then rest = string.sub(v, #p + 1) break end
  end
  if rest == a or string.sub(rest, 1, #a + 1) == a .. ';' then return v end
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return false`)

// AcquireResend is Acquire for a resend, whose attempt id is its own
// (vocab.ResendAttemptID): the recipients are delivered again even when
// another attempt delivered them (that mark is replaced), and a retry of
// the resend skips those it delivered or gave up.
func (g *Gate) AcquireResend(ctx context.Context, eventKey, attemptID string, recipientIDs []string) ([]Verdict, error) {
	if len(recipientIDs) == 0 {
		return nil, nil
	}
	cmds := make([]*redis.Cmd, len(recipientIDs))
	for start := 0; start < len(recipientIDs); start += pipelineMax {
		pipe := g.rdb.Pipeline()
		for i := start; i < min(start+pipelineMax, len(recipientIDs)); i++ {
			cmds[i] = resendScript.Eval(ctx, pipe, []string{g.Key(eventKey, recipientIDs[i])}, attemptID, g.ttl.Milliseconds())
		}
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("gate acquire resend: %w", err)
		}
	}
	return verdicts(func(i int) (string, error) { return cmds[i].Text() }, recipientIDs, attemptID, false)
}

// CountFailed is CountFailures that also writes each recipient's last
// error (last[i], when last is not nil) in the same pipeline, with the
// gate's TTL: the failure path's one round trip.
func (g *Gate) CountFailed(ctx context.Context, eventKey, attemptID, round string, recipientIDs []string, last []LastError) ([]int, error) {
	if len(recipientIDs) == 0 {
		return nil, nil
	}
	key := failuresKey(eventKey, attemptID, round)
	pipe := g.rdb.Pipeline()
	cmds := make([]*redis.IntCmd, len(recipientIDs))
	for i, id := range recipientIDs {
		cmds[i] = pipe.HIncrBy(ctx, key, id, 1)
	}
	pipe.Expire(ctx, key, g.ttl)
	for i, e := range last {
		if i < len(recipientIDs) {
			pipe.Set(ctx, g.LastErrorKey(eventKey, recipientIDs[i]), e.encode(), g.ttl)
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("gate count failures: %w", err)
	}
	out := make([]int, len(cmds))
	for i, c := range cmds {
		out[i] = int(c.Val())
	}
	return out, nil
}

// Record is what the gate knows of one recipient of an event (Read).
type Record struct {
	// Found: the gate key exists. Without it the recipient was never
	// gated by this event, or its key expired (the gate's TTL).
	Found bool
	State State
	// AttemptID holds the key; Batch is its batch number (-1: a resend's,
	// whose name is Resend).
	AttemptID string
	Batch     int
	Resend    string
	// DeliveredAt and Tries are the delivered mark's (zero: a mark written
	// before they were recorded). For a recipient not delivered, Tries is
	// its failed tries in its attempt's first round.
	DeliveredAt time.Time
	Tries       int
	// LastError is its last failed call (nil: none recorded).
	LastError *LastError
	// Unreadable is why the key's value could not be read (a value fanout
	// did not write): State and the rest mean nothing then.
	Unreadable string
}

// Read reads what the gate knows of each recipient of the event (type
// eventType, id eventID) in pipelines of at most pipelineMax commands (two
// passes: the keys and last errors, then the failure counts of those not
// delivered). Values are untrusted: each is bounded and checked, and one
// that is not a value fanout writes is reported in Unreadable.
func (g *Gate) Read(ctx context.Context, eventType, eventID string, recipientIDs []string) ([]Record, error) {
	eventKey := vocab.EventKey(eventType, eventID)
	out := make([]Record, len(recipientIDs))
	vals := make([]*redis.StringCmd, len(recipientIDs))
	lasts := make([]*redis.StringCmd, len(recipientIDs))
	for start := 0; start < len(recipientIDs); start += pipelineMax {
		pipe := g.rdb.Pipeline()
		for i := start; i < min(start+pipelineMax, len(recipientIDs)); i++ {
			vals[i] = pipe.Get(ctx, g.Key(eventKey, recipientIDs[i]))
			lasts[i] = pipe.Get(ctx, g.LastErrorKey(eventKey, recipientIDs[i]))
		}
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("gate read: %w", err)
		}
	}
	var counts []int // indexes of out whose failure count to read
	for i := range recipientIDs {
		r := &out[i]
		if v, err := vals[i].Result(); err == nil {
			r.Found = true
			if err := r.parse(eventKey, v); err != nil {
				*r = Record{Found: true, Unreadable: err.Error()}
				continue
			}
			if r.State != StateDelivered {
				counts = append(counts, i)
			}
		} else if !errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("gate read %s: %w", recipientIDs[i], err)
		}
		if v, err := lasts[i].Result(); err == nil {
			if le, err := ParseLastError(v); err == nil {
				r.LastError = &le
			} else if r.Unreadable == "" {
				r.Unreadable = err.Error()
			}
		}
	}
	for start := 0; start < len(counts); start += pipelineMax {
		pipe := g.rdb.Pipeline()
		cmds := make([]*redis.StringCmd, 0, pipelineMax)
		for _, i := range counts[start:min(start+pipelineMax, len(counts))] {
			cmds = append(cmds, pipe.HGet(ctx, failuresKey(eventKey, out[i].AttemptID, ""), recipientIDs[i]))
		}
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("gate read failure counts: %w", err)
		}
		for j, c := range cmds {
			if n, err := c.Int(); err == nil && n > 0 && n <= MaxTries {
				out[counts[start+j]].Tries = n
			}
		}
	}
	return out, nil
}

// parse reads a gate value of the event eventKey into r.
func (r *Record) parse(eventKey, v string) error {
	if len(v) > MaxValueLen {
		return fmt.Errorf("gate value of %d bytes, over %d", len(v), MaxValueLen)
	}
	attempt, st := ParseState(v)
	r.State, r.AttemptID = st, attempt
	typ, id, _ := strings.Cut(eventKey, "/")
	n, name, err := vocab.ParseAttemptID(typ, id, attempt)
	if err != nil {
		return fmt.Errorf("gate value %.80q: %w", v, err)
	}
	r.Batch, r.Resend = n, name
	if st != StateDelivered {
		return nil
	}
	_, tail, hasTail := strings.Cut(v, string(markSep))
	if !hasTail {
		return nil // a mark from before times and tries were recorded
	}
	ts, tries, ok := strings.Cut(tail, string(markSep))
	if !ok {
		return fmt.Errorf("delivered mark %.80q: want time and tries", v)
	}
	at, err := parseUnix(ts)
	if err != nil {
		return fmt.Errorf("delivered mark time: %w", err)
	}
	k, err := strconv.Atoi(tries)
	if err != nil || k < 1 || k > MaxTries {
		return fmt.Errorf("delivered mark tries %.20q: want 1 to %d", tries, MaxTries)
	}
	r.DeliveredAt, r.Tries = at, k
	return nil
}
