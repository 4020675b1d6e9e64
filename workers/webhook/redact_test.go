package webhook

import (
	"context"
	"encoding/json"
	"net"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/fanout/fanout"
)

// TestErrorsShowOnlyTheOrigin: a failed request's error (which becomes the
// activity's error, a log line, a dead letter's reason and the span's
// exception event) names the destination's scheme, host and port, never
// the URL's user, password, path or query, for deliveries and for the
// recipients endpoint alike.
func TestErrorsShowOnlyTheOrigin(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))
	defer otel.SetTracerProvider(noop.NewTracerProvider())

	// A closed port: every request fails in the dial.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	_ = ln.Close()
	secrets := []string{"alice", "pa55word", "hooks-SECRETPATH", "TOKENVALUE"}
	base := "http://alice:pa55word@" + closed + "/hooks-SECRETPATH?token=TOKENVALUE"
	ctx := context.Background()
	client := NewClient(2*time.Second, 4, Loopback...)

	h := &Handler{Client: client, RecipientsURL: base}
	ev := fanout.Event{ID: "e", Type: EventType}
	var errs []error
	errs = append(errs, h.Deliver(ctx, ev, fanout.Recipient{ID: "r", Address: base}, fanout.Message{ContentType: "application/json", Body: []byte(`{}`)}))
	_, err = h.GetRecipients(ctx, ev, "", 10)
	errs = append(errs, err)
	// A URL that does not parse, with a password in it.
	errs = append(errs, h.Deliver(ctx, ev, fanout.Recipient{ID: "r", Address: "http://alice:pa55word@" + closed + ":bad/hooks-SECRETPATH"}, fanout.Message{ContentType: "application/json"}))
	// A payload's recipients_url outside the allow-list.
	allow := &Handler{Client: client, RecipientsURL: "http://127.0.0.1:1/", RecipientsURLAllow: []string{"http://127.0.0.1:1/"}}
	_, err = allow.GetRecipients(ctx, fanout.Event{ID: "e", Type: EventType, Payload: json.RawMessage(`{"recipients_url":` + strconvQuote(base) + `}`)}, "", 10)
	errs = append(errs, err)

	for i, err := range errs {
		if err == nil {
			t.Fatalf("request %d succeeded, want a failure", i)
		}
		for _, s := range secrets {
			if strings.Contains(err.Error(), s) {
				t.Errorf("error %d shows %q: %v", i, s, err)
			}
		}
	}
	if !strings.Contains(errs[0].Error(), closed) {
		t.Errorf("the delivery error %q does not name the destination %s", errs[0], closed)
	}
	for _, s := range rec.Ended() {
		for _, e := range s.Events() {
			for _, kv := range e.Attributes {
				for _, sec := range secrets {
					if strings.Contains(kv.Value.String(), sec) {
						t.Errorf("span %s event %s attribute %s shows %q", s.Name(), e.Name, kv.Key, sec)
					}
				}
			}
		}
	}
	if len(rec.Ended()) == 0 {
		t.Error("no spans recorded: the span check saw nothing")
	}
}
