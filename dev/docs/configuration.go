// Package docs generates and checks fanout's user documentation (README.md
// and docs/): docs/configuration.md is generated from the configuration
// structs the commands read (Configuration, written by dev/cmd/docs, `go
// tool task docs`), and the tests keep the pages' links, anchors, length,
// wording and examples true to the code.
package docs

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/fanout/fanout/internal/codecserver"
	"github.com/fanout/fanout/internal/config"
	"github.com/fanout/fanout/starter"
	"github.com/fanout/fanout/types"
	"github.com/fanout/fanout/workers"
	"github.com/fanout/fanout/workers/webhook"
)

// ConfigurationPage is the generated page, relative to the repository root.
const ConfigurationPage = "docs/configuration.md"

// temporalClient are the variables of every process that connects to
// Temporal (cli.TemporalGroup in the commands' -h): the temporal CLI's
// variables and the payload keys.
func temporalClient() []config.EnvVar {
	return append(slices.Clone(config.TemporalEnv), config.EnvVars(config.Codec{})...)
}

// OTelVars are the OpenTelemetry variables fanout's code reads by name
// (internal/telemetry: which exporters to make, and the resource it names
// with its own default service name); the exporters read the other
// standard OTEL_* variables themselves.
var OTelVars = []config.EnvVar{
	{Name: "OTEL_EXPORTER_OTLP_ENDPOINT", Kind: "string"},
	{Name: "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", Kind: "string"},
	{Name: "OTEL_EXPORTER_OTLP_PROTOCOL", Kind: "string", Default: "http/protobuf"},
	{Name: "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", Kind: "string"},
	{Name: "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", Kind: "string"},
	{Name: "OTEL_TRACES_EXPORTER", Kind: "string"},
	{Name: "OTEL_METRICS_EXPORTER", Kind: "string"},
	{Name: "OTEL_SERVICE_NAME", Kind: "string"},
	{Name: "OTEL_RESOURCE_ATTRIBUTES", Kind: "string"},
	{Name: "OTEL_SDK_DISABLED", Kind: "bool"},
}

// reader is a process (or command) and the variables it reads, as its -h
// lists them.
type reader struct {
	name string
	vars []config.EnvVar
}

// readers are the processes and commands and what each reads: the same
// configuration structs their -h prints (workers/cmd/worker,
// starter/cmd/starter); the worker's GOGC default is workers.DefaultGCPercent.
func readers(root string) ([]reader, error) {
	gogc := strconv.Itoa(workers.DefaultGCPercent)
	cat := func(lists ...[]config.EnvVar) []config.EnvVar { return slices.Concat(lists...) }
	worker := cat(config.EnvVars(workers.Config{}, webhook.Config{}, types.Settings{}),
		[]config.EnvVar{{Name: "GOGC", Kind: "int", Default: gogc}, {Name: "GOMEMLIMIT", Kind: "string"}},
		temporalClient(), OTelVars)
	return []reader{
		{"worker", worker},
		// The bridge's variables are the worker's too with FANOUT_BRIDGE=true.
		{"bridge", cat(config.EnvVars(starter.Settings{}, types.Settings{}), temporalClient(), OTelVars)},
		{"publish", cat(config.EnvVars(starter.Kafka{}), OTelVars)},
		{"redrive", cat(config.EnvVars(workers.Config{}, webhook.Config{}), temporalClient())},
		{"redrive-events", config.EnvVars(starter.Kafka{})},
		{"replay", temporalClient()},
		{"limits", config.EnvVars(config.RedisConn{})},
		{"setup", cat(temporalClient(), config.EnvVars(config.RedisConn{}, starter.Topics{}))},
		{"codec-server", config.EnvVars(codecserver.Config{}, config.Codec{})},
		{"status", cat(config.EnvVars(starter.Support{}), temporalClient())},
		{"resend", cat(config.EnvVars(starter.Support{}, webhook.Outbound{}, config.Codec{}), []config.EnvVar{{Name: "USER", Kind: "string"}}, temporalClient())},
	}, nil
}

// Variable is a row of the page.
type Variable struct {
	config.EnvVar
	ReadBy []string
}

// Variables are every variable the processes read, each once, with the
// processes that read it, in the order the readers list them.
func Variables(root string) ([]Variable, error) {
	rs, err := readers(root)
	if err != nil {
		return nil, err
	}
	var out []Variable
	index := map[string]int{}
	for _, r := range rs {
		for _, e := range r.vars {
			i, ok := index[e.Name]
			if !ok {
				index[e.Name] = len(out)
				out = append(out, Variable{EnvVar: e})
				i = len(out) - 1
			}
			v := &out[i]
			if e.Default != "" && v.Default == "" {
				v.Default = e.Default
			} else if e.Default != "" && e.Default != v.Default {
				return nil, fmt.Errorf("%s has two defaults in the code: %q and %q", e.Name, v.Default, e.Default)
			}
			if !slices.Contains(v.ReadBy, r.name) {
				v.ReadBy = append(v.ReadBy, r.name)
			}
		}
	}
	return out, nil
}

// section is a part of the page: the variables of structs (or names) not
// already placed in an earlier section.
type section struct {
	title, intro string
	vars         []config.EnvVar
}

func names(ns ...string) []config.EnvVar {
	out := make([]config.EnvVar, len(ns))
	for i, n := range ns {
		out[i] = config.EnvVar{Name: n}
	}
	return out
}

// MustSet are the variables every deployment sets: their defaults are a
// laptop's (localhost) or nothing.
var MustSet = []string{"TEMPORAL_ADDRESS", "TEMPORAL_NAMESPACE", "FANOUT_KAFKA_BROKERS", "FANOUT_REDIS_URL", "FANOUT_RECIPIENTS_URL"}

// part is a level-2 heading of the page and its sections.
type part struct {
	title, intro string
	sections     []section
}

func parts() []part {
	return []part{
		{title: "Must set", intro: "Every deployment sets these: the defaults are those of a laptop running `go tool task dev`.",
			sections: []section{{vars: names(MustSet...)}}},
		{title: "Connections and security", intro: "Set these as your Temporal, Kafka and Redis need (TLS, credentials, modes), and for payload encryption. Every secret can come from a file (`_FILE`), and errors name the variable, never the value; setup: [security.md](security.md).",
			sections: []section{
				{title: "Temporal", intro: "The temporal CLI's own variables (`go.temporal.io/sdk/contrib/envconfig`, which also reads a `temporal.toml` profile), and fanout's API key file.", vars: config.TemporalEnv},
				{title: "Payload encryption", vars: config.EnvVars(config.Codec{})},
				{title: "Kafka", vars: config.EnvVars(config.KafkaBrokers{}, config.KafkaSecurity{})},
				{title: "Redis", vars: config.EnvVars(config.RedisConn{})},
				{title: "Codec server", intro: "`starter codec-server`, which decrypts payloads for the Temporal UI and CLI.", vars: config.EnvVars(codecserver.Config{})},
			}},
		{title: "Tuning", intro: "Each has a default that works; change it when the [runbook](runbook.md), [deploy.md](deploy.md) or [flow-control.md](flow-control.md) says why.",
			sections: []section{
				{title: "Logs, metrics, profiles", vars: names("FANOUT_LOG_LEVEL", "FANOUT_METRICS_ADDR", "FANOUT_PPROF_ADDR")},
				{title: "Worker", intro: "The worker pool: queues, slots, the gate, retries, dead letters, the low-priority brake.", vars: config.EnvVars(workers.Config{}, types.Settings{})},
				{title: "The webhook type", intro: "The stock event type's options, endpoint, signing and outbound policy ([event-types.md](event-types.md)).", vars: config.EnvVars(webhook.Config{})},
				{title: "Bridge", intro: "`starter bridge`, and a worker with `FANOUT_BRIDGE=true`; `publish` and `redrive-events` read the topics.", vars: config.EnvVars(starter.Settings{}, starter.Topics{})},
				{title: "Support", intro: "`starter status` and `starter resend` ([support.md](support.md)).", vars: names("FANOUT_UI_URL", "USER")},
				{title: "OpenTelemetry", intro: "The variables fanout reads itself to choose its exporters and name its resource ([observability.md](observability.md)); the exporters read the other standard `OTEL_EXPORTER_OTLP_*` variables (headers, timeout, compression, certificates) themselves.", vars: OTelVars},
				{title: "Go runtime", vars: names("GOGC", "GOMEMLIMIT")},
			}},
	}
}

// Configuration renders docs/configuration.md from the code: every
// variable the processes read, once, with the code's default and the
// processes that read it; root is the repository.
func Configuration(root string) ([]byte, error) {
	vars, err := Variables(root)
	if err != nil {
		return nil, err
	}
	byName := map[string]Variable{}
	for _, v := range vars {
		byName[v.Name] = v
	}
	var b bytes.Buffer
	b.WriteString(`<!-- Generated by go tool task docs (dev/cmd/docs) from the configuration structs; do not edit. -->
# Configuration

Every process takes its configuration from environment variables only, and fails at start-up
naming the variable that is wrong. ` + "`worker -h` and `starter <command> -h`" + ` list what each reads, with
the defaults below. "Read by": ` + "`worker`" + `, ` + "`bridge`" + ` (` + "`starter bridge`" + `, and a worker with
` + "`FANOUT_BRIDGE=true`" + `) and the ` + "`starter`" + ` commands. A types file may name variables of its own
(` + "`value_from: {env: NAME}`" + `): [event-types.md](event-types.md).
`)
	placed := map[string]bool{}
	for _, p := range parts() {
		fmt.Fprintf(&b, "\n## %s\n\n%s\n", p.title, p.intro)
		for _, s := range p.sections {
			var rows []Variable
			for _, e := range s.vars {
				if placed[e.Name] {
					continue
				}
				v, ok := byName[e.Name]
				if !ok {
					return nil, fmt.Errorf("section %q names %s, which no process reads", cmpTitle(p, s), e.Name)
				}
				placed[e.Name] = true
				rows = append(rows, v)
			}
			if len(rows) == 0 {
				continue
			}
			if s.title != "" {
				fmt.Fprintf(&b, "\n### %s\n", s.title)
			}
			if s.intro != "" {
				fmt.Fprintf(&b, "\n%s\n", s.intro)
			}
			b.WriteString("\n| variable | read by | default | meaning |\n| --- | --- | --- | --- |\n")
			for _, v := range rows {
				m, ok := Meanings[v.Name]
				if !ok {
					return nil, fmt.Errorf("%s has no meaning in dev/docs/meanings.go", v.Name)
				}
				def := "—"
				if v.Default != "" {
					def = "`" + v.Default + "`"
				}
				fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", v.Name, strings.Join(v.ReadBy, ", "), def, m)
			}
		}
	}
	var missing []string
	for _, v := range vars {
		if !placed[v.Name] {
			missing = append(missing, v.Name)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("variables in no section of the page: %s", strings.Join(missing, ", "))
	}
	for n := range Meanings {
		if _, ok := byName[n]; !ok {
			return nil, fmt.Errorf("dev/docs/meanings.go explains %s, which no process reads", n)
		}
	}
	return b.Bytes(), nil
}

func cmpTitle(p part, s section) string {
	if s.title == "" {
		return p.title
	}
	return p.title + "/" + s.title
}

// WriteConfiguration regenerates the page under root.
func WriteConfiguration(root string) error {
	b, err := Configuration(root)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(root, ConfigurationPage), b, 0o644)
}
