//go:build integration

package activities_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/activities"
	"github.com/fanout/fanout/activities/gate"
	"github.com/fanout/fanout/workflows/vocab"
)

// caller is a handler that counts every call per recipient (failed ones
// too) and the semantics each call was made under.
type caller struct {
	mu    sync.Mutex
	calls map[string]int
	sems  map[fanout.Semantics]int
	fail  func(r fanout.Recipient, call int) error
}

func (c *caller) GetRecipients(context.Context, fanout.Event, string, int) (fanout.Page, error) {
	return fanout.Page{}, nil
}

func (c *caller) GenerateMessage(context.Context, fanout.Event) (fanout.Message, error) {
	return fanout.Message{Body: []byte("hi")}, nil
}

func (c *caller) Deliver(ctx context.Context, _ fanout.Event, r fanout.Recipient, _ fanout.Message) error {
	c.mu.Lock()
	c.calls[r.ID]++
	n := c.calls[r.ID]
	c.sems[fanout.SemanticsOf(ctx)]++
	c.mu.Unlock()
	if c.fail != nil {
		return c.fail(r, n)
	}
	return nil
}

// setupSemantics registers c as type "t" with the semantics and returns
// the activity environment, the activities and the DLQ recorder.
func setupSemantics(t *testing.T, c *caller, sem fanout.Semantics, withGate bool) (*testsuite.TestActivityEnvironment, *activities.Activities, *dlqRecorder) {
	t.Helper()
	c.calls, c.sems = map[string]int{}, map[fanout.Semantics]int{}
	reg := fanout.NewRegistry()
	reg.MustRegister("t", c, fanout.TypeOptions{Semantics: sem})
	dl := &dlqRecorder{}
	acts := &activities.Activities{Registry: reg, DeadLetters: dl}
	if withGate {
		acts.Gate = gate.New(rdb, time.Hour)
	}
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	env.RegisterActivity(acts)
	return env, acts, dl
}

// crashMidCall leaves the gate as a try of attempt that died during its
// call to recipient does: held by the attempt, marked sending.
func crashMidCall(t *testing.T, g *gate.Gate, ev fanout.Event, attempt, recipient string) {
	t.Helper()
	ctx := context.Background()
	ek := vocab.EventKey(ev.Type, ev.ID)
	if _, err := g.Acquire(ctx, ek, attempt, []string{recipient}, false); err != nil {
		t.Fatal(err)
	}
	if ok, err := g.MarkSending(ctx, ek, attempt, recipient); err != nil || !ok {
		t.Fatalf("MarkSending: %v %v", ok, err)
	}
}

// TestAtMostOnceDoesNotRepeatAnInterruptedCall: a retry of an at-most-once
// batch whose earlier try died mid-call to x delivers the others, does not
// call x again but dead-letters it as unconfirmed (once, counted in every
// later result too), and a redrive of the same attempt id delivers it. At
// least once, the same gate state makes x be delivered again.
func TestAtMostOnceDoesNotRepeatAnInterruptedCall(t *testing.T) {
	c := &caller{}
	env, acts, dl := setupSemantics(t, c, fanout.AtMostOnce, true)
	ev := event("amo-crash", 0)
	rs := []fanout.Recipient{{ID: "a"}, {ID: "b"}, {ID: "x"}, {ID: "c"}}
	in := activities.DeliverBatchInput{Event: ev, AttemptID: "k#0", Recipients: rs, MaxAttempts: 3, Concurrency: 2}
	crashMidCall(t, acts.Gate, ev, in.AttemptID, "x")

	for try := range 2 {
		res := deliverBatch(t, env, acts, in)
		if res.Delivered != 3 || res.Failed != 1 || res.DeadLettered != 1 || res.Unconfirmed != 1 || res.Duplicates != 0 {
			t.Fatalf("try %d: %+v; want 3 delivered, x failed, dead-lettered and unconfirmed", try, res)
		}
		if c.calls["x"] != 0 || c.calls["a"] != 1 || c.calls["c"] != 1 {
			t.Fatalf("try %d: calls %v; want x never called, the others once", try, c.calls)
		}
	}
	if len(dl.dls) != 1 || dl.dls[0].Recipient.ID != "x" || dl.dls[0].Permanent ||
		!strings.HasPrefix(dl.dls[0].LastError, activities.ReasonUnconfirmedAtMostOnce) {
		t.Fatalf("dead letters: %+v; want x once with %s", dl.dls, activities.ReasonUnconfirmedAtMostOnce)
	}
	if c.sems[fanout.AtMostOnce] != 3 || c.sems[fanout.AtLeastOnce] != 0 {
		t.Errorf("calls by semantics: %v; want every call at most once", c.sems)
	}
	// The operator's choice: redrive x (same attempt id).
	in.Recipients, in.Redrive, in.Round = []fanout.Recipient{{ID: "x"}}, true, "r1"
	if res := deliverBatch(t, env, acts, in); res.Delivered != 1 || c.calls["x"] != 1 {
		t.Fatalf("redrive: %+v, x called %d times; want delivered once", res, c.calls["x"])
	}

	// At least once, the interrupted call is made again.
	c2 := &caller{}
	env2, acts2, dl2 := setupSemantics(t, c2, fanout.AtLeastOnce, true)
	ev2 := event("alo-crash", 0)
	in2 := activities.DeliverBatchInput{Event: ev2, AttemptID: "k#0", Recipients: rs, MaxAttempts: 3, Concurrency: 2}
	crashMidCall(t, acts2.Gate, ev2, in2.AttemptID, "x")
	if res := deliverBatch(t, env2, acts2, in2); res.Delivered != 4 || res.Unconfirmed != 0 || c2.calls["x"] != 1 || len(dl2.dls) != 0 {
		t.Fatalf("at least once: %+v, calls %v, dead letters %d; want all 4 delivered", res, c2.calls, len(dl2.dls))
	}
	if c2.sems[fanout.AtLeastOnce] != 4 {
		t.Errorf("calls by semantics: %v; want every call at least once", c2.sems)
	}
}

// refusedErr is a real dial error: a connection to a loopback port nothing
// listens on.
func refusedErr(t *testing.T) error {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err == nil {
		_ = c.Close()
		t.Fatalf("dial %s succeeded", addr)
	}
	return err
}

// TestAtMostOnceRetriesOnlyCallsNotSent: at most once, a failed call is
// retried only when its error proves it was not sent (a refused connection,
// fanout.NotSent); a 5xx-like failure is dead-lettered at once with
// not_retried_at_most_once, a permanent one with its own error, and neither
// is called again.
func TestAtMostOnceRetriesOnlyCallsNotSent(t *testing.T) {
	refused := refusedErr(t)
	c := &caller{fail: func(r fanout.Recipient, call int) error {
		switch {
		case r.ID == "refused" && call == 1:
			return refused
		case r.ID == "marked" && call == 1:
			return fanout.NotSent(errors.New("provider queue full, rejected before sending"))
		case r.ID == "http500":
			return errors.New("HTTP 500")
		case r.ID == "perm":
			return fanout.Permanent(errors.New("HTTP 404"))
		}
		return nil
	}}
	env, acts, dl := setupSemantics(t, c, fanout.AtMostOnce, true)
	ev := event("amo-fail", 0)
	in := activities.DeliverBatchInput{Event: ev, AttemptID: "f#0", MaxAttempts: 3, Concurrency: 5,
		Recipients: []fanout.Recipient{{ID: "ok"}, {ID: "refused"}, {ID: "marked"}, {ID: "http500"}, {ID: "perm"}}}
	_, err := env.ExecuteActivity(acts.DeliverBatch, in)
	if !activities.IsDeliveryRetry(err) {
		t.Fatalf("attempt 1: %v; want a retry of the calls not sent", err)
	}
	if len(dl.dls) != 2 {
		t.Fatalf("attempt 1: %d dead letters, want http500 and perm", len(dl.dls))
	}
	for _, d := range dl.dls {
		switch d.Recipient.ID {
		case "http500":
			if !strings.HasPrefix(d.LastError, activities.ReasonNotRetriedAtMostOnce+": ") || !strings.Contains(d.LastError, "HTTP 500") || d.Permanent {
				t.Errorf("http500 dead letter: %+v", d)
			}
		case "perm":
			if !d.Permanent || strings.Contains(d.LastError, activities.ReasonNotRetriedAtMostOnce) {
				t.Errorf("perm dead letter: %+v", d)
			}
		default:
			t.Errorf("unexpected dead letter %s", d.Recipient.ID)
		}
	}
	res := deliverBatch(t, env, acts, in)
	if res.Delivered != 3 || res.Failed != 2 || res.DeadLettered != 2 || res.Unconfirmed != 0 {
		t.Fatalf("attempt 2: %+v; want ok, refused and marked delivered, 2 dead-lettered", res)
	}
	want := map[string]int{"ok": 1, "refused": 2, "marked": 2, "http500": 1, "perm": 1}
	for id, n := range want {
		if c.calls[id] != n {
			t.Errorf("%s called %d times, want %d", id, c.calls[id], n)
		}
	}
	if len(dl.dls) != 2 {
		t.Errorf("%d dead letters after attempt 2, want still 2", len(dl.dls))
	}
}

// TestAtMostOnceNeedsTheGate: an at-most-once batch on a worker without the
// gate fails for good rather than deliver without its guarantee.
func TestAtMostOnceNeedsTheGate(t *testing.T) {
	c := &caller{}
	env, acts, _ := setupSemantics(t, c, fanout.AtMostOnce, false)
	_, err := env.ExecuteActivity(acts.DeliverBatch, activities.DeliverBatchInput{
		Event: event("amo-nogate", 0), AttemptID: "n#0", Recipients: []fanout.Recipient{{ID: "a"}}, MaxAttempts: 1, Concurrency: 1})
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || ae.Type() != activities.ErrAtMostOnceNoGate || !ae.NonRetryable() {
		t.Fatalf("err %v; want a non-retryable %s", err, activities.ErrAtMostOnceNoGate)
	}
	if len(c.calls) != 0 {
		t.Errorf("calls %v; want none", c.calls)
	}
}

// TestAtMostOnceRetriesCallsTheBreakerRejected (issue 23, item 3): at most
// once, a delivery its destination's open breaker rejected was never sent,
// so it goes back to the attempt id and is retried after the cooldown, as
// any call not sent; it is never dead-lettered as not_retried_at_most_once.
// The breaker is opened by a real refused connection on loopback.
func TestAtMostOnceRetriesCallsTheBreakerRejected(t *testing.T) {
	refused := refusedErr(t)
	c := &caller{fail: func(r fanout.Recipient, call int) error {
		if r.ID == "a" && call == 1 {
			return refused // opens the breaker (1 failure)
		}
		return nil
	}}
	c.calls, c.sems = map[string]int{}, map[fanout.Semantics]int{}
	reg := fanout.NewRegistry()
	reg.MustRegister("t", c, fanout.TypeOptions{Semantics: fanout.AtMostOnce, BreakerFailures: 1, BreakerCooldown: 300 * time.Millisecond})
	dl := &dlqRecorder{}
	acts := &activities.Activities{Registry: reg, DeadLetters: dl, Gate: gate.New(rdb, time.Hour),
		Destinations: activities.NewDestinations(nil, nil, nil)}
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	env.RegisterActivity(acts)
	in := activities.DeliverBatchInput{Event: event("amo-breaker", 0), AttemptID: "b#0", MaxAttempts: 5, Concurrency: 1,
		Recipients: []fanout.Recipient{{ID: "a"}, {ID: "b"}, {ID: "c"}}}
	_, err := env.ExecuteActivity(acts.DeliverBatch, in)
	if !activities.IsDeliveryRetry(err) {
		t.Fatalf("attempt 1: %v; want a retry of the calls not sent", err)
	}
	if len(dl.dls) != 0 || c.calls["b"] != 0 || c.calls["c"] != 0 {
		t.Fatalf("attempt 1: %d dead letters (%+v), calls %v; want none dead-lettered, b and c not called", len(dl.dls), dl.dls, c.calls)
	}
	time.Sleep(400 * time.Millisecond) // the cooldown
	res := deliverBatch(t, env, acts, in)
	if res.Delivered != 3 || res.Failed != 0 || len(dl.dls) != 0 {
		t.Fatalf("attempt 2: %+v, %d dead letters; want all 3 delivered", res, len(dl.dls))
	}
	if c.calls["a"] != 2 || c.calls["b"] != 1 || c.calls["c"] != 1 {
		t.Errorf("calls %v; want a twice (refused, then sent), b and c once", c.calls)
	}
}
