package activities_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/activities"
	"github.com/fanout/fanout/internal/codec"
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
	if d, err := activities.DecodeDeadLetter(marshal(t, validDeadLetter()), nil); err != nil || !reflect.DeepEqual(d, validDeadLetter()) {
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
		if _, err := activities.DecodeDeadLetter(marshal(t, d), nil); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	for name, b := range map[string]string{
		"not JSON":   "{",
		"an array":   "[]",
		"over 1 MiB": `{"event_id":"` + strings.Repeat("a", activities.MaxDeadLetterBytes) + `"}`,
	} {
		if _, err := activities.DecodeDeadLetter([]byte(b), nil); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// FuzzDecodeDeadLetter: whatever a record of the DLQ topic holds, decoding
// it does not panic, and what it accepts is a dead letter of one event,
// whose redrive workflow ids stay under that event's workflow id, and which
// reads back the same after writing.
func FuzzDecodeDeadLetter(f *testing.F) {
	keys := testKeys(f)
	f.Add(marshal(f, validDeadLetter()))
	f.Add(marshal(f, sealed(f, validDeadLetter(), keys)))
	moved := sealed(f, validDeadLetter(), keys)
	moved.EventID, moved.Event.ID, moved.AttemptID = "other", "other", vocab.AttemptID("webhook", "other", 3)
	f.Add(marshal(f, moved))
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
		d, err := activities.DecodeDeadLetter(b, keys)
		if err != nil {
			return
		}
		if d.Sealed != nil {
			t.Fatal("a decoded letter still has its sealed part")
		}
		// Sealed and read back, it is the same letter.
		s, err := d.SealWith(keys)
		if err != nil {
			t.Fatal(err)
		}
		if again, err := activities.DecodeDeadLetter(marshal(t, s), keys); err != nil || !reflect.DeepEqual(again, d) {
			t.Fatalf("sealed and read back: %+v %v, want %+v", again, err, d)
		}
		wid := vocab.WorkflowID(d.EventType, d.EventID)
		if rw := vocab.RedriveWorkflowID(wid, d.AttemptID, "round", 0); !strings.HasPrefix(rw, wid+"/redrive/round/"+vocab.EventKey(d.EventType, d.EventID)+"#") {
			t.Fatalf("redrive workflow id %q of %q", rw, wid)
		}
		again, err := activities.DecodeDeadLetter(marshal(t, d), nil)
		if err != nil || !reflect.DeepEqual(again, d) {
			t.Fatalf("written and read back: %+v %v, want %+v", again, err, d)
		}
	})
}

// testKeys is a keyring of a fixed key (the same in every fuzz worker).
func testKeys(t testing.TB) *codec.Keyring {
	k, err := codec.New(codec.Key{ID: "k1", Secret: bytes.Repeat([]byte{7}, codec.KeySize)})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func sealed(t testing.TB, d activities.DeadLetter, keys activities.Sealer) activities.DeadLetter {
	s, err := d.SealWith(keys)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestSealedDeadLetter: a letter written with keys keeps its routing and
// diagnostic fields in clear (an operator reading the DLQ sees what failed
// and why) but not the address, the message or the headers, nor the
// address inside last_error; DecodeDeadLetter with the keys reads back the
// letter as it was, without them refuses it, and refuses a sealed part
// moved into a letter of another event, attempt or recipient, or beside an
// address or message in clear. A letter in clear still reads with keys.
func TestSealedDeadLetter(t *testing.T) {
	keys := testKeys(t)
	d := validDeadLetter()
	d.Recipient.Address = "https://hooks.secret.example/t0ken"
	d.LastError = `Post "https://hooks.secret.example/t0ken": connection refused`
	d.Event.Headers = map[string]string{"baggage": "user=alice"}
	d.Message.Body = []byte(`{"text":"the secret message"}`)
	b := marshal(t, sealed(t, d, keys))
	for _, clear := range []string{"hooks.secret.example", "t0ken", "secret message", "alice", "baggage"} {
		if bytes.Contains(b, []byte(clear)) {
			t.Errorf("%q in clear in the sealed letter: %s", clear, b)
		}
	}
	var raw map[string]any
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]any{
		"event_id": "order-42", "event_type": "webhook", "attempt_id": d.AttemptID, "priority": "high",
		"attempts": 5.0, "last_error": `Post <redacted>: connection refused`,
	} {
		if raw[k] != want {
			t.Errorf("clear %s = %v, want %v", k, raw[k], want)
		}
	}
	if rid := raw["recipient"].(map[string]any)["id"]; rid != "r7" {
		t.Errorf("clear recipient id %v", rid)
	}
	got, err := activities.DecodeDeadLetter(b, keys)
	if err != nil || !reflect.DeepEqual(got, d) {
		t.Fatalf("read back: %+v %v, want %+v", got, err, d)
	}
	if _, err := activities.DecodeDeadLetter(b, nil); err == nil || !strings.Contains(err.Error(), "no keys") {
		t.Errorf("without keys: %v", err)
	}
	other, _ := codec.New(codec.NewKey("k2"))
	if _, err := activities.DecodeDeadLetter(b, other); err == nil || !strings.Contains(err.Error(), "unknown key id") {
		t.Errorf("with other keys: %v", err)
	}
	for name, change := range map[string]func(*activities.DeadLetter){
		"another event": func(x *activities.DeadLetter) {
			x.EventID, x.Event.ID, x.AttemptID = "e2", "e2", vocab.AttemptID("webhook", "e2", 3)
		},
		"another attempt":   func(x *activities.DeadLetter) { x.AttemptID = vocab.AttemptID("webhook", "order-42", 4) },
		"another recipient": func(x *activities.DeadLetter) { x.Recipient.ID = "r8" },
		"address in clear":  func(x *activities.DeadLetter) { x.Recipient.Address = "https://evil.example/" },
		"message in clear":  func(x *activities.DeadLetter) { x.Message.Body = []byte("x") },
		"tampered":          func(x *activities.DeadLetter) { x.Sealed[len(x.Sealed)-1] ^= 1 },
	} {
		x := sealed(t, d, keys)
		change(&x)
		if _, err := activities.DecodeDeadLetter(marshal(t, x), keys); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	// With keys fanout writes only sealed letters: one in clear is refused.
	if _, err := activities.DecodeDeadLetter(marshal(t, d), keys); !errors.Is(err, activities.ErrNotSealed) {
		t.Errorf("a letter in clear with keys: %v, want ErrNotSealed", err)
	}
	if got, err := activities.DecodeDeadLetter(marshal(t, d), nil); err != nil || !reflect.DeepEqual(got, d) {
		t.Errorf("a letter in clear without keys: %v", err)
	}
	// The largest message still fits a sealed letter.
	big := validDeadLetter()
	big.Message.Body = bytes.Repeat([]byte{0xff}, fanout.MaxMessageBytes-len(big.Message.ContentType))
	bb := marshal(t, sealed(t, big, keys))
	if _, err := activities.DecodeDeadLetter(bb, keys); err != nil {
		t.Errorf("a sealed letter of the largest message (%d bytes): %v", len(bb), err)
	}
}

// TestSealedLetterClearErrorNamesNoHost: the clear last_error of a sealed
// letter names neither the recipient's host (in any of the forms an error
// gives it: its origin, host and port, a DNS lookup) nor another host the
// error names (a redirect's, a resolved address), while the sealed part
// keeps the whole error.
func TestSealedLetterClearErrorNamesNoHost(t *testing.T) {
	keys := testKeys(t)
	for _, lastErr := range []string{
		`Post "https://hooks.secret.example:8443": dial tcp: lookup hooks.secret.example: no such host`,
		`Post "https://hooks.secret.example:8443": dial tcp 10.1.2.3:8443: connect: connection refused`,
		`redirected: to https://other.secret.example/x`,
		`HTTP 410 from hooks.secret.example`,
		`HTTP 502 from [2001:db8::7]:8443`,
	} {
		d := validDeadLetter()
		d.Recipient.Address = "https://hooks.secret.example:8443/t0ken"
		d.LastError = lastErr
		var raw struct {
			LastError string `json:"last_error"`
		}
		if err := json.Unmarshal(marshal(t, sealed(t, d, keys)), &raw); err != nil {
			t.Fatal(err)
		}
		for _, host := range []string{"secret", "10.1.2.3", "2001:db8", "8443"} {
			if strings.Contains(raw.LastError, host) {
				t.Errorf("clear last_error %q names %q (error %q)", raw.LastError, host, lastErr)
			}
		}
		if raw.LastError == "" {
			t.Errorf("clear last_error of %q is empty; want its reason", lastErr)
		}
		if got, err := activities.DecodeDeadLetter(marshal(t, sealed(t, d, keys)), keys); err != nil || got.LastError != lastErr {
			t.Errorf("read back with keys: last_error %q, %v; want %q", got.LastError, err, lastErr)
		}
	}
}
