package starter

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/fanout/fanout"
)

func manyHeaders(n int) string {
	hs := make([]string, n)
	for i := range hs {
		hs[i] = fmt.Sprintf(`"h%d":"v"`, i)
	}
	return strings.Join(hs, ",")
}

func testValidator() Validator {
	return Validator{Types: []string{"webhook", "email"}, MaxPayloadBytes: 64}
}

func TestParseInvalid(t *testing.T) {
	longID := strings.Repeat("a", 201)
	bigPayload := `"` + strings.Repeat("x", 63) + `"` // 65 bytes of JSON
	cases := []struct {
		name   string
		value  string
		reason string
	}{
		{"empty record", ``, ReasonInvalidJSON},
		{"not JSON", `hello`, ReasonInvalidJSON},
		{"truncated object", `{"id":"a","type":"webhook"`, ReasonInvalidJSON},
		{"array instead of object", `[{"id":"a","type":"webhook"}]`, ReasonInvalidJSON},
		{"id of the wrong type", `{"id":42,"type":"webhook"}`, ReasonInvalidJSON},
		{"headers of the wrong type", `{"id":"a","type":"webhook","headers":{"k":1}}`, ReasonInvalidJSON},
		{"trailing object", `{"id":"a","type":"webhook"}{"id":"b","type":"webhook"}`, ReasonInvalidJSON},
		{"trailing garbage", `{"id":"a","type":"webhook"} garbage`, ReasonInvalidJSON},
		{"trailing number", `{"id":"a","type":"webhook"} 1`, ReasonInvalidJSON},

		{"no id", `{"type":"webhook"}`, ReasonMissingID},
		{"empty id", `{"id":"","type":"webhook"}`, ReasonMissingID},
		{"null object", `null`, ReasonMissingID},
		{"empty object", `{}`, ReasonMissingID},

		{"id over 200 characters", `{"id":"` + longID + `","type":"webhook"}`, ReasonInvalidID},
		{"id with colon", `{"id":"a:b","type":"webhook"}`, ReasonInvalidID},
		{"id with newline", `{"id":"a\nb","type":"webhook"}`, ReasonInvalidID},
		{"id with carriage return", `{"id":"a\rb","type":"webhook"}`, ReasonInvalidID},
		{"id with NUL", `{"id":"a\u0000b","type":"webhook"}`, ReasonInvalidID},
		{"id equal to another event's batch id", `{"id":"x/batch/0","type":"webhook"}`, ReasonInvalidID},
		{"id with the attempt separator", `{"id":"a#0","type":"webhook"}`, ReasonInvalidID},
		{"id with a bidi override", `{"id":"a\u202eb","type":"webhook"}`, ReasonInvalidID},
		{"id with a space", `{"id":"a b","type":"webhook"}`, ReasonInvalidID},
		{"tenant with a slash", `{"id":"a","type":"webhook","tenant":"acme/eu"}`, ReasonInvalidTenant},
		{"tenant over 62 bytes", `{"id":"a","type":"webhook","tenant":"` + strings.Repeat("t", 63) + `"}`, ReasonInvalidTenant},
		{"tenant with a control byte", `{"id":"a","type":"webhook","tenant":"a\u0001"}`, ReasonInvalidTenant},

		{"no type", `{"id":"a"}`, ReasonMissingType},
		{"empty type", `{"id":"a","type":""}`, ReasonMissingType},

		{"unknown type", `{"id":"a","type":"sms"}`, ReasonUnknownType},
		{"type differs in case", `{"id":"a","type":"Webhook"}`, ReasonUnknownType},

		{"unknown priority", `{"id":"a","type":"webhook","priority":"urgent"}`, ReasonUnknownPriority},
		{"priority differs in case", `{"id":"a","type":"webhook","priority":"HIGH"}`, ReasonUnknownPriority},

		{"payload over the limit", `{"id":"a","type":"webhook","payload":` + bigPayload + `}`, ReasonPayloadTooLarge},
		{"headers push payload over the limit", `{"id":"a","type":"webhook","payload":"x","headers":{"k":"` + strings.Repeat("v", 62) + `"}}`, ReasonPayloadTooLarge},
		{"header value over 1 KiB", `{"id":"a","type":"webhook","headers":{"k":"` + strings.Repeat("v", 1025) + `"}}`, ReasonInvalidHeaders},
		{"17 headers", `{"id":"a","type":"webhook","headers":{` + manyHeaders(17) + `}}`, ReasonInvalidHeaders},
		{"empty header key", `{"id":"a","type":"webhook","headers":{"":"v"}}`, ReasonInvalidHeaders},

		{"deliver_at not a time", `{"id":"a","type":"webhook","deliver_at":"tomorrow"}`, ReasonInvalidDeliverAt},
		{"deliver_at without a zone", `{"id":"a","type":"webhook","deliver_at":"2026-12-24T09:00:00"}`, ReasonInvalidDeliverAt},
		{"deliver_at a date only", `{"id":"a","type":"webhook","deliver_at":"2026-12-24"}`, ReasonInvalidDeliverAt},
		{"deliver_at a Unix time", `{"id":"a","type":"webhook","deliver_at":"1798102800"}`, ReasonInvalidDeliverAt},
		{"deliver_at of the wrong type", `{"id":"a","type":"webhook","deliver_at":1798102800}`, ReasonInvalidJSON},
		{"delay not a duration", `{"id":"a","type":"webhook","delay":"soon"}`, ReasonInvalidDelay},
		{"delay without a unit", `{"id":"a","type":"webhook","delay":"90"}`, ReasonInvalidDelay},
		{"delay in days", `{"id":"a","type":"webhook","delay":"2d"}`, ReasonInvalidDelay},
		{"negative delay", `{"id":"a","type":"webhook","delay":"-5m"}`, ReasonInvalidDelay},
		{"deliver_at and delay", `{"id":"a","type":"webhook","deliver_at":"2026-12-24T09:00:00Z","delay":"1h"}`, ReasonDeliverAtAndDelay},
		{"deliver_at beyond the horizon", `{"id":"a","type":"webhook","deliver_at":"2999-01-01T00:00:00Z"}`, ReasonBeyondHorizon},
		{"delay beyond the horizon", `{"id":"a","type":"webhook","delay":"721h"}`, ReasonBeyondHorizon},
		{"delay that overflows", `{"id":"a","type":"webhook","delay":"9999999999h"}`, ReasonInvalidDelay},
	}
	v := testValidator()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ev, err := v.Parse(kafka.Message{Value: []byte(c.value)})
			if err == nil {
				t.Fatalf("Parse(%q) = %+v, nil; want a %s error", c.value, ev, c.reason)
			}
			var ie *InvalidError
			if !errors.As(err, &ie) {
				t.Fatalf("Parse(%q) error %v (%T) is not an *InvalidError", c.value, err, err)
			}
			if ie.Reason != c.reason {
				t.Fatalf("Parse(%q) reason = %q (%v), want %q", c.value, ie.Reason, err, c.reason)
			}
			if ie.Detail == "" {
				t.Errorf("Parse(%q): empty Detail", c.value)
			}
			if got, want := err.Error(), c.reason+": "; !strings.HasPrefix(got, want) {
				t.Errorf("Error() = %q, want prefix %q", got, want)
			}
			if !reflect.DeepEqual(ev, fanout.Event{}) {
				t.Errorf("Parse(%q) returned event %+v with the error, want a zero event", c.value, ev)
			}
		})
	}
}

// The order of the checks decides the reason when several things are wrong.
func TestParseReasonPrecedence(t *testing.T) {
	cases := []struct {
		name   string
		value  string
		reason string
	}{
		{"missing id before missing type", `{}`, ReasonMissingID},
		{"invalid id before unknown type", `{"id":"a:b","type":"sms"}`, ReasonInvalidID},
		{"unknown type before unknown priority", `{"id":"a","type":"sms","priority":"urgent"}`, ReasonUnknownType},
		{"unknown priority before payload size", `{"id":"a","type":"webhook","priority":"urgent","payload":"` + strings.Repeat("x", 100) + `"}`, ReasonUnknownPriority},
	}
	v := testValidator()
	for _, c := range cases {
		_, err := v.Parse(kafka.Message{Value: []byte(c.value)})
		var ie *InvalidError
		if !errors.As(err, &ie) || ie.Reason != c.reason {
			t.Errorf("%s: Parse error = %v, want reason %s", c.name, err, c.reason)
		}
	}
}

func TestParseValid(t *testing.T) {
	id200 := strings.Repeat("i", 200)
	payload64 := `"` + strings.Repeat("x", 62) + `"`
	cases := []struct {
		name      string
		validator Validator
		msg       kafka.Message
		want      fanout.Event
	}{
		{
			name: "minimal",
			msg:  kafka.Message{Value: []byte(`{"id":"order-42","type":"webhook"}`)},
			want: fanout.Event{ID: "order-42", Type: "webhook"},
		},
		{
			name: "all fields",
			msg: kafka.Message{Value: []byte(`{"id":"order-42","type":"email","priority":"high",` +
				`"payload":{"a":[1,2]},"headers":{"x-tenant":"t1"}}`)},
			want: fanout.Event{ID: "order-42", Type: "email", Priority: fanout.PriorityHigh,
				Payload: json.RawMessage(`{"a":[1,2]}`), Headers: map[string]string{"x-tenant": "t1"}},
		},
		{
			name: "every priority: normal",
			msg:  kafka.Message{Value: []byte(`{"id":"a","type":"webhook","priority":"normal"}`)},
			want: fanout.Event{ID: "a", Type: "webhook", Priority: fanout.PriorityNormal},
		},
		{
			name: "every priority: low",
			msg:  kafka.Message{Value: []byte(`{"id":"a","type":"webhook","priority":"low"}`)},
			want: fanout.Event{ID: "a", Type: "webhook", Priority: fanout.PriorityLow},
		},
		{
			name: "empty priority stays empty",
			msg:  kafka.Message{Value: []byte(`{"id":"a","type":"webhook","priority":""}`)},
			want: fanout.Event{ID: "a", Type: "webhook", Priority: ""},
		},
		{
			name: "unknown fields and surrounding whitespace are ignored",
			msg:  kafka.Message{Value: []byte(" \n{\"id\":\"a\",\"type\":\"webhook\",\"extra\":true}\n ")},
			want: fanout.Event{ID: "a", Type: "webhook"},
		},
		{
			name: "id of exactly 200 characters",
			msg:  kafka.Message{Value: []byte(`{"id":"` + id200 + `","type":"webhook"}`)},
			want: fanout.Event{ID: id200, Type: "webhook"},
		},
		{
			name: "payload exactly at the limit",
			msg:  kafka.Message{Value: []byte(`{"id":"a","type":"webhook","payload":` + payload64 + `}`)},
			want: fanout.Event{ID: "a", Type: "webhook", Payload: json.RawMessage(payload64)},
		},
		{
			name:      "no limit when MaxPayloadBytes is zero",
			validator: Validator{Types: []string{"webhook"}},
			msg:       kafka.Message{Value: []byte(`{"id":"a","type":"webhook","payload":"` + strings.Repeat("x", 5000) + `"}`)},
			want:      fanout.Event{ID: "a", Type: "webhook", Payload: json.RawMessage(`"` + strings.Repeat("x", 5000) + `"`)},
		},
		{
			name: "trace headers are copied",
			msg: kafka.Message{
				Value: []byte(`{"id":"a","type":"webhook"}`),
				Headers: []kafka.Header{
					{Key: "traceparent", Value: []byte("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")},
					{Key: "tracestate", Value: []byte("congo=t61rcWkgMzE")},
					{Key: "baggage", Value: []byte("userId=alice")},
					{Key: "x-other", Value: []byte("not copied")},
				},
			},
			want: fanout.Event{ID: "a", Type: "webhook", Headers: map[string]string{
				"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
				"tracestate":  "congo=t61rcWkgMzE",
				"baggage":     "userId=alice",
			}},
		},
		{
			name: "trace header keys are lower-cased and merged with envelope headers",
			msg: kafka.Message{
				Value: []byte(`{"id":"a","type":"webhook","headers":{"x-tenant":"t1","traceparent":"from-envelope"}}`),
				Headers: []kafka.Header{
					{Key: "TraceParent", Value: []byte("from-kafka")},
				},
			},
			want: fanout.Event{ID: "a", Type: "webhook", Headers: map[string]string{
				"x-tenant":    "t1",
				"traceparent": "from-kafka",
			}},
		},
		{
			name: "only other Kafka headers leave Headers nil",
			msg: kafka.Message{
				Value:   []byte(`{"id":"a","type":"webhook"}`),
				Headers: []kafka.Header{{Key: "x-other", Value: []byte("v")}},
			},
			want: fanout.Event{ID: "a", Type: "webhook"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := c.validator
			if v.Types == nil {
				v = testValidator()
			}
			ev, err := v.Parse(c.msg)
			if err != nil {
				t.Fatalf("Parse(%q): %v", c.msg.Value, err)
			}
			if ev.ID != c.want.ID || ev.Type != c.want.Type || ev.Priority != c.want.Priority {
				t.Errorf("Parse = id %q type %q priority %q, want id %q type %q priority %q",
					ev.ID, ev.Type, ev.Priority, c.want.ID, c.want.Type, c.want.Priority)
			}
			if string(ev.Payload) != string(c.want.Payload) {
				t.Errorf("Payload = %s, want %s", ev.Payload, c.want.Payload)
			}
			if !reflect.DeepEqual(ev.Headers, c.want.Headers) {
				t.Errorf("Headers = %#v, want %#v", ev.Headers, c.want.Headers)
			}
		})
	}
}

// TestParseTrailingDelimiter: a stray closing brace or bracket after the
// object is trailing data too. json.Decoder.More reports false before '}' and
// ']', so a check on More alone lets these records through.
func TestParseTrailingDelimiter(t *testing.T) {
	cases := []string{
		`{"id":"a","type":"webhook"}}`,
		`{"id":"a","type":"webhook"}]`,
		`{"id":"a","type":"webhook"} }`,
	}
	v := testValidator()
	for _, value := range cases {
		ev, err := v.Parse(kafka.Message{Value: []byte(value)})
		var ie *InvalidError
		if !errors.As(err, &ie) || ie.Reason != ReasonInvalidJSON {
			t.Errorf("Parse(%q) = %+v, %v; want an %s error", value, ev, err, ReasonInvalidJSON)
		}
	}
}

// TestParseSchedule: deliver_at and delay resolve into an absolute DeliverAt
// (UTC; Delay cleared), a delay from the record's timestamp (the clock's
// when the record has none or one ahead), within the horizon; a past time
// is kept (the workflow delivers it at once).
func TestParseSchedule(t *testing.T) {
	now := time.Date(2026, 12, 1, 4, 0, 0, 0, time.UTC)
	published := now.Add(-10 * time.Second)
	v := Validator{Types: []string{"webhook"}, Horizon: 24 * time.Hour, Now: func() time.Time { return now }}
	cases := []struct {
		name      string
		value     string
		published time.Time
		want      time.Time
		reason    string
	}{
		{"none", `{"id":"a","type":"webhook"}`, published, time.Time{}, ""},
		{"empty strings are none", `{"id":"a","type":"webhook","deliver_at":"","delay":""}`, published, time.Time{}, ""},
		{"deliver_at in UTC", `{"id":"a","type":"webhook","deliver_at":"2026-12-01T05:00:00Z"}`, published, now.Add(time.Hour), ""},
		{"deliver_at with an offset and fractions", `{"id":"a","type":"webhook","deliver_at":"2026-12-01T06:30:00.5+01:00"}`, published, now.Add(90*time.Minute + 500*time.Millisecond), ""},
		{"deliver_at past", `{"id":"a","type":"webhook","deliver_at":"2020-01-01T00:00:00Z"}`, published, time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC), ""},
		{"deliver_at exactly at the horizon", `{"id":"a","type":"webhook","deliver_at":"2026-12-02T04:00:00Z"}`, published, now.Add(24 * time.Hour), ""},
		{"deliver_at a second past the horizon", `{"id":"a","type":"webhook","deliver_at":"2026-12-02T04:00:01Z"}`, published, time.Time{}, ReasonBeyondHorizon},
		{"delay from the record's timestamp", `{"id":"a","type":"webhook","delay":"90s"}`, published, published.Add(90 * time.Second), ""},
		{"delay without a record timestamp", `{"id":"a","type":"webhook","delay":"2h"}`, time.Time{}, now.Add(2 * time.Hour), ""},
		{"delay from a timestamp ahead of the clock", `{"id":"a","type":"webhook","delay":"1m"}`, now.Add(time.Hour), now.Add(time.Minute), ""},
		{"zero delay", `{"id":"a","type":"webhook","delay":"0s"}`, published, published, ""},
		{"delay at the horizon", `{"id":"a","type":"webhook","delay":"24h"}`, published, published.Add(24 * time.Hour), ""},
		{"delay over the horizon", `{"id":"a","type":"webhook","delay":"24h0m1s"}`, published, time.Time{}, ReasonBeyondHorizon},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ev, err := v.Parse(kafka.Message{Value: []byte(c.value), Time: c.published})
			if c.reason != "" {
				var ie *InvalidError
				if !errors.As(err, &ie) || ie.Reason != c.reason {
					t.Fatalf("Parse = %+v, %v; want reason %s", ev, err, c.reason)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if !ev.DeliverAt.Equal(c.want) || ev.Delay != "" {
				t.Fatalf("DeliverAt %v, Delay %q; want %v and no delay", ev.DeliverAt, ev.Delay, c.want)
			}
			if !ev.DeliverAt.IsZero() && ev.DeliverAt.Location() != time.UTC {
				t.Errorf("DeliverAt %v is not in UTC", ev.DeliverAt)
			}
			// What the workflow receives (JSON) keeps the time.
			b, _ := json.Marshal(ev)
			var back fanout.Event
			if err := json.Unmarshal(b, &back); err != nil || !back.DeliverAt.Equal(c.want) {
				t.Fatalf("round trip %s: %v, %v", b, back.DeliverAt, err)
			}
			if c.want.IsZero() && strings.Contains(string(b), "deliver_at") {
				t.Errorf("an unscheduled event encodes deliver_at: %s", b)
			}
		})
	}
}

// TestParseScheduleIsStable: reading the same record again later (a bridge
// restart, a rebalance) resolves its delay to the same time.
func TestParseScheduleIsStable(t *testing.T) {
	published := time.Date(2026, 12, 1, 4, 0, 0, 0, time.UTC)
	m := kafka.Message{Value: []byte(`{"id":"a","type":"webhook","delay":"10m"}`), Time: published}
	var got []time.Time
	for _, later := range []time.Duration{time.Second, 5 * time.Minute, time.Hour} {
		v := Validator{Types: []string{"webhook"}, Now: func() time.Time { return published.Add(later) }}
		ev, err := v.Parse(m)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ev.DeliverAt)
	}
	for _, at := range got {
		if !at.Equal(published.Add(10 * time.Minute)) {
			t.Fatalf("resolved times %v, want %v each time", got, published.Add(10*time.Minute))
		}
	}
}

// TestParseGuard: expires_at resolves to a UTC time after deliver_at, not
// before the record's timestamp beyond ExpirySkew (stable when the record
// is read again later) and at most fanout.MaxTTL after the event is due;
// a canary is kept within its bounds; each mistake has its own reason.
func TestParseGuard(t *testing.T) {
	now := time.Date(2026, 12, 1, 4, 0, 0, 0, time.UTC)
	published := now.Add(-10 * time.Second)
	v := Validator{Types: []string{"webhook"}, Horizon: 24 * time.Hour, Now: func() time.Time { return now }}
	ev := func(extra string) string { return `{"id":"a","type":"webhook"` + extra + `}` }
	cases := []struct {
		name    string
		value   string
		at      time.Time // the record's timestamp
		expires time.Time
		canary  *fanout.Canary
		reason  string
	}{
		{"none", ev(``), published, time.Time{}, nil, ""},
		{"empty expires_at is none", ev(`,"expires_at":""`), published, time.Time{}, nil, ""},
		{"expires_at in an hour", ev(`,"expires_at":"2026-12-01T05:00:00Z"`), published, now.Add(time.Hour), nil, ""},
		{"expires_at with an offset", ev(`,"expires_at":"2026-12-01T06:00:00+01:00"`), published, now.Add(time.Hour), nil, ""},
		{"expires_at within the skew before publishing", ev(`,"expires_at":"2026-12-01T03:59:00Z"`), published, now.Add(-time.Minute), nil, ""},
		{"expires_at before publishing beyond the skew", ev(`,"expires_at":"2026-12-01T03:58:49Z"`), published, time.Time{}, nil, ReasonExpired},
		{"expires_at long past", ev(`,"expires_at":"2020-01-01T00:00:00Z"`), published, time.Time{}, nil, ReasonExpired},
		{"expires_at passed after publishing is kept (the event expires at once)", ev(`,"expires_at":"2026-12-01T03:59:55Z"`), published, now.Add(-5 * time.Second), nil, ""},
		{"expires_at not a time", ev(`,"expires_at":"tomorrow"`), published, time.Time{}, nil, ReasonInvalidExpiresAt},
		{"expires_at without a zone", ev(`,"expires_at":"2026-12-01T05:00:00"`), published, time.Time{}, nil, ReasonInvalidExpiresAt},
		{"expires_at of the wrong type", ev(`,"expires_at":5`), published, time.Time{}, nil, ReasonInvalidJSON},
		{"expires_at at MaxTTL", ev(`,"expires_at":"` + published.Add(fanout.MaxTTL).Format(time.RFC3339) + `"`), published, published.Add(fanout.MaxTTL), nil, ""},
		{"expires_at beyond MaxTTL", ev(`,"expires_at":"` + published.Add(fanout.MaxTTL+time.Second).Format(time.RFC3339) + `"`), published, time.Time{}, nil, ReasonInvalidExpiresAt},
		{"expires_at after deliver_at", ev(`,"deliver_at":"2026-12-01T06:00:00Z","expires_at":"2026-12-01T07:00:00Z"`), published, now.Add(3 * time.Hour), nil, ""},
		{"expires_at at deliver_at", ev(`,"deliver_at":"2026-12-01T06:00:00Z","expires_at":"2026-12-01T06:00:00Z"`), published, time.Time{}, nil, ReasonInvalidExpiresAt},
		{"expires_at before a delay", ev(`,"delay":"2h","expires_at":"2026-12-01T05:00:00Z"`), published, time.Time{}, nil, ReasonInvalidExpiresAt},
		{"MaxTTL counts from deliver_at", ev(`,"deliver_at":"2026-12-01T06:00:00Z","expires_at":"` + now.Add(2*time.Hour+fanout.MaxTTL).Format(time.RFC3339) + `"`), published, now.Add(2*time.Hour + fanout.MaxTTL), nil, ""},

		{"canary", ev(`,"canary":{"recipients":100,"max_failure_ratio":0.2}`), published, time.Time{}, &fanout.Canary{Recipients: 100, MaxFailureRatio: 0.2}, ""},
		{"canary with the default ratio", ev(`,"canary":{"recipients":100}`), published, time.Time{}, &fanout.Canary{Recipients: 100}, ""},
		{"canary off for the event", ev(`,"canary":{"recipients":0}`), published, time.Time{}, &fanout.Canary{}, ""},
		{"canary of negative recipients", ev(`,"canary":{"recipients":-1}`), published, time.Time{}, nil, ReasonInvalidCanary},
		{"canary over the bound", ev(`,"canary":{"recipients":1000001}`), published, time.Time{}, nil, ReasonInvalidCanary},
		{"canary ratio of 1", ev(`,"canary":{"recipients":10,"max_failure_ratio":1}`), published, time.Time{}, nil, ReasonInvalidCanary},
		{"canary ratio negative", ev(`,"canary":{"recipients":10,"max_failure_ratio":-0.1}`), published, time.Time{}, nil, ReasonInvalidCanary},
		{"canary ratio a string", ev(`,"canary":{"recipients":10,"max_failure_ratio":"0.1"}`), published, time.Time{}, nil, ReasonInvalidJSON},
		{"canary not an object", ev(`,"canary":100`), published, time.Time{}, nil, ReasonInvalidJSON},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := v.Parse(kafka.Message{Value: []byte(c.value), Time: c.at})
			if c.reason != "" {
				var ie *InvalidError
				if !errors.As(err, &ie) || ie.Reason != c.reason {
					t.Fatalf("Parse = %+v, %v; want reason %s", got, err, c.reason)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if !got.ExpiresAt.Equal(c.expires) || (!got.ExpiresAt.IsZero() && got.ExpiresAt.Location() != time.UTC) {
				t.Errorf("ExpiresAt %v, want %v in UTC", got.ExpiresAt, c.expires)
			}
			if !reflect.DeepEqual(got.Canary, c.canary) {
				t.Errorf("Canary %+v, want %+v", got.Canary, c.canary)
			}
			b, _ := json.Marshal(got)
			var back fanout.Event
			if err := json.Unmarshal(b, &back); err != nil || !back.ExpiresAt.Equal(c.expires) || !reflect.DeepEqual(back.Canary, c.canary) {
				t.Fatalf("round trip %s: %+v, %v", b, back, err)
			}
			if c.expires.IsZero() && strings.Contains(string(b), "expires_at") || c.canary == nil && strings.Contains(string(b), "canary") {
				t.Errorf("an event without them encodes them: %s", b)
			}
		})
	}
	// Read again a day later, the same record resolves the same way.
	later := Validator{Types: []string{"webhook"}, Horizon: 24 * time.Hour, Now: func() time.Time { return now.Add(24 * time.Hour) }}
	got, err := later.Parse(kafka.Message{Value: []byte(ev(`,"expires_at":"2026-12-01T05:00:00Z"`)), Time: published})
	if err != nil || !got.ExpiresAt.Equal(now.Add(time.Hour)) {
		t.Fatalf("read again later: %+v, %v", got, err)
	}
}
