package activities

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/internal/kafkatopic"
)

// DefaultDeliveriesDLQTopic is where recipients go after MaxAttempts.
const DefaultDeliveriesDLQTopic = "fanout-deliveries-dlq"

// DeadLetter is one recipient that could not be delivered, as written (JSON)
// to the deliveries DLQ topic. It carries what a redrive needs to deliver it
// again through the same gate: the event, the batch's attempt id and the
// message.
type DeadLetter struct {
	EventID   string           `json:"event_id"`
	EventType string           `json:"event_type"`
	Priority  fanout.Priority  `json:"priority"`
	AttemptID string           `json:"attempt_id"`
	Recipient fanout.Recipient `json:"recipient"`
	Attempts  int              `json:"attempts"`
	Permanent bool             `json:"permanent"`
	LastError string           `json:"last_error"`
	Time      time.Time        `json:"time"`
	Event     fanout.Event     `json:"event"`
	Message   fanout.Message   `json:"message"`
}

// DeadLetterPublisher publishes dead letters (the deliveries DLQ topic).
type DeadLetterPublisher interface {
	Publish(ctx context.Context, dls []DeadLetter) error
}

// DeadLetterWriter is the stock DeadLetterPublisher: it writes to the
// deliveries DLQ topic, keyed by event id.
type DeadLetterWriter struct {
	w *kafka.Writer
}

// NewDeadLetterWriter writes to topic on brokers.
func NewDeadLetterWriter(brokers []string, topic string) *DeadLetterWriter {
	return &DeadLetterWriter{w: kafkatopic.NewWriter(brokers, topic)}
}

// Publish writes the dead letters, keyed by event id, and returns once the
// broker acknowledged them all.
func (w *DeadLetterWriter) Publish(ctx context.Context, dls []DeadLetter) error {
	if len(dls) == 0 {
		return nil
	}
	msgs := make([]kafka.Message, len(dls))
	for i, d := range dls {
		v, err := json.Marshal(d)
		if err != nil {
			return err
		}
		msgs[i] = kafka.Message{Key: []byte(d.EventID), Value: v, Headers: []kafka.Header{
			{Key: "fanout-event-id", Value: []byte(d.EventID)},
			{Key: "fanout-event-type", Value: []byte(d.EventType)},
		}}
	}
	if err := w.w.WriteMessages(ctx, msgs...); err != nil {
		return fmt.Errorf("deliveries DLQ: %w", err)
	}
	return nil
}

// Close flushes and closes the writer.
func (w *DeadLetterWriter) Close() error { return w.w.Close() }
