// Package config reads fanout's configuration from environment variables
// (FANOUT_* for fanout, TEMPORAL_* for the Temporal client, the same the
// temporal CLI reads) and validates it at start-up, naming the bad field.
package config

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/caarlos0/env/v11"
	"github.com/redis/go-redis/v9"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/contrib/envconfig"
	tlog "go.temporal.io/sdk/log"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/activities"
	"github.com/fanout/fanout/activities/limits"
	"github.com/fanout/fanout/internal/codecserver"
	"github.com/fanout/fanout/starter"
	"github.com/fanout/fanout/workers"
	"github.com/fanout/fanout/workers/webhook"
	"github.com/fanout/fanout/workflows/vocab"
)

// Kafka is the Kafka connection and topics.
type Kafka struct {
	Brokers     []string `env:"FANOUT_KAFKA_BROKERS" envSeparator:"," envDefault:"localhost:9092"`
	EventsTopic string   `env:"FANOUT_EVENTS_TOPIC"`
	EventsDLQ   string   `env:"FANOUT_EVENTS_DLQ_TOPIC"`
	KafkaSecurity
}

// setDefaults fills the defaults that are named elsewhere (topics, queues,
// the stock event type), so each is written once; Load applies them before
// reading the environment.
func (k *Kafka) setDefaults() {
	k.EventsTopic, k.EventsDLQ = starter.DefaultEventsTopic, starter.DefaultEventsDLQTopic
}

func (b *Bridge) setDefaults() {
	b.Kafka.setDefaults()
	b.Group = starter.DefaultConsumerGroup
	b.EventTypes = []string{webhook.EventType}
}

func (w *Worker) setDefaults() {
	w.DeliveriesDLQ = activities.DefaultDeliveriesDLQTopic
	w.Queues = vocab.Queues()
}

// Redis is the Redis connection of the dedup gate.
type Redis struct {
	RedisConn
	GateTTL time.Duration `env:"FANOUT_GATE_TTL" envDefault:"168h"`
}

// RedisConn is how the workers and the bridge reach Redis: one server,
// a cluster or Sentinel, with TLS and an ACL user (redis.go parses and
// checks it; its tags stay here, where the deploy test reads the names).
type RedisConn struct {
	// URL: redis[s]://[user[:password]@]host[:port][,host[:port]...][/db][?options].
	URL string `env:"FANOUT_REDIS_URL" envDefault:"redis://localhost:6379/0"`
	// Mode: auto, single, cluster or sentinel (RedisAuto...).
	Mode string `env:"FANOUT_REDIS_MODE" envDefault:"auto"`
	// MasterName: the primary's name the sentinels watch (sentinel mode).
	MasterName string `env:"FANOUT_REDIS_MASTER_NAME"`
	// PasswordFile: the Redis password in a file (a mounted Secret); it
	// overrides the URL's password.
	PasswordFile string `env:"FANOUT_REDIS_PASSWORD_FILE"`
	// SentinelPasswordFile: the sentinels' own password in a file.
	SentinelPasswordFile string `env:"FANOUT_REDIS_SENTINEL_PASSWORD_FILE"`
	// TLSCAFile: PEM certificates of a private CA trusted for rediss://
	// instead of the system's.
	TLSCAFile string `env:"FANOUT_REDIS_TLS_CA_FILE"`
	// AcceptEviction lets the workers, the bridge and `starter setup`
	// start against a Redis whose maxmemory-policy can evict fanout's keys
	// (volatile-*, allkeys-*), which CheckEviction otherwise refuses.
	AcceptEviction bool `env:"FANOUT_REDIS_ACCEPT_EVICTION" envDefault:"false"`
}

// Bridge configures `starter bridge`.
type Bridge struct {
	Kafka
	RedisConn
	// EventTTL is how long the Redis event record keeps a fanned-out event
	// id: longer than the events topic's retention, so a replay of the
	// whole topic starts nothing again.
	EventTTL time.Duration `env:"FANOUT_EVENT_TTL" envDefault:"720h"`
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
	ScheduleHorizon time.Duration `env:"FANOUT_SCHEDULE_HORIZON" envDefault:"720h"`
	LogLevel        string        `env:"FANOUT_LOG_LEVEL" envDefault:"info"`
	// MetricsAddr serves Prometheus metrics at http://<addr>/metrics when
	// set (production: :9464); empty serves none.
	MetricsAddr string `env:"FANOUT_METRICS_ADDR"`
}

// Worker configures the worker binary.
type Worker struct {
	Redis
	KafkaSecurity
	Brokers       []string `env:"FANOUT_KAFKA_BROKERS" envSeparator:"," envDefault:"localhost:9092"`
	DeliveriesDLQ string   `env:"FANOUT_DELIVERIES_DLQ_TOPIC"`
	// The stock webhook type's options (0: fanout's defaults).
	BatchSize          int `env:"FANOUT_BATCH_SIZE"`
	PageSize           int `env:"FANOUT_PAGE_SIZE"`
	Window             int `env:"FANOUT_WINDOW"`
	DeliverConcurrency int `env:"FANOUT_DELIVER_CONCURRENCY"`
	// LocalDeliveryMax: events of at most this many recipients are
	// delivered by the events worker in their first workflow task (0:
	// fanout's default, 100; -1: off).
	LocalDeliveryMax int `env:"FANOUT_LOCAL_DELIVERY_MAX"`
	// LargeBatchSize: batch size once an event has started a window of
	// batches (0: the page size, one batch per page; -1: FANOUT_BATCH_SIZE;
	// at most 20,000).
	LargeBatchSize int `env:"FANOUT_LARGE_BATCH_SIZE"`
	// Semantics is the webhook type's delivery guarantee: at-least-once
	// (the default) or at-most-once (needs FANOUT_DEDUP=true).
	Semantics fanout.Semantics `env:"FANOUT_SEMANTICS"`
	// MaxAttempts, RetryInitial and RetryMax tune delivery retries.
	MaxAttempts  int           `env:"FANOUT_MAX_ATTEMPTS" envDefault:"8"`
	RetryInitial time.Duration `env:"FANOUT_RETRY_INITIAL" envDefault:"1s"`
	RetryMax     time.Duration `env:"FANOUT_RETRY_MAX" envDefault:"1m"`
	// DestinationRate: the webhook type's default limit per destination
	// host, in calls per second shared by every delivery worker (0: none;
	// `starter limits` overrides it at run time). BreakerFailures: calls in
	// a row that fail before a host's breaker opens (0: 5; -1: no breaker);
	// BreakerCooldown: how long it stays open (0: 30s).
	DestinationRate float64       `env:"FANOUT_DESTINATION_RATE"`
	BreakerFailures int           `env:"FANOUT_BREAKER_FAILURES"`
	BreakerCooldown time.Duration `env:"FANOUT_BREAKER_COOLDOWN"`
	// LowPriorityBrake: while events of a higher priority deliver, this
	// worker delivers low-priority events at most this fast (the rate
	// grammar of `starter limits`: 1000/s, 60000/m; off: no brake; empty:
	// workers.DefaultLowPriorityBrake). See activities/brake.go.
	LowPriorityBrake string `env:"FANOUT_LOW_PRIORITY_BRAKE"`
	// Queues the process serves: events and/or the priorities high, normal, low.
	Queues []string `env:"FANOUT_QUEUES" envSeparator:","`
	// Bridge also runs the Kafka bridge in this process (configured by the
	// bridge's variables), starting each event eagerly on this process's
	// events worker: its first workflow task skips Temporal's matching.
	// Needs the events queue.
	Bridge bool `env:"FANOUT_BRIDGE"`

	RecipientsURL string `env:"FANOUT_RECIPIENTS_URL"`
	// RecipientsURLAllow: where an event's payload may point its
	// recipients_url: entries scheme://host[:port][/path/], matched on the
	// parsed URL (webhook.URLPrefix); empty: payloads cannot choose the
	// endpoint.
	RecipientsURLAllow []string `env:"FANOUT_RECIPIENTS_URL_ALLOW" envSeparator:","`
	// WebhookSecrets: Standard Webhooks secrets ("whsec_..."); when set,
	// the webhook type signs every delivery with each of them.
	WebhookSecrets []string `env:"FANOUT_WEBHOOK_SECRETS" envSeparator:","`
	// WebhookSecretsFile: the same secrets from a file (a mounted Secret),
	// one per line or comma-separated; not with FANOUT_WEBHOOK_SECRETS.
	WebhookSecretsFile string `env:"FANOUT_WEBHOOK_SECRETS_FILE"`
	// OutboundAllow: address ranges (CIDR or single addresses) the webhook
	// client may reach although they are loopback, private, link-local or
	// otherwise internal; empty: public addresses only.
	OutboundAllow string        `env:"FANOUT_OUTBOUND_ALLOW"`
	HTTPTimeout   time.Duration `env:"FANOUT_HTTP_TIMEOUT" envDefault:"10s"`
	BatchSlots    int           `env:"FANOUT_BATCH_SLOTS" envDefault:"8"`
	// LowPrioritySlots: batch slots of the low-priority queue (0: an eighth of FANOUT_BATCH_SLOTS, at least 1).
	LowPrioritySlots int    `env:"FANOUT_BATCH_SLOTS_LOW"`
	Dedup            bool   `env:"FANOUT_DEDUP" envDefault:"true"`
	LogLevel         string `env:"FANOUT_LOG_LEVEL" envDefault:"info"`
	// PprofAddr serves net/http/pprof (e.g. 127.0.0.1:6060) when set: a
	// loopback address only (profiles show memory, command lines and
	// timings; reach them with kubectl port-forward or ssh).
	PprofAddr string `env:"FANOUT_PPROF_ADDR"`
	// MetricsAddr serves Prometheus metrics at http://<addr>/metrics when
	// set (production: :9464); empty serves none.
	MetricsAddr string `env:"FANOUT_METRICS_ADDR"`
}

// Load sets the defaults of cfg (a pointer to one of the structs above),
// parses the environment into it and validates it.
func Load[T any](cfg *T) error {
	if d, ok := any(cfg).(interface{ setDefaults() }); ok {
		d.setDefaults()
	}
	if err := env.Parse(cfg); err != nil {
		return fmt.Errorf("config: %w", nameVars[T](err))
	}
	if v, ok := any(cfg).(interface{ Validate() error }); ok {
		if err := v.Validate(); err != nil {
			return fmt.Errorf("config: %w", err)
		}
	}
	return nil
}

// nameVars rewrites caarlos0/env parse errors so they name the environment
// variable, not the Go field.
func nameVars[T any](err error) error {
	var agg env.AggregateError
	if !errors.As(err, &agg) {
		return err
	}
	typ := reflect.TypeFor[T]()
	out := make([]error, 0, len(agg.Errors))
	for _, e := range agg.Errors {
		var pe env.ParseError
		if errors.As(e, &pe) {
			if f, ok := typ.FieldByName(pe.Name); ok {
				if key, _, _ := strings.Cut(f.Tag.Get("env"), ","); key != "" {
					e = fmt.Errorf("%s: cannot parse as %s: %w", key, pe.Type, pe.Err)
				}
			}
		}
		out = append(out, e)
	}
	return errors.Join(out...)
}

func validateBrokers(brokers []string) error {
	if len(brokers) == 0 {
		return fmt.Errorf("FANOUT_KAFKA_BROKERS: empty")
	}
	for _, b := range brokers {
		if _, _, err := net.SplitHostPort(b); err != nil {
			return fmt.Errorf("FANOUT_KAFKA_BROKERS: %q is not host:port", b)
		}
	}
	return nil
}

func (k Kafka) validate() error {
	if err := validateBrokers(k.Brokers); err != nil {
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

// Validate checks the bridge configuration.
func (b *Bridge) Validate() error {
	if err := b.Kafka.validate(); err != nil {
		return err
	}
	if err := b.RedisConn.validate(); err != nil {
		return err
	}
	if b.EventTTL < time.Hour {
		return fmt.Errorf("FANOUT_EVENT_TTL: %v is under 1h; it must outlast the events topic's retention", b.EventTTL)
	}
	if b.Group == "" {
		return fmt.Errorf("FANOUT_CONSUMER_GROUP: empty")
	}
	if len(b.EventTypes) == 0 {
		return fmt.Errorf("FANOUT_EVENT_TYPES: empty")
	}
	for _, t := range b.EventTypes {
		if err := fanout.ValidateType(t); err != nil {
			return fmt.Errorf("FANOUT_EVENT_TYPES: %w", err)
		}
	}
	if b.MaxPayloadBytes <= 0 || b.MaxPayloadBytes > 1<<20 {
		return fmt.Errorf("FANOUT_MAX_PAYLOAD_BYTES: %d outside 1..1048576 (Temporal payloads are limited to 2 MB)", b.MaxPayloadBytes)
	}
	if _, err := ParseLevel(b.LogLevel); err != nil {
		return fmt.Errorf("FANOUT_LOG_LEVEL: %w", err)
	}
	if b.ScheduleHorizon < time.Minute || b.ScheduleHorizon > maxScheduleHorizon {
		return fmt.Errorf("FANOUT_SCHEDULE_HORIZON: %v outside 1m..%v", b.ScheduleHorizon, maxScheduleHorizon)
	}
	if err := validateMetricsAddr(b.MetricsAddr); err != nil {
		return err
	}
	return nil
}

// maxScheduleHorizon bounds FANOUT_SCHEDULE_HORIZON: a year, far beyond
// any broadcast worth holding as a waiting workflow (recurring ones are
// Temporal Schedules).
const maxScheduleHorizon = 366 * 24 * time.Hour

// Validate checks the worker configuration.
func (w *Worker) Validate() error {
	if err := w.RedisConn.validate(); err != nil {
		return err
	}
	if w.GateTTL < time.Hour {
		return fmt.Errorf("FANOUT_GATE_TTL: %v is under 1h; it must outlast every retry of an event", w.GateTTL)
	}
	if err := validateBrokers(w.Brokers); err != nil {
		return err
	}
	if _, err := w.KafkaConn(); err != nil {
		return err
	}
	if w.DeliveriesDLQ == "" {
		return fmt.Errorf("FANOUT_DELIVERIES_DLQ_TOPIC: empty")
	}
	if math.IsNaN(w.DestinationRate) || w.DestinationRate > limits.MaxRate {
		return fmt.Errorf("FANOUT_DESTINATION_RATE: %v outside 0..%v", w.DestinationRate, limits.MaxRate)
	}
	if _, err := w.LowPriorityBrakeRate(); err != nil {
		return err
	}
	if err := w.TypeOptions().Validate(); err != nil {
		// TypeOptions name the field; say which variable set it.
		return errors.New(typeOptionVars.Replace(err.Error()))
	}
	if w.Semantics == fanout.AtMostOnce && !w.Dedup {
		return fmt.Errorf("FANOUT_SEMANTICS: %s needs the gate; FANOUT_DEDUP is false", w.Semantics)
	}
	if w.PprofAddr != "" && !codecserver.IsLoopback(w.PprofAddr) {
		return fmt.Errorf("FANOUT_PPROF_ADDR: %q is not a loopback host:port (127.0.0.1:6060, [::1]:6060 or localhost:6060); profiles are for this machine only", w.PprofAddr)
	}
	if w.MaxAttempts < 1 {
		return fmt.Errorf("FANOUT_MAX_ATTEMPTS: %d is under 1", w.MaxAttempts)
	}
	if w.RetryInitial <= 0 || w.RetryMax < w.RetryInitial {
		return fmt.Errorf("FANOUT_RETRY_INITIAL / FANOUT_RETRY_MAX: want 0 < initial <= max, got %v and %v", w.RetryInitial, w.RetryMax)
	}
	if len(w.Queues) == 0 {
		return fmt.Errorf("FANOUT_QUEUES: empty")
	}
	if w.Bridge && !slices.Contains(w.Queues, vocab.QueueEvents) {
		return fmt.Errorf("FANOUT_BRIDGE: the bridge in the worker starts events on its own events worker; add events to FANOUT_QUEUES (%s)", strings.Join(w.Queues, ","))
	}
	for _, q := range w.Queues {
		if _, err := vocab.TaskQueue(q); err != nil {
			return fmt.Errorf("FANOUT_QUEUES: %w", err)
		}
	}
	if w.LowPrioritySlots < 0 {
		return fmt.Errorf("FANOUT_BATCH_SLOTS_LOW: %d is negative", w.LowPrioritySlots)
	}
	if w.BatchSlots < 1 {
		return fmt.Errorf("FANOUT_BATCH_SLOTS: %d is under 1", w.BatchSlots)
	}
	if _, err := webhook.ParseAllow(w.OutboundAllow); err != nil {
		return fmt.Errorf("FANOUT_OUTBOUND_ALLOW: %w", err)
	}
	if _, err := webhook.ParseURLPrefixes(w.RecipientsURLAllow); err != nil {
		return fmt.Errorf("FANOUT_RECIPIENTS_URL_ALLOW: %w (want scheme://host[:port][/path/])", err)
	}
	if _, err := w.signer(); err != nil {
		return err
	}
	if w.HTTPTimeout <= 0 {
		return fmt.Errorf("FANOUT_HTTP_TIMEOUT: must be positive")
	}
	if _, err := ParseLevel(w.LogLevel); err != nil {
		return fmt.Errorf("FANOUT_LOG_LEVEL: %w", err)
	}
	if err := validateMetricsAddr(w.MetricsAddr); err != nil {
		return err
	}
	return nil
}

// validateMetricsAddr checks FANOUT_METRICS_ADDR: empty, or host:port.
func validateMetricsAddr(addr string) error {
	if addr == "" {
		return nil
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("FANOUT_METRICS_ADDR: %q is not [host]:port (e.g. :9464)", addr)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		return fmt.Errorf("FANOUT_METRICS_ADDR: %q has no valid port", addr)
	}
	return nil
}

// typeOptionVars maps TypeOptions' field names in its errors to the
// variables that set them.
var typeOptionVars = strings.NewReplacer(
	"BatchSize:", "FANOUT_BATCH_SIZE:", "PageSize:", "FANOUT_PAGE_SIZE:", "Window:", "FANOUT_WINDOW:",
	"DeliverConcurrency:", "FANOUT_DELIVER_CONCURRENCY:", "MaxAttempts:", "FANOUT_MAX_ATTEMPTS:",
	"LocalDeliveryMax:", "FANOUT_LOCAL_DELIVERY_MAX:", "LargeBatchSize:", "FANOUT_LARGE_BATCH_SIZE:",
	"Semantics:", "FANOUT_SEMANTICS:", "CallTimeout:", "FANOUT_HTTP_TIMEOUT:",
	"DestinationRate:", "FANOUT_DESTINATION_RATE:", "BreakerCooldown:", "FANOUT_BREAKER_COOLDOWN:")

// Webhook is the stock webhook type's handler as configured.
func (w *Worker) Webhook() *webhook.Handler {
	allow, _ := webhook.ParseAllow(w.OutboundAllow) // checked by Validate
	h := &webhook.Handler{
		RecipientsURL:      w.RecipientsURL,
		RecipientsURLAllow: w.RecipientsURLAllow,
		Client:             webhook.NewClient(w.HTTPTimeout, w.deliveriesInFlight(), allow...),
	}
	h.Signer, _ = w.signer() // checked by Validate
	return h
}

// signer is the webhook signer of FANOUT_WEBHOOK_SECRETS or
// FANOUT_WEBHOOK_SECRETS_FILE; nil when neither is set.
func (w *Worker) signer() (*webhook.Signer, error) {
	secrets, name := w.WebhookSecrets, "FANOUT_WEBHOOK_SECRETS"
	if w.WebhookSecretsFile != "" {
		if len(secrets) > 0 {
			return nil, fmt.Errorf("FANOUT_WEBHOOK_SECRETS_FILE: set together with FANOUT_WEBHOOK_SECRETS; use one")
		}
		name = "FANOUT_WEBHOOK_SECRETS_FILE"
		s, err := readSecretFile(name, w.WebhookSecretsFile)
		if err != nil {
			return nil, err
		}
		secrets = secretList(s)
	}
	if len(secrets) == 0 {
		return nil, nil
	}
	s, err := webhook.NewSigner(secrets...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return s, nil
}

// deliveriesInFlight is the most deliveries the process makes at once: the
// batch slots of each queue it serves (the events queue's fast path runs in
// as many local-activity slots) times the concurrency of a batch.
func (w *Worker) deliveriesInFlight() int {
	conc := w.DeliverConcurrency
	if conc <= 0 {
		conc = fanout.DefaultDeliverConcurrency
	}
	slots := 0
	for _, q := range w.Queues {
		switch q {
		case string(fanout.PriorityLow):
			slots += cmp.Or(w.LowPrioritySlots, workers.DefaultLowPrioritySlots(w.BatchSlots))
		default:
			slots += w.BatchSlots
		}
	}
	return max(slots*conc, 64)
}

// TypeOptions are the stock webhook type's options.
func (w *Worker) TypeOptions() fanout.TypeOptions {
	return fanout.TypeOptions{
		BatchSize: w.BatchSize, PageSize: w.PageSize, Window: w.Window,
		DeliverConcurrency: w.DeliverConcurrency, MaxAttempts: w.MaxAttempts,
		LocalDeliveryMax: w.LocalDeliveryMax, LargeBatchSize: w.LargeBatchSize,
		CallTimeout:     w.HTTPTimeout,
		Semantics:       w.Semantics,
		DestinationRate: w.DestinationRate, BreakerFailures: w.BreakerFailures, BreakerCooldown: w.BreakerCooldown,
	}
}

// StarterConfig is the bridge configuration of the binaries' environment.
// types are the event types it accepts: the registry's when the bridge runs
// in a worker, nil for FANOUT_EVENT_TYPES. Its error is KafkaConn's.
func (cfg Bridge) StarterConfig(rdb redis.UniversalClient, log *slog.Logger, types []string) (starter.Config, error) {
	if types == nil {
		types = cfg.EventTypes
	}
	kc, err := cfg.KafkaConn()
	if err != nil {
		return starter.Config{}, err
	}
	return starter.Config{
		Kafka:          kc,
		Topic:          cfg.EventsTopic,
		GroupID:        cfg.Group,
		DLQTopic:       cfg.EventsDLQ,
		Validator:      starter.Validator{Types: types, MaxPayloadBytes: cfg.MaxPayloadBytes, Horizon: cfg.ScheduleHorizon},
		CommitInterval: cfg.CommitInterval,
		Events:         starter.NewEventRecord(rdb, cfg.EventTTL),
		Logger:         log,
	}, nil
}

// ParseLevel parses a slog level name.
func ParseLevel(s string) (slog.Level, error) {
	var l slog.Level
	err := l.UnmarshalText([]byte(strings.ToUpper(s)))
	return l, err
}

// Logger returns a JSON slog logger at level.
func Logger(level string) *slog.Logger {
	l, _ := ParseLevel(level)
	return slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: l}))
}

// DialTemporal connects to Temporal with the TEMPORAL_* environment (address,
// namespace, TLS, API key), logging through logger, and encrypts payloads
// with the keys of FANOUT_CODEC_* when set (WithKeyring). Each of with
// adjusts the options before dialing (telemetry.Telemetry.ClientOptions adds
// tracing and metrics).
func DialTemporal(ctx context.Context, logger *slog.Logger, with ...func(*client.Options)) (client.Client, error) {
	opts, err := envconfig.LoadDefaultClientOptions()
	if err != nil {
		return nil, fmt.Errorf("temporal config (TEMPORAL_*): %w", err)
	}
	opts.Logger = tlog.NewStructuredLogger(logger)
	keys, err := LoadKeyring()
	if err != nil {
		return nil, err
	}
	WithKeyring(keys)(&opts)
	if err := applyAPIKeyFile(&opts); err != nil {
		return nil, err
	}
	for _, f := range with {
		f(&opts)
	}
	c, err := client.DialContext(ctx, opts)
	if err != nil {
		addr := opts.HostPort
		if addr == "" {
			addr = client.DefaultHostPort
		}
		return nil, fmt.Errorf("connect to Temporal at %s (TEMPORAL_ADDRESS): %w", addr, err)
	}
	return c, nil
}

// LowPriorityBrakeRate is FANOUT_LOW_PRIORITY_BRAKE as workers.Options
// takes it: recipients per second, 0 for the default, -1 for off.
func (w *Worker) LowPriorityBrakeRate() (float64, error) {
	if strings.TrimSpace(w.LowPriorityBrake) == "" {
		return 0, nil
	}
	r, err := limits.ParseRate(w.LowPriorityBrake)
	if err != nil {
		return 0, fmt.Errorf("FANOUT_LOW_PRIORITY_BRAKE: %w", err)
	}
	if r == 0 {
		return -1, nil
	}
	return r, nil
}
