package cli

import (
	"errors"
	"flag"
	"fmt"
	"testing"

	"github.com/fanout/fanout/internal/config"
	"github.com/fanout/fanout/starter"
	"github.com/fanout/fanout/workers"
)

func TestParseAndCode(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
	}{
		{nil, 0},
		{[]string{"-h"}, 0},
		{[]string{"--help"}, 0},
		{[]string{"-n", "3"}, 0},
		{[]string{"-n", "x"}, 2},
		{[]string{"-bogus"}, 2},
		{[]string{"extra"}, 2},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.Int("n", 1, "a number")
		err := Parse(fs, tc.args, Help{Name: "t"}, false)
		if got := Code(err); got != tc.code {
			t.Errorf("Parse(%q) = %v: exit %d, want %d", tc.args, err, got, tc.code)
		}
	}
	if Code(errors.New("boom")) != 1 || Code(fmt.Errorf("wrapped: %w", Usagef("x"))) != 2 {
		t.Error("Code: a failure is 1, a wrapped usage error 2")
	}
}

// EnvVars reads names, kinds and defaults (envDefault and Load's
// setDefaults) from the tags, embedded structs included, each name once.
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
