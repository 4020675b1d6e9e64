package starter

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/segmentio/kafka-go"

	"github.com/fanout/fanout"
)

// Envelope is the JSON form of an event on the events topic: fanout.Event's
// own encoding,
//
//	{"id": "order-42", "type": "webhook", "priority": "high", "payload": {...}, "headers": {...}}
type Envelope = fanout.Event

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
	// ReasonStartRejected: Temporal refused the workflow start for good
	// (an InvalidArgument, e.g. a payload over the cluster's blob size
	// limit); after fixing the cause, redrive-events -reason start_rejected.
	ReasonStartRejected = "start_rejected"
)

// InvalidError says why a record is not a valid event.
type InvalidError struct {
	Reason string
	Detail string
}

func (e *InvalidError) Error() string { return e.Reason + ": " + e.Detail }

func invalid(reason, format string, args ...any) *InvalidError {
	return &InvalidError{Reason: reason, Detail: fmt.Sprintf(format, args...)}
}

// Validator checks records against the known event types and size limit.
type Validator struct {
	Types           []string
	MaxPayloadBytes int
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
	var env Envelope
	if err := dec.Decode(&env); err != nil {
		return fanout.Event{}, invalid(ReasonInvalidJSON, "%v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return fanout.Event{}, invalid(ReasonInvalidJSON, "trailing data after the JSON object")
	}
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
