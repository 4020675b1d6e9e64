//go:build integration

// Package priority checks the low-priority brake on the real stack: the
// stock worker binary as an events worker (with the bridge), a delivery
// worker for the high and normal queues and another for the low queue, and
// two destinations on loopback: L receives a big low-priority event, H the
// small high-priority events published while it delivers.
package priority

import (
	"strings"

	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	sdkpb "go.temporal.io/api/sdk/v1"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/activities"
	"github.com/fanout/fanout/dev/demo"
	"github.com/fanout/fanout/dev/stack"
	"github.com/fanout/fanout/workers/webhook"
)

const (
	braked   = 300 // FANOUT_LOW_PRIORITY_BRAKE of the low worker, per second
	lowN     = 100000
	highN    = 100 // small events, highAud recipients each
	highAud  = 20
	highRate = 20 // small events published per second
)

// host counts the distinct recipients it received, with when each arrived.
type host struct {
	addr string
	mu   sync.Mutex
	seen map[string]int
	at   []time.Time
}

func startHost(t *testing.T) *host {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &host{addr: ln.Addr().String(), seen: map[string]int{}}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return h
}

func (h *host) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	key := r.Header.Get(webhook.HeaderEventID) + "/" + r.Header.Get(webhook.HeaderRecipientID)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seen[key]++
	if h.seen[key] == 1 {
		h.at = append(h.at, time.Now())
	}
}

// snapshot is how many distinct recipients arrived, and when.
func (h *host) snapshot() (int, []time.Time, int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	dups := 0
	for _, n := range h.seen {
		dups += n - 1
	}
	return len(h.at), append([]time.Time(nil), h.at...), dups
}

// between counts the arrivals in [from, to).
func between(at []time.Time, from, to time.Time) int {
	n := 0
	for _, t := range at {
		if !t.Before(from) && t.Before(to) {
			n++
		}
	}
	return n
}

// audiences serves each event's recipients (its payload's audience): a
// low-priority event's at L, the others' at H.
type audiences struct{ low, high string }

func (s audiences) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req webhook.RecipientsRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var p demo.Payload
	if err := json.Unmarshal(req.Event.Payload, &p); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	dest := s.high
	if req.Event.Priority == fanout.PriorityLow {
		dest = s.low
	}
	off, _ := strconv.Atoi(req.Cursor)
	var page fanout.Page
	for i := off; i < min(off+req.Limit, p.Audience); i++ {
		page.Recipients = append(page.Recipients, fanout.Recipient{ID: "r" + strconv.Itoa(i), Address: "http://" + dest + "/hook"})
	}
	if off+req.Limit < p.Audience {
		page.NextCursor = strconv.Itoa(off + req.Limit)
	}
	_ = json.NewEncoder(w).Encode(page)
}

// TestLowPriorityBrakedWhileHigherPriorityDelivers: a 100,000-recipient
// low-priority event delivers at full speed until small high-priority
// events arrive; while they deliver (on another worker process: the
// signal goes through Redis), the low worker delivers at most its
// FANOUT_LOW_PRIORITY_BRAKE; when they stop, it speeds up again. Every
// recipient of every event arrives once.
func TestLowPriorityBrakedWhileHigherPriorityDelivers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	L, H := startHost(t), startHost(t)
	rl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rsrv := &http.Server{Handler: audiences{low: L.addr, high: H.addr}, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = rsrv.Serve(rl) }()
	defer func() { _ = rsrv.Close() }()
	recipientsURL := "http://" + rl.Addr().String() + "/recipients"

	s, err := stack.Start(ctx, stack.Options{InMemory: true, Log: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Build(ctx); err != nil {
		t.Fatal(err)
	}
	brake := "FANOUT_LOW_PRIORITY_BRAKE=" + strconv.Itoa(braked) + "/s"
	// The events worker asks the events' recipients_url: list it.
	if err := s.StartWorker("events", "events", "FANOUT_BRIDGE=true", "FANOUT_RECIPIENTS_URL_ALLOW=http://"+rl.Addr().String()); err != nil {
		t.Fatal(err)
	}
	if err := s.StartWorker("delivery-high", "high,normal"); err != nil {
		t.Fatal(err)
	}
	if err := s.StartWorker("delivery-low", "low", brake); err != nil {
		t.Fatal(err)
	}

	stamp := time.Now().UTC().Format("150405")
	low := stack.Event{ID: "brake-low-" + stamp, Audience: lowN, Priority: fanout.PriorityLow, RecipientsURL: recipientsURL}
	if err := s.Publish(ctx, low); err != nil {
		t.Fatal(err)
	}
	// Full speed first.
	waitFor(t, ctx, "the low event's first 2,000 recipients", func() bool { n, _, _ := L.snapshot(); return n >= 2000 })
	n0, _, _ := L.snapshot()
	time.Sleep(time.Second)
	n1, _, _ := L.snapshot()
	free := n1 - n0
	t.Logf("low event before the high-priority events: %d recipients/s", free)

	// Small high-priority events, paced.
	highs := make([]stack.Event, highN)
	t0 := time.Now()
	for i := range highs {
		highs[i] = stack.Event{ID: fmt.Sprintf("brake-high-%s-%d", stamp, i), Audience: highAud, Priority: fanout.PriorityHigh, RecipientsURL: recipientsURL}
		time.Sleep(time.Until(t0.Add(time.Duration(i) * time.Second / highRate)))
		if err := s.Publish(ctx, highs[i]); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, ctx, "every high-priority recipient", func() bool { n, _, _ := H.snapshot(); return n >= highN*highAud })
	_, hat, hdups := H.snapshot()
	hFirst, hLast := hat[0], hat[len(hat)-1]

	// The low event finishes, at full speed again.
	lres, err := s.Wait(ctx, low.ID)
	if err != nil {
		t.Fatal(err)
	}
	// The event says why it slowed: the braked deliveries are in its
	// progress (and its details line, which the UI shows).
	if lres.Braked <= 0 || lres.Braked >= lowN {
		t.Errorf("low event's progress: %d braked, want some of its %d", lres.Braked, lowN)
	}
	t.Logf("low event: %d of %d deliveries braked", lres.Braked, lowN)
	v, err := s.TC.QueryWorkflow(ctx, stack.WorkflowID(low.ID), "", "__temporal_workflow_metadata")
	var md sdkpb.WorkflowMetadata
	if err == nil {
		err = v.Get(&md)
	}
	if want := fmt.Sprintf("braked: %d held", lres.Braked); err != nil || !strings.Contains(md.GetCurrentDetails(), want) {
		t.Errorf("the UI's current details %q (%v) lack %q", md.GetCurrentDetails(), err, want)
	}
	nl, lat, ldups := L.snapshot()
	if nl != lowN || ldups != 0 || hdups != 0 {
		t.Fatalf("L received %d of %d (%d twice), H %d twice: want every recipient once", nl, lowN, ldups, hdups)
	}

	// While the high-priority events delivered (after the first one's
	// signal reached the low worker: a poll, 50 ms, plus margin), the low
	// worker kept to its brake: at most braked/s, its burst (a twentieth
	// of a second's worth) and the deliveries already in flight when it
	// came on (one batch's concurrency at most).
	from := hFirst.Add(500 * time.Millisecond)
	during := between(lat, from, hLast)
	secs := hLast.Sub(from).Seconds()
	limit := int(braked*secs) + braked/20 + 512
	t.Logf("low event while the high-priority events delivered (%.1f s): %d recipients, %.0f/s (brake %d/s)", secs, during, float64(during)/secs, braked)
	if secs < 3 {
		t.Fatalf("the high-priority events delivered over only %.1f s; the test needs a longer window", secs)
	}
	if during > limit {
		t.Errorf("low event delivered %d while braked over %.1f s: want at most %d (%d/s)", during, secs, limit, braked)
	}
	if during == 0 {
		t.Errorf("low event stopped while braked: a brake slows, it does not stop")
	}
	// Released: BrakeHold after the last high-priority delivery (plus a
	// poll and margin) it goes well above the braked rate again, as it
	// did before.
	if free <= 2*braked {
		t.Errorf("low event at %d/s before any high-priority event: want well above the braked %d/s", free, braked)
	}
	release := hLast.Add(activities.BrakeHold + 500*time.Millisecond)
	if end := lat[len(lat)-1]; end.After(release) {
		rest, after := between(lat, release, end.Add(time.Nanosecond)), end.Sub(release).Seconds()
		t.Logf("low event after the brake came off: %d recipients in %.1f s (%.0f/s)", rest, after, float64(rest)/after)
		if float64(rest)/after <= 2*braked {
			t.Errorf("low event at %.0f/s after the high-priority events stopped: want well above the braked %d/s", float64(rest)/after, braked)
		}
	} else {
		t.Errorf("the low event finished at %s, before the brake's release at %s: make it bigger", end.Format("15:04:05.000"), release.Format("15:04:05.000"))
	}
}

func waitFor(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		if ctx.Err() != nil {
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
