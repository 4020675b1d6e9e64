//go:build integration

// Package e2e holds the integration tests: they run fanout against the real
// stack (the temporal dev server, the kfake broker over TCP, a real
// redis-server, a loopback HTTP sink) with the workers and the bridge
// in-process.
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"testing"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/dev/stack"
	"github.com/fanout/fanout/starter"
	"github.com/fanout/fanout/workers"
	"github.com/fanout/fanout/workers/webhook"
	"github.com/fanout/fanout/workflows"
	"github.com/fanout/fanout/workflows/vocab"
)

// testStack is the package's shared real stack, with the workers and the
// bridge in this process.
type testStack struct {
	*stack.Stack
	logger     *slog.Logger
	bridge     *starter.Bridge
	stopBridge func()
}

var st *testStack

const eventsTopic = starter.DefaultEventsTopic

// stackOptions are the webhook type's options in the stack: a small window
// and batches of 200 throughout, so pause and rate caps bite quickly in the
// CLI tests and they can count recipients by batches.
var stackOptions = fanout.TypeOptions{BatchSize: 200, PageSize: 800, Window: 4, LargeBatchSize: -1}

// growingOptions are otherType's: batches of 200 on the first page (800),
// which fill the window of 4, then one batch per page (LargeBatchSize's
// default).
var growingOptions = fanout.TypeOptions{BatchSize: 200, PageSize: 800, Window: 4}

func TestMain(m *testing.M) {
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	os.Exit(code)
}

func run(m *testing.M) (int, error) {
	logLevel := slog.LevelWarn
	if os.Getenv("FANOUT_TEST_VERBOSE") != "" {
		logLevel = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: logLevel}))
	s, err := stack.Start(context.Background(), stack.Options{
		InMemory: true, TemporalMetrics: true, Log: os.Stderr,
		Client: client.Options{Logger: tlog.NewStructuredLogger(logger)},
	})
	if err != nil {
		return 0, err
	}
	defer s.Close()

	reg := fanout.NewRegistry()
	hook := &webhook.Handler{
		RecipientsURL: s.DemoURL + "/recipients",
		// The demo and the tests' servers listen on 127.0.0.1; the hostile
		// input tests stand for internal services on 127.0.0.2, which the
		// guard must refuse.
		Client: webhook.NewClient(10*time.Second, 256, netip.MustParsePrefix("127.0.0.1/32")),
		// Payload recipients_urls: the demo server, where tests Route
		// their recipients endpoints.
		RecipientsURLAllow: []string{s.RecipientsURLAllow()},
	}
	reg.MustRegister(webhook.EventType, hook, stackOptions)
	// otherType signs its deliveries (Standard Webhooks); the same-id test
	// verifies every one.
	signed := *hook
	if signed.Signer, err = webhook.NewSigner(signingSecret); err != nil {
		return 0, err
	}
	reg.MustRegister(otherType, &signed, growingOptions)
	reg.MustRegister(bigType, bigMessages{hook}, stackOptions)
	reg.MustRegister(boundedType, hook, boundedOptions)
	stopWorkers := s.RunWorkers(workers.Options{Registry: reg, Logger: logger})
	defer stopWorkers()

	st = &testStack{Stack: s, logger: logger}
	st.startBridge()
	defer func() { st.stopBridge() }() // the bridge running then
	return m.Run(), nil
}

// Event types of the stack beside the webhook type, for the hostile input
// tests.
const (
	// otherType is a second webhook type: events of both types may share an id.
	otherType = "webhook-b"
	// bigType delivers like the webhook type, with a message as large as
	// the payload's message_bytes says (up to fanout.MaxMessageBytes).
	bigType = "big-message"
	// boundedType bounds an event's audience (boundedOptions).
	boundedType = "webhook-bounded"
)

// boundedOptions: at most 10 pages of 200 and 1,000 recipients an event.
var boundedOptions = fanout.TypeOptions{BatchSize: 200, PageSize: 200, Window: 4, MaxPages: 10, MaxRecipients: 1000}

// signingSecret signs otherType's deliveries.
const signingSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// bigMessages is the handler of bigType.
type bigMessages struct{ *webhook.Handler }

func (bigMessages) GenerateMessage(_ context.Context, ev fanout.Event) (fanout.Message, error) {
	var p struct {
		MessageBytes int `json:"message_bytes"`
	}
	if err := json.Unmarshal(ev.Payload, &p); err != nil {
		return fanout.Message{}, fanout.Permanent(err)
	}
	const ct = "application/octet-stream"
	return fanout.Message{ContentType: ct, Body: bytes.Repeat([]byte{0xff}, max(p.MessageBytes-len(ct), 0))}, nil
}

// startBridge runs the bridge in this process; its client also runs the
// events worker, so it starts workflows eagerly.
func (s *testStack) startBridge() {
	s.bridge, s.stopBridge = s.RunBridge(starter.Config{
		Validator: starter.Validator{Types: []string{webhook.EventType, otherType, bigType, boundedType}, MaxPayloadBytes: 4096},
		Logger:    s.logger,
		Eager:     true,
	})
}

// publish writes demo events to the events topic.
func (s *testStack) publish(t *testing.T, evs ...stack.Event) {
	t.Helper()
	if err := s.Publish(context.Background(), evs...); err != nil {
		t.Fatalf("publish: %v", err)
	}
}

// waitResult waits for the event's Fanout workflow (following
// continue-as-new) to complete and returns its result.
func (s *testStack) waitResult(t *testing.T, eventID string, timeout time.Duration) workflows.FanoutResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	res, err := s.Wait(ctx, eventID)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// publishEnvelopes writes envelopes of any type to the events topic.
func (s *testStack) publishEnvelopes(t *testing.T, envs ...starter.Envelope) {
	t.Helper()
	if err := s.Publisher.Publish(context.Background(), envs...); err != nil {
		t.Fatalf("publish: %v", err)
	}
}

// waitTyped waits for the Fanout workflow of an event of any type to be
// started and to end, and returns its result (or its error).
func (s *testStack) waitTyped(eventType, eventID string, timeout time.Duration) (workflows.FanoutResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return s.WaitWorkflow(ctx, vocab.WorkflowID(eventType, eventID), eventID)
}

// runs counts the executions (runs, not continued-as-new ones) of a workflow id.
func (s *testStack) runs(t *testing.T, wid string) int {
	t.Helper()
	// Visibility lags the executions by up to half a second (see
	// stack.VisibilityPollRPS).
	time.Sleep(2 * time.Second / stack.VisibilityPollRPS)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n := 0
	var token []byte
	for {
		resp, err := s.TC.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: fmt.Sprintf("WorkflowId = '%s'", wid), NextPageToken: token})
		if err != nil {
			t.Fatalf("list %s: %v", wid, err)
		}
		for _, e := range resp.Executions {
			if e.GetStatus() != enums.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW {
				n++
			}
		}
		token = resp.NextPageToken
		if len(token) == 0 {
			return n
		}
	}
}
