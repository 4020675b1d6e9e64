package webhook

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fanout/fanout"
)

// hits counts the requests a test server got per recipient.
type hits struct {
	mu sync.Mutex
	n  map[string]int
}

func (h *hits) add(rc string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.n[rc]++
	return h.n[rc]
}

func (h *hits) get(rc string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n[rc]
}

// TestAtMostOnceFollowsNoRedirect: at least once a delivery follows a 307;
// at most once it makes its one request and fails it as redirected
// (permanent: given up with its own error), so the destination gets it
// once.
func TestAtMostOnceFollowsNoRedirect(t *testing.T) {
	got := &hits{n: map[string]int{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.add(r.URL.Path + " " + r.Header.Get(HeaderRecipientID))
		if r.URL.Path == "/a" {
			http.Redirect(w, r, "/b", http.StatusTemporaryRedirect)
		}
	}))
	defer srv.Close()
	h := &Handler{Client: NewClient(5*time.Second, 4, Loopback...)}
	ev := fanout.Event{ID: "e1", Type: EventType}
	msg := fanout.Message{Body: []byte("{}"), ContentType: "application/json"}
	if err := h.Deliver(context.Background(), ev, fanout.Recipient{ID: "r1", Address: srv.URL + "/a"}, msg); err != nil {
		t.Fatalf("at least once: %v", err)
	}
	if got.get("/b r1") != 1 {
		t.Fatalf("at least once: redirect target hit %d times, want 1", got.get("/b r1"))
	}
	amo := fanout.WithSemantics(context.Background(), fanout.AtMostOnce)
	err := h.Deliver(amo, ev, fanout.Recipient{ID: "r2", Address: srv.URL + "/a"}, msg)
	if err == nil || !fanout.IsPermanent(err) || !strings.Contains(err.Error(), ReasonRedirected) {
		t.Fatalf("at most once: %v; want a permanent redirected for the 307", err)
	}
	if got.get("/a r2") != 1 || got.get("/b r2") != 0 {
		t.Fatalf("at most once: /a hit %d, /b hit %d; want 1 and 0", got.get("/a r2"), got.get("/b r2"))
	}
}

// TestAtMostOnceIsNotReplayedByTheTransport: when the destination drops a
// reused keep-alive connection after reading a delivery, net/http replays
// the POST (the Idempotency-Key header makes it replayable) at least once;
// at most once it does not, and the delivery fails instead, also with an
// empty body (which net/http replays without GetBody).
func TestAtMostOnceIsNotReplayedByTheTransport(t *testing.T) {
	amo := fanout.WithSemantics(context.Background(), fanout.AtMostOnce)
	for _, c := range []struct {
		name     string
		ctx      context.Context
		body     string
		wantErr  bool
		wantHits int
	}{
		{"at least once", context.Background(), "{}", false, 2},
		{"at most once", amo, "{}", true, 1},
		{"at most once, empty body", amo, "", true, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := &hits{n: map[string]int{}}
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				rc := r.Header.Get(HeaderRecipientID)
				if got.add(rc) == 1 && rc == "drop" {
					// Read the request, then drop the connection unanswered.
					conn, _, err := http.NewResponseController(w).Hijack()
					if err == nil {
						_ = conn.Close()
					}
				}
			}))
			defer srv.Close()
			h := &Handler{Client: NewClient(5*time.Second, 4, Loopback...)}
			ev := fanout.Event{ID: "e1", Type: EventType}
			msg := fanout.Message{Body: []byte(c.body), ContentType: "application/json"}
			// A first delivery leaves a keep-alive connection to reuse.
			if err := h.Deliver(c.ctx, ev, fanout.Recipient{ID: "warm", Address: srv.URL}, msg); err != nil {
				t.Fatal(err)
			}
			err := h.Deliver(c.ctx, ev, fanout.Recipient{ID: "drop", Address: srv.URL}, msg)
			if (err != nil) != c.wantErr {
				t.Fatalf("Deliver: %v; want error %v", err, c.wantErr)
			}
			if n := got.get("drop"); n != c.wantHits {
				t.Fatalf("destination got the delivery %d times, want %d", n, c.wantHits)
			}
		})
	}
}
