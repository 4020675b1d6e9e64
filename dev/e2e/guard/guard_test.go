//go:build integration

// Package guard checks an event's canary and expiry on the real stack (the
// temporal dev server, redis-server, kfake over TCP, the bridge, loopback
// HTTP to the sink): events are published as a producer does, with
// "canary" and "expires_at" in the envelope.
package guard

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/activities"
	"github.com/fanout/fanout/dev/stack"
	"github.com/fanout/fanout/internal/backoff"
	"github.com/fanout/fanout/internal/kafkatopic"
	"github.com/fanout/fanout/starter"
	"github.com/fanout/fanout/workers"
	"github.com/fanout/fanout/workers/webhook"
	"github.com/fanout/fanout/workflows"
	"github.com/fanout/fanout/workflows/vocab"
)

var st *stack.Stack

// options: batches of 50 (a canary of 100 is two batches), four open at
// once, no fast path, two calls at a time per batch (an event of 1,000
// takes seconds against a sink that answers in 20 ms), no breaker (the
// failing destination of one test would hold the next one's calls).
var options = fanout.TypeOptions{BatchSize: 50, PageSize: 1000, Window: 4, DeliverConcurrency: 2, MaxAttempts: 2, LocalDeliveryMax: -1, BreakerFailures: -1}

// failing maps an event id to its sink's answer for a recipient; calls
// counts each event's calls per recipient.
var (
	mu      sync.Mutex
	failing = map[string]func(rc string) int{}
	calls   = map[string]map[string]int{}
)

func TestMain(m *testing.M) {
	code, err := func() (int, error) {
		ctx := context.Background()
		s, err := stack.Start(ctx, stack.Options{InMemory: true, Log: os.Stderr})
		if err != nil {
			return 0, err
		}
		defer s.Close()
		st = s
		s.Sink.Delay = 20 * time.Millisecond
		s.Sink.Fail = func(ev, rc string) (int, time.Duration) {
			mu.Lock()
			defer mu.Unlock()
			if calls[ev] == nil {
				calls[ev] = map[string]int{}
			}
			calls[ev][rc]++
			if f := failing[ev]; f != nil {
				return f(rc), 0
			}
			return 0, 0
		}
		reg := fanout.NewRegistry()
		reg.MustRegister(webhook.EventType, &webhook.Handler{
			RecipientsURL: s.DemoURL + "/recipients",
			Client:        webhook.NewClient(10*time.Second, 64, netip.MustParsePrefix("127.0.0.1/32")),
		}, options)
		defer s.RunWorkers(workers.Options{Registry: reg,
			// Retries 2-4 s apart: a batch still failing at the expiry
			// would retry after it.
			Backoff: backoff.Policy{Initial: 2 * time.Second, Max: 4 * time.Second, Jitter: 0.1}})()
		_, stop := s.RunBridge(starter.Config{Validator: starter.Validator{Types: []string{webhook.EventType}}})
		defer stop()
		return m.Run(), nil
	}()
	if err != nil {
		fmt.Fprintln(os.Stderr, "guard:", err)
		os.Exit(1)
	}
	os.Exit(code)
}

// publish publishes a demo event of n recipients through the bridge, with
// edit applied to its envelope.
func publish(ctx context.Context, t *testing.T, id string, n int, edit func(*starter.Envelope)) {
	t.Helper()
	env := stack.Event{ID: id, Audience: n}.Envelope()
	edit(&env)
	if err := st.Publisher.Publish(ctx, env); err != nil {
		t.Fatal(err)
	}
}

// oddOnly fails (503) the recipients whose number is even: half of any
// 100 consecutive ones.
func oddOnly(rc string) int {
	if (rc[len(rc)-1]-'0')%2 == 0 {
		return http.StatusServiceUnavailable
	}
	return 0
}

func called(id string) (recipients, total int) {
	mu.Lock()
	defer mu.Unlock()
	for _, n := range calls[id] {
		recipients++
		total += n
	}
	return recipients, total
}

func progress(ctx context.Context, t *testing.T, wid string) workflows.Progress {
	t.Helper()
	v, err := st.TC.QueryWorkflow(ctx, wid, "", vocab.ProgressQuery)
	if err != nil {
		t.Fatal(err)
	}
	var p workflows.Progress
	if err := v.Get(&p); err != nil {
		t.Fatal(err)
	}
	return p
}

// status is the FanoutStatus search attribute of wid, as visibility has it
// ("" before the bridge started it).
func status(ctx context.Context, t *testing.T, wid string) string {
	t.Helper()
	d, err := st.TC.DescribeWorkflow(ctx, wid, "")
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	s, _ := d.TypedSearchAttributes.GetKeyword(vocab.StatusKey)
	return s
}

// TestCanaryPausesAFailingBroadcast: a canary of 100 (max 20 % failed) of
// a 1,000-recipient event on a destination failing half its recipients
// pauses the event after its two canary batches: 100 recipients called,
// the status paused with the verdict as the reason, read from Temporal
// (the search attribute, the progress query); a resume continues it to
// the end.
func TestCanaryPausesAFailingBroadcast(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const n = 1000
	id := "canary-fail-" + time.Now().UTC().Format("150405.000")
	wid := stack.WorkflowID(id)
	mu.Lock()
	failing[id] = oddOnly
	mu.Unlock()
	publish(ctx, t, id, n, func(e *starter.Envelope) { e.Canary = &fanout.Canary{Recipients: 100, MaxFailureRatio: 0.2} })

	deadline := time.Now().Add(2 * time.Minute)
	for status(ctx, t, wid) != vocab.StatusPaused {
		if time.Now().After(deadline) {
			t.Fatalf("not paused after 2 min: status %q, progress %+v", status(ctx, t, wid), progress(ctx, t, wid))
		}
		time.Sleep(300 * time.Millisecond)
	}
	time.Sleep(2 * time.Second) // nothing more is started while it is paused
	p := progress(ctx, t, wid)
	const reason = "canary: 50 of 100 failed (50% > 20%)"
	if !p.Paused || p.PauseReason != reason || p.BatchesStarted != 2 || p.Delivered != 50 || p.Failed != 50 {
		t.Errorf("paused progress %+v, want the two canary batches and %q", p, reason)
	}
	recips, total := called(id)
	sink := st.Sink.Event(id)
	t.Logf("paused after %d recipients called (%d calls, %d delivered): %s", recips, total, sink.Unique, p.PauseReason)
	if recips != 100 || sink.Unique != 50 {
		t.Errorf("the sink was called for %d recipients and delivered %d before the pause; want the canary's 100, 50 delivered", recips, sink.Unique)
	}
	if _, err := st.TC.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: wid, UpdateName: vocab.ResumeUpdate,
		WaitForStage: client.WorkflowUpdateStageCompleted}); err != nil {
		t.Fatal(err)
	}
	res, err := st.Wait(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if res.Delivered != n/2 || res.Failed != n/2 || res.Paused || res.BatchesCompleted != n/options.BatchSize {
		t.Errorf("after the resume: %+v, want every batch done, half delivered", res.Progress)
	}
	if recips, _ := called(id); recips != n || st.Sink.Event(id).Unique != n/2 {
		t.Errorf("after the resume the sink was called for %d recipients, delivered %d; want %d and %d", recips, st.Sink.Event(id).Unique, n, n/2)
	}
	if s := status(ctx, t, wid); s != vocab.StatusCompletedWithFailures {
		t.Errorf("final status %q", s)
	}
}

// TestCanaryPassesOnAHealthyDestination: the same canary on a destination
// that answers every call lets the event complete, every recipient
// delivered once.
func TestCanaryPassesOnAHealthyDestination(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const n = 1000
	id := "canary-ok-" + time.Now().UTC().Format("150405.000")
	publish(ctx, t, id, n, func(e *starter.Envelope) { e.Canary = &fanout.Canary{Recipients: 100, MaxFailureRatio: 0.2} })
	res, err := st.Wait(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if res.Delivered != n || res.Failed != 0 || res.Paused || !strings.HasPrefix(res.Canary, "passed: 0 of 100 failed") {
		t.Errorf("result %+v", res.Progress)
	}
	if got := st.Sink.Event(id); got.Unique != n || got.Duplicated != 0 {
		t.Errorf("sink %+v, want %d once each", got, n)
	}
	if s := status(ctx, t, stack.WorkflowID(id)); s != vocab.StatusCompleted {
		t.Errorf("final status %q", s)
	}
}

// TestExpiryCountsTheUndelivered: an event of 1,000 published with
// expires_at 4 s ahead, against a sink answering in 20 ms (about 400/s
// over four batches of two calls), delivers part of its audience; the
// rest is counted expired in its result and FanoutExpired, none of it in
// the deliveries DLQ, and delivered + expired is the audience. A tenth of
// its recipients fail (503) until the end: their batches retry 2-4 s
// later, so those retrying at the expiry are not retried after it and are
// expired too, not dead-lettered.
func TestExpiryCountsTheUndelivered(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const n = 1000
	id := "expiry-" + time.Now().UTC().Format("150405.000")
	wid := stack.WorkflowID(id)
	mu.Lock()
	failing[id] = func(rc string) int {
		if strings.HasSuffix(rc, "7") {
			return http.StatusServiceUnavailable
		}
		return 0
	}
	mu.Unlock()
	expires := time.Now().Add(4 * time.Second).UTC().Truncate(time.Second).Add(time.Second)
	publish(ctx, t, id, n, func(e *starter.Envelope) { e.ExpiresAt = expires })
	res, err := st.Wait(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("expired at %s: %+v", expires.Format(time.RFC3339), res.Progress)
	if res.Expired == 0 || res.Delivered == 0 || res.Delivered+res.Expired+res.Failed != n || res.Duplicates != 0 {
		t.Errorf("result %+v: want some delivered, the rest expired, delivered + expired + failed = %d", res.Progress, n)
	}
	// The batches running at the expiry left their still-failing
	// recipients expired (not retried after it): more expired than the
	// batches never started held.
	if notStarted := int64(n - res.BatchesStarted*options.BatchSize); res.Expired <= notStarted {
		t.Errorf("expired %d, only the %d of the batches not started: the running batches retried past the expiry or dead-lettered", res.Expired, notStarted)
	}
	// MaxAttempts 2 with 2 s between them: a recipient failing from the
	// start may have been given up before the expiry (failed, in the DLQ);
	// every other undelivered one is expired.
	if res.DeadLettered != res.Failed {
		t.Errorf("failed %d, dead-lettered %d", res.Failed, res.DeadLettered)
	}
	if got := st.Sink.Event(id).Unique; int64(got) != res.Delivered {
		t.Errorf("the sink delivered %d, the result says %d", got, res.Delivered)
	}
	d, err := st.TC.DescribeWorkflow(ctx, wid, "")
	if err != nil {
		t.Fatal(err)
	}
	sa := d.TypedSearchAttributes
	exp, _ := sa.GetFloat64(vocab.ExpiredKey)
	stat, _ := sa.GetKeyword(vocab.StatusKey)
	if stat != vocab.StatusExpired || int64(exp) != res.Expired {
		t.Errorf("FanoutStatus %q, FanoutExpired %v; want expired and %d", stat, exp, res.Expired)
	}
	letters := map[string]bool{}
	err = kafkatopic.ReadAll(ctx, st.KafkaConn(), activities.DefaultDeliveriesDLQTopic, func(m kafka.Message) error {
		dl, err := activities.DecodeDeadLetter(m.Value, nil) // the stack has no keys
		if err != nil {
			return err
		}
		if dl.EventID == id {
			letters[dl.Recipient.ID] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(letters)) != res.Failed {
		t.Errorf("%d recipients of the event in the deliveries DLQ, want the %d failed (none expired)", len(letters), res.Failed)
	}
	for rc := range letters {
		if !strings.HasSuffix(rc, "7") {
			t.Errorf("recipient %s, never failing, is in the deliveries DLQ", rc)
		}
	}
}
