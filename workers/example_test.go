package workers_test

import (
	"context"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"
	"go.temporal.io/sdk/client"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/activities"
	"github.com/fanout/fanout/workers"
	"github.com/fanout/fanout/workflows/vocab"
)

// A user's own worker main wired by hand: its own event type, the
// stock dead-letter writer and its own retry backoff, all without
// fanout's internal packages. (Compiled by go test; not run: it needs
// Temporal, Redis and Kafka.)
func Example() {
	ctx := context.Background()
	reg := fanout.NewRegistry()
	reg.MustRegister("order-shipped", fanout.HandlerFuncs{
		GetRecipientsFunc: func(ctx context.Context, ev fanout.Event, cursor string, limit int) (fanout.Page, error) {
			return fanout.Page{Recipients: []fanout.Recipient{{ID: "u1", Address: "device-token"}}}, nil
		},
		GenerateMessageFunc: func(ctx context.Context, ev fanout.Event) (fanout.Message, error) {
			return fanout.Message{ContentType: "application/json", Body: ev.Payload}, nil
		},
		DeliverFunc: func(ctx context.Context, ev fanout.Event, r fanout.Recipient, m fanout.Message) error {
			return nil
		},
	}, fanout.TypeOptions{DefaultPriority: fanout.PriorityHigh, BatchSize: 500, MaxAttempts: 5})

	tc, err := client.Dial(client.Options{})
	if err != nil {
		return
	}
	defer tc.Close()
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer func() { _ = rdb.Close() }()
	dlq := activities.NewDeadLetterWriter(activities.KafkaConn{Brokers: []string{"localhost:9092"}}, activities.DefaultDeliveriesDLQTopic)
	defer func() { _ = dlq.Close() }()
	_ = workers.Run(ctx, workers.Options{
		Client: tc, Registry: reg, Redis: rdb, Queues: vocab.Queues(), Logger: slog.Default(),
		DeadLetters: dlq,
		Backoff:     activities.Backoff{Initial: time.Second, Max: time.Minute, Jitter: 0.5, MaxRetryAfter: 10 * time.Minute},
	})
}

// A user's own worker main on the stock wiring: its event type and one
// call. Main reads the same environment as the stock worker (-h lists
// it), adds the types of FANOUT_TYPES_FILE and runs until SIGTERM.
func ExampleMain() {
	reg := fanout.NewRegistry()
	reg.MustRegister("order-shipped", fanout.HandlerFuncs{
		GetRecipientsFunc: func(ctx context.Context, ev fanout.Event, cursor string, limit int) (fanout.Page, error) {
			return fanout.Page{Recipients: []fanout.Recipient{{ID: "u1", Address: "device-token"}}}, nil
		},
		GenerateMessageFunc: func(ctx context.Context, ev fanout.Event) (fanout.Message, error) {
			return fanout.Message{ContentType: "application/json", Body: ev.Payload}, nil
		},
		DeliverFunc: func(ctx context.Context, ev fanout.Event, r fanout.Recipient, m fanout.Message) error {
			return nil
		},
	}, fanout.TypeOptions{DefaultPriority: fanout.PriorityHigh})
	workers.Main(reg)
}
