//go:build integration

package starter_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/grpc"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/starter"
	"github.com/fanout/fanout/workflows/vocab"
)

// stuckStarts is a Temporal client whose starts of events named "stuck-*"
// hang until released (a workflow start that never answers); the others
// are acknowledged at once.
type stuckStarts struct {
	client.Client
	release chan struct{}
	started chan string
}

func (c stuckStarts) ExecuteWorkflow(ctx context.Context, opts client.StartWorkflowOptions, _ any, _ ...any) (client.WorkflowRun, error) {
	if strings.Contains(opts.ID, "/stuck-") {
		select {
		case <-c.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	c.started <- opts.ID
	return nil, nil
}

// OperatorService answers the bridge's read of the namespace's search
// attributes (before it consumes) with fanout's: this fake's namespace is
// set up.
func (c stuckStarts) OperatorService() operatorservice.OperatorServiceClient { return setUp{} }

type setUp struct {
	operatorservice.OperatorServiceClient
}

func (setUp) ListSearchAttributes(context.Context, *operatorservice.ListSearchAttributesRequest, ...grpc.CallOption) (*operatorservice.ListSearchAttributesResponse, error) {
	have := map[string]enumspb.IndexedValueType{}
	for _, a := range vocab.SearchAttributes() {
		have[a.Name] = a.Type
	}
	return &operatorservice.ListSearchAttributesResponse{CustomAttributes: have}, nil
}

// runBridge runs b; the func it returns releases tc's hanging starts,
// stops b and checks that Run ended without an error.
func runBridge(ctx context.Context, t *testing.T, b *starter.Bridge, tc stuckStarts) func() {
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- b.Run(runCtx) }()
	return func() {
		close(tc.release)
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
}

// TestBridgeOneStuckPartitionDoesNotStallTheOthers: partition 0's starts
// hang with far more records waiting than any lane or fetch queue holds;
// the events of partition 1, published after, are still started and
// their offsets committed.
func TestBridgeOneStuckPartitionDoesNotStallTheOthers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	const topic, dlq, group = "events", "events-dlq", "bridge"
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, topic), kfake.SeedTopics(1, dlq))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	kc := starter.KafkaConn{Brokers: c.ListenAddrs()}
	publish := func(partition int, prefix string, n int) {
		t.Helper()
		conn, err := kc.Dialer().DialLeader(ctx, "tcp", kc.Brokers[0], topic, partition)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = conn.Close() }()
		ms := make([]kafka.Message, n)
		for i := range ms {
			v, _ := json.Marshal(fanout.Event{ID: fmt.Sprintf("%s-%d", prefix, i), Type: "webhook", Payload: json.RawMessage(`{}`)})
			ms[i] = kafka.Message{Value: v}
		}
		if _, err := conn.WriteMessages(ms...); err != nil {
			t.Fatal(err)
		}
	}
	publish(0, "stuck", 1000)

	tc := stuckStarts{release: make(chan struct{}), started: make(chan string, 2000)}
	b := starter.New(starter.Config{Kafka: kc, Topic: topic, GroupID: group, DLQTopic: dlq,
		Validator: starter.Validator{Types: []string{"webhook"}}}, tc)
	defer runBridge(ctx, t, b, tc)()

	// Let the bridge take partition 0's records in until its lane is full.
	time.Sleep(5 * time.Second)
	const n = 50
	publish(1, "free", n)
	got := map[string]bool{}
	deadline := time.After(30 * time.Second)
	for len(got) < n {
		select {
		case id := <-tc.started:
			got[id] = true
		case <-deadline:
			t.Fatalf("partition 1: %d of %d events started while partition 0 is stuck", len(got), n)
		}
	}
	kcl := &kafka.Client{Addr: kafka.TCP(kc.Brokers...)}
	for {
		res, err := kcl.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: group, Topics: map[string][]int{topic: {0, 1}}})
		if err != nil {
			t.Fatal(err)
		}
		var p0, p1 int64
		for _, p := range res.Topics[topic] {
			if p.Partition == 0 {
				p0 = p.CommittedOffset
			} else {
				p1 = p.CommittedOffset
			}
		}
		if p1 == n {
			if p0 > 0 {
				t.Errorf("partition 0 committed to %d although its first start hangs", p0)
			}
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("partition 1 committed to %d, want %d", p1, n)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
