package starter_test

import (
	"log/slog"
	"reflect"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"

	"github.com/fanout/fanout/internal/config"
	"github.com/fanout/fanout/internal/config/configtest"
	"github.com/fanout/fanout/starter"
	"github.com/fanout/fanout/workflows"
)

func loadSettings() error {
	var s starter.Settings
	return config.Load(&s)
}

func TestSettingsDefaults(t *testing.T) {
	configtest.ClearFanoutEnv(t)
	var b starter.Settings
	if err := config.Load(&b); err != nil {
		t.Fatalf("Load(Settings) with defaults: %v", err)
	}
	cases := []struct {
		field     string
		got, want any
	}{
		{"Brokers", b.Brokers, []string{"localhost:9092"}},
		{"EventsTopic", b.EventsTopic, "fanout-events"},
		{"EventsDLQ", b.EventsDLQ, "fanout-events-dlq"},
		{"Group", b.Group, "fanout-bridge"},
		{"EventTypes", b.EventTypes, []string{"webhook"}},
		{"MaxPayloadBytes", b.MaxPayloadBytes, 262144},
		{"CommitInterval", b.CommitInterval, 200 * time.Millisecond},
		// The env default and the workflow's (for inputs without one) agree.
		{"ScheduleHorizon", b.ScheduleHorizon, workflows.DefaultScheduleHorizon},
		{"LogLevel", b.LogLevel, "info"},
		{"MetricsAddr", b.MetricsAddr, ""},
	}
	for _, c := range cases {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("default %s = %#v, want %#v", c.field, c.got, c.want)
		}
	}
}

func TestSettingsGoodValues(t *testing.T) {
	configtest.ClearFanoutEnv(t)
	t.Setenv("FANOUT_KAFKA_BROKERS", "k1:9092,k2:9093")
	t.Setenv("FANOUT_MAX_PAYLOAD_BYTES", "1048576")
	t.Setenv("FANOUT_LOG_LEVEL", "DEBUG")
	t.Setenv("FANOUT_EVENTS_TOPIC", "") // empty: the default
	t.Setenv("FANOUT_METRICS_ADDR", "[::1]:0")
	var b starter.Settings
	if err := config.Load(&b); err != nil {
		t.Fatal(err)
	}
	if want := []string{"k1:9092", "k2:9093"}; !reflect.DeepEqual(b.Brokers, want) {
		t.Errorf("Brokers = %v, want %v", b.Brokers, want)
	}
	if b.MaxPayloadBytes != 1<<20 || b.LogLevel != "DEBUG" || b.EventsTopic != "fanout-events" || b.MetricsAddr != "[::1]:0" {
		t.Errorf("Settings = %+v", b)
	}
}

// TestSettingsBadValues: every value that validation or parsing rejects
// makes Load fail with an error that names the environment variable to fix.
func TestSettingsBadValues(t *testing.T) {
	configtest.RunBadValues(t, loadSettings, []configtest.BadValue{
		configtest.Bad("broker without port", map[string]string{"FANOUT_KAFKA_BROKERS": "nohostport"}, "FANOUT_KAFKA_BROKERS"),
		configtest.Bad("one bad broker among good", map[string]string{"FANOUT_KAFKA_BROKERS": "k1:9092,nohostport"}, "FANOUT_KAFKA_BROKERS"),
		configtest.Bad("DLQ topic equal to the default events topic", map[string]string{"FANOUT_EVENTS_DLQ_TOPIC": "fanout-events"}, "FANOUT_EVENTS_DLQ_TOPIC"),
		configtest.Bad("event type outside the type grammar", map[string]string{"FANOUT_EVENT_TYPES": "webhook,a/b"}, "FANOUT_EVENT_TYPES"),
		configtest.Bad("DLQ topic equal to the events topic", map[string]string{"FANOUT_EVENTS_TOPIC": "ev", "FANOUT_EVENTS_DLQ_TOPIC": "ev"}, "FANOUT_EVENTS_DLQ_TOPIC"),
		configtest.Bad("payload limit zero", map[string]string{"FANOUT_MAX_PAYLOAD_BYTES": "0"}, "FANOUT_MAX_PAYLOAD_BYTES"),
		configtest.Bad("schedule horizon under a minute", map[string]string{"FANOUT_SCHEDULE_HORIZON": "30s"}, "FANOUT_SCHEDULE_HORIZON"),
		configtest.Bad("schedule horizon over a year", map[string]string{"FANOUT_SCHEDULE_HORIZON": "9000h"}, "FANOUT_SCHEDULE_HORIZON"),
		configtest.Bad("schedule horizon not a duration", map[string]string{"FANOUT_SCHEDULE_HORIZON": "a month"}, "FANOUT_SCHEDULE_HORIZON"),
		configtest.Bad("payload limit negative", map[string]string{"FANOUT_MAX_PAYLOAD_BYTES": "-1"}, "FANOUT_MAX_PAYLOAD_BYTES"),
		configtest.Bad("payload limit over 1 MiB", map[string]string{"FANOUT_MAX_PAYLOAD_BYTES": "1048577"}, "FANOUT_MAX_PAYLOAD_BYTES"),
		configtest.Bad("bridge log level", map[string]string{"FANOUT_LOG_LEVEL": "loud"}, "FANOUT_LOG_LEVEL"),
		configtest.Bad("event TTL under 1h", map[string]string{"FANOUT_EVENT_TTL": "30m"}, "FANOUT_EVENT_TTL"),
		configtest.Bad("payload limit not a number", map[string]string{"FANOUT_MAX_PAYLOAD_BYTES": "lots"}, "FANOUT_MAX_PAYLOAD_BYTES"),
		configtest.Bad("commit interval not a duration", map[string]string{"FANOUT_COMMIT_INTERVAL": "soon"}, "FANOUT_COMMIT_INTERVAL"),
		configtest.Bad("metrics addr without port", map[string]string{"FANOUT_METRICS_ADDR": "localhost"}, "FANOUT_METRICS_ADDR"),
		configtest.Bad("metrics port out of range", map[string]string{"FANOUT_METRICS_ADDR": ":70000"}, "FANOUT_METRICS_ADDR"),
		configtest.Bad("redis URL scheme", map[string]string{"FANOUT_REDIS_URL": "ftp://x"}, "FANOUT_REDIS_URL"),
	})
}

// TestBridgeTypesComeFromTheRegistry: the bridge inside a worker accepts the
// event types of the worker's registry, whatever FANOUT_EVENT_TYPES says; a
// stand-alone bridge (no registry) accepts FANOUT_EVENT_TYPES.
func TestBridgeTypesComeFromTheRegistry(t *testing.T) {
	configtest.ClearFanoutEnv(t)
	t.Setenv("FANOUT_EVENT_TYPES", "from-env")
	var b starter.Settings
	if err := config.Load(&b); err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled here
	defer func() { _ = rdb.Close() }()
	log := slog.New(slog.DiscardHandler)

	inWorker, err := b.Config(rdb, log, []string{"orders", "webhook"})
	if err != nil {
		t.Fatal(err)
	}
	if got := inWorker.Validator.Types; !reflect.DeepEqual(got, []string{"orders", "webhook"}) {
		t.Errorf("bridge in a worker accepts %v, want the registry's [orders webhook]", got)
	}
	if _, err := inWorker.Validator.Parse(kafka.Message{Value: []byte(`{"id":"1","type":"from-env"}`)}); err == nil {
		t.Error("bridge in a worker accepted a type that only FANOUT_EVENT_TYPES names")
	}
	standalone, err := b.Config(rdb, log, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := standalone.Validator.Types; !reflect.DeepEqual(got, []string{"from-env"}) {
		t.Errorf("stand-alone bridge accepts %v, want FANOUT_EVENT_TYPES [from-env]", got)
	}
	kc, err := b.KafkaConn()
	if err != nil || !reflect.DeepEqual(standalone.Kafka, kc) {
		t.Errorf("Config's Kafka %+v, want KafkaConn's %+v (%v)", standalone.Kafka, kc, err)
	}
}
