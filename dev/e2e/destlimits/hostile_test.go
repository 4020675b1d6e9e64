//go:build integration

package destlimits

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	sdkpb "go.temporal.io/api/sdk/v1"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/dev/stack"
	"github.com/fanout/fanout/workers/webhook"
)

// hostileAddrs are an audience whose addresses pick the destination keys:
// nGood recipients of a working host, and nClosed distinct ports of 127.0.0.1 nothing listens on (a page that tries to
// make a destination, a Redis limiter key and a breaker per recipient).
type hostileAddrs struct {
	good    string // host:port of a working destination
	nGood   int
	nClosed int
	closed  []int
}

func (h hostileAddrs) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var p fanout.Page
	for i := range h.nGood {
		p.Recipients = append(p.Recipients, fanout.Recipient{ID: "g" + strconv.Itoa(i), Address: "http://" + h.good + "/hook"})
	}
	for i, port := range h.closed {
		p.Recipients = append(p.Recipients, fanout.Recipient{ID: "x" + strconv.Itoa(i), Address: "http://127.0.0.1:" + strconv.Itoa(port) + "/hook"})
	}
	_ = json.NewEncoder(w).Encode(p)
}

// closedPorts returns n loopback ports that refuse every call until the test
// ends (held by stack.RefusedPort, so no other process can listen there and
// answer).
func closedPorts(t *testing.T, n int) []int {
	t.Helper()
	ports := make([]int, 0, n)
	for range n {
		p, release, err := stack.RefusedPort()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(release)
		ports = append(ports, p)
	}
	return ports
}

// Hostile destinations on the real stack: an audience spread over 150
// destinations that refuse every call, under a limit that makes every
// destination consult Redis, cannot grow the limiter's keys beyond one per
// destination (GCRA keys expire once their budget refills, so fewer may be
// left), each bounded and naming the event type; the good host's
// recipients are each delivered once, the refused ones dead-lettered, and
// the event's details stay bounded.
func TestHostileDestinations(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	good := startHost(t, "G", false)
	src := hostileAddrs{good: good.addr, nGood: 40, nClosed: 150, closed: closedPorts(t, 150)}
	rl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rsrv := &http.Server{Handler: src, ReadHeaderTimeout: 5 * time.Second}
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
	// A default limit for the type: every destination goes to the limiter.
	if out, err := limitsCmd(ctx, s, "set", "-type", webhook.EventType, "-rate", "1000/s"); err != nil {
		t.Fatalf("starter limits set: %v\n%s", err, out)
	}
	env := []string{"FANOUT_BATCH_SIZE=500", "FANOUT_MAX_ATTEMPTS=2", "FANOUT_RETRY_INITIAL=200ms", "FANOUT_RETRY_MAX=1s", "FANOUT_LOCAL_DELIVERY_MAX=-1",
		"FANOUT_RECIPIENTS_URL_ALLOW=http://" + rl.Addr().String()} // the event's recipients_url
	if err := s.StartWorker("events", "events", append(env, "FANOUT_BRIDGE=true")...); err != nil {
		t.Fatal(err)
	}
	if err := s.StartWorker("delivery", "high,normal,low", env...); err != nil {
		t.Fatal(err)
	}
	id := "hostile-dests"
	n := src.nGood + src.nClosed
	if err := s.Publish(ctx, stack.Event{ID: id, Audience: n, RecipientsURL: "http://" + rl.Addr().String() + "/recipients"}); err != nil {
		t.Fatal(err)
	}
	res, err := s.Wait(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if res.Delivered != int64(src.nGood) || res.Failed != int64(src.nClosed) || res.DeadLettered != int64(src.nClosed) {
		t.Errorf("result %+v: want %d delivered, %d failed and dead-lettered", res.Progress, src.nGood, src.nClosed)
	}
	if st := good.stats(); st.unique != src.nGood || st.calls != src.nGood {
		t.Errorf("the good host saw %d recipients in %d calls, want %d once each", st.unique, st.calls, src.nGood)
	}

	keys, err := s.RDB.Keys(ctx, "rate:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	// One key per destination at most: the good host (both spellings) and
	// the closed ports.
	if len(keys) > 1+src.nClosed {
		t.Errorf("%d limiter keys for %d destinations", len(keys), 1+src.nClosed)
	}
	for _, k := range keys {
		if len(k) > 160 || !strings.HasPrefix(k, "rate:fanout:rate:"+webhook.EventType+":") {
			t.Errorf("limiter key %q: over 160 bytes or without the event type", k)
		}
	}
	// The event's details, as the Temporal UI reads them.
	v, err := s.TC.QueryWorkflow(ctx, stack.WorkflowID(id), "", "__temporal_workflow_metadata")
	var md sdkpb.WorkflowMetadata
	if err == nil {
		err = v.Get(&md)
	}
	if err != nil {
		t.Fatal(err)
	}
	details := md.GetCurrentDetails()
	if len(details) > 2048 {
		t.Errorf("details line of %d bytes", len(details))
	}
	t.Logf("%d limiter keys left for %d destinations; details: %s", len(keys), 1+src.nClosed, details)
}
