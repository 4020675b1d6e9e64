//go:build integration

// Package secrets_test runs fanout on the real stack with a credential on
// every connection it makes (Kafka over TLS with a SCRAM password, Redis
// with a password, payload encryption keys, webhook signing secrets, a
// recipients endpoint URL with a user, password and token, destinations
// with secret paths and tokens), every process logging at debug level and
// exporting its spans, and searches everything they logged and exported,
// and the histories of the events, for those credentials.
package secrets_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl/scram"
	"github.com/twmb/franz-go/pkg/kfake"
	"go.temporal.io/sdk/client"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/internal/dev/demo"
	"github.com/fanout/fanout/internal/dev/stack"
	"github.com/fanout/fanout/internal/kafkatopic"
	"github.com/fanout/fanout/internal/kafkatopic/kafkatest"
	"github.com/fanout/fanout/starter"
	"github.com/fanout/fanout/workers"
	"github.com/fanout/fanout/workers/webhook"
	"github.com/fanout/fanout/workflows"
)

// credentials are this run's secrets, each unique to the run, and the
// servers that ask for them.
type credentials struct {
	kafkaUser, kafkaPassword, redisPassword string
	keyID, codecKey, signingKey             string // the keys as base64 of 32 bytes
	recipientsUser, recipientsPassword      string
	recipientsTok                           string
	destinationPath, destinationToken       string
	// markers are every form of the credentials the search looks for.
	markers []string

	eventsTopic, evDLQ, deliveriesDLQ string
	source, destination, otlp         *httptest.Server
	retryOnce, gone, unreachable      func(int) bool
	closed                            string // a loopback address nothing listens on

	mu                    sync.Mutex
	failedOnce            map[int]int
	spans                 [][]byte // raw OTLP export bodies
	recipientsSeen        int      // recipients calls with the URL's user, password and token
	destinationsWithToken int      // deliveries to the secret path with the token
	signingHeaderSeen     int      // signed deliveries
}

func random(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// TestNoSecretInLogsSpansOrHistories: with credentials everywhere, a big
// event (several batches, retried and dead-lettered recipients), a small
// one (delivered in its first workflow task) and a malformed record are
// handled, and no log line of any process, no exported span and no
// exported history holds any of the credentials, in clear, base64 or URL
// encoded; the capture itself is checked to be the real thing (log lines
// about the run, spans of both processes with delivery spans, the events
// in the histories), so the search cannot pass by finding nothing.
func TestNoSecretInLogsSpansOrHistories(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := &credentials{
		kafkaUser: "fanout", kafkaPassword: "kafka-pw-" + random(t, 8),
		redisPassword:  "redis-pw-" + random(t, 8),
		recipientsUser: "src", recipientsPassword: "src-pw-" + random(t, 8), recipientsTok: "src-token-" + random(t, 8),
		destinationPath: "hook-path-" + random(t, 8), destinationToken: "dest-token-" + random(t, 8),
		keyID:       "k" + random(t, 3),
		failedOnce:  map[int]int{},
		eventsTopic: "ev", evDLQ: "ev-dlq", deliveriesDLQ: "del-dlq",
	}
	keyBytes := make([]byte, 32)
	sigBytes := make([]byte, 32)
	if _, err := rand.Read(keyBytes); err != nil {
		t.Fatal(err)
	}
	if _, err := rand.Read(sigBytes); err != nil {
		t.Fatal(err)
	}
	c.codecKey = base64.StdEncoding.EncodeToString(keyBytes)
	c.signingKey = base64.StdEncoding.EncodeToString(sigBytes)
	c.retryOnce = func(i int) bool { return i%10 == 3 }
	c.gone = func(i int) bool { return i%10 == 7 }
	// Recipients ending in 9 are on a closed port: the transport's error
	// (which, from net/http, quotes the whole URL) is retried, logged and
	// dead-lettered.
	c.unreachable = func(i int) bool { return i%10 == 9 }
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c.closed = ln.Addr().String()
	ln.Close()
	for _, s := range []string{c.kafkaPassword, c.redisPassword, c.codecKey, c.signingKey, c.recipientsPassword, c.recipientsTok, c.destinationPath, c.destinationToken} {
		c.markers = append(c.markers, s, base64.StdEncoding.EncodeToString([]byte(s)), url.QueryEscape(s))
	}
	// The key material also raw and in hex, and the secrets' base64 bodies
	// as URL-safe base64.
	c.markers = append(c.markers, string(keyBytes), hex.EncodeToString(keyBytes), string(sigBytes), hex.EncodeToString(sigBytes),
		base64.RawURLEncoding.EncodeToString(keyBytes), base64.RawURLEncoding.EncodeToString(sigBytes))

	// Kafka: TLS only, SCRAM-SHA-256.
	pki := kafkatest.NewPKI(t, "127.0.0.1", "localhost")
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.TLS(pki.ServerTLS()), kfake.EnableSASL(),
		kfake.Superuser("SCRAM-SHA-256", c.kafkaUser, c.kafkaPassword), kfake.SeedTopics(1, c.eventsTopic, c.evDLQ, c.deliveriesDLQ))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	kafkaAddr := kc.ListenAddrs()[0]
	mech, err := scram.Mechanism(scram.SHA256, c.kafkaUser, c.kafkaPassword)
	if err != nil {
		t.Fatal(err)
	}
	conn := kafkatopic.Conn{Brokers: []string{kafkaAddr}, TLS: &tls.Config{RootCAs: pki.Pool(), MinVersion: tls.VersionTLS12}, SASL: mech}

	// Redis with a password.
	dir := t.TempDir()
	port, err := stack.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	rp, raddr, err := stack.StartRedis(ctx, port, "", filepath.Join(dir, "redis.log"), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer rp.Kill()
	admin := redis.NewClient(&redis.Options{Addr: raddr})
	if err := admin.ConfigSet(ctx, "requirepass", c.redisPassword).Err(); err != nil {
		t.Fatal(err)
	}
	admin.Close()

	// The recipients endpoint (asks for its user, password and token) and
	// the destinations; the OTLP receiver.
	c.source = httptest.NewServer(http.HandlerFunc(c.recipients))
	defer c.source.Close()
	c.destination = httptest.NewServer(http.HandlerFunc(c.deliver))
	defer c.destination.Close()
	c.otlp = httptest.NewServer(http.HandlerFunc(c.collect))
	defer c.otlp.Close()
	src, _ := url.Parse(c.source.URL)
	recipientsURL := fmt.Sprintf("http://%s:%s@%s/recipients?token=%s", c.recipientsUser, c.recipientsPassword, src.Host, c.recipientsTok)

	// The stack gives Temporal (and the temporal CLI); its client reads
	// the results with the run's key.
	keys, err := workers.ParseKeys(c.keyID + ":" + c.codecKey)
	if err != nil {
		t.Fatal(err)
	}
	var copts client.Options
	workers.WithEncryption(keys)(&copts)
	st, err := stack.Start(ctx, stack.Options{InMemory: true, Client: copts, Log: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()

	env := []string{
		"FANOUT_LOG_LEVEL=debug",
		"FANOUT_KAFKA_BROKERS=" + kafkaAddr, "FANOUT_KAFKA_TLS=true", "FANOUT_KAFKA_TLS_CA_FILE=" + pki.CAFile,
		"FANOUT_KAFKA_SASL_MECHANISM=SCRAM-SHA-256", "FANOUT_KAFKA_SASL_USERNAME=" + c.kafkaUser, "FANOUT_KAFKA_SASL_PASSWORD=" + c.kafkaPassword,
		"FANOUT_EVENTS_TOPIC=" + c.eventsTopic, "FANOUT_EVENTS_DLQ_TOPIC=" + c.evDLQ, "FANOUT_DELIVERIES_DLQ_TOPIC=" + c.deliveriesDLQ,
		"FANOUT_REDIS_URL=redis://default:" + c.redisPassword + "@" + raddr + "/0",
		"FANOUT_CODEC_KEYS=" + c.keyID + ":" + c.codecKey,
		"FANOUT_WEBHOOK_SECRETS=whsec_" + c.signingKey,
		"FANOUT_RECIPIENTS_URL=" + recipientsURL,
		"FANOUT_BATCH_SIZE=100", "FANOUT_PAGE_SIZE=200", "FANOUT_LARGE_BATCH_SIZE=-1", "FANOUT_LOCAL_DELIVERY_MAX=20",
		"FANOUT_MAX_ATTEMPTS=3", "FANOUT_RETRY_INITIAL=100ms", "FANOUT_RETRY_MAX=200ms",
		"OTEL_EXPORTER_OTLP_ENDPOINT=" + c.otlp.URL, "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf", "OTEL_EXPORTER_OTLP_COMPRESSION=none",
		"OTEL_BSP_SCHEDULE_DELAY=200", "OTEL_TRACES_SAMPLER=always_on",
	}
	if err := st.StartWorker("events", "events", append(env, "FANOUT_BRIDGE=true")...); err != nil {
		t.Fatal(err)
	}
	if err := st.StartWorker("delivery", "high,normal,low", env...); err != nil {
		t.Fatal(err)
	}

	// A big event, a small one and a malformed record, over the secured
	// connection.
	big := stack.Event{ID: "big-" + random(t, 3), Audience: 600, Text: "message of the big event"}
	small := stack.Event{ID: "small-" + random(t, 3), Audience: 5, Text: "message of the small event"}
	pub := starter.NewPublisher(conn, c.eventsTopic)
	defer pub.Close()
	if err := pub.Publish(ctx, big.Envelope(), small.Envelope()); err != nil {
		t.Fatalf("publish over TLS + SCRAM: %v", err)
	}
	w := kafkatopic.NewWriter(conn, c.eventsTopic)
	if err := w.WriteMessages(ctx, kafka.Message{Key: []byte("bad"), Value: []byte(`{"id": "bad", "type": `)}); err != nil {
		t.Fatal(err)
	}
	w.Close()

	results := map[string]workflows.FanoutResult{}
	for _, ev := range []stack.Event{big, small} {
		results[ev.ID] = wait(ctx, t, st, ev.ID)
	}
	for id, ev := range map[string]stack.Event{big.ID: big, small.ID: small} {
		r := results[id]
		wantFailed := 0
		for i := range ev.Audience {
			if c.gone(i) || c.unreachable(i) {
				wantFailed++
			}
		}
		if r.Delivered != int64(ev.Audience-wantFailed) || r.Failed != int64(wantFailed) {
			t.Errorf("event %s: %+v, want %d delivered and %d failed", id, r.Progress, ev.Audience-wantFailed, wantFailed)
		}
	}
	dlq := readTopic(ctx, t, conn, c.deliveriesDLQ)
	evdlq := readTopic(ctx, t, conn, c.evDLQ)
	if len(dlq) == 0 || len(evdlq) != 1 {
		t.Errorf("dead letters: %d in the deliveries DLQ (want some), %d in the events DLQ (want 1)", len(dlq), len(evdlq))
	}

	// Histories, then stop the workers so their spans flush.
	var histories [][]byte
	for _, wid := range []string{stack.WorkflowID(big.ID), stack.WorkflowID(small.ID), stack.WorkflowID(big.ID) + "/batch/0"} {
		histories = append(histories, show(ctx, t, filepath.Join(st.Bin, "temporal"), st.TemporalAddr, wid))
	}
	st.Stop("events")
	st.Stop("delivery")
	time.Sleep(500 * time.Millisecond) // the receiver answers the last export

	// The capture.
	captures := map[string][]byte{}
	for _, name := range []string{"events", "delivery"} {
		b, err := os.ReadFile(st.LogPath(name))
		if err != nil {
			t.Fatal(err)
		}
		captures["log of "+name] = b
	}
	c.mu.Lock()
	for i, b := range c.spans {
		captures[fmt.Sprintf("OTLP export %d", i)] = b
	}
	spanBytes := bytes.Join(c.spans, nil)
	c.mu.Unlock()
	for i, h := range histories {
		captures[fmt.Sprintf("history %d", i)] = h
	}
	for id, r := range results {
		b, _ := json.Marshal(r)
		captures["result of "+id] = b
	}

	// The capture is the real thing.
	logs := string(captures["log of events"]) + string(captures["log of delivery"])
	lines := strings.Count(logs, "\n")
	for _, want := range []string{`"level":"DEBUG"`, big.ID} {
		if !strings.Contains(logs, want) {
			t.Errorf("the workers' logs (%d lines) never mention %q: the capture is not the run's", lines, want)
		}
	}
	for _, want := range []string{"fanout-worker", "webhook deliver", "webhook recipients", "127.0.0.1", big.ID} {
		if !bytes.Contains(spanBytes, []byte(want)) {
			t.Errorf("the exported spans (%d requests, %d bytes) never name %q", len(c.spans), len(spanBytes), want)
		}
	}
	for i, h := range histories {
		if !bytes.Contains(h, []byte(big.ID)) && !bytes.Contains(h, []byte(small.ID)) {
			t.Errorf("history %d (%d bytes) names neither event", i, len(h))
		}
	}
	c.mu.Lock()
	if c.recipientsSeen == 0 || c.destinationsWithToken == 0 || c.signingHeaderSeen == 0 {
		t.Errorf("the run did not use its credentials: %d recipients calls with the URL's user and token, %d deliveries to tokened addresses, %d signed", c.recipientsSeen, c.destinationsWithToken, c.signingHeaderSeen)
	}
	c.mu.Unlock()

	// The search.
	total := 0
	for what, b := range captures {
		total += len(b)
		for _, found := range leaks(b, c.markers) {
			i := strings.Index(string(b), found)
			ctxt := ""
			if i >= 0 {
				ctxt = string(b[max(0, i-120):min(len(b), i+len(found)+40)])
			}
			t.Errorf("%s holds a credential %q: ...%s...", what, found, ctxt)
		}
	}
	t.Logf("searched %d bytes: %d log lines, %d OTLP exports (%d bytes), %d histories, for %d credential forms", total, lines, len(c.spans), len(spanBytes), len(histories), len(c.markers))
}

// recipients serves the events' recipients, only to a caller with the
// URL's user, password and token; recipient i's address has the secret
// path and token.
func (c *credentials) recipients(w http.ResponseWriter, r *http.Request) {
	user, pass, ok := r.BasicAuth()
	if !ok || user != c.recipientsUser || pass != c.recipientsPassword || r.URL.Query().Get("token") != c.recipientsTok {
		http.Error(w, "who are you", http.StatusUnauthorized)
		return
	}
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
	c.mu.Lock()
	c.recipientsSeen++
	c.mu.Unlock()
	off, _ := strconv.Atoi(req.Cursor)
	var page fanout.Page
	for i := off; i < min(off+req.Limit, p.Audience); i++ {
		base := c.destination.URL
		if c.unreachable(i) {
			base = "http://" + c.closed
		}
		page.Recipients = append(page.Recipients, fanout.Recipient{
			ID:      "r" + strconv.Itoa(i),
			Address: fmt.Sprintf("%s/%s/%d?token=%s", base, c.destinationPath, i, c.destinationToken),
		})
	}
	if off+req.Limit < p.Audience {
		page.NextCursor = strconv.Itoa(off + req.Limit)
	}
	_ = json.NewEncoder(w).Encode(page)
}

// deliver answers 410 to every recipient whose index ends in 7 (dead
// letters), 500 the first time to those ending in 3 (retries), 204 else.
func (c *credentials) deliver(w http.ResponseWriter, r *http.Request) {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	i, _ := strconv.Atoi(parts[len(parts)-1])
	c.mu.Lock()
	defer c.mu.Unlock()
	if r.URL.Query().Get("token") == c.destinationToken && parts[0] == c.destinationPath {
		c.destinationsWithToken++
	}
	if r.Header.Get("webhook-signature") != "" {
		c.signingHeaderSeen++
	}
	switch {
	case c.gone(i):
		w.WriteHeader(http.StatusGone)
	case c.retryOnce(i) && c.failedOnce[i] == 0:
		c.failedOnce[i]++
		w.WriteHeader(http.StatusInternalServerError)
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}

// collect is the OTLP/HTTP receiver: it keeps every export's raw body.
func (c *credentials) collect(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	c.mu.Lock()
	c.spans = append(c.spans, b)
	c.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.WriteHeader(http.StatusOK)
}

// leaks returns the markers found in b, in its bytes or in any JSON string
// of it read as base64 (how histories and results carry bytes).
func leaks(b []byte, markers []string) []string {
	hay := [][]byte{b}
	var v any
	if json.Unmarshal(b, &v) == nil {
		walkStrings(v, func(s string) {
			if d, err := base64.StdEncoding.DecodeString(s); err == nil {
				hay = append(hay, d)
			}
		})
	}
	var found []string
	for _, m := range markers {
		for _, h := range hay {
			if bytes.Contains(h, []byte(m)) {
				found = append(found, m)
				break
			}
		}
	}
	return found
}

func walkStrings(v any, fn func(string)) {
	switch x := v.(type) {
	case string:
		fn(x)
	case []any:
		for _, e := range x {
			walkStrings(e, fn)
		}
	case map[string]any:
		for _, e := range x {
			walkStrings(e, fn)
		}
	}
}

func wait(ctx context.Context, t *testing.T, st *stack.Stack, eventID string) workflows.FanoutResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	for {
		var res workflows.FanoutResult
		err := st.TC.GetWorkflow(ctx, stack.WorkflowID(eventID), "").Get(ctx, &res)
		if err == nil {
			return res
		}
		if ctx.Err() != nil {
			t.Fatalf("event %s: %v", eventID, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func readTopic(ctx context.Context, t *testing.T, conn kafkatopic.Conn, topic string) [][]byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var out [][]byte
	if err := kafkatopic.ReadAll(ctx, conn, topic, func(m kafka.Message) error {
		out = append(out, m.Value)
		return nil
	}); err != nil {
		t.Fatalf("read %s: %v", topic, err)
	}
	return out
}

func show(ctx context.Context, t *testing.T, bin, addr, wid string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "workflow", "show", "--workflow-id", wid, "--address", addr, "--namespace", "default", "--output", "json").Output()
	if err != nil {
		t.Fatalf("temporal workflow show %s: %v", wid, err)
	}
	return out
}
