package starter

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/segmentio/kafka-go"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/workflows"
)

// Envelope is the JSON form of an event on the events topic: fanout.Event's
// own encoding,
//
//	{"id": "order-42", "type": "webhook", "priority": "high", "tenant": "acme", "payload": {...}, "headers": {...}}
//
// with, for a scheduled event, "deliver_at": "2026-12-24T09:00:00Z" (RFC
// 3339) or "delay": "90s" (a Go duration from the record's timestamp); an
// expiry, "expires_at": "2026-12-24T10:00:00Z"; a canary, "canary":
// {"recipients": 100, "max_failure_ratio": 0.2}.
type Envelope = fanout.Event

// envelope decodes an Envelope with its schedule as strings, so that a bad
// time or duration is dead-lettered with its own reason rather than as
// invalid JSON (the outer fields shadow Event's).
type envelope struct {
	fanout.Event
	DeliverAt string `json:"deliver_at"`
	Delay     string `json:"delay"`
	ExpiresAt string `json:"expires_at"`
}

// Reasons a record is dead-lettered; the DLQ record carries one in its
// HeaderReason header, followed by details in HeaderError.
const (
	ReasonInvalidJSON     = "invalid_json"
	ReasonMissingID       = "missing_id"
	ReasonMissingType     = "missing_type"
	ReasonUnknownType     = "unknown_type"
	ReasonUnknownPriority = "unknown_priority"
	ReasonPayloadTooLarge = "payload_too_large"
	ReasonInvalidID       = "invalid_id"
	ReasonInvalidHeaders  = "invalid_headers"
	ReasonInvalidTenant   = "invalid_tenant"
	// ReasonStartRejected: Temporal refused the workflow start for good
	// (an InvalidArgument, e.g. a payload over the cluster's blob size
	// limit); after fixing the cause, redrive-events -reason start_rejected.
	ReasonStartRejected = "start_rejected"
	// ReasonInvalidDeliverAt: deliver_at is not an RFC 3339 time.
	ReasonInvalidDeliverAt = "invalid_deliver_at"
	// ReasonInvalidDelay: delay is not a Go duration, or is negative.
	ReasonInvalidDelay = "invalid_delay"
	// ReasonDeliverAtAndDelay: both deliver_at and delay are set.
	ReasonDeliverAtAndDelay = "deliver_at_and_delay"
	// ReasonBeyondHorizon: the event is scheduled further ahead than
	// FANOUT_SCHEDULE_HORIZON.
	ReasonBeyondHorizon = "beyond_horizon"
	// ReasonInvalidExpiresAt: expires_at is not an RFC 3339 time, is not
	// after deliver_at, or is more than fanout.MaxTTL after the event is
	// due.
	ReasonInvalidExpiresAt = "invalid_expires_at"
	// ReasonExpired: expires_at is before the record was published (by
	// more than ExpirySkew).
	ReasonExpired = "expired"
	// ReasonInvalidCanary: the canary's recipients or max_failure_ratio
	// are out of bounds.
	ReasonInvalidCanary = "invalid_canary"
)

// ExpirySkew is how far before the record's timestamp an expires_at is
// still taken (the producer's clock may be behind): the event then starts
// and expires at once.
const ExpirySkew = time.Minute

// InvalidError says why a record is not a valid event.
type InvalidError struct {
	Reason string
	Detail string
}

func (e *InvalidError) Error() string { return e.Reason + ": " + e.Detail }

func invalid(reason, format string, args ...any) *InvalidError {
	return &InvalidError{Reason: reason, Detail: fmt.Sprintf(format, args...)}
}

// Validator checks records against the known event types and size limit,
// and resolves their schedule.
type Validator struct {
	Types           []string
	MaxPayloadBytes int
	// Horizon is how far ahead an event may be scheduled (0:
	// workflows.DefaultScheduleHorizon).
	Horizon time.Duration
	// Now is the clock (nil: time.Now).
	Now func() time.Time
}

// horizon is v's Horizon or its default.
func (v Validator) horizon() time.Duration {
	if v.Horizon > 0 {
		return v.Horizon
	}
	return workflows.DefaultScheduleHorizon
}

// maxEchoBytes bounds how much of a bad field an error repeats: the record
// itself is in the DLQ, the error only needs to name what was wrong.
const maxEchoBytes = 64

// clip returns s cut to at most n bytes (at a rune boundary), marked with
// "..." when cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "..."
}

// Bounds of an event's headers (the envelope's, and the trace headers
// copied from the record: a longer record header is not copied).
const (
	MaxHeaders          = 16
	maxHeaderKeyBytes   = 64
	MaxHeaderValueBytes = 1024
)

// traceHeaders are the Kafka record headers copied into the event.
var traceHeaders = []string{"traceparent", "tracestate", "baggage"}

// Parse decodes and validates one record into an event.
func (v Validator) Parse(m kafka.Message) (fanout.Event, error) {
	dec := json.NewDecoder(bytes.NewReader(m.Value))
	var raw envelope
	if err := dec.Decode(&raw); err != nil {
		return fanout.Event{}, invalid(ReasonInvalidJSON, "%v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return fanout.Event{}, invalid(ReasonInvalidJSON, "trailing data after the JSON object")
	}
	env := raw.Event
	switch {
	case env.ID == "":
		return fanout.Event{}, invalid(ReasonMissingID, "the event has no id")
	case fanout.ValidateID(env.ID) != nil:
		return fanout.Event{}, invalid(ReasonInvalidID, "%v", fanout.ValidateID(env.ID))
	case env.Type == "":
		return fanout.Event{}, invalid(ReasonMissingType, "the event has no type")
	case !slices.Contains(v.Types, env.Type):
		return fanout.Event{}, invalid(ReasonUnknownType, "type %q is not one of %v", clip(env.Type, maxEchoBytes), v.Types)
	}
	if env.Priority != "" && !env.Priority.Valid() {
		return fanout.Event{}, invalid(ReasonUnknownPriority, "priority %q is not one of high, normal, low", clip(string(env.Priority), maxEchoBytes))
	}
	if env.Tenant != "" && fanout.ValidateTenant(env.Tenant) != nil {
		return fanout.Event{}, invalid(ReasonInvalidTenant, "%v", fanout.ValidateTenant(env.Tenant))
	}
	size := len(env.Payload)
	if len(env.Headers) > MaxHeaders {
		return fanout.Event{}, invalid(ReasonInvalidHeaders, "%d headers, over %d", len(env.Headers), MaxHeaders)
	}
	for k, val := range env.Headers {
		if len(k) == 0 || len(k) > maxHeaderKeyBytes || len(val) > MaxHeaderValueBytes {
			return fanout.Event{}, invalid(ReasonInvalidHeaders, "header %q: keys are 1 to %d bytes, values at most %d", clip(k, maxEchoBytes), maxHeaderKeyBytes, MaxHeaderValueBytes)
		}
		size += len(k) + len(val)
	}
	// The headers ride with the payload into the workflow (and every batch):
	// they count against the same limit.
	if v.MaxPayloadBytes > 0 && size > v.MaxPayloadBytes {
		return fanout.Event{}, invalid(ReasonPayloadTooLarge, "payload and headers of %d bytes are over the limit of %d", size, v.MaxPayloadBytes)
	}
	ev := env
	at, err := v.schedule(raw.DeliverAt, raw.Delay, m.Time)
	if err != nil {
		return fanout.Event{}, err
	}
	ev.DeliverAt, ev.Delay = at, ""
	if ev.ExpiresAt, err = v.expiry(raw.ExpiresAt, at, m.Time); err != nil {
		return fanout.Event{}, err
	}
	if ev.Canary != nil {
		if err := ev.Canary.Validate(); err != nil {
			return fanout.Event{}, invalid(ReasonInvalidCanary, "canary %v", err)
		}
	}
	for _, h := range m.Headers {
		if slices.Contains(traceHeaders, strings.ToLower(h.Key)) && len(h.Value) <= MaxHeaderValueBytes {
			if ev.Headers == nil {
				ev.Headers = map[string]string{}
			}
			ev.Headers[strings.ToLower(h.Key)] = string(h.Value)
		}
	}
	return ev, nil
}

// schedule resolves an event's deliver_at or delay into the absolute time
// it is to be delivered (zero: now). A delay counts from the record's
// timestamp (published; the bridge's clock when the record has none or one
// ahead of it), so that reading the record again — after a bridge restart
// or a rebalance — resolves it to the same time. A time already past is
// kept: the workflow delivers it at once.
func (v Validator) schedule(deliverAt, delay string, published time.Time) (time.Time, error) {
	if deliverAt == "" && delay == "" {
		return time.Time{}, nil
	}
	if deliverAt != "" && delay != "" {
		return time.Time{}, invalid(ReasonDeliverAtAndDelay, "deliver_at %q and delay %q: set one of them", clip(deliverAt, maxEchoBytes), clip(delay, maxEchoBytes))
	}
	now := time.Now()
	if v.Now != nil {
		now = v.Now()
	}
	var at time.Time
	if deliverAt != "" {
		t, err := time.Parse(time.RFC3339, deliverAt)
		if err != nil {
			return time.Time{}, invalid(ReasonInvalidDeliverAt, "deliver_at %q is not an RFC 3339 time such as 2026-12-24T09:00:00Z", clip(deliverAt, maxEchoBytes))
		}
		at = t
	} else {
		d, err := time.ParseDuration(delay)
		if err != nil || d < 0 {
			return time.Time{}, invalid(ReasonInvalidDelay, "delay %q is not a non-negative Go duration such as 90s or 2h", clip(delay, maxEchoBytes))
		}
		from := published
		if from.IsZero() || from.After(now) {
			from = now
		}
		if d > v.horizon() {
			return time.Time{}, invalid(ReasonBeyondHorizon, "delay %v is more than the horizon %v", d, v.horizon())
		}
		at = from.Add(d)
	}
	if h := v.horizon(); at.Sub(now) > h {
		return time.Time{}, invalid(ReasonBeyondHorizon, "deliver_at %s is more than the horizon %v ahead", at.UTC().Format(time.RFC3339), h)
	}
	return at.UTC(), nil
}

// expiry resolves an event's expires_at: an RFC 3339 time after its
// deliver_at (zero: none), not before the record's timestamp (the
// bridge's clock when the record has none or one ahead of it) by more
// than ExpirySkew, and at most fanout.MaxTTL after the event is due (its
// deliver_at, or then). The timestamp, not the bridge's clock, so that a
// record read again later resolves the same way.
func (v Validator) expiry(expiresAt string, deliverAt, published time.Time) (time.Time, error) {
	if expiresAt == "" {
		return time.Time{}, nil
	}
	at, err := time.Parse(time.RFC3339, expiresAt)
	if err != nil {
		return time.Time{}, invalid(ReasonInvalidExpiresAt, "expires_at %q is not an RFC 3339 time such as 2026-12-24T10:00:00Z", clip(expiresAt, maxEchoBytes))
	}
	now := time.Now()
	if v.Now != nil {
		now = v.Now()
	}
	from := published
	if from.IsZero() || from.After(now) {
		from = now
	}
	due := from
	if deliverAt.After(due) {
		due = deliverAt
	}
	switch {
	case !deliverAt.IsZero() && !at.After(deliverAt):
		return time.Time{}, invalid(ReasonInvalidExpiresAt, "expires_at %s is not after deliver_at %s", at.UTC().Format(time.RFC3339), deliverAt.UTC().Format(time.RFC3339))
	case at.Before(from.Add(-ExpirySkew)):
		return time.Time{}, invalid(ReasonExpired, "expires_at %s is before the event was published (%s)", at.UTC().Format(time.RFC3339), from.UTC().Format(time.RFC3339))
	case at.Sub(due) > fanout.MaxTTL:
		return time.Time{}, invalid(ReasonInvalidExpiresAt, "expires_at %s is more than %v after the event is due (%s)", at.UTC().Format(time.RFC3339), fanout.MaxTTL, due.UTC().Format(time.RFC3339))
	}
	return at.UTC(), nil
}
