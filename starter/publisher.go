package starter

import (
	"context"
	"fmt"

	"github.com/segmentio/kafka-go"

	"github.com/fanout/fanout/internal/kafkatopic"
)

// Publisher puts events on the events topic the way producers do: each as
// its Record (the envelope as JSON, keyed by the event id, with the W3C trace
// context of its context in the headers). `starter publish`, the redrive of
// the events DLQ, the dev stack and the tests all publish through it.
type Publisher struct {
	topic string
	w     *kafka.Writer
}

// KafkaConn is how fanout connects to Kafka: the brokers, and TLS and SASL
// when the cluster asks for them (kafkatopic.Conn, named here for users of
// this package).
type KafkaConn = kafkatopic.Conn

// NewPublisher publishes to topic on the brokers of kc.
func NewPublisher(kc KafkaConn, topic string) *Publisher {
	return &Publisher{topic: topic, w: kafkatopic.NewWriter(kc, topic)}
}

// Publish writes the events with the trace context of ctx and returns once
// the broker acknowledged them all.
func (p *Publisher) Publish(ctx context.Context, envs ...Envelope) error {
	msgs := make([]kafka.Message, 0, len(envs))
	for _, env := range envs {
		m, err := Record(ctx, env)
		if err != nil {
			return err
		}
		msgs = append(msgs, m)
	}
	return p.PublishRecords(ctx, msgs...)
}

// PublishRecords writes records as they are (built by Record with a trace
// context each, or taken back from the events DLQ).
func (p *Publisher) PublishRecords(ctx context.Context, msgs ...kafka.Message) error {
	if err := p.w.WriteMessages(ctx, msgs...); err != nil {
		return fmt.Errorf("publish to %s: %w", p.topic, err)
	}
	return nil
}

// Close flushes and closes the publisher.
func (p *Publisher) Close() error { return p.w.Close() }
