// Package chaos is fanout's fault suite (design.md §5, `go tool task chaos`):
// each scenario runs the real stack of dev/stack (the Temporal dev
// server, redis-server, the kfake broker, the demo source and sink, worker
// and bridge processes), breaks something mid-fan-out — SIGKILLs a delivery
// worker or the bridge, replays the events topic, restarts Redis or the
// Temporal server, makes the sink fail — and reports, from the sink's own
// counts, how many recipients were expected, delivered, missing (must be 0)
// and duplicated (bounded by what was in flight when something died). The
// at-most-once scenarios (11, 12: fanout.AtMostOnce) turn that around: no
// duplicate at all, and missing only recipients whose call was in flight at
// a fault (left unconfirmed and dead-lettered), at most the workers'
// in-flight capacity.
package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/fanout/fanout/dev/stack"
)

// Report is the outcome of one scenario.
type Report struct {
	Scenario string `json:"scenario"`
	// Expected is the events' audience (unique recipients).
	Expected int `json:"expected"`
	// Delivered is the recipients the sink saw at least once.
	Delivered int `json:"delivered"`
	// Missing = Expected − Delivered.
	Missing int `json:"missing"`
	// Duplicated = deliveries − unique recipients delivered.
	Duplicated int `json:"duplicated"`
	// InFlightAtKills sums, over the kills and restarts of the scenario, the
	// gate keys held without a delivered mark right after the fault: an upper
	// bound on the duplicates the faults can cause.
	InFlightAtKills int     `json:"in_flight_at_kills"`
	DeadLettered    int     `json:"dead_lettered"`
	Redriven        int     `json:"redriven"`
	Seconds         float64 `json:"seconds"`
	Notes           string  `json:"notes"`

	// At-most-once scenarios: Unconfirmed counts the recipients the gate
	// marks unconfirmed (in flight at a fault, dead-lettered, not called
	// again), MissingOutsideInFlight the missing recipients that are not
	// among them (must be 0), InFlightCapacity the most calls the faults
	// could have interrupted (faults × batch slots × concurrency), and
	// MaxCalls the most calls the sink got for one recipient (must be 1).
	Unconfirmed            int `json:"unconfirmed,omitempty"`
	MissingOutsideInFlight int `json:"missing_outside_in_flight,omitempty"`
	InFlightCapacity       int `json:"in_flight_capacity,omitempty"`
	MaxCalls               int `json:"max_calls,omitempty"`
}

// Options configure the scenarios.
type Options struct {
	// Log receives progress lines; nil discards them.
	Log io.Writer
	// Dir, when set, keeps each scenario's stack (logs, Temporal database,
	// Redis files) in Dir/<n>; empty uses a temporary directory removed when
	// the scenario ends.
	Dir string
	// Timeout bounds each scenario (0: DefaultTimeout).
	Timeout time.Duration
	// Env is added to every worker and bridge process, after WorkerEnv.
	Env []string
}

// DefaultTimeout bounds a scenario when Options.Timeout is zero.
const DefaultTimeout = 10 * time.Minute

// WorkerEnv makes delivery retries quick so scenarios finish in seconds.
var WorkerEnv = []string{
	"FANOUT_MAX_ATTEMPTS=10",
	"FANOUT_RETRY_INITIAL=200ms",
	"FANOUT_RETRY_MAX=3s",
}

// Scenario is one fault of the suite.
type Scenario struct {
	N    int
	Name string
	// Size is the scenario's recipients at scale 1.0 (per event for the
	// multi-event scenarios: see Events).
	Size int
	// Events is the number of events the scenario publishes (Size each).
	Events int
	Run    func(ctx context.Context, o Options, size int) (Report, error)
	// Bounded: duplicates are allowed up to InFlightAtKills (the faults kill
	// deliveries mid-flight); otherwise none are allowed.
	Bounded bool
	// AtMostOnce: the event type delivers at most once; see Problems.
	AtMostOnce bool
}

// names are the scenario names, by number.
var names = [...]string{
	1:  "kill delivery worker x3",
	2:  "kill bridge before commit",
	3:  "replay topic after retention",
	4:  "restart redis mid-fan-out",
	5:  "restart temporal mid-fan-out",
	6:  "sink 30% HTTP 500 for 5s",
	7:  "sink rejects 1% (400), redrive",
	8:  "sink 429 + Retry-After 2s",
	9:  "duplicate recipients in pages",
	10: "kill events worker+bridge x2",
	11: "at-most-once: kill delivery worker x2",
	12: "at-most-once: restart redis",
}

// Scenarios is the suite, in order.
var Scenarios = []Scenario{
	{N: 1, Name: names[1], Size: 50000, Events: 1, Run: KillDeliveryWorker, Bounded: true},
	{N: 2, Name: names[2], Size: 1000, Events: 20, Run: KillBridge},
	{N: 3, Name: names[3], Size: 1000, Events: 10, Run: ReplayTopic},
	{N: 4, Name: names[4], Size: 40000, Events: 1, Run: RestartRedis, Bounded: true},
	{N: 5, Name: names[5], Size: 40000, Events: 1, Run: RestartTemporal, Bounded: true},
	{N: 6, Name: names[6], Size: 20000, Events: 1, Run: SinkErrors},
	{N: 7, Name: names[7], Size: 20000, Events: 1, Run: PermanentFailuresRedrive},
	{N: 8, Name: names[8], Size: 20000, Events: 1, Run: RateLimited},
	{N: 9, Name: names[9], Size: 20000, Events: 1, Run: DuplicateRecipients},
	{N: 10, Name: names[10], Size: 50, Events: 400, Run: KillEventsWorker, Bounded: true},
	{N: 11, Name: names[11], Size: 50000, Events: 1, Run: AtMostOnceKillDeliveryWorker, AtMostOnce: true},
	{N: 12, Name: names[12], Size: 40000, Events: 1, Run: AtMostOnceRestartRedis, AtMostOnce: true},
}

// ByNumber returns scenario n.
func ByNumber(n int) (Scenario, bool) {
	for _, s := range Scenarios {
		if s.N == n {
			return s, true
		}
	}
	return Scenario{}, false
}

// AllowedDuplicates is the most duplicates scenario sc may report in r.
func (sc Scenario) AllowedDuplicates(r Report) int {
	if sc.Bounded {
		return r.InFlightAtKills
	}
	return 0
}

// Problems lists what makes r a failure of sc (empty: it passed).
func (sc Scenario) Problems(r Report) []string {
	if sc.AtMostOnce {
		return atMostOnceProblems(r)
	}
	var out []string
	if r.Missing != 0 {
		out = append(out, fmt.Sprintf("missing %d", r.Missing))
	}
	if allowed := sc.AllowedDuplicates(r); r.Duplicated > allowed {
		out = append(out, fmt.Sprintf("duplicated %d > allowed %d", r.Duplicated, allowed))
	}
	if r.Expected == 0 {
		out = append(out, "nothing expected: the scenario did not run")
	}
	return out
}

// Scaled is a size times scale, at least min.
func Scaled(size int, scale float64, min int) int {
	return max(int(float64(size)*scale+0.5), min)
}

// run is the common frame of a scenario: a fresh stack with an events
// worker, a delivery worker and a bridge, a bounded context, a progress
// printer, and the final tally.
type run struct {
	o     Options
	n     int
	s     *stack.Stack
	start time.Time
	r     *Report

	mu     sync.Mutex
	events []string
	stopP  func()
}

func (o Options) log() io.Writer {
	if o.Log == nil {
		return io.Discard
	}
	return o.Log
}

func (o Options) timeout() time.Duration {
	if o.Timeout > 0 {
		return o.Timeout
	}
	return DefaultTimeout
}

// begin starts the stack of scenario n. env is added to every process.
func begin(ctx context.Context, o Options, n int, r *Report, env ...string) (*run, error) {
	r.Scenario = fmt.Sprintf("%d %s", n, names[n])
	dir := ""
	if o.Dir != "" {
		dir = filepath.Join(o.Dir, fmt.Sprint(n))
		_ = os.RemoveAll(dir)
	}
	allEnv := append(append(append([]string{}, WorkerEnv...), o.Env...), env...)
	fmt.Fprintf(o.log(), "[%d] %s: starting the stack\n", n, names[n])
	s, err := stack.Start(ctx, stack.Options{Dir: dir, Env: allEnv, Log: o.log()})
	if err != nil {
		return nil, fmt.Errorf("scenario %d: start stack: %w", n, err)
	}
	return &run{o: o, n: n, s: s, r: r}, nil
}

// startProcs starts the events worker ("events"), the delivery worker
// ("delivery") and the bridge ("bridge"), as separate processes.
func (u *run) startProcs(bridgeEnv ...string) error {
	if err := u.s.StartWorker("events", "events"); err != nil {
		return err
	}
	if err := u.s.StartWorker("delivery", "high,normal,low"); err != nil {
		return err
	}
	return u.s.StartBridge("bridge", bridgeEnv...)
}

// logf prints one progress line, prefixed with the scenario and its clock.
func (u *run) logf(format string, args ...any) {
	line := fmt.Sprintf("[%d] %5.1fs ", u.n, time.Since(u.start).Seconds()) + fmt.Sprintf(format, args...) + "\n"
	_, _ = io.WriteString(u.o.log(), line)
}

// publish publishes the events, starts the clock (on the first call) and the
// progress printer.
func (u *run) publish(ctx context.Context, evs ...stack.Event) error {
	if u.start.IsZero() {
		u.start = time.Now()
	}
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := u.s.Publish(pctx, evs...); err != nil {
		return fmt.Errorf("publish: %w", err)
	}
	u.mu.Lock()
	for _, e := range evs {
		u.events = append(u.events, e.ID)
		u.r.Expected += e.Audience
	}
	first := u.stopP == nil
	u.mu.Unlock()
	if first {
		u.progress()
	}
	return nil
}

// progress prints the delivered count every 2 s until stopped.
func (u *run) progress() {
	done := make(chan struct{})
	var once sync.Once
	u.stopP = func() { once.Do(func() { close(done) }) }
	go func() {
		t := time.NewTicker(2 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				uniq, dels := u.tally()
				u.mu.Lock()
				exp := u.r.Expected
				u.mu.Unlock()
				u.logf("delivered %d/%d, duplicates %d, sink rejected %d, in flight %d",
					uniq, exp, dels-uniq, u.s.Sink.Rejected(), u.s.Sink.InFlight())
			}
		}
	}()
}

// tally sums the sink's unique recipients and deliveries over the events.
func (u *run) tally() (unique, deliveries int) {
	u.mu.Lock()
	evs := append([]string{}, u.events...)
	u.mu.Unlock()
	for _, id := range evs {
		st := u.s.Sink.Event(id)
		unique += st.Unique
		deliveries += st.Deliveries
	}
	return unique, deliveries
}

// waitFault waits until the sink has seen n unique recipients of the
// scenario's events and has deliveries in flight (up to 32, fewer for tiny
// events), so that a fault lands mid-delivery. It returns false when every
// recipient was delivered first (possible only at tiny sizes).
func (u *run) waitFault(ctx context.Context, n int) (bool, error) {
	u.mu.Lock()
	exp := u.r.Expected
	u.mu.Unlock()
	k := int64(min(max(exp/300, 1), 32))
	for {
		uniq, _ := u.tally()
		if uniq >= n && u.s.Sink.InFlight() >= k {
			return true, nil
		}
		if uniq >= exp {
			return false, nil
		}
		select {
		case <-ctx.Done():
			return false, fmt.Errorf("waiting for %d deliveries and %d in flight (have %d, %d): %w", n, k, uniq, u.s.Sink.InFlight(), ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// SinkLatency is how long the sink takes to answer in the scenarios that
// kill or restart something mid-fan-out, so deliveries are in flight when
// the fault lands (a loopback sink answers in microseconds).
const SinkLatency = 20 * time.Millisecond

// slowSink makes every delivery take d, counted as in flight by the sink.
func (u *run) slowSink(d time.Duration) {
	u.s.Sink.Fail = func(_, _ string) (int, time.Duration) {
		time.Sleep(d)
		return 0, 0
	}
}

// finish fills the counts of the report, stops the progress printer and
// closes the stack.
func (u *run) finish() {
	if u.stopP != nil {
		u.stopP()
	}
	if u.s == nil {
		return
	}
	uniq, dels := u.tally()
	u.r.Delivered = uniq
	u.r.Missing = u.r.Expected - uniq
	u.r.Duplicated = dels - uniq
	if !u.start.IsZero() {
		u.r.Seconds = time.Since(u.start).Seconds()
	}
	u.logf("done: expected %d, delivered %d, missing %d, duplicated %d", u.r.Expected, u.r.Delivered, u.r.Missing, u.r.Duplicated)
	u.s.Close()
}

// note appends to the report's notes.
func (u *run) note(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	if u.r.Notes == "" {
		u.r.Notes = s
	} else {
		u.r.Notes += "; " + s
	}
}

// settle waits until the sink has had no delivery in flight for a moment,
// so the counts taken after a workflow completes are final.
func (u *run) settle(ctx context.Context) {
	quiet := 0
	for quiet < 5 && ctx.Err() == nil {
		if u.s.Sink.InFlight() == 0 {
			quiet++
		} else {
			quiet = 0
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitAll waits for the Fanout workflows of the events and returns their
// results by event id.
func (u *run) waitAll(ctx context.Context, ids ...string) (map[string]harnessResult, error) {
	out := make(map[string]harnessResult, len(ids))
	for _, id := range ids {
		res, err := u.s.Wait(ctx, id)
		if err != nil {
			return out, err
		}
		out[id] = harnessResult{res.Found, res.Delivered, res.Duplicates, res.Failed, res.DeadLettered, res.Unconfirmed}
	}
	u.settle(ctx)
	return out, nil
}

// harnessResult is the part of a FanoutResult the scenarios look at.
type harnessResult struct {
	Found, Delivered, Duplicates, Failed, DeadLettered, Unconfirmed int64
}

// waitTotals waits for the events like waitAll, sums their results and
// records the dead letters in the report.
func (u *run) waitTotals(ctx context.Context, ids ...string) (harnessResult, error) {
	res, err := u.waitAll(ctx, ids...)
	if err != nil {
		return harnessResult{}, err
	}
	t := sumResults(res)
	u.r.DeadLettered = int(t.DeadLettered)
	return t, nil
}

func sumResults(m map[string]harnessResult) harnessResult {
	var t harnessResult
	for _, r := range m {
		t.Found += r.Found
		t.Delivered += r.Delivered
		t.Duplicates += r.Duplicates
		t.Failed += r.Failed
		t.DeadLettered += r.DeadLettered
		t.Unconfirmed += r.Unconfirmed
	}
	return t
}

// scenario runs body in the frame of scenario n and always returns a
// report (partial on error).
func scenario(ctx context.Context, o Options, n int, env []string, body func(ctx context.Context, u *run) error) (r Report, err error) {
	ctx, cancel := context.WithTimeout(ctx, o.timeout())
	defer cancel()
	u, err := begin(ctx, o, n, &r, env...)
	if err != nil {
		return r, err
	}
	defer u.finish()
	if err := body(ctx, u); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("%w (scenario timeout %v)", err, o.timeout())
		}
		u.note("error: %s", firstLine(err.Error()))
		return r, fmt.Errorf("scenario %d: %w", n, err)
	}
	return r, nil
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
