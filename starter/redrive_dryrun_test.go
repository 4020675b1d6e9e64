package starter_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/activities"
	"github.com/fanout/fanout/internal/kafkatopic"
	"github.com/fanout/fanout/starter"
	"github.com/fanout/fanout/workflows/vocab"
)

// kfakeConn starts an in-process Kafka broker on 127.0.0.1 with topics.
func kfakeConn(t *testing.T, topics ...string) starter.KafkaConn {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topics...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return starter.KafkaConn{Brokers: c.ListenAddrs()}
}

func deadLetter(evID string, attempt int, rcpt, lastErr string) activities.DeadLetter {
	ev := fanout.Event{ID: evID, Type: "webhook"}
	return activities.DeadLetter{
		EventID: evID, EventType: "webhook", Priority: fanout.PriorityHigh, Event: ev,
		AttemptID: vocab.AttemptID("webhook", evID, attempt),
		Recipient: fanout.Recipient{ID: rcpt, Address: "http://127.0.0.1:1/" + rcpt}, Attempts: 5,
		LastError: lastErr, Time: time.Now(), Message: fanout.Message{Body: []byte(`{"hi":1}`), ContentType: "application/json"},
	}
}

// A dry run reads the deliveries DLQ and says, per event, how many dead
// letters and batches a redrive would have and by which last error, and
// starts nothing (it has no Temporal client at all: nil would panic on a
// start). Progress is reported while reading and once at the end.
func TestRedriveDeliveriesDryRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const topic = "dlq"
	kc := kfakeConn(t, topic)
	w := activities.NewDeadLetterWriter(kc, topic)
	defer func() { _ = w.Close() }()
	dls := []activities.DeadLetter{
		deadLetter("a", 0, "r1", "http 500"), deadLetter("a", 0, "r2", "http 500"), deadLetter("a", 0, "r3", "http 410: gone"),
		deadLetter("a", 0, "r1", "http 500"), // the same letter twice: counted once
		deadLetter("a", 1, "r9", "http 500"),
		deadLetter("b", 0, "r1", "timeout"), deadLetter("b", 0, "r2", "timeout"),
	}
	if err := w.Publish(ctx, dls); err != nil {
		t.Fatal(err)
	}
	// A record that is not a dead letter.
	kw := kafkatopic.NewWriter(kc, topic)
	defer func() { _ = kw.Close() }()
	if err := kw.WriteMessages(ctx, kafka.Message{Value: []byte(`{"nope":true}`)}); err != nil {
		t.Fatal(err)
	}

	var progress []starter.RedriveProgress
	res, err := starter.RedriveDeliveries(ctx, nil, starter.RedriveOptions{
		Kafka: kc, Topic: topic, BatchSize: 2, DryRun: true, Wait: true,
		Progress: func(p starter.RedriveProgress) { progress = append(progress, p) }, ProgressEvery: time.Nanosecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Matched != 6 || res.Invalid != 1 || res.Batches != 4 || res.Delivered != 0 {
		t.Fatalf("result %+v: want 6 matched, 1 invalid, 4 batches (a: 2 + 1, b: 1), nothing delivered", res)
	}
	if len(res.Plan) != 2 {
		t.Fatalf("plan %+v: want events a and b", res.Plan)
	}
	a, b := res.Plan[0], res.Plan[1]
	if a.EventID != "a" || a.DeadLetters != 4 || a.Batches != 3 || a.Errors["http 500"] != 3 || a.Errors["http 410: gone"] != 1 || a.Priority != fanout.PriorityHigh {
		t.Fatalf("event a: %+v", a)
	}
	if b.EventID != "b" || b.DeadLetters != 2 || b.Batches != 1 || b.Errors["timeout"] != 2 {
		t.Fatalf("event b: %+v", b)
	}
	if len(progress) < 2 || progress[0].Phase != "read" {
		t.Fatalf("progress %+v: want reports while reading, then at the end", progress)
	}
	last := progress[len(progress)-1]
	if last.Phase != "done" || last.Read != 8 || last.Matched != 6 || last.Planned != 4 {
		t.Fatalf("last progress %+v: want done, 8 read, 6 matched, 4 planned", last)
	}
	for i := 1; i < len(progress); i++ {
		if progress[i].Read < progress[i-1].Read {
			t.Fatalf("progress went back: %+v", progress)
		}
	}
}

// A dry run of the events DLQ counts per reason and publishes nothing; the
// same redrive for real publishes what the dry run counted.
func TestRedriveEventsDryRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const dlq, events = "events-dlq", "events"
	kc := kfakeConn(t, dlq, events)
	kw := kafkatopic.NewWriter(kc, dlq)
	defer func() { _ = kw.Close() }()
	rec := func(reason string) kafka.Message {
		v, _ := json.Marshal(map[string]string{"id": "e-" + reason, "type": "webhook"})
		return kafka.Message{Value: v, Headers: []kafka.Header{{Key: starter.HeaderReason, Value: []byte(reason)}}}
	}
	if err := kw.WriteMessages(ctx, rec(starter.ReasonUnknownType), rec(starter.ReasonUnknownType), rec(starter.ReasonInvalidJSON)); err != nil {
		t.Fatal(err)
	}
	count := func() int {
		n := 0
		if err := kafkatopic.ReadAll(ctx, kc, events, func(kafka.Message) error { n++; return nil }); err != nil {
			t.Fatal(err)
		}
		return n
	}
	var last starter.RedriveEventsProgress
	res, err := starter.RedriveEvents(ctx, starter.RedriveEventsOptions{Kafka: kc, DLQTopic: dlq, EventsTopic: events, Rate: 1000, DryRun: true,
		Progress: func(p starter.RedriveEventsProgress) { last = p }})
	if err != nil {
		t.Fatal(err)
	}
	if res.ByReason[starter.ReasonUnknownType] != 2 || res.ByReason[starter.ReasonInvalidJSON] != 1 || res.Republished != 0 {
		t.Fatalf("dry run %+v: want 2 unknown_type, 1 invalid_json, none re-published", res)
	}
	if !last.Done || last.Read != 3 {
		t.Fatalf("last progress %+v: want done after 3 records", last)
	}
	if n := count(); n != 0 {
		t.Fatalf("the dry run published %d records to the events topic", n)
	}
	res, err = starter.RedriveEvents(ctx, starter.RedriveEventsOptions{Kafka: kc, DLQTopic: dlq, EventsTopic: events, Rate: 1000, Reason: starter.ReasonUnknownType})
	if err != nil || res.Republished != 2 || res.ByReason[starter.ReasonUnknownType] != 2 {
		t.Fatalf("redrive %+v, %v: want the 2 unknown_type records re-published", res, err)
	}
	if n := count(); n != 2 {
		t.Fatalf("events topic holds %d records, want 2", n)
	}
}
