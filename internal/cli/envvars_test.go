package cli_test

import (
	"testing"

	"github.com/fanout/fanout/internal/config"
	"github.com/fanout/fanout/starter"
	"github.com/fanout/fanout/workers"
)

// EnvVars reads names, kinds and defaults (envDefault and Load's
// setDefaults) from the tags, embedded structs included, each name once.
// (An external test: workers imports cli for its Main, so an internal test
// importing workers would be an import cycle.)
func TestEnvVars(t *testing.T) {
	got := map[string]config.EnvVar{}
	for _, e := range config.EnvVars(starter.Settings{}, workers.Config{}) {
		if _, dup := got[e.Name]; dup {
			t.Fatalf("%s listed twice", e.Name)
		}
		got[e.Name] = e
	}
	for _, want := range []config.EnvVar{
		{Name: "FANOUT_EVENTS_TOPIC", Kind: "string", Default: "fanout-events"},  // setDefaults
		{Name: "FANOUT_KAFKA_BROKERS", Kind: "list", Default: "localhost:9092"},  // envDefault
		{Name: "FANOUT_QUEUES", Kind: "list", Default: "events,high,normal,low"}, // setDefaults, a list
		{Name: "FANOUT_GATE_TTL", Kind: "duration", Default: "168h"},             // embedded Redis
		{Name: "FANOUT_REDIS_TLS_CA_FILE", Kind: "string"},                       // embedded twice
		{Name: "FANOUT_KAFKA_SASL_PASSWORD_FILE", Kind: "string"},                // KafkaSecurity
		{Name: "FANOUT_DEDUP", Kind: "bool", Default: "true"},
		{Name: "FANOUT_BATCH_SLOTS", Kind: "int", Default: "8"},
	} {
		if got[want.Name] != want {
			t.Errorf("%s: got %+v, want %+v", want.Name, got[want.Name], want)
		}
	}
}
