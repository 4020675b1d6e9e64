package activities_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/activities"
	"github.com/fanout/fanout/workflows/vocab"
)

// validDeadLetter is a dead letter as DeliverBatch writes it.
func validDeadLetter() activities.DeadLetter {
	return activities.DeadLetter{
		EventID: "order-42", EventType: "webhook", Priority: fanout.PriorityHigh, AttemptID: vocab.AttemptID("webhook", "order-42", 3),
		Recipient: fanout.Recipient{ID: "r7", Address: "https://example.com/hook"}, Attempts: 5, LastError: "HTTP 410",
		Event:   fanout.Event{ID: "order-42", Type: "webhook", Headers: map[string]string{"tenant": "a"}},
		Message: fanout.Message{ContentType: "application/json", Body: []byte(`{"text":"hi"}`)},
	}
}

func marshal(t testing.TB, d activities.DeadLetter) []byte {
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestDecodeDeadLetter: a redrive acts only on dead letters fanout could
// have written; each way a hostile record differs is refused.
func TestDecodeDeadLetter(t *testing.T) {
	if d, err := activities.DecodeDeadLetter(marshal(t, validDeadLetter())); err != nil || !reflect.DeepEqual(d, validDeadLetter()) {
		t.Fatalf("a valid dead letter: %+v %v", d, err)
	}
	for name, change := range map[string]func(*activities.DeadLetter){
		"slash in the event id":        func(d *activities.DeadLetter) { d.EventID, d.Event.ID = "x/batch/0", "x/batch/0" },
		"event id differs from event":  func(d *activities.DeadLetter) { d.Event.ID = "other" },
		"type differs from event":      func(d *activities.DeadLetter) { d.Event.Type = "other" },
		"attempt of another event":     func(d *activities.DeadLetter) { d.AttemptID = vocab.AttemptID("webhook", "other", 0) },
		"attempt of another type":      func(d *activities.DeadLetter) { d.AttemptID = vocab.AttemptID("other", "order-42", 0) },
		"attempt number not canonical": func(d *activities.DeadLetter) { d.AttemptID = "webhook/order-42#03" },
		"attempt number negative":      func(d *activities.DeadLetter) { d.AttemptID = "webhook/order-42#-1" },
		"attempt number huge":          func(d *activities.DeadLetter) { d.AttemptID = "webhook/order-42#99999999999999999999999" },
		"attempt with a suffix":        func(d *activities.DeadLetter) { d.AttemptID = "webhook/order-42#1/redrive" },
		"unknown priority":             func(d *activities.DeadLetter) { d.Priority = "urgent" },
		"control in recipient id":      func(d *activities.DeadLetter) { d.Recipient.ID = "r\x07" },
		"bidi in recipient id":         func(d *activities.DeadLetter) { d.Recipient.ID = "r\u202e" },
		"empty recipient id":           func(d *activities.DeadLetter) { d.Recipient.ID = "" },
		"address too long":             func(d *activities.DeadLetter) { d.Recipient.Address = strings.Repeat("a", fanout.MaxAddressLen+1) },
		"message too large":            func(d *activities.DeadLetter) { d.Message.Body = make([]byte, fanout.MaxMessageBytes) },
		"attempts huge":                func(d *activities.DeadLetter) { d.Attempts = 1 << 40 },
		"attempts negative":            func(d *activities.DeadLetter) { d.Attempts = -1 },
	} {
		d := validDeadLetter()
		change(&d)
		if _, err := activities.DecodeDeadLetter(marshal(t, d)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	for name, b := range map[string]string{
		"not JSON":   "{",
		"an array":   "[]",
		"over 1 MiB": `{"event_id":"` + strings.Repeat("a", activities.MaxDeadLetterBytes) + `"}`,
	} {
		if _, err := activities.DecodeDeadLetter([]byte(b)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// FuzzDecodeDeadLetter: whatever a record of the DLQ topic holds, decoding
// it does not panic, and what it accepts is a dead letter of one event,
// whose redrive workflow ids stay under that event's workflow id, and which
// reads back the same after writing.
func FuzzDecodeDeadLetter(f *testing.F) {
	f.Add(marshal(f, validDeadLetter()))
	omitted := validDeadLetter()
	omitted.Message, omitted.MessageOmitted = fanout.Message{}, 524288
	f.Add(marshal(f, omitted))
	for _, s := range []string{
		`{"event_id":"a","event_type":"t","attempt_id":"t/a#0","recipient":{"id":"r"},"event":{"id":"a","type":"t"}}`,
		`{"event_id":"a/b","event_type":"t","attempt_id":"t/a/b#0","recipient":{"id":"r"},"event":{"id":"a/b","type":"t"}}`,
		`{"event_id":"a#1","event_type":"t","attempt_id":"t/a#1#0","recipient":{"id":"r"},"event":{"id":"a#1","type":"t"}}`,
		`{"event_id":"a","event_type":"t","attempt_id":"t/a#1e3","recipient":{"id":"r\u202e"},"event":{"id":"a","type":"t"}}`,
		`{"event_id":"a","event_type":"t","attempt_id":"t/a#0","attempts":1e309,"recipient":{"id":"r"},"event":{"id":"a","type":"t"}}`,
		`{"event_id":"a\u0000","event_type":"t","attempt_id":"t/a\u0000#0","recipient":{"id":"r"},"event":{"id":"a\u0000","type":"t"}}`,
		`{"message":{"body":"////"},"message_omitted":-9223372036854775808}`,
		`null`, `{}`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := activities.DecodeDeadLetter(b)
		if err != nil {
			return
		}
		wid := vocab.WorkflowID(d.EventType, d.EventID)
		if rw := vocab.RedriveWorkflowID(wid, d.AttemptID, "round", 0); !strings.HasPrefix(rw, wid+"/redrive/round/"+vocab.EventKey(d.EventType, d.EventID)+"#") {
			t.Fatalf("redrive workflow id %q of %q", rw, wid)
		}
		again, err := activities.DecodeDeadLetter(marshal(t, d))
		if err != nil || !reflect.DeepEqual(again, d) {
			t.Fatalf("written and read back: %+v %v, want %+v", again, err, d)
		}
	})
}
