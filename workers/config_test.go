package workers_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/activities"
	"github.com/fanout/fanout/activities/gate"
	"github.com/fanout/fanout/internal/config"
	"github.com/fanout/fanout/internal/config/configtest"
	"github.com/fanout/fanout/workers"
	"github.com/fanout/fanout/workers/webhook"
)

// loadWorker loads the settings as the worker binary does: the pool's and
// the stock type's, and checks the pool can serve the type.
func loadWorker() error {
	var c workers.Config
	var h webhook.Config
	if err := config.Load(&c, &h); err != nil {
		return err
	}
	return c.CheckType(h.TypeOptions())
}

func TestConfigDefaults(t *testing.T) {
	configtest.ClearFanoutEnv(t)
	var w workers.Config
	if err := config.Load(&w); err != nil {
		t.Fatalf("Load(Config) with defaults: %v", err)
	}
	cases := []struct {
		field     string
		got, want any
	}{
		{"URL", w.URL, "redis://localhost:6379/0"},
		{"GateTTL", w.GateTTL, 168 * time.Hour},
		{"Queues", w.Queues, []string{"events", "high", "normal", "low"}},
		{"DeliveriesDLQ", w.DeliveriesDLQ, "fanout-deliveries-dlq"},
		{"BatchSlots", w.BatchSlots, 8},
		{"Dedup", w.Dedup, true},
		{"LogLevel", w.LogLevel, "info"},
		{"MetricsAddr", w.MetricsAddr, ""},
		// One default per knob: the backoff's, the brake's and the gate's
		// are the constants the pool uses without configuration.
		{"Backoff()", w.Backoff(), activities.DefaultBackoff},
		{"LowPriorityBrake", w.LowPriorityBrake, "1000/s"},
		{"GateTTL", w.GateTTL, gate.DefaultTTL},
		{"BatchSlots", w.BatchSlots, workers.DefaultBatchSlots},
	}
	if r, err := w.LowPriorityBrakeRate(); err != nil || r != workers.DefaultLowPriorityBrake {
		t.Errorf("LowPriorityBrakeRate() = %v, %v; want DefaultLowPriorityBrake", r, err)
	}
	for _, c := range cases {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("default %s = %#v, want %#v", c.field, c.got, c.want)
		}
	}
}

func TestConfigGoodValues(t *testing.T) {
	configtest.ClearFanoutEnv(t)
	t.Setenv("FANOUT_QUEUES", "high,low")
	t.Setenv("FANOUT_GATE_TTL", "1h")
	t.Setenv("FANOUT_REDIS_URL", "rediss://user:pw@redis.example:6380/2")
	t.Setenv("FANOUT_BATCH_SLOTS", "1")
	t.Setenv("FANOUT_DEDUP", "false")
	t.Setenv("FANOUT_METRICS_ADDR", ":9464")
	var w workers.Config
	if err := config.Load(&w); err != nil {
		t.Fatal(err)
	}
	if want := []string{"high", "low"}; !reflect.DeepEqual(w.Queues, want) || w.GateTTL != time.Hour ||
		w.URL != "rediss://user:pw@redis.example:6380/2" || w.BatchSlots != 1 || w.Dedup || w.MetricsAddr != ":9464" {
		t.Errorf("Config = %+v", w)
	}
	configtest.ClearFanoutEnv(t)
	t.Setenv("FANOUT_BATCH_SLOTS", "") // empty: the default
	if err := config.Load(&w); err != nil || w.BatchSlots != 8 {
		t.Errorf("BatchSlots = %d (%v); want the default", w.BatchSlots, err)
	}
}

// TestLowPriorityBrake: a rate, off, or the default.
func TestLowPriorityBrake(t *testing.T) {
	var w workers.Config
	for _, tc := range []struct {
		set  string
		want float64
	}{{"60000/m", 1000}, {"off", -1}, {"", 0}, {" 250 ", 250}} {
		w.LowPriorityBrake = tc.set
		if got, err := w.LowPriorityBrakeRate(); err != nil || got != tc.want {
			t.Errorf("FANOUT_LOW_PRIORITY_BRAKE=%q: %v, %v; want %v", tc.set, got, err, tc.want)
		}
	}
}

// TestConfigBadValues: every value that validation or parsing rejects
// makes the worker's Load fail with an error that names the variable.
func TestConfigBadValues(t *testing.T) {
	configtest.RunBadValues(t, loadWorker, []configtest.BadValue{
		configtest.Bad("unknown queue", map[string]string{"FANOUT_QUEUES": "events,urgent"}, "FANOUT_QUEUES"),
		configtest.Bad("gate TTL under 1h", map[string]string{"FANOUT_GATE_TTL": "1m"}, "FANOUT_GATE_TTL"),
		configtest.Bad("gate TTL zero", map[string]string{"FANOUT_GATE_TTL": "0s"}, "FANOUT_GATE_TTL"),
		configtest.Bad("batch slots zero", map[string]string{"FANOUT_BATCH_SLOTS": "0"}, "FANOUT_BATCH_SLOTS"),
		configtest.Bad("batch slots negative", map[string]string{"FANOUT_BATCH_SLOTS": "-3"}, "FANOUT_BATCH_SLOTS"),
		configtest.Bad("worker log level", map[string]string{"FANOUT_LOG_LEVEL": "loud"}, "FANOUT_LOG_LEVEL"),
		configtest.Bad("redis URL scheme", map[string]string{"FANOUT_REDIS_URL": "ftp://x"}, "FANOUT_REDIS_URL"),
		configtest.Bad("bridge without the events queue", map[string]string{"FANOUT_BRIDGE": "true", "FANOUT_QUEUES": "high,low"}, "FANOUT_BRIDGE"),
		configtest.Bad("at-most-once without the gate", map[string]string{"FANOUT_SEMANTICS": "at-most-once", "FANOUT_DEDUP": "false"}, "FANOUT_SEMANTICS"),
		configtest.Bad("low-priority brake not a rate", map[string]string{"FANOUT_LOW_PRIORITY_BRAKE": "fast"}, "FANOUT_LOW_PRIORITY_BRAKE"),
		configtest.Bad("low-priority brake negative", map[string]string{"FANOUT_LOW_PRIORITY_BRAKE": "-5/s"}, "FANOUT_LOW_PRIORITY_BRAKE"),
		configtest.Bad("pprof on every interface", map[string]string{"FANOUT_PPROF_ADDR": ":6060"}, "FANOUT_PPROF_ADDR"),
		configtest.Bad("pprof on a routable address", map[string]string{"FANOUT_PPROF_ADDR": "0.0.0.0:6060"}, "FANOUT_PPROF_ADDR"),
		configtest.Bad("pprof on a host name", map[string]string{"FANOUT_PPROF_ADDR": "pprof.example:6060"}, "FANOUT_PPROF_ADDR"),
		configtest.Bad("pprof without a port", map[string]string{"FANOUT_PPROF_ADDR": "127.0.0.1"}, "FANOUT_PPROF_ADDR"),
		configtest.Bad("retry max under initial", map[string]string{"FANOUT_RETRY_INITIAL": "2m", "FANOUT_RETRY_MAX": "1m"}, "FANOUT_RETRY_INITIAL"),
		configtest.Bad("gate TTL not a duration", map[string]string{"FANOUT_GATE_TTL": "abc"}, "FANOUT_GATE_TTL"),
		configtest.Bad("batch slots not a number", map[string]string{"FANOUT_BATCH_SLOTS": "many"}, "FANOUT_BATCH_SLOTS"),
		configtest.Bad("dedup not a bool", map[string]string{"FANOUT_DEDUP": "maybe"}, "FANOUT_DEDUP"),
		configtest.Bad("metrics addr without port", map[string]string{"FANOUT_METRICS_ADDR": "9464"}, "FANOUT_METRICS_ADDR"),
		configtest.Bad("metrics port not a number", map[string]string{"FANOUT_METRICS_ADDR": ":http-alt"}, "FANOUT_METRICS_ADDR"),
		configtest.Bad("broker without port", map[string]string{"FANOUT_KAFKA_BROKERS": "nohostport"}, "FANOUT_KAFKA_BROKERS"),
	})
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
		w := workers.Config{Queues: c.queues, BatchSlots: c.slots, LowPrioritySlots: c.low}
		if got := w.DeliveriesInFlight(c.con); got != c.want {
			t.Errorf("%v, %d slots (low %d), concurrency %d: %d in flight, want %d", c.queues, c.slots, c.low, c.con, got, c.want)
		}
	}
}
