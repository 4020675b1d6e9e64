// Package dlq writes and reads fanout's dead-letter topics: the deliveries
// DLQ (recipients given up after MaxAttempts, as fanout.DeadLetter JSON) and
// the events DLQ (bad records, with the reason in headers).
package dlq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/fanout/fanout"
)

// Writer publishes dead letters to the deliveries DLQ topic.
type Writer struct {
	w *kafka.Writer
}

// NewWriter writes to topic on brokers.
func NewWriter(brokers []string, topic string) *Writer {
	return &Writer{w: &kafka.Writer{
		Addr:         kafka.TCP(brokers...),
		Topic:        topic,
		Balancer:     &kafka.Hash{},
		RequiredAcks: kafka.RequireAll,
		BatchTimeout: 5 * time.Millisecond,
	}}
}

// Publish writes the dead letters, keyed by event id, and returns once the
// broker acknowledged them all.
func (w *Writer) Publish(ctx context.Context, dls []fanout.DeadLetter) error {
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
func (w *Writer) Close() error { return w.w.Close() }

// ReadAll reads every record of topic from the first offset up to the end
// offsets seen at the start, calling fn for each. It reads all partitions.
func ReadAll(ctx context.Context, brokers []string, topic string, fn func(kafka.Message) error) error {
	conn, err := kafka.DialContext(ctx, "tcp", brokers[0])
	if err != nil {
		return err
	}
	parts, err := conn.ReadPartitions(topic)
	conn.Close()
	if err != nil {
		return fmt.Errorf("partitions of %s: %w", topic, err)
	}
	for _, p := range parts {
		lc, err := kafka.DialLeader(ctx, "tcp", brokers[0], topic, p.ID)
		if err != nil {
			return err
		}
		first, last, err := lc.ReadOffsets()
		lc.Close()
		if err != nil {
			return err
		}
		if last <= first {
			continue
		}
		r := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, Topic: topic, Partition: p.ID, MinBytes: 1, MaxBytes: 10 << 20, MaxWait: 200 * time.Millisecond})
		if err := r.SetOffset(first); err != nil {
			r.Close()
			return err
		}
		for {
			m, err := r.ReadMessage(ctx)
			if err != nil {
				r.Close()
				return fmt.Errorf("read %s[%d]: %w", topic, p.ID, err)
			}
			if ferr := fn(m); ferr != nil {
				r.Close()
				if errors.Is(ferr, ErrStop) {
					return nil
				}
				return ferr
			}
			if m.Offset >= last-1 {
				break
			}
		}
		r.Close()
	}
	return nil
}

// ErrStop ends ReadAll early without error.
var ErrStop = errors.New("stop")
