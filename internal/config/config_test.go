package config

import (
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/workers/webhook"
	"github.com/fanout/fanout/workflows"
	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"
)

// clearFanoutEnv unsets every FANOUT_* variable for the test (t.Setenv
// restores them afterwards), so defaults are what the test sees.
func clearFanoutEnv(t *testing.T) {
	t.Helper()
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "FANOUT_") {
			t.Setenv(k, "")
			os.Unsetenv(k)
		}
	}
}

func TestLoadDefaults(t *testing.T) {
	clearFanoutEnv(t)

	var b Bridge
	if err := Load(&b); err != nil {
		t.Fatalf("Load(Bridge) with defaults: %v", err)
	}
	var w Worker
	if err := Load(&w); err != nil {
		t.Fatalf("Load(Worker) with defaults: %v", err)
	}
	cases := []struct {
		field     string
		got, want any
	}{
		{"Bridge.Brokers", b.Brokers, []string{"localhost:9092"}},
		{"Bridge.EventsTopic", b.EventsTopic, "fanout-events"},
		{"Bridge.EventsDLQ", b.EventsDLQ, "fanout-events-dlq"},
		{"Bridge.Group", b.Group, "fanout-bridge"},
		{"Bridge.EventTypes", b.EventTypes, []string{"webhook"}},
		{"Bridge.MaxPayloadBytes", b.MaxPayloadBytes, 262144},
		{"Bridge.CommitInterval", b.CommitInterval, 200 * time.Millisecond},
		// The env default and the workflow's (for inputs without one) agree.
		{"Bridge.ScheduleHorizon", b.ScheduleHorizon, workflows.DefaultScheduleHorizon},
		{"Bridge.LogLevel", b.LogLevel, "info"},
		{"Worker.URL", w.URL, "redis://localhost:6379/0"},
		{"Worker.GateTTL", w.GateTTL, 168 * time.Hour},
		{"Worker.Queues", w.Queues, []string{"events", "high", "normal", "low"}},
		{"Worker.RecipientsURL", w.RecipientsURL, ""},
		// The env default and the type's (for a handler of one's own) agree.
		{"Worker.HTTPTimeout", w.HTTPTimeout, fanout.DefaultCallTimeout},
		// The heartbeat and the yields are derived from the HTTP timeout.
		{"Worker.TypeOptions().CallTimeout", w.TypeOptions().CallTimeout, w.HTTPTimeout},
		{"Worker.BatchSlots", w.BatchSlots, 8},
		{"Worker.Dedup", w.Dedup, true},
		{"Worker.LogLevel", w.LogLevel, "info"},
	}
	for _, c := range cases {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("default %s = %#v, want %#v", c.field, c.got, c.want)
		}
	}
}

func TestLoadGoodValues(t *testing.T) {
	cases := []struct {
		name  string
		env   map[string]string
		check func(t *testing.T, b Bridge, w Worker)
	}{
		{
			name: "several brokers",
			env:  map[string]string{"FANOUT_KAFKA_BROKERS": "k1:9092,k2:9093"},
			check: func(t *testing.T, b Bridge, _ Worker) {
				if want := []string{"k1:9092", "k2:9093"}; !reflect.DeepEqual(b.Brokers, want) {
					t.Errorf("Brokers = %v, want %v", b.Brokers, want)
				}
			},
		},
		{
			name: "queue subset and gate TTL of exactly 1h",
			env:  map[string]string{"FANOUT_QUEUES": "high,low", "FANOUT_GATE_TTL": "1h"},
			check: func(t *testing.T, _ Bridge, w Worker) {
				if want := []string{"high", "low"}; !reflect.DeepEqual(w.Queues, want) {
					t.Errorf("Queues = %v, want %v", w.Queues, want)
				}
				if w.GateTTL != time.Hour {
					t.Errorf("GateTTL = %v, want 1h", w.GateTTL)
				}
			},
		},
		{
			name: "payload limit at its maximum, upper-case log level",
			env:  map[string]string{"FANOUT_MAX_PAYLOAD_BYTES": "1048576", "FANOUT_LOG_LEVEL": "DEBUG"},
			check: func(t *testing.T, b Bridge, w Worker) {
				if b.MaxPayloadBytes != 1<<20 {
					t.Errorf("MaxPayloadBytes = %d, want %d", b.MaxPayloadBytes, 1<<20)
				}
				if b.LogLevel != "DEBUG" || w.LogLevel != "DEBUG" {
					t.Errorf("LogLevel = %q / %q, want DEBUG", b.LogLevel, w.LogLevel)
				}
			},
		},
		{
			name: "redis URL, slots, dedup off",
			env: map[string]string{"FANOUT_REDIS_URL": "rediss://user:pw@redis.example:6380/2",
				"FANOUT_BATCH_SLOTS": "1", "FANOUT_DEDUP": "false", "FANOUT_RECIPIENTS_URL": "http://r.example/x"},
			check: func(t *testing.T, _ Bridge, w Worker) {
				if w.URL != "rediss://user:pw@redis.example:6380/2" || w.BatchSlots != 1 || w.Dedup ||
					w.RecipientsURL != "http://r.example/x" {
					t.Errorf("Worker = %+v", w)
				}
			},
		},
		{
			name: "at-most-once for the webhook type",
			env:  map[string]string{"FANOUT_SEMANTICS": "at-most-once"},
			check: func(t *testing.T, _ Bridge, w Worker) {
				if got := w.TypeOptions().Semantics; got != fanout.AtMostOnce {
					t.Errorf("TypeOptions().Semantics = %q, want %q", got, fanout.AtMostOnce)
				}
			},
		},
		{
			name: "low-priority brake: a rate, off, or the default",
			env:  map[string]string{"FANOUT_LOW_PRIORITY_BRAKE": "60000/m"},
			check: func(t *testing.T, _ Bridge, w Worker) {
				for _, tc := range []struct {
					set  string
					want float64
				}{{"60000/m", 1000}, {"off", -1}, {"", 0}, {" 250 ", 250}} {
					w.LowPriorityBrake = tc.set
					if got, err := w.LowPriorityBrakeRate(); err != nil || got != tc.want {
						t.Errorf("FANOUT_LOW_PRIORITY_BRAKE=%q: %v, %v; want %v", tc.set, got, err, tc.want)
					}
				}
			},
		},
		{
			name: "empty value takes the default",
			env:  map[string]string{"FANOUT_BATCH_SLOTS": "", "FANOUT_EVENTS_TOPIC": ""},
			check: func(t *testing.T, b Bridge, w Worker) {
				if w.BatchSlots != 8 || b.EventsTopic != "fanout-events" {
					t.Errorf("BatchSlots = %d, EventsTopic = %q; want the defaults", w.BatchSlots, b.EventsTopic)
				}
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			clearFanoutEnv(t)
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			var b Bridge
			if err := Load(&b); err != nil {
				t.Fatalf("Load(Bridge): %v", err)
			}
			var w Worker
			if err := Load(&w); err != nil {
				t.Fatalf("Load(Worker): %v", err)
			}
			c.check(t, b, w)
		})
	}
}

type target int

const (
	bridge target = iota
	worker
)

type badValueCase struct {
	name   string
	target target
	env    map[string]string
	want   string // the variable the error must name
}

func runBadValues(t *testing.T, cases []badValueCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			clearFanoutEnv(t)
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			var err error
			if c.target == bridge {
				var b Bridge
				err = Load(&b)
			} else {
				var w Worker
				err = Load(&w)
			}
			if err == nil {
				t.Fatalf("Load with %v succeeded, want an error naming %s", c.env, c.want)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Load with %v: error %q does not name %s", c.env, err, c.want)
			}
		})
	}
}

// TestLoadBadValues: every value that validation rejects makes Load fail with
// an error that names the environment variable to fix.
func TestLoadBadValues(t *testing.T) {
	cases := []badValueCase{
		// Bridge: validation
		{"broker without port", bridge, map[string]string{"FANOUT_KAFKA_BROKERS": "nohostport"}, "FANOUT_KAFKA_BROKERS"},
		{"one bad broker among good", bridge, map[string]string{"FANOUT_KAFKA_BROKERS": "k1:9092,nohostport"}, "FANOUT_KAFKA_BROKERS"},
		{"DLQ topic equal to the default events topic", bridge, map[string]string{"FANOUT_EVENTS_DLQ_TOPIC": "fanout-events"}, "FANOUT_EVENTS_DLQ_TOPIC"},
		{"event type outside the type grammar", bridge, map[string]string{"FANOUT_EVENT_TYPES": "webhook,a/b"}, "FANOUT_EVENT_TYPES"},
		{"DLQ topic equal to the events topic", bridge, map[string]string{"FANOUT_EVENTS_TOPIC": "ev", "FANOUT_EVENTS_DLQ_TOPIC": "ev"}, "FANOUT_EVENTS_DLQ_TOPIC"},
		{"payload limit zero", bridge, map[string]string{"FANOUT_MAX_PAYLOAD_BYTES": "0"}, "FANOUT_MAX_PAYLOAD_BYTES"},
		{"schedule horizon under a minute", bridge, map[string]string{"FANOUT_SCHEDULE_HORIZON": "30s"}, "FANOUT_SCHEDULE_HORIZON"},
		{"schedule horizon over a year", bridge, map[string]string{"FANOUT_SCHEDULE_HORIZON": "9000h"}, "FANOUT_SCHEDULE_HORIZON"},
		{"schedule horizon not a duration", bridge, map[string]string{"FANOUT_SCHEDULE_HORIZON": "a month"}, "FANOUT_SCHEDULE_HORIZON"},
		{"payload limit negative", bridge, map[string]string{"FANOUT_MAX_PAYLOAD_BYTES": "-1"}, "FANOUT_MAX_PAYLOAD_BYTES"},
		{"payload limit over 1 MiB", bridge, map[string]string{"FANOUT_MAX_PAYLOAD_BYTES": "1048577"}, "FANOUT_MAX_PAYLOAD_BYTES"},
		{"bridge log level", bridge, map[string]string{"FANOUT_LOG_LEVEL": "loud"}, "FANOUT_LOG_LEVEL"},

		// Worker: validation
		{"unknown queue", worker, map[string]string{"FANOUT_QUEUES": "events,urgent"}, "FANOUT_QUEUES"},
		{"gate TTL under 1h", worker, map[string]string{"FANOUT_GATE_TTL": "1m"}, "FANOUT_GATE_TTL"},
		{"gate TTL zero", worker, map[string]string{"FANOUT_GATE_TTL": "0s"}, "FANOUT_GATE_TTL"},
		{"batch slots zero", worker, map[string]string{"FANOUT_BATCH_SLOTS": "0"}, "FANOUT_BATCH_SLOTS"},
		{"batch slots negative", worker, map[string]string{"FANOUT_BATCH_SLOTS": "-3"}, "FANOUT_BATCH_SLOTS"},
		{"worker log level", worker, map[string]string{"FANOUT_LOG_LEVEL": "loud"}, "FANOUT_LOG_LEVEL"},
		{"redis URL scheme", worker, map[string]string{"FANOUT_REDIS_URL": "ftp://x"}, "FANOUT_REDIS_URL"},
		{"HTTP timeout zero", worker, map[string]string{"FANOUT_HTTP_TIMEOUT": "0s"}, "FANOUT_HTTP_TIMEOUT"},
		{"bridge without the events queue", worker, map[string]string{"FANOUT_BRIDGE": "true", "FANOUT_QUEUES": "high,low"}, "FANOUT_BRIDGE"},
		{"local delivery limit over the batch limit", worker, map[string]string{"FANOUT_LOCAL_DELIVERY_MAX": "6000"}, "FANOUT_LOCAL_DELIVERY_MAX"},
		{"large batches under the batch size", worker, map[string]string{"FANOUT_BATCH_SIZE": "800", "FANOUT_LARGE_BATCH_SIZE": "500"}, "FANOUT_LARGE_BATCH_SIZE"},
		{"large batches over the page limit", worker, map[string]string{"FANOUT_LARGE_BATCH_SIZE": "20001"}, "FANOUT_LARGE_BATCH_SIZE"},
		{"a signing secret without whsec_", worker, map[string]string{"FANOUT_WEBHOOK_SECRETS": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw,MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}, "FANOUT_WEBHOOK_SECRETS"},
		{"window over its limit", worker, map[string]string{"FANOUT_WINDOW": "501"}, "FANOUT_WINDOW"},
		{"HTTP timeout negative", worker, map[string]string{"FANOUT_HTTP_TIMEOUT": "-1s"}, "FANOUT_HTTP_TIMEOUT"},
		// A batch heartbeats between calls and yields a call's time before
		// its attempt's deadline (DeliverTimeout, 5m): a call of 3m leaves
		// neither.
		{"HTTP timeout a batch cannot heartbeat and yield within", worker, map[string]string{"FANOUT_HTTP_TIMEOUT": "3m"}, "FANOUT_HTTP_TIMEOUT"},
		{"outbound allow-list with a bad prefix", worker, map[string]string{"FANOUT_OUTBOUND_ALLOW": "10.0.0.0/33"}, "FANOUT_OUTBOUND_ALLOW"},
		{"outbound allow-list with a host name", worker, map[string]string{"FANOUT_OUTBOUND_ALLOW": "metadata.internal"}, "FANOUT_OUTBOUND_ALLOW"},
		{"recipients URL allow-list with a file URL", worker, map[string]string{"FANOUT_RECIPIENTS_URL_ALLOW": "file:///etc/"}, "FANOUT_RECIPIENTS_URL_ALLOW"},
		{"unknown delivery semantics", worker, map[string]string{"FANOUT_SEMANTICS": "exactly-once"}, "FANOUT_SEMANTICS"},
		{"at-most-once without the gate", worker, map[string]string{"FANOUT_SEMANTICS": "at-most-once", "FANOUT_DEDUP": "false"}, "FANOUT_SEMANTICS"},
		{"low-priority brake not a rate", worker, map[string]string{"FANOUT_LOW_PRIORITY_BRAKE": "fast"}, "FANOUT_LOW_PRIORITY_BRAKE"},
		{"low-priority brake negative", worker, map[string]string{"FANOUT_LOW_PRIORITY_BRAKE": "-5/s"}, "FANOUT_LOW_PRIORITY_BRAKE"},
		{"pprof on every interface", worker, map[string]string{"FANOUT_PPROF_ADDR": ":6060"}, "FANOUT_PPROF_ADDR"},
		{"pprof on a routable address", worker, map[string]string{"FANOUT_PPROF_ADDR": "0.0.0.0:6060"}, "FANOUT_PPROF_ADDR"},
		{"pprof on a host name", worker, map[string]string{"FANOUT_PPROF_ADDR": "pprof.example:6060"}, "FANOUT_PPROF_ADDR"},
		{"pprof without a port", worker, map[string]string{"FANOUT_PPROF_ADDR": "127.0.0.1"}, "FANOUT_PPROF_ADDR"},
	}
	runBadValues(t, cases)
}

// TestLoadUnparsableValues: values the env parser itself rejects (not a
// duration, not a number) must also name the environment variable, not only
// the Go field.
func TestLoadUnparsableValues(t *testing.T) {
	cases := []badValueCase{
		{"gate TTL not a duration", worker, map[string]string{"FANOUT_GATE_TTL": "abc"}, "FANOUT_GATE_TTL"},
		{"batch slots not a number", worker, map[string]string{"FANOUT_BATCH_SLOTS": "many"}, "FANOUT_BATCH_SLOTS"},
		{"dedup not a bool", worker, map[string]string{"FANOUT_DEDUP": "maybe"}, "FANOUT_DEDUP"},
		{"payload limit not a number", bridge, map[string]string{"FANOUT_MAX_PAYLOAD_BYTES": "lots"}, "FANOUT_MAX_PAYLOAD_BYTES"},
		{"commit interval not a duration", bridge, map[string]string{"FANOUT_COMMIT_INTERVAL": "soon"}, "FANOUT_COMMIT_INTERVAL"},
	}
	runBadValues(t, cases)
}

func TestParseLevel(t *testing.T) {
	cases := []struct {
		in      string
		want    slog.Level
		wantErr bool
	}{
		{"debug", slog.LevelDebug, false},
		{"info", slog.LevelInfo, false},
		{"WARN", slog.LevelWarn, false},
		{"Error", slog.LevelError, false},
		{"loud", 0, true},
		{"", 0, true},
	}
	for _, c := range cases {
		got, err := ParseLevel(c.in)
		if (err != nil) != c.wantErr {
			t.Errorf("ParseLevel(%q) error = %v, want error %v", c.in, err, c.wantErr)
			continue
		}
		if !c.wantErr && got != c.want {
			t.Errorf("ParseLevel(%q) = %v, want %v", c.in, got, c.want)
		}
	}
}

// TestBridgeTypesComeFromTheRegistry: the bridge inside a worker accepts the
// event types of the worker's registry, whatever FANOUT_EVENT_TYPES says; a
// stand-alone bridge (no registry) accepts FANOUT_EVENT_TYPES.
func TestBridgeTypesComeFromTheRegistry(t *testing.T) {
	clearFanoutEnv(t)
	t.Setenv("FANOUT_EVENT_TYPES", "from-env")
	var b Bridge
	if err := Load(&b); err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled here
	defer rdb.Close()
	log := slog.New(slog.DiscardHandler)

	inWorker, err := b.StarterConfig(rdb, log, []string{"orders", "webhook"})
	if err != nil {
		t.Fatal(err)
	}
	if got := inWorker.Validator.Types; !reflect.DeepEqual(got, []string{"orders", "webhook"}) {
		t.Errorf("bridge in a worker accepts %v, want the registry's [orders webhook]", got)
	}
	if _, err := inWorker.Validator.Parse(kafka.Message{Value: []byte(`{"id":"1","type":"from-env"}`)}); err == nil {
		t.Error("bridge in a worker accepted a type that only FANOUT_EVENT_TYPES names")
	}
	standalone, err := b.StarterConfig(rdb, log, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := standalone.Validator.Types; !reflect.DeepEqual(got, []string{"from-env"}) {
		t.Errorf("stand-alone bridge accepts %v, want FANOUT_EVENT_TYPES [from-env]", got)
	}
}

// TestDeliveriesInFlight: the webhook client's idle pool is sized to the
// deliveries the process makes at once, so connections are reused instead
// of closed after most requests (issue 11: a pool of 256 under 512
// deliveries left thousands of sockets in TIME_WAIT).
func TestDeliveriesInFlight(t *testing.T) {
	for _, c := range []struct {
		queues          []string
		slots, low, con int
		want            int
	}{
		// The events queue's fast path delivers in its batch slots too.
		{[]string{"events", "high", "normal", "low"}, 8, 0, 0, (8 + 8 + 8 + 1) * fanout.DefaultDeliverConcurrency},
		{[]string{"high", "normal"}, 8, 0, 0, 16 * fanout.DefaultDeliverConcurrency},
		{[]string{"low"}, 8, 5, 100, 500},
		{[]string{"normal"}, 32, 0, 16, 512},
		{[]string{"events"}, 8, 0, 0, 8 * fanout.DefaultDeliverConcurrency},
	} {
		w := Worker{Queues: c.queues, BatchSlots: c.slots, LowPrioritySlots: c.low, DeliverConcurrency: c.con}
		if got := w.deliveriesInFlight(); got != c.want {
			t.Errorf("%v, %d slots (low %d), concurrency %d: %d in flight, want %d", c.queues, c.slots, c.low, c.con, got, c.want)
		}
	}
}

// TestRedisURLErrorsHideThePassword: a malformed FANOUT_REDIS_URL fails at
// start-up naming the variable, without printing the password it holds.
func TestRedisURLErrorsHideThePassword(t *testing.T) {
	for _, raw := range []string{
		"redis://user:s3cret@redis.example:notaport/0",
		"rediss://:s3cret@redis.example:6380/abc",
		"http://user:s3cret@redis.example",
		"redis://user:s3cret@redis.example:6379/0?nosuch=1",
	} {
		for _, load := range []func() error{
			func() error { clearFanoutEnv(t); t.Setenv("FANOUT_REDIS_URL", raw); var w Worker; return Load(&w) },
			func() error { _, err := RedisClient(RedisConn{URL: raw}); return err },
		} {
			err := load()
			if err == nil || !strings.Contains(err.Error(), "FANOUT_REDIS_URL") || strings.Contains(err.Error(), "s3cret") {
				t.Errorf("%s: error %v; want one naming FANOUT_REDIS_URL without the password", raw, err)
			}
		}
	}
	if got := redactURL("redis://user:s3cret@host:6379/0"); got != "redis://user:xxxxx@host:6379/0" {
		t.Errorf("redactURL = %q", got)
	}
}

// TestWebhookSecretsSign: FANOUT_WEBHOOK_SECRETS gives the stock webhook
// type a signer.
func TestWebhookSecretsSign(t *testing.T) {
	clearFanoutEnv(t)
	t.Setenv("FANOUT_WEBHOOK_SECRETS", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	var w Worker
	if err := Load(&w); err != nil {
		t.Fatal(err)
	}
	if w.Webhook().Signer == nil {
		t.Fatal("no signer with FANOUT_WEBHOOK_SECRETS set")
	}
	clearFanoutEnv(t)
	var plain Worker
	if err := Load(&plain); err != nil || plain.Webhook().Signer != nil {
		t.Fatalf("a signer without FANOUT_WEBHOOK_SECRETS (%v)", err)
	}
}

// TestWebhookSecretsFile: FANOUT_WEBHOOK_SECRETS_FILE (a mounted Secret, one
// secret per line) signs with every secret in it, and its errors name the
// variable without showing the file's content.
func TestWebhookSecretsFile(t *testing.T) {
	const a, b = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_c2Vjb25kLXNlY3JldC1mb3Itcm90YXRpb24="
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	clearFanoutEnv(t)
	t.Setenv("FANOUT_WEBHOOK_SECRETS_FILE", file("two", a+"\n"+b+"\n"))
	var w Worker
	if err := Load(&w); err != nil {
		t.Fatal(err)
	}
	sig := w.Webhook().Signer.Sign("msg_1", 1700000000, []byte(`{}`))
	for _, sec := range []string{a, b} {
		if err := webhook.Verify([]string{sec}, "msg_1", "1700000000", sig, []byte(`{}`), time.Unix(1700000000, 0), time.Minute); err != nil {
			t.Errorf("signature %q does not verify with one of the file's secrets: %v", sig, err)
		}
	}

	const leaked = "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw-not-whsec"
	runBadValues(t, []badValueCase{
		{"secrets file missing", worker, map[string]string{"FANOUT_WEBHOOK_SECRETS_FILE": filepath.Join(dir, "absent")}, "FANOUT_WEBHOOK_SECRETS_FILE"},
		{"secrets file empty", worker, map[string]string{"FANOUT_WEBHOOK_SECRETS_FILE": file("empty", "\n")}, "FANOUT_WEBHOOK_SECRETS_FILE"},
		{"secrets file is a directory", worker, map[string]string{"FANOUT_WEBHOOK_SECRETS_FILE": dir}, "FANOUT_WEBHOOK_SECRETS_FILE"},
		{"secrets file and variable both set", worker, map[string]string{"FANOUT_WEBHOOK_SECRETS_FILE": file("one", a), "FANOUT_WEBHOOK_SECRETS": a}, "FANOUT_WEBHOOK_SECRETS_FILE"},
		{"bad secret in the file", worker, map[string]string{"FANOUT_WEBHOOK_SECRETS_FILE": file("bad", leaked)}, "FANOUT_WEBHOOK_SECRETS_FILE"},
	})
	clearFanoutEnv(t)
	t.Setenv("FANOUT_WEBHOOK_SECRETS_FILE", filepath.Join(dir, "bad"))
	var bad Worker
	if err := Load(&bad); err == nil || strings.Contains(err.Error(), "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw") {
		t.Fatalf("a bad secret file: error %v, want one that does not show the secret", err)
	}
}
