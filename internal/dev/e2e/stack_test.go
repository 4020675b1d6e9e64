//go:build integration

// Package e2e holds the integration tests: they run fanout against the real
// stack (the temporal dev server, the kfake broker over TCP, a real
// redis-server, a loopback HTTP sink) with the workers and the bridge
// in-process.
package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"
	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/activities"
	"github.com/fanout/fanout/internal/dev/demo"
	"github.com/fanout/fanout/internal/dev/stack"
	"github.com/fanout/fanout/starter"
	"github.com/fanout/fanout/workers"
	"github.com/fanout/fanout/workers/webhook"
	"github.com/fanout/fanout/workflows"
	"github.com/fanout/fanout/workflows/vocab"
)

// stack is the shared real stack of the package's tests.
type testStack struct {
	temporalAddr string
	// temporalMetrics is the dev server's Prometheus endpoint.
	temporalMetrics string
	kafkaAddr       string
	redisAddr       string
	tc              client.Client
	rdb             *redis.Client
	sink            *demo.Sink
	sinkURL         string
	logger          *slog.Logger

	mu           sync.Mutex
	bridge       *starter.Bridge
	bridgeCancel context.CancelFunc
	bridgeDone   chan struct{}
}

var st *testStack

const eventsTopic = starter.DefaultEventsTopic

// stackOptions are the webhook type's options in the stack: a small window,
// so pause and rate caps bite quickly in the CLI tests.
var stackOptions = fanout.TypeOptions{BatchSize: 200, Window: 4}

func TestMain(m *testing.M) {
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	os.Exit(code)
}

func run(m *testing.M) (int, error) {
	ctx := context.Background()
	root, err := stack.RepoRoot()
	if err != nil {
		return 0, err
	}
	tmp, err := os.MkdirTemp("", "fanout-e2e-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(tmp)
	bin, err := stack.EnsureTemporalCLI(ctx, root, os.Stderr)
	if err != nil {
		return 0, err
	}
	logLevel := slog.LevelWarn
	if os.Getenv("FANOUT_TEST_VERBOSE") != "" {
		logLevel = slog.LevelDebug
	}
	s := &testStack{logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: logLevel}))}

	tport, err := stack.FreePort()
	if err != nil {
		return 0, err
	}
	mport, err := stack.FreePort()
	if err != nil {
		return 0, err
	}
	tproc, taddr, err := stack.StartTemporal(ctx, stack.TemporalOptions{Port: tport, Headless: true, Bin: bin, LogPath: filepath.Join(tmp, "temporal.log"), MetricsPort: mport})
	if err != nil {
		return 0, err
	}
	defer tproc.Stop(10 * time.Second)
	s.temporalAddr = taddr
	s.temporalMetrics = fmt.Sprintf("http://127.0.0.1:%d/metrics", mport)

	rport, err := stack.FreePort()
	if err != nil {
		return 0, err
	}
	rproc, raddr, err := stack.StartRedis(ctx, rport, "", filepath.Join(tmp, "redis.log"), os.Stderr)
	if err != nil {
		return 0, err
	}
	defer rproc.Stop(5 * time.Second)
	s.redisAddr = raddr
	s.rdb = redis.NewClient(&redis.Options{Addr: raddr})
	defer s.rdb.Close()

	kport, err := stack.FreePort()
	if err != nil {
		return 0, err
	}
	kc, kaddr, err := stack.StartKafka(kport)
	if err != nil {
		return 0, err
	}
	defer kc.Close()
	s.kafkaAddr = kaddr

	s.sink = demo.NewSink()
	srv := httptest.NewServer(demo.Mux(&demo.Source{}, s.sink))
	defer srv.Close()
	s.sinkURL = srv.URL
	// The source needs its own URL for recipients' addresses.
	srv.Config.Handler = demo.Mux(&demo.Source{DeliverURL: srv.URL + "/deliver"}, s.sink)

	s.tc, err = client.Dial(client.Options{HostPort: taddr, Logger: tlog.NewStructuredLogger(s.logger)})
	if err != nil {
		return 0, err
	}
	defer s.tc.Close()

	reg := fanout.NewRegistry()
	reg.MustRegister(webhook.EventType, &webhook.Handler{
		RecipientsURL: srv.URL + "/recipients",
		Client:        webhook.NewClient(10*time.Second, 256),
	}, stackOptions)
	dlw := activities.NewDeadLetterWriter([]string{kaddr}, activities.DefaultDeliveriesDLQTopic)
	defer dlw.Close()
	wctx, wcancel := context.WithCancel(ctx)
	werr := make(chan error, 1)
	go func() {
		werr <- workers.Run(wctx, workers.Options{
			Client: s.tc, Registry: reg, Redis: s.rdb, Queues: vocab.Queues(), Logger: s.logger,
			DeadLetters: dlw,
		})
	}()
	defer func() { wcancel(); <-werr }()

	st = s
	s.startBridge()
	defer s.stopBridge()
	return m.Run(), nil
}

func (s *testStack) startBridge() {
	s.mu.Lock()
	defer s.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	b := starter.New(starter.Config{
		Brokers:        []string{s.kafkaAddr},
		Topic:          eventsTopic,
		GroupID:        "fanout-bridge",
		DLQTopic:       starter.DefaultEventsDLQTopic,
		Validator:      starter.Validator{Types: []string{webhook.EventType}, MaxPayloadBytes: 4096},
		CommitInterval: 0,
		Events:         starter.NewEventRecord(s.rdb, time.Hour),
		Logger:         s.logger,
		Eager:          true, // s.tc also runs the events worker
	}, s.tc)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := b.Run(ctx); err != nil {
			s.logger.Error("bridge stopped", "err", err)
		}
	}()
	s.bridge, s.bridgeCancel, s.bridgeDone = b, cancel, done
}

func (s *testStack) stopBridge() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.bridgeCancel != nil {
		s.bridgeCancel()
		<-s.bridgeDone
		s.bridgeCancel = nil
	}
}

// publish writes raw records to the events topic.
func (s *testStack) publish(t *testing.T, msgs ...kafka.Message) {
	t.Helper()
	w := &kafka.Writer{Addr: kafka.TCP(s.kafkaAddr), Topic: eventsTopic, Balancer: &kafka.Hash{}, RequiredAcks: kafka.RequireAll, BatchTimeout: 5 * time.Millisecond}
	defer w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatalf("publish: %v", err)
	}
}

// eventRecord is a well-formed demo event record with the given audience.
func eventRecord(t *testing.T, id string, audience int, extra map[string]any) kafka.Message {
	t.Helper()
	p := map[string]any{"audience": audience, "message": map[string]string{"text": "hello " + id}}
	for k, v := range extra {
		p[k] = v
	}
	pb, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	v, err := json.Marshal(starter.Envelope{ID: id, Type: webhook.EventType, Payload: pb})
	if err != nil {
		t.Fatal(err)
	}
	return kafka.Message{Key: []byte(id), Value: v}
}

// waitResult waits for the event's Fanout workflow (following
// continue-as-new) to complete and returns its result.
func (s *testStack) waitResult(t *testing.T, eventID string, timeout time.Duration) workflows.FanoutResult {
	t.Helper()
	wid := vocab.WorkflowID(webhook.EventType, eventID)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for {
		var res workflows.FanoutResult
		err := s.tc.GetWorkflow(ctx, wid, "").Get(ctx, &res)
		if err == nil {
			return res
		}
		var nf *serviceerror.NotFound
		if !errors.As(err, &nf) || ctx.Err() != nil {
			t.Fatalf("event %s (workflow %s): %v", eventID, wid, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// runs counts the executions (runs, not continued-as-new ones) of a workflow id.
func (s *testStack) runs(t *testing.T, wid string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n := 0
	var token []byte
	for {
		resp, err := s.tc.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: fmt.Sprintf("WorkflowId = '%s'", wid), NextPageToken: token})
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
