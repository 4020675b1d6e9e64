package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/activities/staging"
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
	// Sealed, in a letter written with keys (DeadLetterWriter.WithSealer),
	// holds the recipient's address, the message, the event's headers and
	// the whole last error, encrypted (base64 in the JSON); those fields
	// are then empty in clear, but for last_error, which keeps the reason
	// with every word that could name a host cut out (clearError).
	// DecodeDeadLetter opens it; a decoded letter has it nil and the fields
	// filled.
	Sealed []byte `json:"sealed,omitempty"`
}

// Sealer encrypts and decrypts values (internal/codec's Keyring is one):
// staged batches in Redis and the sealed part of dead letters.
type Sealer = staging.Sealer

// Opener decrypts what a Sealer sealed.
type Opener interface {
	Open(sealed []byte) ([]byte, error)
}

// sealedPart is what a sealed dead letter keeps out of clear, with the
// routing fields it belongs to, so it cannot be moved into another letter.
type sealedPart struct {
	EventType   string            `json:"event_type"`
	EventID     string            `json:"event_id"`
	AttemptID   string            `json:"attempt_id"`
	RecipientID string            `json:"recipient_id"`
	Address     string            `json:"address,omitempty"`
	Message     fanout.Message    `json:"message"`
	Headers     map[string]string `json:"headers,omitempty"`
	LastError   string            `json:"last_error,omitempty"`
}

// redacted replaces, in a sealed letter's clear last_error, each word that
// could name a host.
const redacted = "<redacted>"

// clearError is lastErr as a sealed letter shows it in clear: each word
// that holds anything but letters, digits, '_' and '-' (a URL, a host name,
// an IP address, a host and port, a quoted string) is replaced, and so is
// the recipient's host where it is a single label; a word's trailing ':',
// ',' or ';' is kept, so the reason still reads ("Post <redacted>: dial tcp
// <redacted>: connect: connection refused"). The whole error is sealed.
func clearError(lastErr, address string) string {
	host := ""
	if u, err := url.Parse(address); err == nil {
		host = u.Hostname()
	}
	words := strings.Fields(lastErr)
	for i, w := range words {
		core := strings.TrimRight(w, ":,;")
		if core == "" {
			continue
		}
		plain := strings.IndexFunc(core, func(c rune) bool {
			return (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') && c != '_' && c != '-'
		}) < 0
		if !plain || strings.EqualFold(core, host) {
			words[i] = redacted + w[len(core):]
		}
	}
	return strings.Join(words, " ")
}

// SealWith is d as DeadLetterWriter writes it with keys: address, message,
// headers and the whole last error in Sealed, the rest in clear (last_error
// naming no host: clearError).
func (d DeadLetter) SealWith(s Sealer) (DeadLetter, error) {
	b, err := json.Marshal(sealedPart{
		EventType: d.EventType, EventID: d.EventID, AttemptID: d.AttemptID, RecipientID: d.Recipient.ID,
		Address: d.Recipient.Address, Message: d.Message, Headers: d.Event.Headers, LastError: d.LastError,
	})
	if err != nil {
		return d, err
	}
	d.LastError = clearError(d.LastError, d.Recipient.Address)
	d.Recipient.Address, d.Message, d.Event.Headers = "", fanout.Message{}, nil
	d.Sealed = s.Seal(b)
	return d, nil
}

// open fills d's sealed fields from Sealed.
func (d DeadLetter) open(keys Opener) (DeadLetter, error) {
	if keys == nil {
		return d, errors.New("sealed, and no keys to open it (FANOUT_CODEC_KEYS)")
	}
	if d.Recipient.Address != "" || len(d.Message.Body) > 0 || d.Message.ContentType != "" || len(d.Event.Headers) > 0 {
		return d, errors.New("sealed, with an address, a message or headers in clear too")
	}
	b, err := keys.Open(d.Sealed)
	if err != nil {
		return d, fmt.Errorf("sealed: %w", err)
	}
	var p sealedPart
	if err := json.Unmarshal(b, &p); err != nil {
		return d, fmt.Errorf("sealed: %w", err)
	}
	if p.EventType != d.EventType || p.EventID != d.EventID || p.AttemptID != d.AttemptID || p.RecipientID != d.Recipient.ID {
		return d, errors.New("sealed part of another event, attempt or recipient")
	}
	d.Recipient.Address, d.Message, d.Event.Headers, d.LastError = p.Address, p.Message, p.Headers, p.LastError
	d.Sealed = nil
	return d, nil
}

// withoutMessage is d as written when the DLQ topic refused it whole: no
// message and no event headers, a few KiB at most.
func (d DeadLetter) withoutMessage() DeadLetter {
	if d.MessageOmitted != 0 {
		return d // written without it already (publishDeadLetters)
	}
	d.MessageOmitted = max(len(d.Message.Body)+len(d.Message.ContentType), 1)
	d.Message = fanout.Message{}
	d.Event.Headers = nil
	return d
}

// ErrNotSealed is DecodeDeadLetter refusing a letter in clear read with keys.
var ErrNotSealed = errors.New("in clear, and keys are configured: fanout then writes only sealed letters")

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
// bounds. A sealed letter is opened with keys (nil: it is refused) and its
// sealed part must name the same event, attempt and recipient; a letter in
// clear is read as it is without keys, and refused with them (ErrNotSealed):
// with keys fanout writes only sealed letters, so a clear one is someone
// else's, and must not supply a message or an address.
func DecodeDeadLetter(b []byte, keys Opener) (DeadLetter, error) {
	var d DeadLetter
	if len(b) > MaxDeadLetterBytes {
		return d, fmt.Errorf("dead letter of %d bytes, over %d", len(b), MaxDeadLetterBytes)
	}
	if err := json.Unmarshal(b, &d); err != nil {
		return DeadLetter{}, fmt.Errorf("dead letter: %w", err)
	}
	if d.Sealed == nil && keys != nil {
		return DeadLetter{}, fmt.Errorf("dead letter of event %.64q: %w", d.EventID, ErrNotSealed)
	}
	if d.Sealed != nil {
		var err error
		if d, err = d.open(keys); err != nil {
			return DeadLetter{}, fmt.Errorf("dead letter of event %.64q: %w", d.EventID, err)
		}
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
	sealer    Sealer
}

// WithSealer has w seal each letter's address, message, headers and whole
// last error (DeadLetter.Sealed) with s, nil: all in clear; it returns w.
func (w *DeadLetterWriter) WithSealer(s Sealer) *DeadLetterWriter {
	w.sealer = s
	return w
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
		m, err := w.record(d)
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
			if m, err = w.record(dls[i].withoutMessage()); err != nil {
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

// record is d's record: JSON, keyed by event id, sealed with w's sealer.
func (w *DeadLetterWriter) record(d DeadLetter) (kafka.Message, error) {
	if w.sealer != nil {
		var err error
		if d, err = d.SealWith(w.sealer); err != nil {
			return kafka.Message{}, err
		}
	}
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

// DeadLetterChunk is the most letters a dead-lettering publishes at once.
const DeadLetterChunk = 1000
