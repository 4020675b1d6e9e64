// Package kafkatopic writes and reads fanout's topics, the dead-letter topics among them: the deliveries
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
// keyed records on the same partition, small batches for low latency. It
// connects as c says (TLS, SASL).
func NewWriter(c Conn, topic string) *kafka.Writer {
	return &kafka.Writer{
		Addr:         kafka.TCP(c.Brokers...),
		Topic:        topic,
		Balancer:     &kafka.Hash{},
		RequiredAcks: kafka.RequireAll,
		BatchTimeout: 5 * time.Millisecond,
		Transport:    c.Transport(),
	}
}

// ReadAll reads every record of topic from the first offset up to the end
// offsets seen at the start, calling fn for each. It reads all partitions,
// connecting as c says.
func ReadAll(ctx context.Context, c Conn, topic string, fn func(kafka.Message) error) error {
	if len(c.Brokers) == 0 {
		return errNoBrokers
	}
	d := c.Dialer()
	conn, err := d.DialContext(ctx, "tcp", c.Brokers[0])
	if err != nil {
		return fmt.Errorf("kafka %s: %w", c.Brokers[0], err)
	}
	parts, err := conn.ReadPartitions(topic)
	// The connections and readers below are only read from: closing them
	// loses nothing, so their Close errors are dropped.
	_ = conn.Close()
	if err != nil {
		return fmt.Errorf("partitions of %s: %w", topic, err)
	}
	for _, p := range parts {
		lc, err := d.DialLeader(ctx, "tcp", c.Brokers[0], topic, p.ID)
		if err != nil {
			return err
		}
		first, last, err := lc.ReadOffsets()
		_ = lc.Close()
		if err != nil {
			return err
		}
		if last <= first {
			continue
		}
		r := NewReader(c, kafka.ReaderConfig{Topic: topic, Partition: p.ID, MinBytes: 1, MaxBytes: 10 << 20, MaxWait: 200 * time.Millisecond})
		if err := r.SetOffset(first); err != nil {
			_ = r.Close()
			return err
		}
		for {
			m, err := r.ReadMessage(ctx)
			if err != nil {
				_ = r.Close()
				return fmt.Errorf("read %s[%d]: %w", topic, p.ID, err)
			}
			if ferr := fn(m); ferr != nil {
				_ = r.Close()
				if errors.Is(ferr, ErrStop) {
					return nil
				}
				return ferr
			}
			if m.Offset >= last-1 {
				break
			}
		}
		_ = r.Close()
	}
	return nil
}

// ErrStop ends ReadAll early without error.
var ErrStop = errors.New("stop")

// Refused sorts the outcome err of one WriteMessages call of n records:
// failed lists the records not written, and refused those among them the
// broker (or the writer, before sending) turned down for what they are, too
// large or malformed for the topic, which no retry of the same record
// changes. A broker refuses a whole produce batch for one such record, so
// every record of that batch is reported refused.
func Refused(err error, n int) (failed, refused []int) {
	if err == nil {
		return nil, nil
	}
	var werrs kafka.WriteErrors
	if !errors.As(err, &werrs) || len(werrs) != n {
		werrs = make(kafka.WriteErrors, n)
		for i := range werrs {
			werrs[i] = err
		}
	}
	for i, e := range werrs {
		if e == nil {
			continue
		}
		failed = append(failed, i)
		if recordRefused(e) {
			refused = append(refused, i)
		}
	}
	return failed, refused
}

// recordRefused reports whether a broker error is about the record itself.
func recordRefused(err error) bool {
	for _, code := range []kafka.Error{kafka.MessageSizeTooLarge, kafka.RecordListTooLarge, kafka.InvalidRecord, kafka.InvalidTimestamp} {
		if errors.Is(err, code) {
			return true
		}
	}
	return false
}

// NewSingleWriter is NewWriter sending each record in a produce batch of
// its own: for records written again after their batch was refused, so one
// large neighbour cannot make a broker refuse a small record.
func NewSingleWriter(c Conn, topic string) *kafka.Writer {
	w := NewWriter(c, topic)
	w.BatchSize = 1
	return w
}
