// Package demo provides the loopback recipients source and webhook sink used
// by `task dev`, the integration tests and the benchmarks.
//
// The Source serves a synthetic audience per event: the event payload's
// "audience" field says how many recipients (ids r0..r<n-1>), "duplicate_every"
// repeats every k-th recipient in a later page (to exercise the gate). Every
// recipient's address is the Sink's /deliver URL.
//
// The Sink counts deliveries per (event, recipient), so tests can assert that
// every recipient got the message exactly once.
package demo

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/workers/webhook"
)

// Payload is the demo event payload understood by the Source.
type Payload struct {
	Audience       int             `json:"audience"`
	DuplicateEvery int             `json:"duplicate_every,omitempty"`
	Message        json.RawMessage `json:"message,omitempty"`
	// RecipientsURL is read by the webhook handler, not the Source: the
	// event's recipients come from there instead of the workers' default.
	RecipientsURL string `json:"recipients_url,omitempty"`
}

// Source serves pages of a synthetic audience at POST /recipients.
type Source struct {
	// DeliverURL is every recipient's address.
	DeliverURL string
}

// RecipientID is the id of the i-th demo recipient.
func RecipientID(i int) string { return "r" + strconv.Itoa(i) }

func (s *Source) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req webhook.RecipientsRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var p Payload
	if len(req.Event.Payload) > 0 {
		if err := json.Unmarshal(req.Event.Payload, &p); err != nil {
			http.Error(w, "payload: "+err.Error(), http.StatusBadRequest)
			return
		}
	}
	off := 0
	if req.Cursor != "" {
		n, err := strconv.Atoi(req.Cursor)
		if err != nil || n < 0 {
			http.Error(w, "bad cursor", http.StatusBadRequest)
			return
		}
		off = n
	}
	limit := max(req.Limit, 1)
	page := fanout.Page{Recipients: make([]fanout.Recipient, 0, min(limit, max(p.Audience-off, 0)))}
	i := off
	for ; i < p.Audience && len(page.Recipients) < limit; i++ {
		page.Recipients = append(page.Recipients, fanout.Recipient{ID: RecipientID(i), Address: s.DeliverURL})
		// Repeat an earlier recipient (from a previous page) to show the gate
		// turning it into a skipped duplicate.
		if p.DuplicateEvery > 0 && i%p.DuplicateEvery == p.DuplicateEvery-1 && i >= limit && len(page.Recipients) < limit {
			page.Recipients = append(page.Recipients, fanout.Recipient{ID: RecipientID(i - limit), Address: s.DeliverURL})
		}
	}
	if i < p.Audience {
		page.NextCursor = strconv.Itoa(i)
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(page)
}

// Sink counts deliveries at POST /deliver.
type Sink struct {
	mu     sync.Mutex
	counts map[string]map[string]uint32 // event id -> recipient -> deliveries
	last   map[string]time.Time         // event id -> last delivery

	total    atomic.Int64
	dups     atomic.Int64
	rejected atomic.Int64
	inflight atomic.Int64

	// Fail, when set, decides the answer to a delivery: an HTTP status
	// (0 = deliver) and a Retry-After to send with it (0 = none).
	Fail func(eventID, recipientID string) (int, time.Duration)
	// Delay is added to every delivery.
	Delay time.Duration
}

// NewSink returns an empty sink.
func NewSink() *Sink {
	return &Sink{counts: map[string]map[string]uint32{}, last: map[string]time.Time{}}
}

func (s *Sink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ev := r.Header.Get(webhook.HeaderEventID)
	rc := r.Header.Get(webhook.HeaderRecipientID)
	if ev == "" || rc == "" {
		http.Error(w, "missing event or recipient header", http.StatusBadRequest)
		return
	}
	if s.Delay > 0 {
		time.Sleep(s.Delay)
	}
	s.inflight.Add(1)
	defer s.inflight.Add(-1)
	if s.Fail != nil {
		if code, after := s.Fail(ev, rc); code != 0 && code != http.StatusOK {
			if after > 0 {
				w.Header().Set("Retry-After", strconv.Itoa(int((after+time.Second-1)/time.Second)))
			}
			s.rejected.Add(1)
			w.WriteHeader(code)
			return
		}
	}
	now := time.Now()
	s.mu.Lock()
	m := s.counts[ev]
	if m == nil {
		m = map[string]uint32{}
		s.counts[ev] = m
	}
	m[rc]++
	dup := m[rc] > 1
	s.last[ev] = now
	s.mu.Unlock()
	s.total.Add(1)
	if dup {
		s.dups.Add(1)
	}
	w.WriteHeader(http.StatusNoContent)
}

// Total is the number of successful deliveries so far, duplicates included.
func (s *Sink) Total() int64 { return s.total.Load() }

// Rejected is the number of deliveries answered with an error.
func (s *Sink) Rejected() int64 { return s.rejected.Load() }

// InFlight is the number of deliveries being served now.
func (s *Sink) InFlight() int64 { return s.inflight.Load() }

// Duplicates is the number of deliveries to a recipient that already had one.
func (s *Sink) Duplicates() int64 { return s.dups.Load() }

// EventStats describes what one event's recipients received.
type EventStats struct {
	Unique     int       // recipients with at least one delivery
	Deliveries int       // deliveries, duplicates included
	Duplicated int       // recipients with more than one delivery
	Last       time.Time // time of the last delivery
}

// Event returns the stats of one event.
func (s *Sink) Event(eventID string) EventStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := EventStats{Last: s.last[eventID]}
	for _, n := range s.counts[eventID] {
		st.Unique++
		st.Deliveries += int(n)
		if n > 1 {
			st.Duplicated++
		}
	}
	return st
}

// Count returns how many deliveries a recipient of an event received.
func (s *Sink) Count(eventID, recipientID string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return int(s.counts[eventID][recipientID])
}

// Mux serves the source at /recipients and the sink at /deliver, with the
// sink's totals at /stats.
func Mux(src *Source, sink *Sink) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("POST /recipients", src)
	mux.Handle("POST /deliver", sink)
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "{\"deliveries\":%d,\"duplicates\":%d}\n", sink.Total(), sink.Duplicates())
	})
	return mux
}
