package starter

import (
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.temporal.io/api/enums/v1"

	"github.com/fanout/fanout/activities/gate"
)

// Every answer has exactly the fields of the issue, null when not known.
func TestStatusJSONShape(t *testing.T) {
	at := time.Date(2026, 12, 2, 5, 0, 0, 0, time.UTC)
	n, b := 3, 4
	wid, ui := "fanout/webhook/e1/batch/4", "http://ui/namespaces/default/workflows/x"
	for _, s := range []RecipientStatus{
		{Type: "webhook", EventID: "e1", Recipient: "r1", State: StateDelivered, DeliveredAt: &at, Attempts: &n,
			LastError: &StatusError{Class: "http_error", HTTPStatus: 503, At: &at}, Batch: &b, BatchWorkflowID: &wid, UIURL: &ui},
		{Type: "webhook", EventID: "e1", Recipient: "r2", State: StateUnknown},
	} {
		raw, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatal(err)
		}
		var keys []string
		for k := range m {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		want := []string{"attempts", "batch", "batch_workflow_id", "delivered_at", "event_id", "last_error", "recipient", "state", "type", "ui_url"}
		if !slices.Equal(keys, want) {
			t.Errorf("keys %v, want %v (%s)", keys, want, raw)
		}
		if s.Recipient == "r2" && !strings.Contains(string(raw), `"delivered_at":null`) {
			t.Errorf("unknown fields are not null: %s", raw)
		}
		if s.Recipient == "r1" && !strings.Contains(string(raw), `"last_error":{"class":"http_error","http_status":503,"at":"2026-12-02T05:00:00Z"}`) {
			t.Errorf("last_error: %s", raw)
		}
	}
}

// Each gate record and event state gives the documented state.
func TestStatusAnswer(t *testing.T) {
	running := eventState{running: true, status: enums.WORKFLOW_EXECUTION_STATUS_RUNNING}
	completed := eventState{status: enums.WORKFLOW_EXECUTION_STATUS_COMPLETED}
	terminated := eventState{status: enums.WORKFLOW_EXECUTION_STATUS_TERMINATED}
	gone := eventState{}
	at := time.Now().Truncate(time.Second)
	le := &gate.LastError{Class: "http_error", HTTPStatus: 500, At: at}
	for _, c := range []struct {
		name  string
		r     gate.Record
		ev    eventState
		want  string
		tries int
	}{
		{"missing, running", gate.Record{}, running, StateNotReached, 0},
		{"missing, closed", gate.Record{}, completed, StateUnknown, 0},
		{"missing, gone", gate.Record{}, gone, StateUnknown, 0},
		{"unreadable", gate.Record{Found: true, Unreadable: "bad"}, running, StateUnknown, 0},
		{"delivered old", gate.Record{Found: true, State: gate.StateDelivered}, completed, StateDelivered, 0},
		{"delivered new", gate.Record{Found: true, State: gate.StateDelivered, DeliveredAt: at, Tries: 3, LastError: le}, completed, StateDelivered, 3},
		{"held", gate.Record{Found: true, State: gate.StateHeld}, running, StateInFlight, 0},
		{"sending", gate.Record{Found: true, State: gate.StateSending}, running, StateInFlight, 0},
		{"held after failures", gate.Record{Found: true, State: gate.StateHeld, Tries: 2, LastError: le}, running, StateRetrying, 2},
		{"dead", gate.Record{Found: true, State: gate.StateDeadLettered, Tries: 5, LastError: le}, completed, StateDeadLettered, 5},
		{"unconfirmed", gate.Record{Found: true, State: gate.StateUnconfirmed}, completed, StateUnconfirmed, 0},
		{"held, batch failed", gate.Record{Found: true, State: gate.StateHeld}, completed, StateDeadLettered, 0},
		{"held, event terminated", gate.Record{Found: true, State: gate.StateHeld}, terminated, StateUnknown, 0},
		{"held by a resend, event closed", gate.Record{Found: true, State: gate.StateHeld, Batch: -1, Resend: "x"}, completed, StateInFlight, 0},
	} {
		s := answer(c.r, c.ev)
		if s.State != c.want {
			t.Errorf("%s: state %s, want %s", c.name, s.State, c.want)
		}
		if got := 0; s.Attempts != nil {
			got = *s.Attempts
			if got != c.tries {
				t.Errorf("%s: attempts %d, want %d", c.name, got, c.tries)
			}
		} else if c.tries != 0 {
			t.Errorf("%s: attempts null, want %d", c.name, c.tries)
		}
		if c.r.State == gate.StateDelivered && c.r.DeliveredAt.IsZero() != (s.DeliveredAt == nil) {
			t.Errorf("%s: delivered_at %v", c.name, s.DeliveredAt)
		}
		if c.r.Unreadable != "" && (s.LastError == nil || s.LastError.Class != ClassUnreadable || s.LastError.Detail != "bad") {
			t.Errorf("%s: last error %+v, want the reason", c.name, s.LastError)
		}
	}
}

// Stdin: blank lines skipped, ids checked, at most max, a long line refused.
func TestReadIDsBounds(t *testing.T) {
	ids, err := ReadIDs(strings.NewReader("a\n\n  b  \r\nc"), 3)
	if err != nil || !slices.Equal(ids, []string{"a", "b", "c"}) {
		t.Errorf("ReadIDs = %v, %v", ids, err)
	}
	for name, in := range map[string]string{
		"too many":   "a\nb\nc\nd\n",
		"bad id":     "a\nb/c\n",
		"long line":  strings.Repeat("x", 100_000) + "\n",
		"control":    "a\x00b\n",
		"over MaxID": strings.Repeat("y", 201) + "\n",
	} {
		if ids, err := ReadIDs(strings.NewReader(in), 3); err == nil {
			t.Errorf("%s: ReadIDs = %v, nil error", name, ids)
		}
	}
	// 10,000 ids, the most per call, read; one more refused.
	var b strings.Builder
	for i := range MaxStatusRecipients + 1 {
		b.WriteString("r")
		b.WriteString(itoa(i) + "\n")
	}
	if _, err := ReadIDs(strings.NewReader(b.String()), MaxStatusRecipients); err == nil {
		t.Error("10,001 ids read")
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

// Bad queries fail before any read.
func TestStatusRefusesBadInput(t *testing.T) {
	for _, c := range []struct {
		typ, id string
		rs      []string
	}{{"", "e", []string{"r"}}, {"t", "a/b", []string{"r"}}, {"t", "e", nil}, {"t", "e", []string{"r:x"}}, {"t", "e", make([]string, MaxStatusRecipients+1)}} {
		if _, err := Status(t.Context(), StatusOptions{}, c.typ, c.id, c.rs); err == nil || errors.Is(err, ErrSomeUnknown) {
			t.Errorf("Status(%q, %q, %d ids): %v, want an error", c.typ, c.id, len(c.rs), err)
		}
	}
}

func TestUILink(t *testing.T) {
	if got := UILink("http://localhost:8233/", "", "fanout/webhook/e1/batch/0"); got != "http://localhost:8233/namespaces/default/workflows/fanout%2Fwebhook%2Fe1%2Fbatch%2F0" {
		t.Errorf("UILink = %s", got)
	}
}

func TestSupportSettings(t *testing.T) {
	for _, u := range []string{"ftp://x", "http://", "http://u:p@h", "http://h/?q=1", "not a url"} {
		s := Support{UIURL: u}
		s.URL = "redis://localhost:6379/0"
		if err := s.Validate(); err == nil || !strings.Contains(err.Error(), "FANOUT_UI_URL") {
			t.Errorf("FANOUT_UI_URL=%q: %v, want an error naming it", u, err)
		}
	}
}

// A resend needs a reason and who asks, bounded, and -address for one
// recipient only.
func TestResendOptionsCheck(t *testing.T) {
	ok := ResendOptions{EventType: "t", EventID: "e", Recipients: []string{"r"}, Reason: "ticket", By: "me"}
	if err := ok.check(); err != nil {
		t.Fatal(err)
	}
	for name, mod := range map[string]func(*ResendOptions){
		"no reason":         func(o *ResendOptions) { o.Reason = " " },
		"no by":             func(o *ResendOptions) { o.By = "" },
		"long reason":       func(o *ResendOptions) { o.Reason = strings.Repeat("x", MaxResendReason+1) },
		"control in reason": func(o *ResendOptions) { o.Reason = "a\nb" },
		"no recipients":     func(o *ResendOptions) { o.Recipients = nil },
		"address for two":   func(o *ResendOptions) { o.Recipients, o.Address = []string{"a", "b"}, "http://x/" },
		"bad name":          func(o *ResendOptions) { o.Name = "a/b" },
		"recipient twice":   func(o *ResendOptions) { o.Recipients = []string{"a", "a"} },
		"too many":          func(o *ResendOptions) { o.Recipients = make([]string, MaxResendRecipients+1) },
	} {
		o := ok
		mod(&o)
		if err := o.check(); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
