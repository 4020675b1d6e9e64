package gate

import (
	"strings"
	"testing"
	"time"
)

// The delivered mark as written before times and tries were recorded is
// still read as delivered by its attempt, and the new one too.
func TestDeliveredMarkEncoding(t *testing.T) {
	at := time.Date(2026, 12, 2, 5, 0, 0, 0, time.UTC)
	v := DeliveredValue("webhook/e1#3", at, 4)
	if v != "delivered:webhook/e1#3;1796187600;4" {
		t.Errorf("DeliveredValue = %q", v)
	}
	for _, c := range []struct {
		v         string
		wantAt    time.Time
		wantTries int
	}{{v, at, 4}, {"delivered:webhook/e1#3", time.Time{}, 0}} {
		if a, st := ParseState(c.v); a != "webhook/e1#3" || st != StateDelivered {
			t.Errorf("ParseState(%q) = %q, %v; want webhook/e1#3 delivered", c.v, a, st)
		}
		if !isDeliveredMark(c.v, deliveredPrefix+"webhook/e1#3") || isDeliveredMark(c.v, deliveredPrefix+"webhook/e1#") {
			t.Errorf("isDeliveredMark(%q) wrong", c.v)
		}
		var r Record
		if err := r.parse("webhook/e1", c.v); err != nil {
			t.Fatalf("parse(%q): %v", c.v, err)
		}
		if r.State != StateDelivered || r.Batch != 3 || !r.DeliveredAt.Equal(c.wantAt) || r.Tries != c.wantTries {
			t.Errorf("parse(%q) = %+v; want delivered, batch 3, at %v, %d tries", c.v, r, c.wantAt, c.wantTries)
		}
	}
	// Another attempt's new mark is not ours.
	if isDeliveredMark(DeliveredValue("webhook/e1#30", at, 1), deliveredPrefix+"webhook/e1#3") {
		t.Error("the mark of batch 30 read as batch 3's")
	}
}

// Hostile or garbled values: an error naming why, never a panic, never a
// state.
func TestRecordParseHostile(t *testing.T) {
	future := time.Now().Add(72 * time.Hour).Unix()
	for _, v := range []string{
		"", "delivered:", "garbage", "otherevent/e1#0", "webhook/e2#0", "webhook/e1#x", "webhook/e1#-1", "webhook/e1#0001",
		"delivered:webhook/e1#0;", "delivered:webhook/e1#0;abc;1", "delivered:webhook/e1#0;1796187600;0",
		"delivered:webhook/e1#0;1796187600;99999999", "delivered:webhook/e1#0;1796187600",
		"delivered:webhook/e1#0;" + itoa(future) + ";1", "delivered:webhook/e1#0;100;1",
		"dead:webhook/e1#resend-", "dead:webhook/e1#resend-a/b", "webhook/e1#" + strings.Repeat("9", 700),
		"webhook/e1#99999999999",
	} {
		var r Record
		if err := r.parse("webhook/e1", v); err == nil {
			t.Errorf("parse(%q) = %+v, nil error; want an error", v, r)
		}
	}
	for _, v := range []string{"webhook/e1#0", "sending:webhook/e1#12", "dead:webhook/e1#resend-20261202T050000Z", "unconfirmed:webhook/e1#2"} {
		var r Record
		if err := r.parse("webhook/e1", v); err != nil {
			t.Errorf("parse(%q): %v", v, err)
		}
	}
}

func itoa(n int64) string { return fmtInt(n) }

func fmtInt(n int64) string {
	var b [20]byte
	i := len(b)
	for n > 0 {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
	}
	return string(b[i:])
}

func TestLastErrorRecord(t *testing.T) {
	at := time.Date(2026, 12, 2, 5, 0, 0, 0, time.UTC)
	e := LastError{Class: "http_error", HTTPStatus: 503, At: at}
	got, err := ParseLastError(e.encode())
	if err != nil || got != e {
		t.Errorf("ParseLastError(%q) = %+v, %v; want %+v", e.encode(), got, err, e)
	}
	for _, v := range []string{"", "a;b", "http_error;503;1796187600;x", "HTTP;503;1796187600", "http_error;99;1796187600",
		"http_error;600;1796187600", "http_error;503;-5", "http_error;503;nope", strings.Repeat("a", 40) + ";0;1796187600",
		"x;0;" + strings.Repeat("1", 700)} {
		if got, err := ParseLastError(v); err == nil {
			t.Errorf("ParseLastError(%q) = %+v, nil error", v, got)
		}
	}
}
