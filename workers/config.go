package workers

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/activities"
	"github.com/fanout/fanout/activities/gate"
	"github.com/fanout/fanout/activities/limits"
	"github.com/fanout/fanout/internal/codecserver"
	"github.com/fanout/fanout/internal/config"
	"github.com/fanout/fanout/workflows/vocab"
)

// Config is the worker pool as the environment sets it (the worker binary;
// `starter redrive` reads its Kafka and deliveries DLQ): the Redis of the
// gate, the deliveries DLQ, the retry backoff, the queues and their slots,
// the low-priority brake. config.Load reads it; the event types the pool
// serves have their own settings (webhook.Config for the stock type).
type Config struct {
	config.RedisConn
	GateTTL time.Duration `env:"FANOUT_GATE_TTL"`
	config.KafkaSecurity
	config.KafkaBrokers
	DeliveriesDLQ string `env:"FANOUT_DELIVERIES_DLQ_TOPIC"`
	// RetryInitial and RetryMax tune the delivery retries' backoff.
	// (default: activities.DefaultBackoff's).
	RetryInitial time.Duration `env:"FANOUT_RETRY_INITIAL"`
	RetryMax     time.Duration `env:"FANOUT_RETRY_MAX"`
	// The low-priority brake (default: DefaultLowPriorityBrake).
	limits.BrakeSettings
	// Queues the process serves: events and/or the priorities high, normal, low.
	Queues []string `env:"FANOUT_QUEUES" envSeparator:","`
	// Bridge also runs the Kafka bridge in this process (configured by the
	// bridge's variables, starter.Settings), starting each event eagerly on
	// this process's events worker: its first workflow task skips
	// Temporal's matching. Needs the events queue.
	Bridge     bool `env:"FANOUT_BRIDGE"`
	BatchSlots int  `env:"FANOUT_BATCH_SLOTS"`
	// LowPrioritySlots: batch slots of the low-priority queue (0: an eighth of FANOUT_BATCH_SLOTS, at least 1).
	LowPrioritySlots int    `env:"FANOUT_BATCH_SLOTS_LOW"`
	Dedup            bool   `env:"FANOUT_DEDUP" envDefault:"true"`
	LogLevel         string `env:"FANOUT_LOG_LEVEL"`
	// PprofAddr serves net/http/pprof (e.g. 127.0.0.1:6060) when set: a
	// loopback address only (profiles show memory, command lines and
	// timings; reach them with kubectl port-forward or ssh).
	PprofAddr string `env:"FANOUT_PPROF_ADDR"`
	// MetricsAddr serves Prometheus metrics at http://<addr>/metrics when
	// set (production: :9464); empty serves none.
	MetricsAddr string `env:"FANOUT_METRICS_ADDR"`
}

// SetDefaults sets the defaults named in code (config.Load calls it).
func (c *Config) SetDefaults() {
	c.GateTTL = gate.DefaultTTL
	c.DeliveriesDLQ = activities.DefaultDeliveriesDLQTopic
	c.RetryInitial, c.RetryMax = activities.DefaultBackoff.Initial, activities.DefaultBackoff.Max
	c.LowPriorityBrake = limits.FormatRate(DefaultLowPriorityBrake)
	c.Queues = vocab.Queues()
	c.BatchSlots = DefaultBatchSlots
	c.LogLevel = config.DefaultLogLevel
}

// Kafka is the connection to the deliveries DLQ's Kafka.
func (c Config) Kafka() config.Kafka {
	return config.Kafka{KafkaBrokers: c.KafkaBrokers, KafkaSecurity: c.KafkaSecurity}
}

// Validate checks the settings, naming the variable (config.Load calls it).
func (c *Config) Validate() error {
	if err := c.RedisConn.Check(); err != nil {
		return err
	}
	if c.GateTTL < time.Hour {
		return fmt.Errorf("FANOUT_GATE_TTL: %v is under 1h; it must outlast every retry of an event", c.GateTTL)
	}
	if err := c.Kafka().Check(); err != nil {
		return err
	}
	if c.DeliveriesDLQ == "" {
		return fmt.Errorf("FANOUT_DELIVERIES_DLQ_TOPIC: empty")
	}
	if _, err := c.LowPriorityBrakeRate(); err != nil {
		return err
	}
	if c.PprofAddr != "" && !codecserver.IsLoopback(c.PprofAddr) {
		return fmt.Errorf("FANOUT_PPROF_ADDR: %q is not a loopback host:port (127.0.0.1:6060, [::1]:6060 or localhost:6060); profiles are for this machine only", c.PprofAddr)
	}
	if c.RetryInitial <= 0 || c.RetryMax < c.RetryInitial {
		return fmt.Errorf("FANOUT_RETRY_INITIAL / FANOUT_RETRY_MAX: want 0 < initial <= max, got %v and %v", c.RetryInitial, c.RetryMax)
	}
	if len(c.Queues) == 0 {
		return fmt.Errorf("FANOUT_QUEUES: empty")
	}
	if c.Bridge && !slices.Contains(c.Queues, vocab.QueueEvents) {
		return fmt.Errorf("FANOUT_BRIDGE: the bridge in the worker starts events on its own events worker; add events to FANOUT_QUEUES (%s)", strings.Join(c.Queues, ","))
	}
	for _, q := range c.Queues {
		if _, err := vocab.TaskQueues(q); err != nil {
			return fmt.Errorf("FANOUT_QUEUES: %w", err)
		}
	}
	if c.LowPrioritySlots < 0 {
		return fmt.Errorf("FANOUT_BATCH_SLOTS_LOW: %d is negative", c.LowPrioritySlots)
	}
	if c.BatchSlots < 1 {
		return fmt.Errorf("FANOUT_BATCH_SLOTS: %d is under 1", c.BatchSlots)
	}
	if _, err := config.ParseLevel(c.LogLevel); err != nil {
		return fmt.Errorf("FANOUT_LOG_LEVEL: %w", err)
	}
	return config.ValidateMetricsAddr(c.MetricsAddr)
}

// CheckType checks that the pool can serve a type of options o (the
// variable named is the stock type's): an at-most-once type needs the gate.
func (c *Config) CheckType(o fanout.TypeOptions) error {
	if o.Semantics == fanout.AtMostOnce && !c.Dedup {
		return fmt.Errorf("FANOUT_SEMANTICS: %s needs the gate; FANOUT_DEDUP is false", o.Semantics)
	}
	return nil
}

// Backoff is the delivery retries' backoff: activities.DefaultBackoff with
// FANOUT_RETRY_INITIAL and FANOUT_RETRY_MAX.
func (c *Config) Backoff() activities.Backoff {
	b := activities.DefaultBackoff
	b.Initial, b.Max = c.RetryInitial, c.RetryMax
	return b
}

// DeliveriesInFlight is the most deliveries the process makes at once, for
// batches of concurrency conc (0: fanout's default): the batch slots of
// each queue it serves (the events queue's fast path runs in as many
// local-activity slots) times conc, at least 64. A type's HTTP client
// keeps as many idle connections.
func (c *Config) DeliveriesInFlight(conc int) int {
	if conc <= 0 {
		conc = fanout.DefaultDeliverConcurrency
	}
	slots := 0
	for _, q := range c.Queues {
		switch q {
		case string(fanout.PriorityLow):
			slots += cmp.Or(c.LowPrioritySlots, DefaultLowPrioritySlots(c.BatchSlots))
		default:
			slots += c.BatchSlots
		}
	}
	return max(slots*conc, 64)
}
