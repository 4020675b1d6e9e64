package activities

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/activities/limits"
)

// localTaker is a per-key token bucket in process: the unit tests' stand-in
// for the Redis limiter (tested against redis-server in the integration
// tests), with Take's contract: 0 and the call counted, or a wait and
// nothing counted.
type localTaker struct {
	mu   sync.Mutex
	lims map[string]*rate.Limiter
	asks map[string]int
}

func (l *localTaker) take(_ context.Context, _, dest string, perSecond float64) (time.Duration, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lims == nil {
		l.lims, l.asks = map[string]*rate.Limiter{}, map[string]int{}
	}
	l.asks[dest]++
	lim, ok := l.lims[dest]
	if !ok {
		lim = rate.NewLimiter(rate.Limit(perSecond), 1)
		l.lims[dest] = lim
	}
	now := time.Now()
	r := lim.ReserveN(now, 1)
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return d, nil
	}
	return 0, nil
}

// hostKeyed keys recipients by their address (the host).
type hostKeyed struct{ fanout.Handler }

func (hostKeyed) DestinationKey(r fanout.Recipient) string { return r.Address }

func mixed(n int, hosts ...string) []fanout.Recipient {
	rs := make([]fanout.Recipient, n)
	for i := range rs {
		rs[i] = fanout.Recipient{ID: "r" + strconv.Itoa(i), Address: hosts[i%len(hosts)]}
	}
	return rs
}

func testFeed(todo []fanout.Recipient, ov limits.Overrides, def float64, lt *localTaker) *destFeed {
	d := &Destinations{Breakers: &limits.Breakers{}}
	f := &destFeed{d: d, eventType: "t", key: destKeyer(hostKeyed{}, "t"), def: def, ov: ov, todo: todo,
		queues: map[string]*destQueue{}, rates: map[string]float64{}, brs: map[string]*limits.Breaker{}, stats: map[string]*DestinationStat{},
		bs: limits.BreakerSettings{Failures: 3, Cooldown: time.Minute}, take: lt.take}
	return f
}

// TestDestFeedDefersAThrottledHostWithoutHoldingTheRest: host a is limited
// to 50/s, b is not; their recipients alternate. Every b comes out before
// most of a (a's wait never holds b's), each recipient exactly once, a's in
// their order, at most about a's rate; a's recipients counted as throttled.
func TestDestFeedDefersAThrottledHostWithoutHoldingTheRest(t *testing.T) {
	const n = 40
	lt := &localTaker{}
	f := testFeed(mixed(n, "a", "B"), limits.Overrides{Dest: map[string]float64{"a": 50}}, 0, lt)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	var order []fanout.Recipient
	lastB := -1
	for {
		j, ok, err := f.next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		r := j.r
		if j.key != strings.ToLower(r.Address) {
			t.Fatalf("%s handed out with key %q", r.ID, j.key)
		}
		if r.Address == "B" {
			lastB = len(order)
		}
		order = append(order, r)
	}
	if len(order) != n || f.remaining() != 0 {
		t.Fatalf("handed out %d of %d (remaining %d)", len(order), n, f.remaining())
	}
	seen := map[string]bool{}
	prevA := -1
	for _, r := range order {
		if seen[r.ID] {
			t.Fatalf("%s handed out twice", r.ID)
		}
		seen[r.ID] = true
		if r.Address == "a" {
			i, _ := strconv.Atoi(r.ID[1:])
			if i < prevA {
				t.Fatalf("a's recipients out of order: %s after r%d", r.ID, prevA)
			}
			prevA = i
		}
	}
	// All 20 b's out within the first 20 + a few a's (a at 50/s takes
	// 400 ms for its 20; the b's need no wait).
	if lastB > n/2+3 {
		t.Errorf("the last b came out at position %d of %d: a's throttling held b", lastB, n)
	}
	if el := time.Since(start); el < 19*time.Second/50 {
		t.Errorf("20 deliveries to a at 50/s took %v, want at least %v", el, 19*time.Second/50)
	}
	if lt.asks["b"] != 0 {
		t.Errorf("the limiter was asked %d times for the unlimited b", lt.asks["b"])
	}
	st := f.results()
	if len(st) != 1 || st[0].Key != "a" || st[0].Throttled == 0 || st[0].Rate != 50 || st[0].Waited <= 0 {
		t.Errorf("stats %+v, want a throttled at 50/s", st)
	}
}

// TestDestFeedLeavesWhatOutlastsTheDeadline: a host at 1/s whose queue
// cannot drain before the attempt's deadline (less paceYieldMargin) stops
// the feed with errPaceDeadline once the rest is out, and remaining counts
// the queued recipients (the next attempt delivers them).
func TestDestFeedLeavesWhatOutlastsTheDeadline(t *testing.T) {
	lt := &localTaker{}
	f := testFeed(mixed(10, "slow", "fast"), limits.Overrides{HasDefault: true, Default: 1, Dest: map[string]float64{"fast": 0}}, 0, lt)
	ctx, cancel := context.WithTimeout(context.Background(), paceYieldMargin+1500*time.Millisecond)
	defer cancel()
	got := map[string]int{}
	var err error
	for {
		var j delivery
		var ok bool
		j, ok, err = f.next(ctx)
		if !ok {
			break
		}
		got[j.r.Address]++
	}
	if !errors.Is(err, errPaceDeadline) {
		t.Fatalf("err %v, want errPaceDeadline", err)
	}
	// Issue 23, item 8: the yield says when the next call is due (about a
	// second from the throttled host's last), so the retry waits for it.
	if due, ok := paceDue(err); !ok || time.Until(due) < 0 || time.Until(due) > 2*time.Second {
		t.Errorf("due %v (%v), want within the next 2s", due, ok)
	}
	if got["fast"] != 5 || got["slow"] < 1 || got["slow"] > 3 || f.remaining() != 5-got["slow"] {
		t.Fatalf("handed out %v, remaining %d: want every fast, 1..3 slow, the rest remaining", got, f.remaining())
	}
}

// TestDestFeedRate: an override of the destination beats the overridden
// default, which beats the type's DestinationRate.
func TestDestFeedRate(t *testing.T) {
	f := testFeed(nil, limits.Overrides{HasDefault: true, Default: 7, Dest: map[string]float64{"x": 3, "off": 0}}, 9, &localTaker{})
	for k, want := range map[string]float64{"x": 3, "off": 0, "other": 7} {
		if got := f.rate(k); got != want {
			t.Errorf("rate(%s) = %v, want %v", k, got, want)
		}
	}
	if got := (limits.Overrides{}).Rate("x", 9); got != 9 {
		t.Errorf("without overrides: %v, want the type's 9", got)
	}
}

// TestBreakerOpensForAFailingHostOnly: host c fails every call; after 3 in
// a row its breaker opens and its other deliveries fail at once
// (circuit_open, Retry-After the cooldown) without a call, while d's all
// go through.
func TestBreakerOpensForAFailingHostOnly(t *testing.T) {
	lt := &localTaker{}
	f := testFeed(nil, limits.Overrides{}, 0, lt)
	f.eventType = "breaker-" + t.Name() // breakers are per type and key
	var calls sync.Map
	h := hostKeyed{}
	deliver := func(r fanout.Recipient) error {
		return f.deliver(context.Background(), callHandler{func() error {
			c, _ := calls.LoadOrStore(r.Address, new(int))
			*c.(*int)++
			if r.Address == "c" {
				return errors.New("HTTP 500")
			}
			return nil
		}, h}, &DeliverBatchInput{Event: fanout.Event{Type: f.eventType}}, f.delivery(r, f.key(r)))
	}
	var openErrs int
	for _, r := range mixed(20, "c", "d") {
		err := deliver(r)
		if r.Address == "d" && err != nil {
			t.Fatalf("d: %v", err)
		}
		if errors.Is(err, limits.ErrOpen) {
			openErrs++
			if d, ok := fanout.RetryAfterOf(err); !ok || d != time.Minute || fanout.IsPermanent(err) || !strings.Contains(err.Error(), "destination c") {
				t.Fatalf("breaker error %v: want transient, Retry-After 1m, naming c", err)
			}
		}
	}
	cc, _ := calls.Load("c")
	dc, _ := calls.Load("d")
	if *cc.(*int) != 3 || *dc.(*int) != 10 || openErrs != 7 {
		t.Fatalf("calls c=%d d=%d, rejected %d: want 3, 10, 7", *cc.(*int), *dc.(*int), openErrs)
	}
	st := f.results()
	if len(st) != 1 || st[0].Key != "c" || !st[0].BreakerOpen || st[0].Rejected != 7 {
		t.Fatalf("stats %+v, want c's breaker open with 7 not called", st)
	}
	if got := DestinationDetails(MergeDestinationStats(DestinationStats{}, st)); got != " · breaker open: c (7 not called)" {
		t.Errorf("details %q", got)
	}
}

// callHandler delivers by calling fn.
type callHandler struct {
	fn func() error
	fanout.Handler
}

func (c callHandler) Deliver(context.Context, fanout.Event, fanout.Recipient, fanout.Message) error {
	return c.fn()
}

// TestMergeDestinationStats: counts add up across batches, the latest
// breaker state wins, the busiest stay (open breakers first), at most
// MaxDestinationStats.
func TestMergeDestinationStats(t *testing.T) {
	var acc DestinationStats
	acc = MergeDestinationStats(acc, []DestinationStat{{Key: "a", Rate: 200, Throttled: 5, Waited: time.Second}, {Key: "c", BreakerOpen: true, Rejected: 2}})
	acc = MergeDestinationStats(acc, []DestinationStat{{Key: "a", Rate: 200, Throttled: 7, Waited: 2 * time.Second}})
	for i := range 8 {
		acc = MergeDestinationStats(acc, []DestinationStat{{Key: "h" + strconv.Itoa(i), Throttled: 1}})
	}
	if acc[0].Key != "c" || !acc[0].BreakerOpen || acc[1].Key != "a" || acc[1].Throttled != 12 || acc[1].Waited != 2*time.Second {
		t.Fatalf("merged %+v", acc)
	}
	if acc[MaxDestinationStats-1].Key == "" {
		t.Fatalf("merged %+v: want it full", acc)
	}
	acc = MergeDestinationStats(acc, []DestinationStat{{Key: "c", Rejected: 1}}) // closed again
	if acc[0].Key != "a" {
		t.Fatalf("after c closed: %+v", acc)
	}
	want := " · throttled: a 200/s (12 waited), h0 off (1 waited)"
	if got := DestinationDetails(acc); !strings.HasPrefix(got, want) {
		t.Errorf("details %q, want prefix %q", got, want)
	}
}
