//go:build integration

package destlimits

import (
	"context"
	"encoding/json"
	"net/netip"
	"os"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/dev/stack"
	"github.com/fanout/fanout/starter"
	"github.com/fanout/fanout/workers"
	"github.com/fanout/fanout/workers/webhook"
	"github.com/fanout/fanout/workflows/vocab"
)

// slowType is a webhook type whose destinations are limited to one call
// every 15 s, with batch attempts of 12 s (calls of at most 1 s): a limit slower
// than one call per attempt.
const slowType = "webhook-slow"

var slowOptions = fanout.TypeOptions{DestinationRate: 4.0 / 60, DeliverTimeout: 12 * time.Second, CallTimeout: time.Second, LocalDeliveryMax: -1}

// TestSlowLimitWaitsInsteadOfSpinning (issue 23, item 8) on the real stack
// (Temporal dev server, redis-server, loopback HTTP): three recipients of
// one destination limited to one call every 15 s, each batch attempt 12 s
// long, are delivered in a few attempts, each coming back when its next
// call is due, not in an attempt every 100 ms.
func TestSlowLimitWaitsInsteadOfSpinning(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const n = 3
	dest := startHost(t, "S", false)
	recipientsURL := serveRecipients(t, hostileAddrs{good: dest.addr, nGood: n})

	s, err := stack.Start(ctx, stack.Options{InMemory: true, Log: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	reg := fanout.NewRegistry()
	reg.MustRegister(slowType, &webhook.Handler{RecipientsURL: recipientsURL,
		Client: webhook.NewClient(5*time.Second, 8, netip.MustParsePrefix("127.0.0.1/32"))}, slowOptions)
	defer s.RunWorkers(workers.Options{Registry: reg})()

	id := "slow-" + time.Now().UTC().Format("150405")
	payload, _ := json.Marshal(map[string]any{"message": map[string]string{"text": "hi"}})
	if _, err := starter.StartEvent(ctx, s.TC, fanout.Event{ID: id, Type: slowType, Payload: payload}, false, 0); err != nil {
		t.Fatal(err)
	}
	wid := vocab.WorkflowID(slowType, id)
	res, err := s.WaitWorkflow(ctx, wid, id)
	if err != nil {
		t.Fatal(err)
	}
	if st := dest.stats(); res.Delivered != n || st.unique != n || st.calls != n {
		t.Fatalf("%+v, destination got %d recipients in %d calls; want %d delivered once", res.Progress, st.unique, st.calls, n)
	}
	attempts := maxAttempt(ctx, t, s, wid)
	t.Logf("delivered %d at one call per 15 s in %d attempts of the batch", n, attempts)
	// One attempt per call due, and a little slack: an attempt every
	// 100 ms would be hundreds.
	if attempts == 0 || attempts > 2*n {
		t.Errorf("the batch took %d attempts for %d calls due 15 s apart; want at most %d", attempts, n, 2*n)
	}
}

// maxAttempt is the highest attempt of an activity of the workflow wid or
// of its children (the batch runs in one or the other).
func maxAttempt(ctx context.Context, t *testing.T, s *stack.Stack, wid string) int32 {
	t.Helper()
	attempts := int32(0)
	it := s.TC.GetWorkflowHistory(ctx, wid, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		if a := ev.GetActivityTaskStartedEventAttributes(); a != nil {
			attempts = max(attempts, a.GetAttempt())
		}
		if c := ev.GetChildWorkflowExecutionStartedEventAttributes(); c != nil {
			attempts = max(attempts, maxAttempt(ctx, t, s, c.GetWorkflowExecution().GetWorkflowId()))
		}
	}
	return attempts
}
