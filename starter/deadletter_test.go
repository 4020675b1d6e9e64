package starter

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/fanout/fanout"
	"github.com/segmentio/kafka-go"
	"go.temporal.io/api/serviceerror"
)

// header returns the value of the last header named key.
func header(m kafka.Message, key string) (string, bool) {
	v, ok := "", false
	for _, h := range m.Headers {
		if h.Key == key {
			v, ok = string(h.Value), true
		}
	}
	return v, ok
}

func recordSize(m kafka.Message) int {
	n := len(m.Key) + len(m.Value)
	for _, h := range m.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return n
}

// TestDeadLetterRecordIsBounded: whatever a bad record holds, its DLQ record
// stays writable (under Kafka's default 1 MiB), keeps the reason and the
// source position, and says when the value was cut.
func TestDeadLetterRecordIsBounded(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	many := make([]kafka.Header, 200)
	for i := range many {
		many[i] = kafka.Header{Key: "h" + strconv.Itoa(i), Value: []byte(strings.Repeat("v", 4096))}
	}
	cases := []struct {
		name      string
		m         kafka.Message
		errText   string
		truncated bool
	}{
		{"small record", kafka.Message{Key: []byte("k"), Value: []byte(`{"id":"a"}`)}, "missing_type: the event has no type", false},
		{"600 KB value with an unknown type echoed", kafka.Message{Key: []byte("k"), Value: []byte(`{"id":"a","type":"` + strings.Repeat("x", 600<<10) + `"}`)},
			"unknown_type: type " + strings.Repeat("x", 600<<10), true},
		{"value just at the bound", kafka.Message{Value: []byte(strings.Repeat("y", maxDLQValueBytes))}, "invalid_json", false},
		{"200 headers of 4 KiB and a huge key", kafka.Message{Key: []byte(strings.Repeat("k", 1<<20)), Value: []byte("x"), Headers: many}, "invalid_json", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.m.Topic, c.m.Partition, c.m.Offset = "fanout-events", 3, 42
			d := DeadLetterRecord(c.m, "some_reason", c.errText, now)
			if size := recordSize(d); size > 900<<10 {
				t.Errorf("DLQ record is %d bytes, over 900 KiB", size)
			}
			for key, want := range map[string]string{HeaderReason: "some_reason", HeaderSourceTopic: "fanout-events", HeaderSourcePartition: "3", HeaderSourceOffset: "42"} {
				if got, _ := header(d, key); got != want {
					t.Errorf("header %s = %q, want %q", key, got, want)
				}
			}
			if got, _ := header(d, HeaderError); len(got) > maxDLQErrorBytes+3 || !strings.HasPrefix(c.errText, strings.TrimSuffix(got, "...")) {
				t.Errorf("error header is %d bytes and not a prefix of the error", len(got))
			}
			orig, cut := header(d, HeaderTruncated)
			if cut != c.truncated {
				t.Fatalf("truncated header present = %v, want %v", cut, c.truncated)
			}
			if cut && (orig != strconv.Itoa(len(c.m.Value)) || len(d.Value) != maxDLQValueBytes) {
				t.Errorf("truncated: header %s, value %d bytes; want %d and %d", orig, len(d.Value), len(c.m.Value), maxDLQValueBytes)
			}
			if !cut && string(d.Value) != string(c.m.Value) {
				t.Error("value changed although it was within the bound")
			}
		})
	}
}

// TestInvalidErrorsEchoLittle: a bad type or priority is named in the error
// but not repeated whole, so a huge field cannot make a huge error.
func TestInvalidErrorsEchoLittle(t *testing.T) {
	v := Validator{Types: []string{"webhook"}}
	for _, rec := range []string{
		`{"id":"a","type":"` + strings.Repeat("t", 1<<20) + `"}`,
		`{"id":"a","type":"webhook","priority":"` + strings.Repeat("p", 1<<20) + `"}`,
		`{"id":"a","type":"` + strings.Repeat("é", 100) + `"}`,
	} {
		_, err := v.Parse(kafka.Message{Value: []byte(rec)})
		var ie *InvalidError
		if !errors.As(err, &ie) {
			t.Fatalf("want an InvalidError, got %v", err)
		}
		if len(err.Error()) > 300 {
			t.Errorf("%s error is %d bytes", ie.Reason, len(err.Error()))
		}
		if !utf8.ValidString(err.Error()) {
			t.Errorf("%s error cut inside a rune", ie.Reason)
		}
	}
}

// FuzzParse: whatever a record holds, Parse gives an event that keeps every
// rule (id grammar, a known type and priority, the payload limit) or an
// InvalidError with a named reason and a short message, and the record's
// dead letter stays writable.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`{"id":"a","type":"webhook"}`, `{"id":"x/batch/0","type":"webhook"}`, `{"id":"a#1","type":"webhook","priority":"high"}`,
		`{"id":"a","type":"webhook","payload":{"k":"v"},"headers":{"traceparent":"x"}}`, `{"id":"\u202e","type":"webhook"}`,
		`{"id":"a","type":"sms"}`, `{"id":"a","type":"webhook","priority":"URGENT"}`, `{"id":1e999}`, `null`, ``, `{"id":"a","type":"webhook"} x`,
		`{"id":"a","type":"webhook","deliver_at":"2026-12-01T04:00:20Z"}`, `{"id":"a","type":"webhook","delay":"90s"}`,
		`{"id":"a","type":"webhook","delay":"-1h"}`, `{"id":"a","type":"webhook","deliver_at":"2026-12-01T04:00:20+14:00","delay":"1s"}`,
		`{"id":"a","type":"webhook","deliver_at":"9999-12-31T23:59:59.999999999Z"}`, `{"id":"a","type":"webhook","delay":"2562047h"}`,
	} {
		f.Add([]byte(s))
	}
	now := time.Date(2026, 12, 1, 4, 0, 0, 0, time.UTC)
	const horizon = 48 * time.Hour
	v := Validator{Types: []string{"webhook"}, MaxPayloadBytes: 256, Horizon: horizon, Now: func() time.Time { return now }}
	f.Fuzz(func(t *testing.T, value []byte) {
		ev, err := v.Parse(kafka.Message{Value: value, Time: now.Add(-time.Second)})
		if err != nil {
			var ie *InvalidError
			if !errors.As(err, &ie) || ie.Reason == "" {
				t.Fatalf("error without a reason: %v", err)
			}
			if len(ie.Error()) > 600 {
				t.Fatalf("%s error of %d bytes", ie.Reason, len(ie.Error()))
			}
			if d := DeadLetterRecord(kafka.Message{Value: value}, ie.Reason, ie.Error(), time.Now()); recordSize(d) > 900<<10 {
				t.Fatalf("dead letter of %d bytes", recordSize(d))
			}
			return
		}
		if fanout.ValidateID(ev.ID) != nil || ev.Type != "webhook" || (ev.Priority != "" && !ev.Priority.Valid()) || len(ev.Payload) > 256 {
			t.Fatalf("Parse accepted %+v", ev)
		}
		// A schedule is resolved: absolute, in UTC, never beyond the horizon.
		if ev.Delay != "" || (!ev.DeliverAt.IsZero() && (ev.DeliverAt.Location() != time.UTC || ev.DeliverAt.Sub(now) > horizon)) {
			t.Fatalf("Parse accepted schedule %v / %q", ev.DeliverAt, ev.Delay)
		}
	})
}

// TestHeadersOnlyRecord: the fallback dead letter, for a DLQ topic that
// refused the bounded one, is small whatever the bad record held, and still
// says why and where the record is.
func TestHeadersOnlyRecord(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	many := make([]kafka.Header, 50)
	for i := range many {
		many[i] = kafka.Header{Key: "h" + strconv.Itoa(i), Value: []byte(strings.Repeat("v", 4096))}
	}
	m := kafka.Message{Topic: "events", Partition: 3, Offset: 77, Key: []byte(strings.Repeat("k", 5000)),
		Value: []byte(strings.Repeat("x", 900_000)), Headers: many}
	d := headersOnlyRecord(m, strings.Repeat("r", 1000), strings.Repeat("e", 100_000), now)
	if n := recordSize(d); n > 2048 || len(d.Value) != 0 {
		t.Fatalf("headers-only record of %d bytes (value %d)", n, len(d.Value))
	}
	for key, want := range map[string]string{HeaderTruncated: "900000", HeaderSourceTopic: "events", HeaderSourcePartition: "3", HeaderSourceOffset: "77"} {
		if v, _ := header(d, key); v != want {
			t.Errorf("%s = %q, want %q", key, v, want)
		}
	}
	if v, _ := header(d, HeaderReason); !strings.HasPrefix(v, "rrr") {
		t.Errorf("reason %q", v)
	}
}

// TestStartRejected: only an InvalidArgument from Temporal dead-letters an
// event; errors about the cluster or the configuration are retried.
func TestStartRejected(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{serviceerror.NewInvalidArgument("Blob data size exceeds limit."), true},
		{fmt.Errorf("start workflow for event e: %w", serviceerror.NewInvalidArgument("x")), true},
		{serviceerror.NewUnavailable("down"), false},
		{serviceerror.NewPermissionDenied("no", ""), false},
		{serviceerror.NewNamespaceNotFound("default"), false},
		{context.DeadlineExceeded, false},
		{nil, false},
	} {
		if got := startRejected(c.err); got != c.want {
			t.Errorf("startRejected(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
