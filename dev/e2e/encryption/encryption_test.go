//go:build integration

// Package encryption_test checks payload encryption (FANOUT_CODEC_KEYS) on
// the real stack (the temporal dev server, redis-server, kfake over TCP)
// with worker processes built from this repository: what Temporal, Redis
// and the deliveries DLQ hold, read straight from each, has no recipient
// address, message or payload in clear; events are still delivered, dead
// letters still redrive, and a key rotation keeps running events going.
package encryption_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/proxy"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/protobuf/proto"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/activities"
	"github.com/fanout/fanout/activities/staging"
	"github.com/fanout/fanout/dev/demo"
	"github.com/fanout/fanout/dev/stack"
	"github.com/fanout/fanout/internal/codec"
	"github.com/fanout/fanout/internal/kafkatopic"
	"github.com/fanout/fanout/starter"
	"github.com/fanout/fanout/workers/webhook"
	"github.com/fanout/fanout/workflows"
	"github.com/fanout/fanout/workflows/vocab"
)

var (
	st   *stack.Stack
	dest *destination
	// token makes this run's secrets unique, so a search for them finds
	// nothing by chance.
	token = func() string { b := make([]byte, 6); _, _ = rand.Read(b); return hex.EncodeToString(b) }()
)

// workerEnv: batches of 200 on pages of 1,000 throughout, so a big event
// stages several batches in Redis from its first page.
var workerEnv = []string{"FANOUT_BATCH_SIZE=200", "FANOUT_PAGE_SIZE=1000", "FANOUT_LARGE_BATCH_SIZE=-1"}

func TestMain(m *testing.M) {
	code, err := func() (int, error) {
		s, err := stack.Start(context.Background(), stack.Options{InMemory: true, Encrypt: true, Log: os.Stderr})
		if err != nil {
			return 0, err
		}
		defer s.Close()
		st = s
		dest = newDestination()
		defer dest.srv.Close()
		// Payloads name it as their recipients_url: list it, as an operator would.
		workerEnv = append(workerEnv, "FANOUT_RECIPIENTS_URL_ALLOW="+dest.srv.URL)
		return m.Run(), nil
	}()
	if err != nil {
		fmt.Fprintln(os.Stderr, "encryption:", err)
		os.Exit(1)
	}
	os.Exit(code)
}

// destination is both the recipients endpoint and the webhook receiver of
// the tests' events: recipient i of event e is at /deliver/<e>/<i>/s3cr3t-...
// and every recipient whose index ends in 7 answers 410 (a permanent
// failure: dead-lettered) until failing is switched off.
type destination struct {
	srv       *httptest.Server
	mu        sync.Mutex
	delivered map[string]int    // address -> deliveries
	bodies    map[string]string // address -> last body
	failing   bool
}

func newDestination() *destination {
	d := &destination{delivered: map[string]int{}, bodies: map[string]string{}, failing: true}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /recipients-"+token, d.recipients)
	mux.HandleFunc("POST /deliver/", d.deliver)
	d.srv = httptest.NewServer(mux) // on 127.0.0.1
	return d
}

func (d *destination) address(eventID string, i int) string {
	return fmt.Sprintf("%s/deliver/%s/%d/s3cr3t-%s-%d", d.srv.URL, eventID, i, token, i)
}

func fails(i int) bool { return i%10 == 7 }

func (d *destination) recipients(w http.ResponseWriter, r *http.Request) {
	var req webhook.RecipientsRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var p demo.Payload
	if err := json.Unmarshal(req.Event.Payload, &p); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	off, _ := strconv.Atoi(req.Cursor)
	var page fanout.Page
	for i := off; i < min(off+req.Limit, p.Audience); i++ {
		page.Recipients = append(page.Recipients, fanout.Recipient{ID: "rcpt-" + strconv.Itoa(i), Address: d.address(req.Event.ID, i)})
	}
	if off+req.Limit < p.Audience {
		page.NextCursor = strconv.Itoa(off + req.Limit)
	}
	_ = json.NewEncoder(w).Encode(page)
}

func (d *destination) deliver(w http.ResponseWriter, r *http.Request) {
	parts := strings.Split(r.URL.Path, "/") // "", deliver, event, i, secret
	i, _ := strconv.Atoi(parts[3])
	body := new(bytes.Buffer)
	_, _ = body.ReadFrom(r.Body)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.failing && fails(i) {
		w.WriteHeader(http.StatusGone)
		return
	}
	addr := d.srv.URL + r.URL.Path
	d.delivered[addr]++
	d.bodies[addr] = body.String()
	w.WriteHeader(http.StatusNoContent)
}

func (d *destination) count(addr string) (int, string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.delivered[addr], d.bodies[addr]
}

// event is a test event of n recipients served by the destination, whose
// message text is a secret of its own.
func event(id string, n int) stack.Event {
	return stack.Event{ID: id, Audience: n, Text: "the secret message " + token + " of " + id, RecipientsURL: dest.srv.URL + "/recipients-" + token}
}

// secrets are the texts of event ev that must never be stored in clear:
// every recipient's address and its secret path, the message text, and
// the payload's recipients_url.
func secrets(ev stack.Event) []string {
	out := []string{ev.Text, ev.RecipientsURL, "recipients-" + token}
	for i := range ev.Audience {
		a := dest.address(ev.ID, i)
		out = append(out, a, a[strings.LastIndex(a, "/")+1:])
	}
	return out
}

// leaks returns the secrets found in b: in its bytes, or in any JSON
// string of it read as base64 (how `workflow show -o json` and the dead
// letters' JSON carry bytes).
func leaks(b []byte, secrets []string) []string {
	hay := [][]byte{b}
	var v any
	if json.Unmarshal(b, &v) == nil {
		stack.EachJSONString(v, func(s string) {
			if d, err := base64.StdEncoding.DecodeString(s); err == nil {
				hay = append(hay, d)
			}
		})
	}
	var found []string
	for _, s := range secrets {
		for _, h := range hay {
			if bytes.Contains(h, []byte(s)) {
				found = append(found, s)
				break
			}
		}
	}
	return found
}

// decrypted is every encrypted payload of a `workflow show -o json` output,
// opened with keys: what the history holds once decrypted.
func decrypted(t *testing.T, out []byte, keys *codec.Keyring) []byte {
	t.Helper()
	var v any
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("workflow show output: %v", err)
	}
	var all []byte
	stack.EachJSONString(v, func(s string) {
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil || !codec.IsSealed(b) {
			return
		}
		pt, err := keys.Open(b)
		if err != nil {
			t.Errorf("a sealed payload of the history does not open: %v", err)
			return
		}
		var p commonpb.Payload
		if err := proto.Unmarshal(pt, &p); err != nil {
			t.Errorf("a sealed payload is not a payload: %v", err)
			return
		}
		all = append(append(all, p.Data...), '\n')
	})
	return all
}

// show is the workflow's history as the pinned temporal CLI exports it.
func show(t *testing.T, wid string) []byte {
	t.Helper()
	out, err := st.ShowHistory(context.Background(), wid)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// stagedBatches returns the raw Redis values of the event's staged batches.
func stagedBatches(t *testing.T, eventID string) map[string][]byte {
	t.Helper()
	ctx := context.Background()
	prefix := staging.New(nil, 0).Key(vocab.EventKey(webhook.EventType, eventID), 0)
	prefix = strings.TrimSuffix(prefix, "0")
	keys, err := st.RDB.Keys(ctx, prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, k := range keys {
		if v, err := st.RDB.Get(ctx, k).Bytes(); err == nil {
			out[k] = v
		}
	}
	return out
}

// deadLetters returns the raw records of the deliveries DLQ of the event.
func deadLetters(t *testing.T, eventID string) [][]byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out [][]byte
	err := kafkatopic.ReadAll(ctx, st.KafkaConn(), activities.DefaultDeliveriesDLQTopic, func(m kafka.Message) error {
		if string(m.Key) == eventID {
			out = append(out, m.Value)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func wait(t *testing.T, tc client.Client, eventID string, timeout time.Duration) workflows.FanoutResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for {
		var res workflows.FanoutResult
		err := tc.GetWorkflow(ctx, stack.WorkflowID(eventID), "").Get(ctx, &res)
		if err == nil {
			return res
		}
		if ctx.Err() != nil {
			t.Fatalf("event %s: %v", eventID, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitStaged waits until the event has staged batches in Redis.
func waitStaged(t *testing.T, eventID string) map[string][]byte {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if b := stagedBatches(t, eventID); len(b) > 0 {
			return b
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("event %s staged no batch in Redis", eventID)
	return nil
}

// TestNothingInClear: with keys, a small event (delivered in its first
// workflow task) and a big one (batches staged in Redis, children, some
// recipients failing for good) are delivered correctly, and neither the
// histories exported by the temporal CLI, nor a staged batch read from
// Redis, nor the dead letters read from the Kafka topic hold an address,
// the message or the payload in clear; what they hold does decrypt to
// them with the keys. The sealed dead letters redrive.
func TestNothingInClear(t *testing.T) {
	small, big := event("small-"+token, 5), event("big-"+token, 3000)
	// The events worker (and the bridge) first, alone: the big event's
	// batches stay staged until a delivery worker comes.
	if err := st.StartWorker("events", vocab.QueueEvents, append(workerEnv, "FANOUT_BRIDGE=true")...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Stop("events") })
	if err := st.Publish(context.Background(), small, big); err != nil {
		t.Fatal(err)
	}
	if res := wait(t, st.TC, small.ID, time.Minute); res.Delivered != 5 || res.Failed != 0 {
		t.Fatalf("small event: %+v", res.Progress)
	}
	for i := range small.Audience {
		if n, body := dest.count(dest.address(small.ID, i)); n != 1 || !strings.Contains(body, small.Text) {
			t.Errorf("small event recipient %d: %d deliveries, body %q", i, n, body)
		}
	}

	// (b) A staged batch, straight from Redis, before its delivery.
	batches := waitStaged(t, big.ID)
	bigSecrets := secrets(big)
	for k, v := range batches {
		if !codec.IsSealed(v) {
			t.Errorf("%s: staged in clear", k)
		}
		if l := leaks(v, bigSecrets); len(l) > 0 {
			t.Errorf("%s: in clear in Redis: %q", k, l[:min(len(l), 3)])
		}
		if pt, err := st.Keyring.Open(v); err != nil || !strings.Contains(string(pt), "s3cr3t-"+token) {
			t.Errorf("%s does not open to its recipients: %v", k, err)
		}
	}

	if err := st.StartWorker("delivery", "high,normal,low", workerEnv...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Stop("delivery") })
	res := wait(t, st.TC, big.ID, 3*time.Minute)
	wantFailed := 0
	for i := range big.Audience {
		if fails(i) {
			wantFailed++
		}
	}
	if res.Found != 3000 || res.Delivered != int64(3000-wantFailed) || res.Failed != int64(wantFailed) || res.DeadLettered != int64(wantFailed) {
		t.Fatalf("big event: %+v; want %d delivered, %d failed and dead-lettered", res.Progress, 3000-wantFailed, wantFailed)
	}
	for _, i := range []int{0, 1, 1500, 2999} {
		if n, body := dest.count(dest.address(big.ID, i)); n != 1 || !strings.Contains(body, big.Text) {
			t.Errorf("big event recipient %d: %d deliveries, body %q", i, n, body)
		}
	}

	// (a) The histories as the temporal CLI exports them.
	for _, c := range []struct {
		wid     string
		secrets []string
		want    []string // found once decrypted
	}{
		// A delivered small event's recipients are not in its history at
		// all (Open leaves them out of its result); its message is.
		{stack.WorkflowID(small.ID), secrets(small), []string{small.Text}},
		{stack.WorkflowID(big.ID), bigSecrets, []string{big.Text}},
		{vocab.BatchWorkflowID(stack.WorkflowID(big.ID), 0), bigSecrets, []string{big.Text}},
	} {
		out := show(t, c.wid)
		if !bytes.Contains(out, []byte(codec.MetadataEncodingEncrypted)) && !bytes.Contains(out, []byte(base64.StdEncoding.EncodeToString([]byte(codec.MetadataEncodingEncrypted)))) {
			t.Errorf("%s: no encrypted payload in the history", c.wid)
		}
		if l := leaks(out, c.secrets); len(l) > 0 {
			t.Errorf("%s: in clear in the history: %q", c.wid, l[:min(len(l), 3)])
		}
		plain := decrypted(t, out, st.Keyring)
		for _, w := range c.want {
			if !bytes.Contains(plain, []byte(w)) {
				t.Errorf("%s: %q not in the decrypted history: the test looks in the wrong place", c.wid, w)
			}
		}
	}

	// (c) The dead letters, straight from the Kafka topic.
	recs := deadLetters(t, big.ID)
	if len(recs) != wantFailed {
		t.Fatalf("%d dead letters of %s in the topic, want %d", len(recs), big.ID, wantFailed)
	}
	for _, r := range recs {
		if l := leaks(r, bigSecrets); len(l) > 0 {
			t.Fatalf("in clear in a dead letter: %q\n%s", l, r)
		}
		var clear map[string]any
		if err := json.Unmarshal(r, &clear); err != nil {
			t.Fatal(err)
		}
		// What an operator reading the topic with kcat needs, in clear.
		if clear["event_id"] != big.ID || clear["event_type"] != webhook.EventType || !strings.Contains(fmt.Sprint(clear["last_error"]), "HTTP 410") ||
			clear["permanent"] != true || clear["sealed"] == nil || !strings.HasPrefix(clear["recipient"].(map[string]any)["id"].(string), "rcpt-") {
			t.Fatalf("dead letter's clear fields: %s", r)
		}
		// A batch's letters carry the message once per chunk (the others
		// say it is omitted; a redrive takes it from that one).
		d, err := activities.DecodeDeadLetter(r, st.Keyring)
		hasMessage := d.MessageOmitted == 0 && strings.Contains(string(d.Message.Body), big.Text)
		if err != nil || d.Recipient.Address != dest.address(big.ID, mustAtoi(t, strings.TrimPrefix(d.Recipient.ID, "rcpt-"))) ||
			!hasMessage && (d.MessageOmitted == 0 || len(d.Message.Body) != 0) {
			t.Fatalf("dead letter decoded: %+v %v", d, err)
		}
		if _, err := activities.DecodeDeadLetter(r, nil); err == nil {
			t.Fatal("a sealed dead letter decoded without keys")
		}
	}

	// The sealed dead letters redrive, now that the destination accepts them.
	dest.mu.Lock()
	dest.failing = false
	dest.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rr, err := starter.RedriveDeliveries(ctx, st.TC, starter.RedriveOptions{
		Kafka: st.KafkaConn(), Topic: activities.DefaultDeliveriesDLQTopic, Filter: starter.RedriveFilter{EventID: big.ID},
		Keys: st.Keyring, Wait: true, Round: "r" + token,
	})
	if err != nil || rr.Matched != wantFailed || rr.Delivered != wantFailed || rr.Invalid != 0 {
		t.Fatalf("redrive: %+v %v; want %d matched and delivered", rr, err, wantFailed)
	}
	for i := range big.Audience {
		if n, _ := dest.count(dest.address(big.ID, i)); n != 1 {
			t.Fatalf("big event recipient %d: %d deliveries after the redrive, want 1", i, n)
		}
	}
	// Without the keys, the redrive leaves the sealed letters alone (and
	// warns of each: not here).
	defer slog.SetDefault(slog.Default())
	slog.SetDefault(slog.New(slog.DiscardHandler))
	rr, err = starter.RedriveDeliveries(ctx, st.TC, starter.RedriveOptions{
		Kafka: st.KafkaConn(), Topic: activities.DefaultDeliveriesDLQTopic, Filter: starter.RedriveFilter{EventID: big.ID}, Round: "n" + token,
	})
	if err != nil || rr.Matched != 0 || rr.Invalid < wantFailed {
		t.Fatalf("redrive without keys: %+v %v; want the sealed letters invalid, none matched", rr, err)
	}
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// keyIDs are the encryption key ids of the payloads of a workflow's
// history (its latest run).
func keyIDs(t *testing.T, tc client.Client, wid string) map[string]bool {
	t.Helper()
	ids := map[string]bool{}
	iter := tc.GetWorkflowHistory(context.Background(), wid, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for iter.HasNext() {
		e, err := iter.Next()
		if err != nil {
			t.Fatal(err)
		}
		err = proxy.VisitPayloads(context.Background(), e, proxy.VisitPayloadsOptions{
			SkipSearchAttributes: true,
			Visitor: func(_ *proxy.VisitPayloadsContext, ps []*commonpb.Payload) ([]*commonpb.Payload, error) {
				for _, p := range ps {
					if id := p.GetMetadata()[codec.MetadataEncryptionKeyID]; id != nil {
						ids[string(id)] = true
					}
				}
				return ps, nil
			},
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return ids
}

// TestKeyRotation: an event started by workers with key A (its batches
// staged and its children started, not delivered) completes after the
// workers restart with keys B (active) and A: they read what A encrypted
// (history, children's input, staged batches) and write with B. A client
// with A alone then no longer reads its result.
func TestKeyRotation(t *testing.T) {
	keyFile, err := os.ReadFile(st.KeysFile)
	if err != nil {
		t.Fatal(err)
	}
	old, err := codec.ParseKeyFile(string(keyFile))
	if err != nil || len(old) != 1 {
		t.Fatalf("stack keys: %v %v", old, err)
	}
	a := old[0]
	rot := event("rot-"+token, 1000)
	dest.mu.Lock()
	dest.failing = false
	dest.mu.Unlock()
	if err := st.StartWorker("events-a", vocab.QueueEvents, append(workerEnv, "FANOUT_BRIDGE=true")...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Stop("events-a") })
	if err := st.Publish(context.Background(), rot); err != nil {
		t.Fatal(err)
	}
	staged := waitStaged(t, rot.ID)
	for k, v := range staged {
		if id, err := codec.KeyIDOf(v); err != nil || id != a.ID {
			t.Fatalf("%s sealed with %q (%v), want %s", k, id, err, a.ID)
		}
	}
	// Once the first batches are started (children, or for an event of one
	// page its own DeliverBatch activities), stop the A workers.
	deadline := time.Now().Add(time.Minute)
	for {
		d, err := st.TC.DescribeWorkflow(context.Background(), stack.WorkflowID(rot.ID), "")
		if err == nil && len(d.RawResponse.GetPendingChildren())+len(d.RawResponse.GetPendingActivities()) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no batch started: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	st.Stop("events-a")

	b := codec.NewKey("rotated-2")
	rotated := []string{"FANOUT_CODEC_KEYS_FILE=", "FANOUT_CODEC_KEYS=" + codec.FormatKey(b) + "," + codec.FormatKey(a)}
	if err := st.StartWorker("events-ba", vocab.QueueEvents, append(append(workerEnv, "FANOUT_BRIDGE=true"), rotated...)...); err != nil {
		t.Fatal(err)
	}
	if err := st.StartWorker("delivery-ba", "high,normal,low", append(workerEnv, rotated...)...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Stop("events-ba"); st.Stop("delivery-ba") })
	ring, err := codec.New(b, a)
	if err != nil {
		t.Fatal(err)
	}
	dc := ring.DataConverter()
	tc, err := client.Dial(client.Options{HostPort: st.TemporalAddr, Logger: stack.QuietLogger{}, DataConverter: dc,
		FailureConverter: temporal.NewDefaultFailureConverter(temporal.DefaultFailureConverterOptions{DataConverter: dc, EncodeCommonAttributes: true})})
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	res := wait(t, tc, rot.ID, 3*time.Minute)
	if res.Found != 1000 || res.Delivered != 1000 || res.Failed != 0 {
		t.Fatalf("rotated event: %+v", res.Progress)
	}
	for _, i := range []int{0, 7, 999} {
		if n, body := dest.count(dest.address(rot.ID, i)); n != 1 || !strings.Contains(body, rot.Text) {
			t.Errorf("recipient %d: %d deliveries, body %q", i, n, body)
		}
	}
	// The history holds payloads of both keys: A's from before, B's after.
	if ids := keyIDs(t, tc, stack.WorkflowID(rot.ID)); !ids[a.ID] || !ids[b.ID] || len(ids) != 2 {
		t.Errorf("key ids in the history: %v; want %s and %s", ids, a.ID, b.ID)
	}
	// The result was written with B: a client with A alone cannot read it.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var r workflows.FanoutResult
	if err := st.TC.GetWorkflow(ctx, stack.WorkflowID(rot.ID), "").Get(ctx, &r); err == nil || !strings.Contains(err.Error(), "unknown key id") {
		t.Errorf("result read with key A alone: %v; want unknown key id", err)
	}
}
