//go:build integration

package starter_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/activities"
	"github.com/fanout/fanout/dev/stack"
	"github.com/fanout/fanout/starter"
	"github.com/fanout/fanout/workflows/vocab"
)

// TestBridgeSignalsTheEventsItStarts: the bridge signals an event that
// names its priority as it starts it (fanout:yield in a real redis-server
// holds its rank and fairness key), so the batches behind it yield from
// its start; an event scheduled for later and one that names no priority
// (its type's default is only known at its Open) do not signal.
func TestBridgeSignalsTheEventsItStarts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	addr, stopRedis, err := stack.StartRedisArgs(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer stopRedis()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer func() { _ = rdb.Close() }()

	const topic, dlq, group = "events", "events-dlq", "bridge"
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topic), kfake.SeedTopics(1, dlq))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	kc := starter.KafkaConn{Brokers: c.ListenAddrs()}
	events := []fanout.Event{
		{ID: "urgent", Type: "webhook", Priority: fanout.PriorityHigh},
		{ID: "later", Type: "webhook", Priority: fanout.PriorityHigh, DeliverAt: time.Now().Add(time.Hour).UTC()},
		{ID: "plain", Type: "webhook"},
	}
	w := &kafka.Writer{Addr: kafka.TCP(kc.Brokers...), Topic: topic, BatchTimeout: 10 * time.Millisecond}
	defer func() { _ = w.Close() }()
	for _, ev := range events {
		ev.Payload = json.RawMessage(`{}`)
		v, _ := json.Marshal(ev)
		if err := w.WriteMessages(ctx, kafka.Message{Value: v}); err != nil {
			t.Fatal(err)
		}
	}

	tc := stuckStarts{release: make(chan struct{}), started: make(chan string, len(events))}
	b := starter.New(starter.Config{Kafka: kc, Topic: topic, GroupID: group, DLQTopic: dlq,
		Validator: starter.Validator{Types: []string{"webhook"}},
		Yields:    activities.NewYieldSignals(rdb, nil)}, tc)
	defer runBridge(ctx, t, b, tc)()
	for range events {
		select {
		case <-tc.started:
		case <-ctx.Done():
			t.Fatal("the bridge did not start the events")
		}
	}

	want := "0 " + vocab.FairnessKey(events[0]) // rank 0: high's small batches
	var members []string
	for deadline := time.Now().Add(5 * time.Second); !slices.Contains(members, want); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: members %q, want %q among them", activities.YieldKey, members, want)
		}
		if members, err = rdb.ZRange(ctx, activities.YieldKey, 0, -1).Result(); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(300 * time.Millisecond) // the signals are sent in the background
	if members, err = rdb.ZRange(ctx, activities.YieldKey, 0, -1).Result(); err != nil {
		t.Fatal(err)
	}
	if len(members) != 1 {
		t.Errorf("%s: members %q, want only %q (no signal for an event scheduled later or without a priority)", activities.YieldKey, members, want)
	}
}
