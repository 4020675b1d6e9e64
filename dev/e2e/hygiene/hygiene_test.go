//go:build integration

// Package hygiene_test proves that no credential fanout is given reaches
// what it writes for operators. On the real stack (the temporal dev server,
// redis-server, a kfake broker that speaks only TLS and SASL) with worker
// processes built from this repository, every credential is in use: the
// Kafka SASL password, a Redis ACL user's password, the codec key, the
// webhook signing secret, the recipients endpoint's user, password and
// token, the destinations' secret paths, tokens and passwords, an event's
// recipients_url with credentials, and a Temporal API key. None of them, in
// clear, base64 or hex, is in any log line of the processes, any span or
// metric they export over OTLP, any exported workflow history, any workflow
// result's error, or the dead-letter topics.
package hygiene_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
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
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/activities"
	"github.com/fanout/fanout/dev/demo"
	"github.com/fanout/fanout/dev/stack"
	"github.com/fanout/fanout/internal/codec"
	"github.com/fanout/fanout/internal/config"
	"github.com/fanout/fanout/internal/kafkatopic"
	"github.com/fanout/fanout/internal/kafkatopic/kafkatest"
	"github.com/fanout/fanout/starter"
	"github.com/fanout/fanout/workers/webhook"
	"github.com/fanout/fanout/workflows"
	"github.com/fanout/fanout/workflows/vocab"
)

// The audience of the big event and how its destinations answer (see
// sink.ServeHTTP): every tenth recipient from 7 answers 410 (dead-lettered
// at once), every 25th from 11 answers 503 until its attempts run out
// (dead-lettered after FANOUT_MAX_ATTEMPTS), every tenth from 3 answers 500
// once, then 204 (retried, delivered).
const bigAudience = 600

func gone(i int) bool     { return i%10 == 7 }
func broken(i int) bool   { return i%25 == 11 }
func flaky(i int) bool    { return i%10 == 3 }
func withPass(i int) bool { return i%5 == 0 || unreachable(i) } // address with user:password@

// unreachable recipients' addresses are a closed port: their dial errors
// (net/http's *url.Error, which quotes the URL) are retried until their
// attempts run out.
func unreachable(i int) bool { return i%100 == 42 }

// credentials of one run, each a random marker, so a search finds only
// what leaked.
type credentials struct {
	kafkaUser, kafkaPass           string
	redisUser, redisPass           string
	codecKey                       codec.Key // the stack's generated key
	whsecRaw                       []byte
	whsec                          string // "whsec_" + base64(whsecRaw)
	recipUser, recipPass, recipTok string // FANOUT_RECIPIENTS_URL's
	secretPath, destTok, destPass  string // in the recipients' addresses
	payloadPass, payloadPath       string // in events' recipients_url
	payloadTok                     string
	temporalAPIKey                 string
}

func randomHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// secret is one credential and every form of it that counts as a leak.
type secret struct {
	name  string
	forms []form
}

type form struct {
	kind string
	b    []byte
}

// formsOf is v as a log, span, JSON or protobuf could carry it: as is, hex
// (lower and upper case), URL-escaped, and base64 (standard and URL
// alphabets) at each of the three alignments v can have inside a longer
// base64 text (so "user:password" in a Basic header is found by the
// password's forms).
func formsOf(v []byte) []form {
	out := []form{{"clear", v}, {"hex", []byte(hex.EncodeToString(v))}, {"HEX", []byte(strings.ToUpper(hex.EncodeToString(v)))}}
	if q := url.QueryEscape(string(v)); q != string(v) {
		out = append(out, form{"url-escaped", []byte(q)})
	}
	for _, enc := range []struct {
		name string
		e    *base64.Encoding
	}{{"base64", base64.RawStdEncoding}, {"base64url", base64.RawURLEncoding}} {
		for k := range 3 {
			b := v[min(k, len(v)):]
			b = b[:len(b)/3*3]
			if len(b) >= 9 {
				out = append(out, form{fmt.Sprintf("%s+%d", enc.name, k), []byte(enc.e.EncodeToString(b))})
			}
		}
	}
	return out
}

func (c *credentials) secrets() []secret {
	s := func(name string, v []byte) secret { return secret{name, formsOf(v)} }
	whBody, _ := strings.CutPrefix(c.whsec, "whsec_")
	return []secret{
		s("kafka SASL password", []byte(c.kafkaPass)),
		s("redis password", []byte(c.redisPass)),
		s("codec key (base64)", []byte(base64.StdEncoding.EncodeToString(c.codecKey.Secret))),
		s("codec key (bytes)", c.codecKey.Secret),
		s("webhook secret", []byte(c.whsec)),
		s("webhook secret (base64 body)", []byte(whBody)),
		s("webhook secret (bytes)", c.whsecRaw),
		s("recipients endpoint password", []byte(c.recipPass)),
		s("recipients endpoint token", []byte(c.recipTok)),
		s("destination secret path", []byte(c.secretPath)),
		s("destination token", []byte(c.destTok)),
		s("destination password", []byte(c.destPass)),
		s("payload recipients_url password", []byte(c.payloadPass)),
		s("payload recipients_url path", []byte(c.payloadPath)),
		s("payload recipients_url token", []byte(c.payloadTok)),
		s("temporal API key", []byte(c.temporalAPIKey)),
	}
}

// capture is everything the run wrote for operators, by source.
type capture struct {
	mu      sync.Mutex
	sources []source
}

type source struct {
	name string
	b    []byte
}

func (c *capture) add(name string, b []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sources = append(c.sources, source{name, b})
}

// leaks returns a line per secret form found in a source; for JSON (the
// histories) the decoded bytes of every base64 string are searched too.
func (c *capture) leaks(secrets []secret) []string {
	var out []string
	for _, src := range c.sources {
		hay := [][]byte{src.b}
		var v any
		if json.Unmarshal(src.b, &v) == nil {
			stack.EachJSONString(v, func(s string) {
				if d, err := base64.StdEncoding.DecodeString(s); err == nil && len(d) > 0 {
					hay = append(hay, d)
				}
			})
		}
		for _, sec := range secrets {
			for _, f := range sec.forms {
				for _, h := range hay {
					if i := bytes.Index(h, f.b); i >= 0 {
						out = append(out, fmt.Sprintf("%s (%s) in %s: ...%q...", sec.name, f.kind, src.name, h[max(i-120, 0):min(i+len(f.b)+60, len(h))]))
						break
					}
				}
			}
		}
	}
	return out
}

// clearFailures returns the messages of the failures (written by the Go
// SDK) of a `workflow show -o json` history that are not encrypted: with
// keys, each must read "Encoded failure", its text in encodedAttributes.
func clearFailures(h []byte) []string {
	var v any
	if json.Unmarshal(h, &v) != nil {
		return []string{"not JSON"}
	}
	var out []string
	var walk func(any)
	walk = func(v any) {
		switch x := v.(type) {
		case []any:
			for _, e := range x {
				walk(e)
			}
		case map[string]any:
			if x["source"] == "GoSDK" && x["message"] != "Encoded failure" {
				out = append(out, fmt.Sprint(x["message"]))
			}
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(v)
	return out
}

// source serves the recipients of FANOUT_RECIPIENTS_URL, only to a request
// with its user, password and token, and answers 403 at /forbidden/.
type recipientsSource struct {
	c              *credentials
	sinkHost       string
	closedHost     string // 127.0.0.1:<a port nothing listens on>
	mu             sync.Mutex
	served, denied int
}

func (s *recipientsSource) address(i int) string {
	userinfo := ""
	if withPass(i) {
		userinfo = "hook:" + s.c.destPass + "@"
	}
	host := s.sinkHost
	if unreachable(i) {
		host = s.closedHost
	}
	return fmt.Sprintf("http://%s%s/hooks/%s-%d?token=%s", userinfo, host, s.c.secretPath, i, s.c.destTok)
}

func (s *recipientsSource) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, "/forbidden/") {
		http.Error(w, "forbidden", http.StatusForbidden)
		return
	}
	user, pass, ok := r.BasicAuth()
	if r.Method != http.MethodPost || r.URL.Path != "/recipients" || !ok || user != s.c.recipUser || pass != s.c.recipPass || r.URL.Query().Get("token") != s.c.recipTok {
		s.mu.Lock()
		s.denied++
		s.mu.Unlock()
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	var req webhook.RecipientsRequest
	var p demo.Payload
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || json.Unmarshal(req.Event.Payload, &p) != nil {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	off, _ := strconv.Atoi(req.Cursor)
	var page fanout.Page
	for i := off; i < min(off+req.Limit, p.Audience); i++ {
		page.Recipients = append(page.Recipients, fanout.Recipient{ID: "rcpt-" + strconv.Itoa(i), Address: s.address(i)})
	}
	if off+req.Limit < p.Audience {
		page.NextCursor = strconv.Itoa(off + req.Limit)
	}
	s.mu.Lock()
	s.served++
	s.mu.Unlock()
	_ = json.NewEncoder(w).Encode(page)
}

// sink is the destinations: it checks each request's secret path, token,
// password and Standard Webhooks signature, and answers as gone, broken and
// flaky say.
type sink struct {
	c         *credentials
	mu        sync.Mutex
	delivered map[string]int // "<event>/<i>" -> 2xx answers
	tried     map[string]int // "<event>/<i>" -> requests
	bad       []string       // requests that failed a check
}

func (s *sink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	ev := r.Header.Get(webhook.HeaderEventID)
	n, ok := strings.CutPrefix(r.URL.Path, "/hooks/"+s.c.secretPath+"-")
	i, err := strconv.Atoi(n)
	user, pass, hasAuth := r.BasicAuth()
	why := ""
	switch {
	case !ok || err != nil:
		why = "path " + r.URL.Path
	case r.URL.Query().Get("token") != s.c.destTok:
		why = "token"
	case withPass(i) && (!hasAuth || user != "hook" || pass != s.c.destPass):
		why = "basic auth"
	default:
		if err := webhook.Verify([]string{s.c.whsec}, r.Header.Get(webhook.HeaderWebhookID), r.Header.Get(webhook.HeaderWebhookTimestamp),
			r.Header.Get(webhook.HeaderWebhookSignature), body, time.Now(), 5*time.Minute); err != nil {
			why = "signature: " + err.Error()
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if why != "" {
		s.bad = append(s.bad, why)
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	key := ev + "/" + n
	s.tried[key]++
	switch {
	case gone(i):
		w.WriteHeader(http.StatusGone)
	case broken(i):
		w.WriteHeader(http.StatusServiceUnavailable)
	case flaky(i) && s.tried[key] == 1:
		w.WriteHeader(http.StatusInternalServerError)
	default:
		s.delivered[key]++
		w.WriteHeader(http.StatusNoContent)
	}
}

func (s *sink) count(ev string, i int) (delivered, tried int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := ev + "/" + strconv.Itoa(i)
	return s.delivered[k], s.tried[k]
}

// otlpReceiver keeps the raw (uncompressed) body of every OTLP/HTTP trace
// and metrics export.
type otlpReceiver struct {
	mu      sync.Mutex
	bodies  [][]byte // traces
	metrics [][]byte
}

func (o *otlpReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || (r.URL.Path != "/v1/traces" && r.URL.Path != "/v1/metrics") {
		http.NotFound(w, r)
		return
	}
	var rd io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		rd = zr
	}
	b, err := io.ReadAll(io.LimitReader(rd, 64<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	o.mu.Lock()
	if r.URL.Path == "/v1/metrics" {
		o.metrics = append(o.metrics, b)
	} else {
		o.bodies = append(o.bodies, b)
	}
	o.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.WriteHeader(http.StatusOK) // an empty Export...ServiceResponse
}

// secureKafka starts a kfake broker on 127.0.0.1 that speaks only TLS and
// SASL SCRAM-SHA-256, with fanout's three topics, and returns the client
// connection to it.
func secureKafka(t *testing.T, c *credentials) (kafkatopic.Conn, *kafkatest.PKI) {
	t.Helper()
	pki := kafkatest.NewPKI(t, "127.0.0.1", "localhost")
	cl, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.TLS(pki.ServerTLS()), kfake.EnableSASL(),
		kfake.Superuser(config.SASLScramSHA256, c.kafkaUser, c.kafkaPass),
		kfake.SeedTopics(2, starter.DefaultEventsTopic),
		kfake.SeedTopics(1, starter.DefaultEventsDLQTopic, activities.DefaultDeliveriesDLQTopic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	mech, err := scram.Mechanism(scram.SHA256, c.kafkaUser, c.kafkaPass)
	if err != nil {
		t.Fatal(err)
	}
	return kafkatopic.Conn{Brokers: cl.ListenAddrs()[:1], TLS: &tls.Config{RootCAs: pki.Pool(), MinVersion: tls.VersionTLS12}, SASL: mech}, pki
}

// authRedis starts a redis-server on 127.0.0.1 whose only user is an ACL
// user with a password (the default user is off), and returns its address
// and a client of that user.
func authRedis(t *testing.T, c *credentials, logPath string) (string, *redis.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	port, err := stack.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	p, addr, err := stack.StartRedis(ctx, port, "", logPath, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	admin := redis.NewClient(&redis.Options{Addr: addr})
	if err := admin.Do(ctx, "ACL", "SETUSER", c.redisUser, "on", ">"+c.redisPass, "~*", "&*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	_ = admin.Do(ctx, "ACL", "SETUSER", "default", "off").Err() // may hang up on us
	_ = admin.Close()
	anon := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer func() { _ = anon.Close() }()
	if err := anon.Ping(ctx).Err(); err == nil {
		t.Fatal("redis answers without a password: the password would not be in use")
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr, Username: c.redisUser, Password: c.redisPass})
	t.Cleanup(func() { _ = rdb.Close() })
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	return addr, rdb
}

// show is the workflow's history as the pinned temporal CLI exports it.
func show(t *testing.T, st *stack.Stack, wid string) []byte {
	t.Helper()
	out, err := st.ShowHistory(context.Background(), wid)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// readTopic is every record of topic, as bytes: key, value and headers.
func readTopic(t *testing.T, kc kafkatopic.Conn, topic string) []kafka.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []kafka.Message
	if err := kafkatopic.ReadAll(ctx, kc, topic, func(m kafka.Message) error { out = append(out, m); return nil }); err != nil {
		t.Fatalf("read %s: %v", topic, err)
	}
	return out
}

func recordBytes(m kafka.Message) []byte {
	b := append(append([]byte(nil), m.Key...), '\n')
	b = append(append(b, m.Value...), '\n')
	for _, h := range m.Headers {
		b = append(append(append(append(b, h.Key...), '='), h.Value...), '\n')
	}
	return b
}

// TestNoSecretInLogsSpansOrHistories runs a small event (delivered in its
// first workflow task, one recipient retried on the delivery queue), a big
// one (six staged batches on the delivery worker, destinations answering
// 410, 503 and 500 or on a closed port: retries, dial errors and dead
// letters), an event whose recipients_url with a password is refused, one
// whose recipients endpoint answers 403, and a malformed record (the events
// DLQ), with every credential in use and debug logs, span and metrics
// export on in both worker processes; then it stops them (flushing their
// exports) and searches every captured byte for every credential. The
// capture is checked to be the real thing first: deliveries, retries and
// dead letters happened, the logs, spans and metrics tell of them, the
// histories are the events' (and hold no failure message in clear).
func TestNoSecretInLogsSpansOrHistories(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	run := randomHex(t, 4)
	c := &credentials{
		kafkaUser: "fanout-hyg", kafkaPass: "kafkapw" + randomHex(t, 12),
		redisUser: "fanout-hyg", redisPass: "redispw" + randomHex(t, 12),
		recipUser: "fanout", recipPass: "recippw" + randomHex(t, 12), recipTok: "reciptok" + randomHex(t, 12),
		secretPath: "hookpath" + randomHex(t, 12), destTok: "desttok" + randomHex(t, 12), destPass: "destpw" + randomHex(t, 12),
		payloadPass: "payloadpw" + randomHex(t, 12), payloadPath: "payloadpath" + randomHex(t, 12), payloadTok: "payloadtok" + randomHex(t, 12),
		temporalAPIKey: "tapikey" + randomHex(t, 12),
	}
	c.whsecRaw = make([]byte, 32)
	_, _ = rand.Read(c.whsecRaw)
	c.whsec = "whsec_" + base64.StdEncoding.EncodeToString(c.whsecRaw)

	// FANOUT_HYGIENE_LOGS keeps the processes' logs there, to read after.
	st, err := stack.Start(ctx, stack.Options{InMemory: true, Encrypt: true, Log: os.Stderr, LogDir: os.Getenv("FANOUT_HYGIENE_LOGS")})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	keyFile, err := os.ReadFile(st.KeysFile)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := codec.ParseKeyFile(string(keyFile))
	if err != nil || len(keys) != 1 {
		t.Fatalf("stack keys: %v", err)
	}
	c.codecKey = keys[0]

	kc, pki := secureKafka(t, c)
	redisAddr, rdb := authRedis(t, c, filepath.Join(st.LogDir, "redis-auth.log"))

	snk := &sink{c: c, delivered: map[string]int{}, tried: map[string]int{}}
	sinkSrv := httptest.NewServer(snk) // on 127.0.0.1
	defer sinkSrv.Close()
	closed, release, err := stack.RefusedPort()
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	src := &recipientsSource{c: c, sinkHost: strings.TrimPrefix(sinkSrv.URL, "http://"), closedHost: "127.0.0.1:" + strconv.Itoa(closed)}
	srcSrv := httptest.NewServer(src)
	defer srcSrv.Close()
	srcHost := strings.TrimPrefix(srcSrv.URL, "http://")
	otlp := &otlpReceiver{}
	otlpSrv := httptest.NewServer(otlp)
	defer otlpSrv.Close()

	env := []string{
		"FANOUT_LOG_LEVEL=debug",
		"FANOUT_KAFKA_BROKERS=" + strings.Join(kc.Brokers, ","), "FANOUT_KAFKA_TLS=true", "FANOUT_KAFKA_TLS_CA_FILE=" + pki.CAFile,
		"FANOUT_KAFKA_SASL_MECHANISM=" + config.SASLScramSHA256, "FANOUT_KAFKA_SASL_USERNAME=" + c.kafkaUser, "FANOUT_KAFKA_SASL_PASSWORD=" + c.kafkaPass,
		"FANOUT_REDIS_URL=redis://" + c.redisUser + ":" + c.redisPass + "@" + redisAddr + "/0",
		"FANOUT_CODEC_KEYS_FILE=", "FANOUT_CODEC_KEYS=" + codec.FormatKey(c.codecKey),
		"FANOUT_WEBHOOK_SECRETS=" + c.whsec,
		"FANOUT_RECIPIENTS_URL=http://" + c.recipUser + ":" + c.recipPass + "@" + srcHost + "/recipients?token=" + c.recipTok,
		"FANOUT_RECIPIENTS_URL_ALLOW=" + srcSrv.URL, // the forbid event's recipients_url
		"FANOUT_BATCH_SIZE=100", "FANOUT_PAGE_SIZE=200", "FANOUT_LARGE_BATCH_SIZE=-1",
		"FANOUT_MAX_ATTEMPTS=3", "FANOUT_RETRY_INITIAL=100ms", "FANOUT_RETRY_MAX=300ms",
		// Every try is made, so the spans can be counted exactly: the
		// good, flaky and broken destinations share the sink's host, whose
		// breaker would otherwise open and skip some (e2e/destlimits
		// tests the breakers).
		"FANOUT_BREAKER_FAILURES=-1",
		"TEMPORAL_API_KEY=" + c.temporalAPIKey, "TEMPORAL_TLS=false",
		"OTEL_EXPORTER_OTLP_ENDPOINT=" + otlpSrv.URL, "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf", "OTEL_EXPORTER_OTLP_COMPRESSION=none",
		"OTEL_BSP_SCHEDULE_DELAY=200", "OTEL_TRACES_SAMPLER=always_on",
		"OTEL_METRICS_EXPORTER=otlp", "OTEL_METRIC_EXPORT_INTERVAL=500",
	}
	procs := []string{"hyg-events", "hyg-delivery"}
	if err := st.StartWorker("hyg-events", vocab.QueueEvents, append(env, "FANOUT_BRIDGE=true", "OTEL_SERVICE_NAME=hyg-events")...); err != nil {
		t.Fatal(err)
	}
	if err := st.StartWorker("hyg-delivery", "high,normal,low", append(env, "OTEL_SERVICE_NAME=hyg-delivery")...); err != nil {
		t.Fatal(err)
	}
	stopped := false
	stopAll := func() {
		if !stopped {
			stopped = true
			for _, p := range procs {
				st.Stop(p) // SIGTERM: the process flushes its spans and exits
			}
		}
	}
	defer stopAll()

	small := stack.Event{ID: "small-" + run, Audience: 5}
	big := stack.Event{ID: "big-" + run, Audience: bigAudience}
	deny := stack.Event{ID: "deny-" + run, Audience: 5,
		RecipientsURL: "http://pu:" + c.payloadPass + "@" + srcHost + "/recipients/" + c.payloadPath + "?token=" + c.payloadTok}
	forbid := stack.Event{ID: "forbid-" + run, Audience: 5,
		RecipientsURL: "http://" + srcHost + "/forbidden/" + c.payloadPath + "?token=" + c.payloadTok}
	bad := kafka.Message{Key: []byte("bad-" + run), Value: []byte(`{"id":"bad-` + run + `","type":"webhook","payload":`)}
	pub := starter.NewPublisher(kc, starter.DefaultEventsTopic)
	err = pub.Publish(ctx, small.Envelope(), big.Envelope(), deny.Envelope(), forbid.Envelope())
	if err == nil {
		err = pub.PublishRecords(ctx, bad)
	}
	_ = pub.Close()
	if err != nil {
		t.Fatalf("publish over TLS+SASL: %v", err)
	}

	wait := func(ev stack.Event, d time.Duration) (workflows.FanoutResult, error) {
		wctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		res, err := st.Wait(wctx, ev.ID)
		if wctx.Err() != nil {
			t.Fatalf("event %s: no result after %v: %v (see %s)", ev.ID, d, err, st.LogPath("hyg-events"))
		}
		return res, err
	}
	capt := &capture{}
	if res, err := wait(small, time.Minute); err != nil || res.Delivered != 5 || res.Failed != 0 {
		t.Fatalf("small event: %+v %v", res.Progress, err)
	}
	wantDead := 0
	for i := range bigAudience {
		if gone(i) || broken(i) || unreachable(i) {
			wantDead++
		}
	}
	if res, err := wait(big, 90*time.Second); err != nil || res.Found != bigAudience || res.Delivered != int64(bigAudience-wantDead) ||
		res.Failed != int64(wantDead) || res.DeadLettered != int64(wantDead) {
		t.Fatalf("big event: %+v %v; want %d delivered, %d failed and dead-lettered", res.Progress, err, bigAudience-wantDead, wantDead)
	}
	for ev, want := range map[stack.Event]string{deny: "recipients_url_not_allowed", forbid: "HTTP 403"} {
		_, err := wait(ev, time.Minute)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("event %s: %v; want a failure with %q", ev.ID, err, want)
		}
		t.Logf("event %s: %v", ev.ID, err)
		capt.add("result error of "+ev.ID, []byte(err.Error()))
	}

	// The destinations: each recipient that accepts got it once, signed,
	// at its secret path with its token (and password); the flaky ones
	// after a 500.
	for _, ev := range []stack.Event{small, big} {
		for i := range ev.Audience {
			d, tried := snk.count(ev.ID, i)
			switch {
			case gone(i) && (d != 0 || tried != 1):
				t.Errorf("%s recipient %d (410): %d delivered of %d tries, want 0 of 1", ev.ID, i, d, tried)
			case unreachable(i) && (d != 0 || tried != 0):
				t.Errorf("%s recipient %d (unreachable): %d delivered of %d tries at the sink, want none", ev.ID, i, d, tried)
			case broken(i) && (d != 0 || tried != 3):
				t.Errorf("%s recipient %d (503): %d delivered of %d tries, want 0 of 3", ev.ID, i, d, tried)
			case flaky(i) && (d != 1 || tried != 2):
				t.Errorf("%s recipient %d (500 once): %d delivered of %d tries, want 1 of 2", ev.ID, i, d, tried)
			case !gone(i) && !broken(i) && !flaky(i) && !unreachable(i) && d != 1:
				t.Errorf("%s recipient %d: delivered %d times, want once", ev.ID, i, d)
			}
		}
	}
	snk.mu.Lock()
	if len(snk.bad) > 0 {
		t.Errorf("%d deliveries failed the destination's checks, e.g. %s", len(snk.bad), snk.bad[0])
	}
	snk.mu.Unlock()
	src.mu.Lock()
	if src.served < 4 || src.denied > 0 {
		t.Errorf("recipients endpoint served %d pages and refused %d requests; want the pages of small and big, none refused", src.served, src.denied)
	}
	src.mu.Unlock()
	if n, err := rdb.DBSize(ctx).Result(); err != nil || n == 0 {
		t.Errorf("the password-protected Redis holds %d keys (%v): the workers did not use it", n, err)
	}

	// The dead-letter topics, read over TLS+SASL.
	dead := 0
	for _, m := range readTopic(t, kc, activities.DefaultDeliveriesDLQTopic) {
		if string(m.Key) == big.ID {
			dead++
		}
		capt.add("deliveries DLQ record", recordBytes(m))
	}
	if dead != wantDead {
		t.Errorf("%d dead letters of %s in the deliveries DLQ, want %d", dead, big.ID, wantDead)
	}
	badSeen := false
	for _, m := range readTopic(t, kc, starter.DefaultEventsDLQTopic) {
		badSeen = badSeen || string(m.Key) == string(bad.Key)
		capt.add("events DLQ record", recordBytes(m))
	}
	if !badSeen {
		t.Error("the malformed record is not in the events DLQ")
	}

	// The histories, as the temporal CLI exports them.
	wids := []string{stack.WorkflowID(small.ID), stack.WorkflowID(big.ID), stack.WorkflowID(deny.ID), stack.WorkflowID(forbid.ID)}
	for n := range bigAudience / 100 {
		wids = append(wids, vocab.BatchWorkflowID(stack.WorkflowID(big.ID), n))
	}
	historyBytes := 0
	for _, wid := range wids {
		h := show(t, st, wid)
		if !bytes.Contains(h, []byte(run)) {
			t.Errorf("history of %s: its event id is not in its %d bytes", wid, len(h))
		}
		historyBytes += len(h)
		// Errors are encrypted too (a handler's error may quote what it
		// was given): no failure message is in clear.
		if m := clearFailures(h); len(m) > 0 {
			t.Errorf("history of %s: %d failure messages in clear, e.g. %q", wid, len(m), m[0])
		}
		if dir := os.Getenv("FANOUT_HYGIENE_LOGS"); dir != "" {
			_ = os.WriteFile(filepath.Join(dir, "history-"+strings.ReplaceAll(wid, "/", "_")+".json"), h, 0o644)
		}
		capt.add("history of "+wid, h)
	}

	// Stop the workers gracefully: they flush their spans on the way out.
	stopAll()
	for _, p := range procs {
		if pr := st.Proc(p); pr != nil && !pr.Exited() {
			t.Errorf("%s did not stop", p)
		}
	}

	// The logs of every process of the run.
	logLines := map[string]int{}
	logs, _ := filepath.Glob(filepath.Join(st.LogDir, "*.log"))
	for _, path := range logs {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		name := filepath.Base(path)
		logLines[name] = bytes.Count(b, []byte("\n"))
		capt.add("log "+name, b)
	}
	for _, p := range procs {
		if logLines[p+".log"] < 15 {
			t.Errorf("%s.log has %d lines: the capture is not the process's log", p, logLines[p+".log"])
		}
	}
	mustLog := map[string][]string{
		"hyg-events":   {`"level":"DEBUG"`, "bridge consuming", "SASL_SSL SCRAM-SHA-256", "bad event dead-lettered", "retrying as an activity"},
		"hyg-delivery": {`"level":"DEBUG"`, "batch finished with dead letters", "failed transiently"},
	}
	for p, wants := range mustLog {
		b, _ := os.ReadFile(st.LogPath(p))
		for _, w := range wants {
			if !bytes.Contains(b, []byte(w)) {
				t.Errorf("%s.log does not contain %q: the capture misses what the run did", p, w)
			}
		}
	}

	// The spans every process exported.
	otlp.mu.Lock()
	bodies, metrics := otlp.bodies, otlp.metrics
	otlp.mu.Unlock()
	// The metrics every process pushed, searched as they came.
	metricBytes := 0
	var allMetrics []byte
	for _, b := range metrics {
		metricBytes += len(b)
		allMetrics = append(allMetrics, b...)
		capt.add("OTLP metrics export", b)
	}
	for _, name := range []string{"fanout.events", "fanout.deliveries", "fanout.dead_letters", "fanout.delivery.retries"} {
		if !bytes.Contains(allMetrics, []byte(name)) {
			t.Errorf("no %s in the %d metrics exports: the capture misses the metrics", name, len(metrics))
		}
	}
	spanBytes := 0
	spans := map[string]map[string]int{} // service -> span name -> count
	deliverSpans, deliverLoopback, errorSpans := 0, 0, 0
	for _, b := range bodies {
		spanBytes += len(b)
		capt.add("OTLP export", b)
		var req coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(b, &req); err != nil {
			t.Fatalf("an OTLP export is not an ExportTraceServiceRequest: %v", err)
		}
		for _, rs := range req.GetResourceSpans() {
			svc := ""
			for _, kv := range rs.GetResource().GetAttributes() {
				if kv.GetKey() == "service.name" {
					svc = kv.GetValue().GetStringValue()
				}
			}
			if spans[svc] == nil {
				spans[svc] = map[string]int{}
			}
			for _, ss := range rs.GetScopeSpans() {
				for _, s := range ss.GetSpans() {
					spans[svc][s.GetName()]++
					if s.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR {
						errorSpans++
					}
					if s.GetName() == "webhook deliver" {
						deliverSpans++
						for _, kv := range s.GetAttributes() {
							if kv.GetKey() == "server.address" && kv.GetValue().GetStringValue() == "127.0.0.1" {
								deliverLoopback++
							}
						}
					}
				}
			}
		}
	}
	total := func(svc string) (n int) {
		for _, c := range spans[svc] {
			n += c
		}
		return n
	}
	for _, p := range procs {
		if total(p) < 20 {
			t.Errorf("%d spans from %s: the capture is not its export (%v)", total(p), p, spans[p])
		}
	}
	if spans["hyg-events"]["process "+starter.DefaultEventsTopic] < 5 || spans["hyg-events"]["webhook recipients"] < 3 ||
		spans["hyg-delivery"]["RunActivity:DeliverBatch"] < bigAudience/100 {
		t.Errorf("spans miss the bridge, the recipients pages or the batches: %v", spans)
	}
	// Every delivery request is a span naming the destination's host: one
	// per try (two of a flaky recipient, three of a broken one).
	wantDeliver := 0
	for _, ev := range []stack.Event{small, big} {
		for i := range ev.Audience {
			wantDeliver++
			if flaky(i) {
				wantDeliver++
			}
			if broken(i) || unreachable(i) {
				wantDeliver += 2
			}
		}
	}
	if deliverSpans < wantDeliver || deliverLoopback != deliverSpans || errorSpans < wantDead {
		t.Errorf("%d delivery spans (%d naming 127.0.0.1), %d error spans; want at least %d deliveries, all to 127.0.0.1, and %d errors",
			deliverSpans, deliverLoopback, errorSpans, wantDeliver, wantDead)
	}

	// The search.
	secrets := c.secrets()
	forms := 0
	for _, s := range secrets {
		forms += len(s.forms)
	}
	lines := 0
	for _, n := range logLines {
		lines += n
	}
	t.Logf("searched %d sources for %d credentials in %d forms: %d log lines (%v), %d spans in %d OTLP exports (%d bytes), %d OTLP metrics exports (%d bytes), %d history bytes of %d workflows",
		len(capt.sources), len(secrets), forms, lines, logLines, total("hyg-events")+total("hyg-delivery"), len(bodies), spanBytes, len(metrics), metricBytes, historyBytes, len(wids))
	if l := capt.leaks(secrets); len(l) > 0 {
		for _, s := range l[:min(len(l), 20)] {
			t.Error("LEAK: " + s)
		}
		t.Fatalf("%d leaks", len(l))
	}
}
