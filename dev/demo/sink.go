package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/fanout/fanout/workers/webhook"
)

// Sink counts deliveries at POST /deliver and answers 204. It is the
// destination of the dev stack, the tests and the bench, so it must stay
// cheap per request: a delivery costs two header reads, one map update under
// a mutex and an empty answer, and an event's stats are kept as running
// counters, so reading them never walks the event's recipients (a bench
// polling a 1,000,000-recipient event would otherwise hold the lock for
// milliseconds per poll and slow the very deliveries it measures).
type Sink struct {
	mu     sync.Mutex
	events map[string]*eventCounts

	total    atomic.Int64
	dups     atomic.Int64
	rejected atomic.Int64
	forged   atomic.Int64
	inflight atomic.Int64
	delay    atomic.Int64 // SetDelay, ns

	// Fail, when set, decides the answer to a delivery: an HTTP status
	// (0 = deliver) and a Retry-After to send with it (0 = none).
	Fail func(eventID, recipientID string) (int, time.Duration)
	// Delay is added to every delivery; set it before the sink serves (or
	// use SetDelay, which is safe at any time and adds to it).
	Delay time.Duration
	// verify holds, by event type, the Standard Webhooks receivers of
	// Verify.
	verify map[string][]*standardwebhooks.Webhook
}

// maxSignedBody bounds the body the sink reads to check a signature.
const maxSignedBody = 1 << 20

// Verify has the sink check, before the sink serves, every delivery of
// eventType (its X-Fanout-Event-Type header) as a receiver of that type
// does: with the Standard Webhooks reference library, its signature must
// be by one of secrets ("whsec_..."), its timestamp recent. A delivery that
// fails is answered 401 and counted in Totals.BadSignatures, not
// delivered; one that passes counts in its EventStats.Verified. Deliveries
// of other types are not checked.
func (s *Sink) Verify(eventType string, secrets ...string) error {
	if len(secrets) == 0 {
		return errors.New("no secret")
	}
	var whs []*standardwebhooks.Webhook
	for i, sec := range secrets {
		wh, err := standardwebhooks.NewWebhook(sec)
		if err != nil {
			return fmt.Errorf("type %s: secret %d: %w", eventType, i+1, err)
		}
		whs = append(whs, wh)
	}
	if s.verify == nil {
		s.verify = map[string][]*standardwebhooks.Webhook{}
	}
	s.verify[eventType] = whs
	return nil
}

// checkSignature reports whether the delivery r of a type with receivers
// whs is signed by one of them.
func checkSignature(whs []*standardwebhooks.Webhook, r *http.Request) bool {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxSignedBody+1))
	if err != nil || len(body) > maxSignedBody {
		return false
	}
	for _, wh := range whs {
		if wh.Verify(body, r.Header) == nil {
			return true
		}
	}
	return false
}

// eventCounts are one event's deliveries per recipient and its running
// stats.
type eventCounts struct {
	recipients map[string]uint32
	stats      EventStats
	// perSecond counts the deliveries by the Unix second they arrived in.
	perSecond map[int64]int
}

// NewSink returns an empty sink.
func NewSink() *Sink {
	return &Sink{events: map[string]*eventCounts{}}
}

// SetDelay sets a delay added to every delivery from now on (on top of
// Delay), for a sink in another process, whose fields cannot be set.
func (s *Sink) SetDelay(d time.Duration) { s.delay.Store(int64(d)) }

func (s *Sink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ev := r.Header.Get(webhook.HeaderEventID)
	rc := r.Header.Get(webhook.HeaderRecipientID)
	if ev == "" || rc == "" {
		http.Error(w, "missing event or recipient header", http.StatusBadRequest)
		return
	}
	if d := s.Delay + time.Duration(s.delay.Load()); d > 0 {
		time.Sleep(d)
	}
	s.inflight.Add(1)
	defer s.inflight.Add(-1)
	verified := false
	if whs, ok := s.verify[r.Header.Get(webhook.HeaderEventType)]; ok {
		if !checkSignature(whs, r) {
			s.forged.Add(1)
			s.rejected.Add(1)
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		verified = true
	}
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
	if s.record(ev, rc, verified, time.Now()) {
		s.dups.Add(1)
	}
	s.total.Add(1)
	w.WriteHeader(http.StatusNoContent)
}

// record counts a delivery (verified: its signature was checked) and
// reports whether the recipient had one already.
func (s *Sink) record(ev, rc string, verified bool, now time.Time) (dup bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.events[ev]
	if e == nil {
		e = &eventCounts{recipients: map[string]uint32{}, perSecond: map[int64]int{}}
		s.events[ev] = e
	}
	n := e.recipients[rc] + 1
	e.recipients[rc] = n
	e.stats.Deliveries++
	if verified {
		e.stats.Verified++
	}
	if e.stats.Deliveries == 1 {
		e.stats.First = now
	}
	e.perSecond[now.Unix()]++
	switch n {
	case 1:
		e.stats.Unique++
	case 2:
		e.stats.Duplicated++
	}
	e.stats.Last = now
	return n > 1
}

// Total is the number of successful deliveries so far, duplicates included.
func (s *Sink) Total() int64 { return s.total.Load() }

// Rejected is the number of deliveries answered with an error.
func (s *Sink) Rejected() int64 { return s.rejected.Load() }

// InFlight is the number of deliveries being served now.
func (s *Sink) InFlight() int64 { return s.inflight.Load() }

// Duplicates is the number of deliveries to a recipient that already had one.
func (s *Sink) Duplicates() int64 { return s.dups.Load() }

// Totals are the sink's counters.
type Totals struct {
	Deliveries int64 `json:"deliveries"` // successful, duplicates included
	Duplicates int64 `json:"duplicates"`
	Rejected   int64 `json:"rejected"`
	InFlight   int64 `json:"in_flight"`
	// BadSignatures counts the deliveries of a type checked by Verify
	// whose signature failed (counted in Rejected too).
	BadSignatures int64 `json:"bad_signatures"`
}

// Totals returns the sink's counters.
func (s *Sink) Totals() Totals {
	return Totals{Deliveries: s.Total(), Duplicates: s.Duplicates(), Rejected: s.Rejected(), InFlight: s.InFlight(), BadSignatures: s.forged.Load()}
}

// EventStats describes what one event's recipients received.
type EventStats struct {
	Unique     int       `json:"unique"`     // recipients with at least one delivery
	Deliveries int       `json:"deliveries"` // deliveries, duplicates included
	Duplicated int       `json:"duplicated"` // recipients with more than one delivery
	Verified   int       `json:"verified"`   // deliveries whose signature Sink.Verify checked
	First      time.Time `json:"first"`      // time of the first delivery
	Last       time.Time `json:"last"`       // time of the last delivery
}

// Event returns the stats of one event.
func (s *Sink) Event(eventID string) EventStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.events[eventID]; e != nil {
		return e.stats
	}
	return EventStats{}
}

// PerSecond returns an event's deliveries (duplicates included) by the Unix
// second they arrived in, for checking a rate: seconds without a delivery
// are absent.
func (s *Sink) PerSecond(eventID string) map[int64]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.events[eventID]
	if e == nil {
		return map[int64]int{}
	}
	out := make(map[int64]int, len(e.perSecond))
	for sec, n := range e.perSecond {
		out[sec] = n
	}
	return out
}

// Count returns how many deliveries a recipient of an event received.
func (s *Sink) Count(eventID, recipientID string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.events[eventID]; e != nil {
		return int(e.recipients[recipientID])
	}
	return 0
}

// Bounds of the stats API's requests.
const (
	maxStatsBody = 8 << 20
	maxStatsIDs  = 100_000
)

// Routes registers the sink on mux: deliveries at POST /deliver; its
// counters at GET /stats (Totals, or with ?event=ID that event's
// EventStats) and POST /stats/events (a JSON array of event ids, answered
// with their EventStats by id); GET /stats/seconds?event=ID the event's
// PerSecond; PUT /delay?d=25ms sets SetDelay. SinkClient reads them.
func (s *Sink) Routes(mux *http.ServeMux) {
	mux.Handle("POST /deliver", s)
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, r *http.Request) {
		if id := r.URL.Query().Get("event"); id != "" {
			writeJSON(w, s.Event(id))
			return
		}
		writeJSON(w, s.Totals())
	})
	mux.HandleFunc("GET /stats/seconds", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, s.PerSecond(r.URL.Query().Get("event")))
	})
	mux.HandleFunc("POST /stats/events", func(w http.ResponseWriter, r *http.Request) {
		var ids []string
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxStatsBody)).Decode(&ids); err != nil || len(ids) > maxStatsIDs {
			http.Error(w, fmt.Sprintf("want a JSON array of at most %d event ids", maxStatsIDs), http.StatusBadRequest)
			return
		}
		out := make(map[string]EventStats, len(ids))
		for _, id := range ids {
			out[id] = s.Event(id)
		}
		writeJSON(w, out)
	})
	mux.HandleFunc("PUT /delay", func(w http.ResponseWriter, r *http.Request) {
		d, err := time.ParseDuration(r.URL.Query().Get("d"))
		if err != nil || d < 0 || d > time.Minute {
			http.Error(w, "want d=<duration between 0 and 1m>", http.StatusBadRequest)
			return
		}
		s.SetDelay(d)
		w.WriteHeader(http.StatusNoContent)
	})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// Mux serves the source at /recipients and the sink's Routes.
func Mux(src *Source, sink *Sink) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("POST /recipients", src)
	sink.Routes(mux)
	return mux
}

// SinkClient reads a sink's counters over HTTP (Routes), for a sink that
// runs in another process as a real destination does.
type SinkClient struct {
	// URL is the sink's base URL (http://127.0.0.1:port).
	URL  string
	HTTP *http.Client
}

// NewSinkClient returns a client of the sink at baseURL.
func NewSinkClient(baseURL string) *SinkClient {
	return &SinkClient{URL: baseURL, HTTP: &http.Client{Timeout: 10 * time.Second}}
}

// maxStatsAnswer bounds what the client reads from the sink.
const maxStatsAnswer = 64 << 20

func (c *SinkClient) do(ctx context.Context, method, path string, body []byte, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, c.URL+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxStatsAnswer))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("sink %s %s: HTTP %d: %.200s", method, path, resp.StatusCode, b)
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(b, out)
}

// Event returns the stats of one event.
func (c *SinkClient) Event(ctx context.Context, eventID string) (EventStats, error) {
	var st EventStats
	err := c.do(ctx, http.MethodGet, "/stats?event="+url.QueryEscape(eventID), nil, &st)
	return st, err
}

// Events returns the stats of several events in one request.
func (c *SinkClient) Events(ctx context.Context, eventIDs []string) (map[string]EventStats, error) {
	out := make(map[string]EventStats, len(eventIDs))
	for len(eventIDs) > 0 {
		part := eventIDs[:min(len(eventIDs), maxStatsIDs)]
		eventIDs = eventIDs[len(part):]
		body, err := json.Marshal(part)
		if err != nil {
			return nil, err
		}
		var got map[string]EventStats
		if err := c.do(ctx, http.MethodPost, "/stats/events", body, &got); err != nil {
			return nil, err
		}
		for id, st := range got {
			out[id] = st
		}
	}
	return out, nil
}

// PerSecond returns an event's deliveries by Unix second (Sink.PerSecond).
func (c *SinkClient) PerSecond(ctx context.Context, eventID string) (map[int64]int, error) {
	out := map[int64]int{}
	err := c.do(ctx, http.MethodGet, "/stats/seconds?event="+url.QueryEscape(eventID), nil, &out)
	return out, err
}

// Totals returns the sink's counters.
func (c *SinkClient) Totals(ctx context.Context) (Totals, error) {
	var t Totals
	err := c.do(ctx, http.MethodGet, "/stats", nil, &t)
	return t, err
}

// SetDelay sets the sink's added delay per delivery.
func (c *SinkClient) SetDelay(ctx context.Context, d time.Duration) error {
	if d < 0 {
		return errors.New("negative delay")
	}
	return c.do(ctx, http.MethodPut, "/delay?d="+d.String(), nil, nil)
}
