//go:build integration

// Package trusted_test checks issue 26's trusted endpoints on the real stack
// (the temporal dev server, redis-server, kfake over TCP, the worker binary
// configured by its environment only): the recipients endpoint the operator
// configures (FANOUT_RECIPIENTS_URL) is reached on a loopback address that
// FANOUT_OUTBOUND_ALLOW does not name, while recipient addresses and a
// payload's recipients_url stay under the outbound guard, on that very host
// and port too.
package trusted_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/activities"
	"github.com/fanout/fanout/dev/stack"
	"github.com/fanout/fanout/internal/kafkatopic"
	"github.com/fanout/fanout/internal/netguard"
	"github.com/fanout/fanout/workers/webhook"
)

// sink stands for the public destinations of a deployment: it listens on
// 127.0.0.2, the range the test allows (FANOUT_OUTBOUND_ALLOW=127.0.0.2/32),
// and records the recipient of every delivery.
type sink struct {
	*httptest.Server
	mu   sync.Mutex
	seen map[string]int // recipient id -> deliveries
}

func startSink(t *testing.T) *sink {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatalf("listen 127.0.0.2: %v", err)
	}
	s := &sink{seen: map[string]int{}}
	s.Server = &httptest.Server{Listener: ln, Config: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.seen[r.Header.Get(webhook.HeaderRecipientID)]++
		s.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})}}
	s.Start()
	t.Cleanup(s.Close)
	return s
}

func (s *sink) counts() (recipients, deliveries int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range s.seen {
		deliveries += n
	}
	return len(s.seen), deliveries
}

// audience is an event's recipients: n on the sink, then one whose
// address is on the recipients endpoint's own host and port (victim),
// paged by offset.
type audience struct {
	n      int
	sink   string // the sink's base URL
	victim string // an address on the endpoint's host:port
	hits   atomic.Int64
}

// victimID is the recipient whose address is the endpoint's host.
const victimID = "same-host"

func (a *audience) page(req webhook.RecipientsRequest) fanout.Page {
	a.hits.Add(1)
	all := make([]fanout.Recipient, 0, a.n+1)
	for i := range a.n {
		all = append(all, fanout.Recipient{ID: "r" + strconv.Itoa(i), Address: a.sink + "/hook/" + strconv.Itoa(i)})
	}
	all = append(all, fanout.Recipient{ID: victimID, Address: a.victim})
	from, _ := strconv.Atoi(req.Cursor)
	from = min(max(from, 0), len(all))
	to := min(from+max(req.Limit, 1), len(all))
	page := fanout.Page{Recipients: all[from:to]}
	if to < len(all) {
		page.NextCursor = strconv.Itoa(to)
	}
	return page
}

// recipientsEndpoint answers each event's recipients request with its
// audience (one endpoint URL, as an operator configures it).
func recipientsEndpoint(byEvent map[string]*audience) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req webhook.RecipientsRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || byEvent[req.Event.ID] == nil {
			http.Error(w, "unknown event", http.StatusBadRequest)
			return
		}
		_ = json.NewEncoder(w).Encode(byEvent[req.Event.ID].page(req))
	})
}

// The acceptance point of issue 26, item 1: the worker runs with
// FANOUT_RECIPIENTS_URL on loopback (127.0.0.1) and FANOUT_OUTBOUND_ALLOW
// naming only the sink's test range (127.0.0.2/32). An event is paged from
// the endpoint and delivered to every recipient on the sink, through the
// fast path (a small audience, delivered by the events worker) and through
// delivery batches (a large one); the recipient whose address is on the
// recipients endpoint's host and port is refused by the guard, gets no
// request, and is dead-lettered with the guard's reason. A payload's
// recipients_url on that same host, matched by FANOUT_RECIPIENTS_URL_ALLOW,
// is not operator-configured: the guard refuses it and the event fails.
func TestTrustedRecipientsEndpoint(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dest := startSink(t)
	s, err := stack.Start(ctx, stack.Options{InMemory: true, Log: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Build(ctx); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(s.DemoURL, "http://127.0.0.1:") {
		t.Fatalf("the demo server is at %s, want 127.0.0.1 (outside the allowed range)", s.DemoURL)
	}
	// Both on the demo server, 127.0.0.1:<port>: the recipients endpoint
	// and, at the same host and port, the address of the victim recipient.
	var victimHits atomic.Int64
	victim := s.Route(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		victimHits.Add(1)
		w.WriteHeader(http.StatusNoContent)
	})) + "/deliver"
	stamp := time.Now().UTC().Format("150405")
	smallID, largeID, payloadID := "trusted-small-"+stamp, "trusted-large-"+stamp, "trusted-payload-"+stamp
	small := &audience{n: 20, sink: dest.URL, victim: victim}
	large := &audience{n: 450, sink: dest.URL, victim: victim}
	chosen := &audience{n: 5, sink: dest.URL, victim: victim} // the payload's, never asked
	// Filled before Route, whose lock orders it before every request.
	byEvent := map[string]*audience{smallID: small, largeID: large, payloadID: chosen}
	router := s.Route(recipientsEndpoint(byEvent))

	env := []string{
		"FANOUT_BRIDGE=true",
		"FANOUT_RECIPIENTS_URL=" + router + "/recipients",
		// The sink's range only: not the recipients endpoint's 127.0.0.1
		// (the stack's default, 127.0.0.0/8, is replaced: the last of a
		// variable wins).
		"FANOUT_OUTBOUND_ALLOW=127.0.0.2/32",
		// The stack's: payloads may name the demo server (where the
		// endpoint is routed too).
		"FANOUT_RECIPIENTS_URL_ALLOW=" + s.RecipientsURLAllow(),
		"FANOUT_BATCH_SIZE=100", "FANOUT_PAGE_SIZE=200",
		"FANOUT_MAX_ATTEMPTS=2", "FANOUT_RETRY_INITIAL=200ms", "FANOUT_RETRY_MAX=1s",
	}
	if err := s.StartWorker("worker", "events,high,normal,low", env...); err != nil {
		t.Fatal(err)
	}
	if err := s.Publish(ctx, stack.Event{ID: smallID}, stack.Event{ID: largeID},
		stack.Event{ID: payloadID, RecipientsURL: router + "/recipients"}); err != nil {
		t.Fatal(err)
	}

	for _, ev := range []struct {
		id string
		a  *audience
	}{{smallID, small}, {largeID, large}} {
		res, err := s.Wait(ctx, ev.id)
		if err != nil {
			t.Fatalf("event %s: %v (worker log: %s)", ev.id, err, s.LogPath("worker"))
		}
		if res.Delivered != int64(ev.a.n) || res.Failed != 1 || res.DeadLettered != 1 {
			t.Errorf("event %s: progress %+v, want %d delivered to the sink, the same-host recipient failed and dead-lettered", ev.id, res.Progress, ev.a.n)
		}
		if ev.a.hits.Load() == 0 {
			t.Errorf("event %s: the recipients endpoint got no request", ev.id)
		}
	}
	if got, calls := dest.counts(); got != large.n || calls < small.n+large.n {
		t.Errorf("the sink saw %d recipients in %d deliveries, want %d recipients (of both events)", got, calls, large.n)
	}
	if n := victimHits.Load(); n != 0 {
		t.Errorf("the address on the recipients endpoint's host got %d requests, want none", n)
	}

	// The payload's recipients_url: the same endpoint, allowed by
	// FANOUT_RECIPIENTS_URL_ALLOW, but chosen by the event, not the
	// operator: the guard refuses 127.0.0.1.
	if _, err := s.Wait(ctx, payloadID); err == nil || !strings.Contains(err.Error(), netguard.ErrDenied.Error()) {
		t.Errorf("event %s with a payload recipients_url on 127.0.0.1: %v, want it failed by the guard (%s)", payloadID, err, netguard.ErrDenied)
	}
	if n := chosen.hits.Load(); n != 0 {
		t.Errorf("the payload's recipients_url was requested %d times", n)
	}

	// The dead letters: one per event, the same-host recipient, with the
	// guard's reason.
	letters := map[string]activities.DeadLetter{}
	rctx, rcancel := context.WithTimeout(ctx, time.Minute)
	defer rcancel()
	err = kafkatopic.ReadAll(rctx, s.KafkaConn(), activities.DefaultDeliveriesDLQTopic, func(m kafka.Message) error {
		d, err := activities.DecodeDeadLetter(m.Value, nil)
		if err != nil {
			return fmt.Errorf("a dead letter that does not decode: %w", err)
		}
		if _, dup := letters[d.EventID]; dup {
			return errors.New("two dead letters of event " + d.EventID)
		}
		letters[d.EventID] = d
		return nil
	})
	if err != nil {
		t.Fatalf("read the deliveries DLQ: %v", err)
	}
	for _, id := range []string{smallID, largeID} {
		d, ok := letters[id]
		switch {
		case !ok:
			t.Errorf("event %s: no dead letter", id)
		case d.Recipient.ID != victimID || !d.Permanent || d.Attempts != 1:
			t.Errorf("event %s: dead letter of %q (permanent %v, %d attempts), want %q refused at once", id, d.Recipient.ID, d.Permanent, d.Attempts, victimID)
		case !strings.Contains(d.LastError, netguard.ErrDenied.Error()) || !strings.Contains(d.LastError, "127.0.0.1 is in 127.0.0.0/8"):
			t.Errorf("event %s: dead letter's last error %q, want the guard's reason (127.0.0.1 is in 127.0.0.0/8)", id, d.LastError)
		}
	}
	if len(letters) != 2 {
		t.Errorf("%d dead letters, want 2 (one per delivered event)", len(letters))
	}
}
