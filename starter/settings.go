package starter

import (
	"fmt"
	"log/slog"
	"net/url"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/activities"
	"github.com/fanout/fanout/internal/config"
	"github.com/fanout/fanout/internal/kafkatopic"
	"github.com/fanout/fanout/workers/webhook"
	"github.com/fanout/fanout/workflows"
)

// Kafka is the events topics' Kafka, as the environment sets it: the
// brokers, the events topic and its DLQ, TLS and SASL (`starter publish`,
// `starter redrive-events` and the bridge read it).
type Kafka struct {
	config.KafkaBrokers
	EventsTopic string `env:"FANOUT_EVENTS_TOPIC"`
	EventsDLQ   string `env:"FANOUT_EVENTS_DLQ_TOPIC"`
	config.KafkaSecurity
}

// SetDefaults sets the topics' defaults (config.Load calls it).
func (k *Kafka) SetDefaults() {
	k.EventsTopic, k.EventsDLQ = DefaultEventsTopic, DefaultEventsDLQTopic
}

// KafkaConn is the connection to the brokers of FANOUT_KAFKA_BROKERS with
// the configured TLS and SASL (checked: Settings' Validate fails on the
// same error).
func (k Kafka) KafkaConn() (kafkatopic.Conn, error) { return k.Conn(k.Brokers) }

// Check checks the brokers, the topics and the connection.
func (k Kafka) Check() error {
	if err := k.KafkaBrokers.Check(); err != nil {
		return err
	}
	if k.EventsTopic == "" {
		return fmt.Errorf("FANOUT_EVENTS_TOPIC: empty")
	}
	if k.EventsDLQ == "" {
		return fmt.Errorf("FANOUT_EVENTS_DLQ_TOPIC: empty")
	}
	if k.EventsTopic == k.EventsDLQ {
		return fmt.Errorf("FANOUT_EVENTS_DLQ_TOPIC: must differ from FANOUT_EVENTS_TOPIC")
	}
	_, err := k.KafkaConn()
	return err
}

// Settings are the bridge's settings as the environment sets them (`starter
// bridge`, and a worker with FANOUT_BRIDGE=true): config.Load reads them,
// Config turns them into the bridge's Config.
type Settings struct {
	Kafka
	config.RedisConn
	// EventTTL is how long the Redis event record keeps a fanned-out event
	// id: longer than the events topic's retention, so a replay of the
	// whole topic starts nothing again.
	EventTTL time.Duration `env:"FANOUT_EVENT_TTL"`
	Group    string        `env:"FANOUT_CONSUMER_GROUP"`
	// EventTypes are the types a stand-alone bridge (`starter bridge`)
	// accepts; the bridge inside a worker (FANOUT_BRIDGE=true) accepts the
	// types of the worker's registry instead.
	EventTypes      []string      `env:"FANOUT_EVENT_TYPES" envSeparator:","`
	MaxPayloadBytes int           `env:"FANOUT_MAX_PAYLOAD_BYTES" envDefault:"262144"`
	CommitInterval  time.Duration `env:"FANOUT_COMMIT_INTERVAL" envDefault:"200ms"`
	// ScheduleHorizon is how far ahead an event may be scheduled
	// (deliver_at, delay, the reschedule update); further is dead-lettered
	// (beyond_horizon). Default workflows.DefaultScheduleHorizon.
	ScheduleHorizon time.Duration `env:"FANOUT_SCHEDULE_HORIZON"`
	LogLevel        string        `env:"FANOUT_LOG_LEVEL"`
	// MetricsAddr serves Prometheus metrics at http://<addr>/metrics when
	// set (production: :9464); empty serves none.
	MetricsAddr string `env:"FANOUT_METRICS_ADDR"`
}

// SetDefaults sets the defaults named in code (config.Load calls it).
func (s *Settings) SetDefaults() {
	s.Kafka.SetDefaults()
	s.EventTTL = DefaultEventTTL
	s.Group = DefaultConsumerGroup
	s.EventTypes = []string{webhook.EventType} // the stock worker's type
	s.ScheduleHorizon = workflows.DefaultScheduleHorizon
	s.LogLevel = config.DefaultLogLevel
}

// MaxScheduleHorizon bounds FANOUT_SCHEDULE_HORIZON: a year, far beyond
// any broadcast worth holding as a waiting workflow (recurring ones are
// Temporal Schedules).
const MaxScheduleHorizon = 366 * 24 * time.Hour

// Validate checks the settings, naming the variable (config.Load calls it).
func (s *Settings) Validate() error {
	if err := s.Kafka.Check(); err != nil {
		return err
	}
	if err := s.RedisConn.Check(); err != nil {
		return err
	}
	if s.EventTTL < time.Hour {
		return fmt.Errorf("FANOUT_EVENT_TTL: %v is under 1h; it must outlast the events topic's retention", s.EventTTL)
	}
	if s.Group == "" {
		return fmt.Errorf("FANOUT_CONSUMER_GROUP: empty")
	}
	if len(s.EventTypes) == 0 {
		return fmt.Errorf("FANOUT_EVENT_TYPES: empty")
	}
	for _, t := range s.EventTypes {
		if err := fanout.ValidateType(t); err != nil {
			return fmt.Errorf("FANOUT_EVENT_TYPES: %w", err)
		}
	}
	if s.MaxPayloadBytes <= 0 || s.MaxPayloadBytes > 1<<20 {
		return fmt.Errorf("FANOUT_MAX_PAYLOAD_BYTES: %d outside 1..1048576 (Temporal payloads are limited to 2 MB)", s.MaxPayloadBytes)
	}
	if _, err := config.ParseLevel(s.LogLevel); err != nil {
		return fmt.Errorf("FANOUT_LOG_LEVEL: %w", err)
	}
	if s.ScheduleHorizon < time.Minute || s.ScheduleHorizon > MaxScheduleHorizon {
		return fmt.Errorf("FANOUT_SCHEDULE_HORIZON: %v outside 1m..%v", s.ScheduleHorizon, MaxScheduleHorizon)
	}
	return config.ValidateMetricsAddr(s.MetricsAddr)
}

// Config is the bridge's Config of these settings. types are the event
// types it accepts: the registry's when the bridge runs in a worker, nil
// for FANOUT_EVENT_TYPES. Its namespace is TemporalNamespace's. Its error
// is KafkaConn's or TemporalNamespace's.
func (s Settings) Config(rdb redis.UniversalClient, log *slog.Logger, types []string) (Config, error) {
	if types == nil {
		types = s.EventTypes
	}
	kc, err := s.KafkaConn()
	if err != nil {
		return Config{}, err
	}
	ns, err := TemporalNamespace()
	if err != nil {
		return Config{}, err
	}
	return Config{
		Namespace:      ns,
		Kafka:          kc,
		Topic:          s.EventsTopic,
		GroupID:        s.Group,
		DLQTopic:       s.EventsDLQ,
		Validator:      Validator{Types: types, MaxPayloadBytes: s.MaxPayloadBytes, Horizon: s.ScheduleHorizon},
		CommitInterval: s.CommitInterval,
		Events:         NewEventRecord(rdb, s.EventTTL),
		Yields:         activities.NewYieldSignals(rdb, log),
		Logger:         log,
	}, nil
}

// Support are the settings of the commands that answer for one recipient
// (`starter status`, `starter resend`): the workers' Redis, where the gate
// keeps its records, and the Temporal UI's address for links.
type Support struct {
	config.RedisConn
	// UIURL is the Temporal UI's base address (http://localhost:8233 for the
	// dev server, https://cloud.temporal.io for Temporal Cloud): each answer
	// links its batch workflow there (ui_url). Empty: no links.
	UIURL string `env:"FANOUT_UI_URL"`
}

// Validate checks the settings, naming the variable (config.Load calls it).
func (s *Support) Validate() error {
	if err := s.Check(); err != nil {
		return err
	}
	if s.UIURL == "" {
		return nil
	}
	u, err := url.Parse(s.UIURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return fmt.Errorf("FANOUT_UI_URL: %.200q is not an http(s) address without user, query or fragment", s.UIURL)
	}
	return nil
}
