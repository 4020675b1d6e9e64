// Package dlq writes and reads fanout's dead-letter topics: the deliveries
// DLQ (recipients given up after MaxAttempts, as activities.DeadLetter JSON) and
// the events DLQ (bad records, with the reason in headers).
package kafkatopic

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"
)

// NewWriter returns the writer fanout uses for every topic it produces to
// (the events topic, both dead-letter topics): acknowledged by all replicas,
// keyed records on the same partition, small batches for low latency.
func NewWriter(brokers []string, topic string) *kafka.Writer {
	return &kafka.Writer{
		Addr:         kafka.TCP(brokers...),
		Topic:        topic,
		Balancer:     &kafka.Hash{},
		RequiredAcks: kafka.RequireAll,
		BatchTimeout: 5 * time.Millisecond,
	}
}

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
