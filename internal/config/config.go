// Package config holds fanout's connections (Temporal, Kafka, Redis, the
// codec keys) and the machinery that reads configuration from environment
// variables (FANOUT_* for fanout, TEMPORAL_* for the Temporal client, the
// same the temporal CLI reads) and validates it at start-up, naming the bad
// variable. The stages own their settings: starter.Settings (the bridge),
// workers.Config (the worker pool), webhook.Config (the stock event type)
// and the flow-control settings of activities/limits declare their
// variables as `env` tags and their defaults beside the code that uses
// them; Load reads them and EnvVars lists them for -h and the README test.
// This package imports no stage.
package config

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/contrib/envconfig"
	tlog "go.temporal.io/sdk/log"
)

// KafkaBrokers is FANOUT_KAFKA_BROKERS, the Kafka cluster every command
// that touches Kafka reaches.
type KafkaBrokers struct {
	Brokers []string `env:"FANOUT_KAFKA_BROKERS" envSeparator:"," envDefault:"localhost:9092"`
}

// Check checks that the brokers are host:port.
func (b KafkaBrokers) Check() error {
	if len(b.Brokers) == 0 {
		return fmt.Errorf("FANOUT_KAFKA_BROKERS: empty")
	}
	for _, h := range b.Brokers {
		if _, _, err := net.SplitHostPort(h); err != nil {
			return fmt.Errorf("FANOUT_KAFKA_BROKERS: %q is not host:port", h)
		}
	}
	return nil
}

// Kafka is the connection to Kafka: the brokers, TLS and SASL.
type Kafka struct {
	KafkaBrokers
	KafkaSecurity
}

// Check checks the brokers and builds the connection as KafkaConn does,
// reading the files it names.
func (k Kafka) Check() error {
	if err := k.KafkaBrokers.Check(); err != nil {
		return err
	}
	_, err := k.KafkaConn()
	return err
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

// Check checks c as start-up does: the URL, the mode and the files.
func (c RedisConn) Check() error {
	_, err := c.setup()
	return err
}

// DefaultLogLevel is FANOUT_LOG_LEVEL's default, every process's.
const DefaultLogLevel = "info"

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

// ValidateMetricsAddr checks FANOUT_METRICS_ADDR: empty, or host:port.
func ValidateMetricsAddr(addr string) error {
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
