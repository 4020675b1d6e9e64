//go:build integration

// Package destlimits checks the per-destination rate limits and circuit
// breakers (issue 14) on the real stack: the stock worker binary as an
// events worker (with the bridge) and two delivery workers, a limit set at
// run time with `starter limits`, and three destinations on loopback, each
// its own host:port: A limited to 200/s, B unlimited, C failing every call.
package destlimits

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	sdkpb "go.temporal.io/api/sdk/v1"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/activities"
	"github.com/fanout/fanout/dev/stack"
	"github.com/fanout/fanout/workers/webhook"
)

const (
	limitA    = 200.0 // calls per second on host A
	nA, nB    = 3000, 3000
	cEvery    = 15 // every 15th recipient goes to C
	window    = 10 // seconds
	tolerance = 0.10
)

// host is a destination on its own port that counts the deliveries it
// accepted per second (each recipient once) or fails every call.
type host struct {
	name string
	fail bool
	addr string

	mu     sync.Mutex
	perSec map[int64]int
	seen   map[string]int
	calls  int
	first  time.Time
	last   time.Time
}

func startHost(t *testing.T, name string, fail bool) *host {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &host{name: name, fail: fail, addr: ln.Addr().String(), perSec: map[int64]int{}, seen: map[string]int{}}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return h
}

func (h *host) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	now := time.Now()
	h.mu.Lock()
	h.calls++
	if !h.fail {
		h.seen[r.Header.Get(webhook.HeaderRecipientID)]++
		h.perSec[now.Unix()]++
		if h.first.IsZero() {
			h.first = now
		}
		h.last = now
	}
	h.mu.Unlock()
	if h.fail {
		http.Error(w, "down", http.StatusInternalServerError)
	}
}

type hostStats struct {
	unique, calls int
	first, last   time.Time
	perSec        map[int64]int
}

func (h *host) stats() hostStats {
	h.mu.Lock()
	defer h.mu.Unlock()
	ps := make(map[int64]int, len(h.perSec))
	for k, v := range h.perSec {
		ps[k] = v
	}
	return hostStats{unique: len(h.seen), calls: h.calls, first: h.first, last: h.last, perSec: ps}
}

// recipients serves the event's audience: recipient i goes to C when
// i%cEvery == 0, else to A and B in turn, so every batch mixes the three.
type recipients struct{ a, b, c string }

func (s recipients) addr(i int) string {
	switch {
	case i%cEvery == 0:
		return "http://" + s.c + "/hook"
	case i%2 == 0:
		return "http://" + s.a + "/hook"
	default:
		return "http://" + s.b + "/hook"
	}
}

// total is the audience: nA to A and nB to B, with C's in between.
func total() int {
	n := 0
	for a, b := 0, 0; a < nA || b < nB; n++ {
		switch {
		case n%cEvery == 0:
		case n%2 == 0:
			a++
		default:
			b++
		}
	}
	return n
}

func (s recipients) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req webhook.RecipientsRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	off, _ := strconv.Atoi(req.Cursor)
	n := total()
	var p fanout.Page
	for i := off; i < min(off+req.Limit, n); i++ {
		p.Recipients = append(p.Recipients, fanout.Recipient{ID: "r" + strconv.Itoa(i), Address: s.addr(i)})
	}
	if off+req.Limit < n {
		p.NextCursor = strconv.Itoa(off + req.Limit)
	}
	_ = json.NewEncoder(w).Encode(p)
}

// TestLimitedHostThrottledOthersAtFullSpeedFailingHostBroken is issue 14's
// acceptance: with two delivery workers and a limit of 200/s on host A set
// by `starter limits` (none on B), A receives 200/s within 10 % over every
// full 10-second window while B's deliveries of the same batches finish
// long before A's; C fails every call, its breaker opens (the batch
// results, the event's details and the breaker metric show it) and its
// recipients are dead-lettered after FANOUT_MAX_ATTEMPTS without hammering
// it, while A and B receive every recipient once.
func TestLimitedHostThrottledOthersAtFullSpeedFailingHostBroken(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	a, b, c := startHost(t, "A", false), startHost(t, "B", false), startHost(t, "C", true)
	rl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rsrv := &http.Server{Handler: recipients{a.addr, b.addr, c.addr}, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = rsrv.Serve(rl) }()
	defer func() { _ = rsrv.Close() }()

	s, err := stack.Start(ctx, stack.Options{InMemory: true, Log: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Build(ctx); err != nil {
		t.Fatal(err)
	}
	// The limit is set at run time, as an operator would: no worker reads
	// it from its environment.
	out, err := limitsCmd(ctx, s, "set", "-type", webhook.EventType, "-dest", a.addr, "-rate", "200/s")
	if err != nil || !strings.Contains(out, a.addr+": 200/s") {
		t.Fatalf("starter limits set: %v\n%s", err, out)
	}
	mport, err := stack.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	env := []string{
		"FANOUT_BATCH_SIZE=200", "FANOUT_BATCH_SLOTS=32", "FANOUT_MAX_ATTEMPTS=2",
		"FANOUT_RETRY_INITIAL=200ms", "FANOUT_RETRY_MAX=1s", "FANOUT_BREAKER_COOLDOWN=2s",
		"FANOUT_RECIPIENTS_URL_ALLOW=http://" + rl.Addr().String(), // the event's recipients_url
	}
	if err := s.StartWorker("events", "events", append(env, "FANOUT_BRIDGE=true")...); err != nil {
		t.Fatal(err)
	}
	if err := s.StartWorker("delivery1", "high,normal,low", append(env, "FANOUT_METRICS_ADDR=127.0.0.1:"+strconv.Itoa(mport))...); err != nil {
		t.Fatal(err)
	}
	if err := s.StartWorker("delivery2", "high,normal,low", env...); err != nil {
		t.Fatal(err)
	}

	n := total()
	nC := n - nA - nB
	id := "destlimits-" + time.Now().UTC().Format("150405")
	if err := s.Publish(ctx, stack.Event{ID: id, Audience: n, RecipientsURL: "http://" + rl.Addr().String() + "/recipients"}); err != nil {
		t.Fatal(err)
	}
	res, err := s.Wait(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	sa, sb, sc := a.stats(), b.stats(), c.stats()
	t.Logf("result %+v", res.Progress)
	t.Logf("A: %d recipients %s..%s; B: %d recipients %s..%s; C: %d calls for %d recipients",
		sa.unique, clock(sa.first), clock(sa.last), sb.unique, clock(sb.first), clock(sb.last), sc.calls, nC)

	// Everything reached A and B once; C's recipients were given up.
	if sa.unique != nA || sa.calls != nA || sb.unique != nB || sb.calls != nB {
		t.Errorf("A got %d recipients in %d calls, B %d in %d: want %d and %d, once each", sa.unique, sa.calls, sb.unique, sb.calls, nA, nB)
	}
	if res.Delivered != int64(nA+nB) || res.Failed != int64(nC) || res.DeadLettered != int64(nC) {
		t.Errorf("result %+v: want %d delivered, %d failed and dead-lettered", res.Progress, nA+nB, nC)
	}

	// A at its limit over every full 10-second window.
	first, last := sa.first.Unix()+1, sa.last.Unix()-1
	lo, hi := limitA*(1-tolerance)*window, limitA*(1+tolerance)*window
	var rates []string
	for w := first; w+window-1 <= last; w++ {
		sum := 0
		for sec := w; sec < w+window; sec++ {
			sum += sa.perSec[sec]
		}
		rates = append(rates, strconv.Itoa(sum/window))
		if float64(sum) < lo || float64(sum) > hi {
			t.Errorf("A: the 10 s from %s delivered %.0f/s, want %.0f/s ± 10 %%", clock(time.Unix(w, 0)), float64(sum)/window, limitA)
		}
	}
	if len(rates) < 3 {
		t.Errorf("A: only %d full windows (%s..%s)", len(rates), clock(sa.first), clock(sa.last))
	}
	t.Logf("A per 10 s window: %s /s", strings.Join(rates, " "))

	// B ran at full speed in the same batches: done long before A, at many
	// times A's rate.
	aSpan, bSpan := sa.last.Sub(sa.first), sb.last.Sub(sb.first)
	bRate := float64(nB) / max(bSpan.Seconds(), 0.001)
	t.Logf("B: %d in %v (%.0f/s); A: %d in %v", nB, bSpan.Round(time.Millisecond), bRate, nA, aSpan.Round(time.Millisecond))
	if !sb.last.Before(sa.first.Add(aSpan/2)) || bRate < 3*limitA {
		t.Errorf("B finished at %s (%.0f/s) while A ran %s..%s: want B done before A's first half, far above A's %v/s",
			clock(sb.last), bRate, clock(sa.first), clock(sa.last), limitA)
	}

	// C's breaker: far fewer calls than its deliveries (nC recipients, 2
	// attempts each), shown in the event's progress and details.
	if sc.calls >= nC {
		t.Errorf("C was called %d times for %d recipients: its breaker did not stop the calls", sc.calls, nC)
	}
	var statA, statC activities.DestinationStat
	for _, st := range res.Destinations {
		switch st.Key {
		case a.addr:
			statA = st
		case c.addr:
			statC = st
		}
	}
	if statA.Throttled == 0 || statA.Rate != limitA || statA.BreakerOpen {
		t.Errorf("A's stat %+v: want throttled at %v/s", statA, limitA)
	}
	if !statC.BreakerOpen || statC.Rejected == 0 {
		t.Errorf("C's stat %+v: want its breaker open with deliveries not called", statC)
	}
	details := activities.DestinationDetails(res.Destinations)
	t.Logf("details: %s", details)
	if !strings.Contains(details, "throttled: "+a.addr+" 200/s") || !strings.Contains(details, "breaker open: "+c.addr) {
		t.Errorf("details %q: want A throttled and C's breaker open", details)
	}
	// The Temporal UI's "current details" of the event (the metadata query
	// the UI sends) name both.
	v, err := s.TC.QueryWorkflow(ctx, stack.WorkflowID(id), "", "__temporal_workflow_metadata")
	var md sdkpb.WorkflowMetadata
	if err == nil {
		err = v.Get(&md)
	}
	if err != nil {
		t.Errorf("workflow metadata query: %v", err)
	} else if cd := md.GetCurrentDetails(); !strings.Contains(cd, details) {
		t.Errorf("the UI's current details %q lack %q", cd, details)
	} else {
		t.Logf("UI current details: %s", cd)
	}
	metrics := get(t, "http://127.0.0.1:"+strconv.Itoa(mport)+"/metrics")
	for _, m := range []string{"fanout_destination_breaker_opened_total", "fanout_destination_breaker_rejected_total", "fanout_destination_throttled_total"} {
		if v := metricValue(metrics, m); v <= 0 {
			t.Errorf("metric %s = %v on delivery1, want > 0", m, v)
		}
	}
	if strings.Contains(metrics, a.addr) || strings.Contains(metrics, c.addr) {
		t.Error("a destination's host is in the metrics' labels")
	}
}

// limitsCmd runs `starter limits` with the stack's environment.
func limitsCmd(ctx context.Context, s *stack.Stack, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(s.Bin, "starter"), append([]string{"limits"}, args...)...)
	cmd.Env = append(os.Environ(), s.Env()...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// metricValue sums the samples of the metric named m (any labels).
func metricValue(body, m string) float64 {
	sum := 0.0
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(line, m+"{") && !strings.HasPrefix(line, m+" ") {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err == nil {
			sum += v
		}
	}
	return sum
}

func clock(t time.Time) string { return t.Format("15:04:05.000") }
