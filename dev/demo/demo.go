// Package demo provides the loopback recipients source and webhook sink used
// by `task dev`, the integration tests and the benchmarks.
//
// The Source serves a synthetic audience per event: the event payload's
// "audience" field says how many recipients (ids r0..r<n-1>), "duplicate_every"
// repeats every k-th recipient in a later page (to exercise the gate). Every
// recipient's address is the Sink's /deliver URL.
//
// The Sink counts deliveries per (event, recipient), so tests can assert that
// every recipient got the message exactly once. It runs in the caller's
// process (tests, the fault suite) or as its own process (dev/cmd/sink,
// for `task dev` and the bench, as a real destination does), read through
// SinkClient.
package demo

import (
	"encoding/json"
	"net/http"
	"strconv"

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
