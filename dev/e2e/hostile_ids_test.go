//go:build integration

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/activities"
	"github.com/fanout/fanout/internal/kafkatopic"
	"github.com/fanout/fanout/starter"
	"github.com/fanout/fanout/workers/webhook"
	"github.com/fanout/fanout/workflows/vocab"
)

// recorder is a destination on loopback that records, per recipient id,
// how many deliveries it got and whether each carried the expected event
// type and message.
type recorder struct {
	*countingServer
	wantType, wantBody string
	// secrets, when set, must verify every delivery's Standard Webhooks
	// signature.
	secrets []string

	mu    sync.Mutex
	got   map[string]int
	wrong []string // deliveries with another type or message
}

func newRecorder(t *testing.T, wantType, wantBody string, delay time.Duration) *recorder {
	r := &recorder{wantType: wantType, wantBody: wantBody, got: map[string]int{}}
	r.countingServer = startCounting(t, "127.0.0.1:0", func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(req.Body, 1<<20))
		id, typ := req.Header.Get(webhook.HeaderRecipientID), req.Header.Get(webhook.HeaderEventType)
		r.mu.Lock()
		r.got[id]++
		if typ != r.wantType || !strings.Contains(string(body), r.wantBody) {
			r.wrong = append(r.wrong, typ+" "+id+" "+string(body[:min(len(body), 64)]))
		}
		if r.secrets != nil {
			h := req.Header
			// The reference Go library of Standard Webhooks, as a receiver
			// would verify, and then fanout's own Verify.
			err := verifyReference(r.secrets[0], body, h)
			if err == nil {
				err = webhook.Verify(r.secrets, h.Get("webhook-id"), h.Get("webhook-timestamp"), h.Get("webhook-signature"), body, time.Now(), 5*time.Minute)
			}
			if err != nil || h.Get("webhook-id") != webhook.WebhookID(fanout.Event{ID: req.Header.Get(webhook.HeaderEventID), Type: typ}, fanout.Recipient{ID: id}) {
				r.wrong = append(r.wrong, fmt.Sprintf("%s %s: signature: %v, webhook-id %q", typ, id, err, h.Get("webhook-id")))
			}
			// The same delivery tampered with (another body, another
			// webhook-id, an older timestamp) is refused by the reference
			// library: the signature covers all three.
			for what, tampered := range tamperedDeliveries(body, h) {
				if verifyReference(r.secrets[0], tampered.body, tampered.h) == nil {
					r.wrong = append(r.wrong, fmt.Sprintf("%s %s: a delivery with %s still verifies", typ, id, what))
				}
			}
		} else if req.Header.Get("webhook-signature") != "" {
			r.wrong = append(r.wrong, typ+" "+id+": signed, but its type has no secret")
		}
		r.mu.Unlock()
		time.Sleep(delay)
		w.WriteHeader(http.StatusNoContent)
	})
	return r
}

// verifyReference verifies a delivery with the Standard Webhooks reference
// library, an implementation independent of fanout's.
func verifyReference(secret string, body []byte, h http.Header) error {
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		return err
	}
	return wh.Verify(body, h)
}

type delivery struct {
	body []byte
	h    http.Header
}

// tamperedDeliveries are copies of a signed delivery, each with one signed
// part changed.
func tamperedDeliveries(body []byte, h http.Header) map[string]delivery {
	with := func(k, v string) http.Header {
		c := h.Clone()
		c.Set(k, v)
		return c
	}
	ts, _ := strconv.ParseInt(h.Get("webhook-timestamp"), 10, 64)
	return map[string]delivery{
		"another body":       {append([]byte(" "), body...), h},
		"another webhook-id": {body, with("webhook-id", h.Get("webhook-id")+"x")},
		"another timestamp":  {body, with("webhook-timestamp", strconv.FormatInt(ts-1, 10))},
	}
}

// check asserts every id in want was delivered exactly once, nothing else
// was, and every delivery carried the right type and message.
func (r *recorder) check(t *testing.T, name string, want []string) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, id := range want {
		if r.got[id] != 1 {
			t.Errorf("%s: recipient %q got %d deliveries, want 1", name, id, r.got[id])
		}
	}
	if len(r.got) != len(want) {
		t.Errorf("%s: %d recipients delivered, want %d", name, len(r.got), len(want))
	}
	if len(r.wrong) > 0 {
		t.Errorf("%s: %d deliveries of another event, e.g. %q", name, len(r.wrong), r.wrong[0])
	}
}

// pagedEndpoint serves recips as a recipients endpoint: pages of the asked
// limit, the cursor being the offset. Its URL is its route on the demo
// server (Stack.Route), the origin the workers allow payloads to name.
func pagedEndpoint(t *testing.T, recips []fanout.Recipient) *countingServer {
	s := startCounting(t, "127.0.0.1:0", func(w http.ResponseWriter, req *http.Request) {
		var rr webhook.RecipientsRequest
		if err := json.NewDecoder(req.Body).Decode(&rr); err != nil || rr.Limit <= 0 {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		off, _ := strconv.Atoi(rr.Cursor)
		end := min(off+rr.Limit, len(recips))
		page := fanout.Page{Recipients: recips[min(off, end):end]}
		if end < len(recips) {
			page.NextCursor = strconv.Itoa(end)
		}
		_ = json.NewEncoder(w).Encode(page)
	})
	s.URL = st.Route(s.Config.Handler)
	return s
}

// webhookPayload is a webhook event's payload: its message and where its
// recipients come from.
func webhookPayload(t *testing.T, text, recipientsURL string) json.RawMessage {
	msg, _ := json.Marshal(map[string]string{"text": text})
	p, err := json.Marshal(map[string]any{"message": json.RawMessage(msg), "recipients_url": recipientsURL})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Item 6 of issue 10: an event of another type with the same id as a
// running one. Gate keys, staged batches, attempt ids and child ids derive
// from type and id, so each event reaches its own recipients, with its own
// message, once (the other type's deliveries signed, Standard Webhooks
// style, and verified); the recipient ids are the same in both, as they were when
// the second event overwrote the first's staged batches. The two types batch
// differently: the webhook type in batches of 200 throughout (10), the other
// in 200s on the first page and then one batch per page of 800 (4 + 1 + 1).
func TestSameIDInTwoTypes(t *testing.T) {
	const n = 2000
	id := "same-id-" + runID
	ids := make([]string, n)
	for i := range ids {
		ids[i] = "r" + strconv.Itoa(i)
	}
	type side struct {
		typ, text string
		batches   int
		dest      *recorder
	}
	sides := []side{
		{typ: webhook.EventType, text: "for-the-webhook-type", batches: 10},
		{typ: otherType, text: "for-the-other-type", batches: 6},
	}
	var envs []starter.Envelope
	for i := range sides {
		s := &sides[i]
		// The first is slow, so both events' batches run at once.
		s.dest = newRecorder(t, s.typ, s.text, time.Duration(1-i)*5*time.Millisecond)
		if s.typ == otherType {
			s.dest.secrets = []string{signingSecret} // it signs; the webhook type does not
		}
		recips := make([]fanout.Recipient, n)
		for j, rid := range ids {
			recips[j] = fanout.Recipient{ID: rid, Address: s.dest.URL + "/hook"}
		}
		envs = append(envs, starter.Envelope{ID: id, Type: s.typ, Payload: webhookPayload(t, s.text, pagedEndpoint(t, recips).URL)})
	}
	st.publishEnvelopes(t, envs...)
	for _, s := range sides {
		res, err := st.waitTyped(s.typ, id, 2*time.Minute)
		if err != nil {
			t.Fatalf("%s event %s: %v", s.typ, id, err)
		}
		if res.Delivered != n || res.Failed != 0 || res.Duplicates != 0 || res.BatchesStarted != s.batches {
			t.Errorf("%s event %s: progress %+v, want %d delivered in %d batches", s.typ, id, res.Progress, n, s.batches)
		}
		s.dest.check(t, s.typ, ids)
	}
}

// Item 7 of issue 10: a recipients page that repeats ids (in one batch and
// across the page's batches) and holds empty and invalid ids: each valid
// recipient is delivered once, the invalid ones go to the deliveries DLQ
// with their reason, and nothing is delivered twice.
func TestRepeatedAndInvalidRecipientIDs(t *testing.T) {
	id := "repeated-ids-" + runID
	dest := newRecorder(t, webhook.EventType, "repeated", 0)
	var recips []fanout.Recipient
	var valid []string
	for i := range 300 {
		rid := "r" + strconv.Itoa(i)
		valid = append(valid, rid)
		recips = append(recips, fanout.Recipient{ID: rid, Address: dest.URL + "/hook"})
	}
	addr := dest.URL + "/hook"
	repeats := []fanout.Recipient{{ID: "r0", Address: addr}, {ID: "r1", Address: addr}, {ID: "r250", Address: addr}, {ID: "r0", Address: addr}}
	invalid := []fanout.Recipient{{ID: "", Address: addr}, {ID: "a/batch/0", Address: addr}, {ID: "bidi\u202ename", Address: addr}, {ID: "ctl\x07", Address: addr}}
	// r0 and r1 again inside the first batch; r250 (second batch) again
	// in the first; the invalid ones spread over both batches.
	page := append([]fanout.Recipient{}, recips[:100]...)
	page = append(page, repeats[0], invalid[0], repeats[1], repeats[2], invalid[1])
	page = append(page, recips[100:]...)
	page = append(page, invalid[2], repeats[3], invalid[3])
	st.publishEnvelopes(t, starter.Envelope{ID: id, Type: webhook.EventType, Payload: webhookPayload(t, "repeated", pagedEndpoint(t, page).URL)})
	res, err := st.waitTyped(webhook.EventType, id, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if res.Found != int64(len(page)) || res.Delivered != 300 || res.Duplicates != int64(len(repeats)) || res.Failed != int64(len(invalid)) || res.DeadLettered != int64(len(invalid)) {
		t.Errorf("progress %+v; want %d found, 300 delivered, %d duplicates, %d failed and dead-lettered", res.Progress, len(page), len(repeats), len(invalid))
	}
	dest.check(t, "destination", valid)

	reasons := map[string]int{}
	readDeadLetters(t, activities.DefaultDeliveriesDLQTopic, func(d activities.DeadLetter) {
		if d.EventID == id {
			reasons[strings.SplitN(d.LastError, ":", 2)[0]]++
			if !strings.HasPrefix(d.Recipient.ID, "invalid-") {
				t.Errorf("dead letter of recipient %q, want only the invalid ones, under stand-in ids", d.Recipient.ID)
			}
		}
	})
	if reasons[activities.ReasonInvalidRecipientID] != len(invalid) || len(reasons) != 1 {
		t.Errorf("dead letters by reason %v, want %d %s", reasons, len(invalid), activities.ReasonInvalidRecipientID)
	}
}

// readDeadLetters calls fn with every deliveries dead letter in topic.
func readDeadLetters(t *testing.T, topic string, fn func(activities.DeadLetter)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err := kafkatopic.ReadAll(ctx, st.KafkaConn(), topic, func(m kafka.Message) error {
		var d activities.DeadLetter
		if json.Unmarshal(m.Value, &d) == nil {
			fn(d)
		}
		if len(m.Value) > 1<<20 {
			t.Errorf("a dead letter of %d bytes", len(m.Value))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("read %s: %v", topic, err)
	}
}

// setMaxMessageBytes sets a topic's max.message.bytes (as an operator may,
// below Kafka's default) until the test ends.
func setMaxMessageBytes(t *testing.T, topic string, n int) {
	t.Helper()
	set := func(v string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c := &kafka.Client{Addr: kafka.TCP(st.KafkaAddr)}
		resp, err := c.AlterConfigs(ctx, &kafka.AlterConfigsRequest{Resources: []kafka.AlterConfigRequestResource{{
			ResourceType: kafka.ResourceTypeTopic, ResourceName: topic,
			Configs: []kafka.AlterConfigRequestConfig{{Name: "max.message.bytes", Value: v}},
		}}})
		if err != nil {
			return err
		}
		for _, e := range resp.Errors {
			if e != nil {
				return e
			}
		}
		return nil
	}
	if err := set(strconv.Itoa(n)); err != nil {
		t.Fatalf("set max.message.bytes of %s: %v", topic, err)
	}
	t.Cleanup(func() {
		if err := set(strconv.Itoa(1<<20 + 12)); err != nil { // Kafka's default
			t.Errorf("reset max.message.bytes of %s: %v", topic, err)
		}
	})
}

// gone answers every delivery 410 Gone: each recipient fails for good and
// is dead-lettered at once.
func gone(t *testing.T) *countingServer {
	return startCounting(t, "127.0.0.1:0", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusGone) })
}

// Item 4 of issue 10: dead letters of the largest message fanout allows fit
// a Kafka record; and on a deliveries DLQ topic whose max.message.bytes is
// below them, the batch still ends: its dead letters are written without
// the message (and say so), instead of DeliverBatch retrying forever.
func TestLargeDeadLetters(t *testing.T) {
	const ct = "application/octet-stream"
	bigPayload := func(url string) json.RawMessage {
		p, _ := json.Marshal(map[string]any{"recipients_url": url, "message_bytes": fanout.MaxMessageBytes})
		return p
	}
	recips := func(dest *countingServer, n int) []fanout.Recipient {
		rs := make([]fanout.Recipient, n)
		for i := range rs {
			rs[i] = fanout.Recipient{ID: "r" + strconv.Itoa(i), Address: dest.URL + "/hook"}
		}
		return rs
	}

	whole, omitted := "big-whole-"+runID, "big-omitted-"+runID
	dest := gone(t)
	st.publishEnvelopes(t, starter.Envelope{ID: whole, Type: bigType, Payload: bigPayload(pagedEndpoint(t, recips(dest, 3)).URL)})
	res, err := st.waitTyped(bigType, whole, time.Minute)
	if err != nil || res.Failed != 3 || res.DeadLettered != 3 {
		t.Fatalf("event %s: %+v %v; want 3 failed and dead-lettered", whole, res.Progress, err)
	}

	// 250 recipients: two batches, DeliveryBatch children, on a DLQ topic
	// that takes records of 64 KiB at most.
	setMaxMessageBytes(t, activities.DefaultDeliveriesDLQTopic, 64<<10)
	st.publishEnvelopes(t, starter.Envelope{ID: omitted, Type: bigType, Payload: bigPayload(pagedEndpoint(t, recips(dest, 250)).URL)})
	res, err = st.waitTyped(bigType, omitted, 2*time.Minute)
	if err != nil || res.Failed != 250 || res.DeadLettered != 250 || res.BatchErrors != 0 {
		t.Fatalf("event %s: %+v %v; want 250 failed and dead-lettered, no batch error", omitted, res.Progress, err)
	}

	// A batch's letters carry the message once per chunk (the first; the
	// others say it is omitted, and a redrive takes it from the first).
	count, withMessage := map[string]int{}, 0
	readDeadLetters(t, activities.DefaultDeliveriesDLQTopic, func(d activities.DeadLetter) {
		switch d.EventID {
		case whole:
			count[whole]++
			if d.MessageOmitted == 0 {
				withMessage++
				if len(d.Message.Body)+len(d.Message.ContentType) != fanout.MaxMessageBytes || d.Message.ContentType != ct {
					t.Errorf("dead letter of %s: message of %d bytes (%q)", whole, len(d.Message.Body), d.Message.ContentType)
				}
			} else if d.MessageOmitted != fanout.MaxMessageBytes || len(d.Message.Body) != 0 {
				t.Errorf("dead letter of %s: omitted %d, message %d bytes", whole, d.MessageOmitted, len(d.Message.Body))
			}
		case omitted:
			count[omitted]++
			if d.MessageOmitted != fanout.MaxMessageBytes || len(d.Message.Body) != 0 || !strings.Contains(d.LastError, "HTTP 410") {
				t.Errorf("dead letter of %s: omitted %d, message %d bytes, error %q", omitted, d.MessageOmitted, len(d.Message.Body), d.LastError)
			}
		}
	})
	if count[whole] != 3 || count[omitted] != 250 || withMessage != 1 {
		t.Fatalf("dead letters %v, %d of %s with the message; want 3 of %s (1 with the message) and 250 of %s", count, withMessage, whole, whole, omitted)
	}

	// A redrive cannot deliver a letter without its message: it leaves
	// them, and says how many.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rr, err := starter.RedriveDeliveries(ctx, st.TC, starter.RedriveOptions{Kafka: st.KafkaConn(), Topic: activities.DefaultDeliveriesDLQTopic,
		Filter: starter.RedriveFilter{EventID: omitted}, Round: "omitted-" + runID, Wait: true})
	if err != nil || rr.Matched != 250 || rr.Unredrivable != 250 || rr.Batches != 0 {
		t.Errorf("redrive of the letters without message: %+v %v", rr, err)
	}
}

// Item 3 of issue 10, on an events DLQ topic whose max.message.bytes is
// below even the bounded dead letter: the bridge writes the reason and the
// source position without the record, and the partition moves on.
func TestEventsDLQRefusesDeadLetter(t *testing.T) {
	setMaxMessageBytes(t, starter.DefaultEventsDLQTopic, 4<<10)
	key := "refused-" + runID
	bad := `{"id":"` + key + `","type":"` + strings.Repeat("t", 100_000) + `"}`
	good := "refused-next-" + runID
	dest := newRecorder(t, webhook.EventType, "after the refused one", 0)
	v, _ := json.Marshal(starter.Envelope{ID: good, Type: webhook.EventType,
		Payload: webhookPayload(t, "after the refused one", pagedEndpoint(t, []fanout.Recipient{{ID: "r0", Address: dest.URL + "/hook"}}).URL)})
	if err := st.Publisher.PublishRecords(context.Background(), kafka.Message{Key: []byte(key), Value: []byte(bad)}, kafka.Message{Key: []byte(key), Value: v}); err != nil {
		t.Fatal(err)
	}
	if res, err := st.waitTyped(webhook.EventType, good, time.Minute); err != nil || res.Delivered != 1 {
		t.Fatalf("the event behind the refused dead letter: %+v %v", res.Progress, err)
	}
	dest.check(t, "destination", []string{"r0"})

	found, h := eventsDeadLetter(t, key)
	if len(found.Value) != 0 || h[starter.HeaderReason] != starter.ReasonUnknownType || h[starter.HeaderTruncated] != strconv.Itoa(len(bad)) || h[starter.HeaderSourceOffset] == "" {
		t.Errorf("dead letter: value %d bytes, headers %v", len(found.Value), h)
	}
}

// The endless audiences of issue 10, item 1: an endpoint that hands out a
// fresh cursor forever, and one whose audience never ends. Paging stops at
// the type's MaxPages or MaxRecipients, what was found is delivered once,
// and the event fails with the reason.
func TestEndlessAudiences(t *testing.T) {
	for _, c := range []struct {
		name, reason string
		perPage      int
		pages        int64 // pages asked before paging stops
	}{
		{"cursor-forever", "too_many_pages", 3, int64(boundedOptions.MaxPages)},
		{"audience-forever", "too_many_recipients", boundedOptions.PageSize, boundedOptions.MaxRecipients/int64(boundedOptions.PageSize) + 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			id := "endless-" + c.name + "-" + runID
			dest := newRecorder(t, boundedType, "endless", 0)
			var pages atomic.Int64
			endpoint := startCounting(t, "127.0.0.1:0", func(w http.ResponseWriter, _ *http.Request) {
				p := pages.Add(1)
				page := fanout.Page{NextCursor: "c" + strconv.FormatInt(p, 10)}
				for i := range c.perPage {
					page.Recipients = append(page.Recipients, fanout.Recipient{ID: fmt.Sprintf("p%d-r%d", p, i), Address: dest.URL + "/hook"})
				}
				_ = json.NewEncoder(w).Encode(page)
			})
			st.publishEnvelopes(t, starter.Envelope{ID: id, Type: boundedType, Payload: webhookPayload(t, "endless", st.Route(endpoint.Config.Handler))})
			res, err := st.waitTyped(boundedType, id, 2*time.Minute)
			if err == nil || !strings.Contains(err.Error(), c.reason) {
				t.Fatalf("event %s: %+v %v; want it failed with %s", id, res.Progress, err, c.reason)
			}
			if n := endpoint.hits.Load(); n != c.pages {
				t.Errorf("the endpoint was asked %d pages, want %d", n, c.pages)
			}
			var want []string
			for p := range c.pages {
				for i := range c.perPage {
					want = append(want, fmt.Sprintf("p%d-r%d", p+1, i))
				}
			}
			dest.check(t, "destination", want)
		})
	}
}

// Forged records in the deliveries DLQ (anyone who can write to the topic)
// do not steer a redrive: a letter naming another event's attempt id, and
// one whose event id reaches into another execution's ids, are left in the
// DLQ and counted, and nothing is delivered.
func TestRedriveRefusesForgedDeadLetters(t *testing.T) {
	dest := newRecorder(t, webhook.EventType, "forged", 0)
	forge := func(eventID, attemptID string) kafka.Message {
		d := activities.DeadLetter{EventID: eventID, EventType: webhook.EventType, AttemptID: attemptID,
			Recipient: fanout.Recipient{ID: "victim", Address: dest.URL + "/hook"}, Attempts: 1,
			Event: fanout.Event{ID: eventID, Type: webhook.EventType}, Message: fanout.Message{ContentType: "text/plain", Body: []byte("forged")}}
		v, _ := json.Marshal(d)
		return kafka.Message{Key: []byte(eventID), Value: v}
	}
	id := "forged-" + runID
	w := kafkatopic.NewWriter(st.KafkaConn(), activities.DefaultDeliveriesDLQTopic)
	defer func() { _ = w.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := w.WriteMessages(ctx,
		forge(id, vocab.AttemptID(webhook.EventType, "someone-else", 0)),
		forge(id+"/batch/0", vocab.AttemptID(webhook.EventType, id+"/batch/0", 0)),
	); err != nil {
		t.Fatal(err)
	}
	rr, err := starter.RedriveDeliveries(ctx, st.TC, starter.RedriveOptions{Kafka: st.KafkaConn(), Topic: activities.DefaultDeliveriesDLQTopic,
		Filter: starter.RedriveFilter{EventID: id}, Round: "forged-" + runID, Wait: true})
	if err != nil || rr.Invalid != 2 || rr.Batches != 0 {
		t.Errorf("redrive: %+v %v; want the 2 forged records counted invalid", rr, err)
	}
	dest.check(t, "the forged letters' address", nil)
}
