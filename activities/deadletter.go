package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/internal/kafkatopic"
	"github.com/fanout/fanout/workflows/vocab"
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
	// MessageOmitted, when not zero, is the size of the message this dead
	// letter was written without: the DLQ topic refused the whole letter
	// (its max.message.bytes is below fanout.MaxMessageBytes). A redrive
	// takes the message from another dead letter of the same batch.
	MessageOmitted int `json:"message_omitted,omitempty"`
}

// withoutMessage is d as written when the DLQ topic refused it whole: no
// message and no event headers, a few KiB at most.
func (d DeadLetter) withoutMessage() DeadLetter {
	d.MessageOmitted = max(len(d.Message.Body)+len(d.Message.ContentType), 1)
	d.Message = fanout.Message{}
	d.Event.Headers = nil
	return d
}

// MaxDeadLetterBytes bounds a deliveries dead letter as read back: the
// largest one fanout writes (a fanout.MaxMessageBytes message, base64 in
// JSON, and bounded ids, address, error and headers) is well under it.
const MaxDeadLetterBytes = 1 << 20

// maxDeadLetterAttempts bounds a dead letter's attempts (a redrive tries at
// least as often as the batch did).
const maxDeadLetterAttempts = 1000

// DecodeDeadLetter reads one deliveries-DLQ record as a redrive does and
// checks it: anyone who can write to the topic could have written it, and a
// redrive starts workflows and delivers from what it says. It must be at
// most MaxDeadLetterBytes of JSON whose event id and type follow the id
// grammar and match its event, whose attempt id is one of that event's
// (vocab.AttemptID), whose priority is known or empty, whose recipient id
// follows the grammar, and whose address and message are within fanout's
// bounds.
func DecodeDeadLetter(b []byte) (DeadLetter, error) {
	var d DeadLetter
	if len(b) > MaxDeadLetterBytes {
		return d, fmt.Errorf("dead letter of %d bytes, over %d", len(b), MaxDeadLetterBytes)
	}
	if err := json.Unmarshal(b, &d); err != nil {
		return DeadLetter{}, fmt.Errorf("dead letter: %w", err)
	}
	if err := d.check(); err != nil {
		return DeadLetter{}, fmt.Errorf("dead letter: %w", err)
	}
	return d, nil
}

func (d DeadLetter) check() error {
	if err := fanout.ValidateType(d.EventType); err != nil {
		return err
	}
	if err := fanout.ValidateID(d.EventID); err != nil {
		return err
	}
	if d.Event.ID != d.EventID || d.Event.Type != d.EventType {
		return errors.New("event_id and event_type differ from the event's")
	}
	rest, ok := strings.CutPrefix(d.AttemptID, vocab.EventKey(d.EventType, d.EventID)+"#")
	if n, err := strconv.Atoi(rest); !ok || err != nil || n < 0 || strconv.Itoa(n) != rest {
		return fmt.Errorf("attempt_id %.64q is not one of the event's", d.AttemptID)
	}
	if d.Priority != "" && !d.Priority.Valid() {
		return fmt.Errorf("priority %.16q", d.Priority)
	}
	if err := fanout.ValidateID(d.Recipient.ID); err != nil {
		return fmt.Errorf("recipient: %w", err)
	}
	if len(d.Recipient.Address) > fanout.MaxAddressLen {
		return fmt.Errorf("recipient address of %d bytes, over %d", len(d.Recipient.Address), fanout.MaxAddressLen)
	}
	if n := len(d.Message.Body) + len(d.Message.ContentType); n > fanout.MaxMessageBytes {
		return fmt.Errorf("message of %d bytes, over %d", n, fanout.MaxMessageBytes)
	}
	if d.Attempts < 0 || d.Attempts > maxDeadLetterAttempts || d.MessageOmitted < 0 {
		return fmt.Errorf("attempts %d or message_omitted %d out of range", d.Attempts, d.MessageOmitted)
	}
	return nil
}

// DeadLetterPublisher publishes dead letters (the deliveries DLQ topic).
type DeadLetterPublisher interface {
	Publish(ctx context.Context, dls []DeadLetter) error
}

// DeadLetterWriter is the stock DeadLetterPublisher: it writes to the
// deliveries DLQ topic, keyed by event id.
type DeadLetterWriter struct {
	w, single *kafka.Writer
}

// KafkaConn is how fanout connects to Kafka: the brokers, and TLS and SASL
// when the cluster asks for them (kafkatopic.Conn, named here for users of
// this package, e.g. KafkaConn{Brokers: []string{"kafka:9092"}}).
type KafkaConn = kafkatopic.Conn

// NewDeadLetterWriter writes to topic on the brokers of kc.
func NewDeadLetterWriter(kc KafkaConn, topic string) *DeadLetterWriter {
	return &DeadLetterWriter{w: kafkatopic.NewWriter(kc, topic), single: kafkatopic.NewSingleWriter(kc, topic)}
}

// Publish writes the dead letters, keyed by event id, and returns once the
// broker acknowledged them all.
func (w *DeadLetterWriter) Publish(ctx context.Context, dls []DeadLetter) error {
	if len(dls) == 0 {
		return nil
	}
	msgs := make([]kafka.Message, len(dls))
	for i, d := range dls {
		m, err := deadLetterRecord(d)
		if err != nil {
			return err
		}
		msgs[i] = m
	}
	err := w.w.WriteMessages(ctx, msgs...)
	failed, refused := kafkatopic.Refused(err, len(msgs))
	if len(refused) == 0 {
		if err != nil {
			return fmt.Errorf("deliveries DLQ: %w", err)
		}
		return nil
	}
	// The topic refused some letters whole (too large for it): write every
	// letter not written again, the refused ones without their message,
	// each in a batch of its own. A retry of the activity would only be
	// refused again.
	again := make([]kafka.Message, 0, len(failed))
	for _, i := range failed {
		m := msgs[i]
		if slices.Contains(refused, i) {
			if m, err = deadLetterRecord(dls[i].withoutMessage()); err != nil {
				return err
			}
		}
		again = append(again, m)
	}
	if err := w.single.WriteMessages(ctx, again...); err != nil {
		return fmt.Errorf("deliveries DLQ, %d letters without their message: %w", len(refused), err)
	}
	return nil
}

// deadLetterRecord is d's record: JSON, keyed by event id.
func deadLetterRecord(d DeadLetter) (kafka.Message, error) {
	v, err := json.Marshal(d)
	if err != nil {
		return kafka.Message{}, err
	}
	return kafka.Message{Key: []byte(d.EventID), Value: v, Headers: []kafka.Header{
		{Key: "fanout-event-id", Value: []byte(d.EventID)},
		{Key: "fanout-event-type", Value: []byte(d.EventType)},
	}}, nil
}

// Close flushes and closes the writers.
func (w *DeadLetterWriter) Close() error { return errors.Join(w.w.Close(), w.single.Close()) }
