//go:build integration

package destlimits

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fanout/fanout/dev/stack"
	"github.com/fanout/fanout/starter"
	"github.com/fanout/fanout/workers/webhook"
)

// TestOneEventCannotTripAnotherEventsBreaker (issue 23, item 2) on the real
// stack: an event whose message has a content type net/http refuses (a
// control byte in a quoted parameter, which mime.ParseMediaType accepts)
// fails with invalid_message before any delivery, so the breaker it shares
// with other events of its type stays closed, and the next event to the
// same destination is delivered in full.
func TestOneEventCannotTripAnotherEventsBreaker(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const n = 10
	dest := startHost(t, "D", false)
	recipientsURL := serveRecipients(t, hostileAddrs{good: dest.addr, nGood: n})

	s, err := stack.Start(ctx, stack.Options{InMemory: true, Log: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Build(ctx); err != nil {
		t.Fatal(err)
	}
	env := []string{"FANOUT_BRIDGE=true", "FANOUT_MAX_ATTEMPTS=2", "FANOUT_RETRY_INITIAL=200ms", "FANOUT_RETRY_MAX=1s",
		"FANOUT_BREAKER_FAILURES=2", "FANOUT_BREAKER_COOLDOWN=2m",
		"FANOUT_RECIPIENTS_URL_ALLOW=" + strings.TrimSuffix(recipientsURL, "/recipients")} // the events' recipients_url
	if err := s.StartWorker("worker", "events,high,normal,low", env...); err != nil {
		t.Fatal(err)
	}

	stamp := time.Now().UTC().Format("150405")
	bad, _ := json.Marshal(map[string]any{"message": map[string]string{"text": "hi"}, "content_type": "application/json; x=\"\x01\"", "recipients_url": recipientsURL})
	if err := s.Publisher.Publish(ctx, starter.Envelope{ID: "badct-" + stamp, Type: webhook.EventType, Payload: bad}); err != nil {
		t.Fatal(err)
	}
	_, err = s.Wait(ctx, "badct-"+stamp)
	if err == nil || !strings.Contains(err.Error(), "invalid_message") {
		t.Errorf("the bad event ended with %v; want it failed with invalid_message", err)
	}
	if st := dest.stats(); st.calls != 0 {
		t.Errorf("the bad event's message reached the destination %d times", st.calls)
	}

	good := "goodct-" + stamp
	if err := s.Publish(ctx, stack.Event{ID: good, Audience: n, RecipientsURL: recipientsURL}); err != nil {
		t.Fatal(err)
	}
	res, err := s.Wait(ctx, good)
	if err != nil {
		t.Fatal(err)
	}
	if st := dest.stats(); res.Delivered != n || res.Failed != 0 || st.unique != n {
		t.Errorf("the next event: %+v, %d recipients reached; want all %d delivered", res.Progress, st.unique, n)
	}
	for _, d := range res.Destinations {
		if d.BreakerOpen || d.Rejected > 0 {
			t.Errorf("destination %+v: its breaker was opened by the bad event", d)
		}
	}
}

// serveRecipients serves h on loopback until the test ends and returns its
// recipients URL.
func serveRecipients(t *testing.T, h http.Handler) string {
	t.Helper()
	rl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(rl) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + rl.Addr().String() + "/recipients"
}
