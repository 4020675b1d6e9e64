package config

import (
	"fmt"
	"reflect"
	"strings"
	"time"
)

// EnvVar is an environment variable a configuration struct reads, as its
// `env` tag names it.
type EnvVar struct {
	Name string
	// Kind is how the value is read: string, bool, int, duration, list
	// (comma-separated).
	Kind string
	// Default is the value used when the variable is unset ("" for none).
	Default string
}

// Defaulter is a configuration struct whose defaults are named elsewhere
// than in its `envDefault` tags: a stage's constants (topics, queues, the
// type options' defaults), so each default is written once, where the stage
// that uses it lives. Load calls SetDefaults before reading the environment
// and EnvVars before listing the variables, so -h and the README test show
// the same default the code applies. A struct calls SetDefaults of the
// structs it embeds itself.
type Defaulter interface{ SetDefaults() }

// Validator is a configuration struct that checks itself after the
// environment is read (Load calls Validate); its errors name the variable.
type Validator interface{ Validate() error }

// EnvVars lists the variables the configuration structs cfgs (values or
// pointers, e.g. workers.Config{}, &codecserver.Config{}) read, from their
// `env` tags, embedded structs followed, in field order, each name once.
// Defaults come from `envDefault` tags and from SetDefaults (Defaulter).
// The commands' -h output and the README test read them, so neither can go
// stale.
func EnvVars(cfgs ...any) []EnvVar {
	var out []EnvVar
	seen := map[string]bool{}
	for _, c := range cfgs {
		t := reflect.TypeOf(c)
		if t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		v := reflect.New(t)
		if d, ok := v.Interface().(Defaulter); ok {
			d.SetDefaults()
		}
		collectEnvVars(v.Elem(), &out, seen)
	}
	return out
}

func collectEnvVars(v reflect.Value, out *[]EnvVar, seen map[string]bool) {
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("env"), ",")
		if name == "" {
			if f.Anonymous && f.Type.Kind() == reflect.Struct {
				collectEnvVars(v.Field(i), out, seen)
			}
			continue
		}
		if seen[name] {
			continue
		}
		seen[name] = true
		e := EnvVar{Name: name, Kind: envKind(f.Type), Default: f.Tag.Get("envDefault")}
		if fv := v.Field(i); e.Default == "" && !fv.IsZero() {
			if fv.Kind() == reflect.Slice {
				parts := make([]string, fv.Len())
				for j := range parts {
					parts[j] = fmt.Sprint(fv.Index(j).Interface())
				}
				e.Default = strings.Join(parts, ",")
			} else {
				e.Default = FormatValue(fv.Interface())
			}
		}
		*out = append(*out, e)
	}
}

// FormatValue is a default as a variable would be set to it: durations
// without their zero units (168h, not 168h0m0s; 1m, 200ms), the rest as
// fmt prints them.
func FormatValue(v any) string {
	d, ok := v.(time.Duration)
	if !ok {
		return fmt.Sprint(v)
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func envKind(t reflect.Type) string {
	switch {
	case t == reflect.TypeFor[time.Duration]():
		return "duration"
	case t.Kind() == reflect.Slice:
		return "list"
	case t.Kind() == reflect.Bool:
		return "bool"
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64:
		return "int"
	default:
		return "string"
	}
}

// TemporalEnv are the variables DialTemporal reads besides the codec's
// (Codec): fanout's FANOUT_TEMPORAL_API_KEY_FILE and the temporal CLI's
// TEMPORAL_* (go.temporal.io/sdk/contrib/envconfig), which also reads a
// temporal.toml profile file.
var TemporalEnv = []EnvVar{
	{Name: "TEMPORAL_ADDRESS", Kind: "string", Default: "localhost:7233"},
	{Name: "TEMPORAL_NAMESPACE", Kind: "string", Default: "default"},
	{Name: "TEMPORAL_API_KEY", Kind: "string"},
	{Name: TemporalAPIKeyFileVar, Kind: "string"},
	{Name: "TEMPORAL_TLS", Kind: "bool"},
	{Name: "TEMPORAL_TLS_CLIENT_CERT_PATH", Kind: "string"},
	{Name: "TEMPORAL_TLS_CLIENT_KEY_PATH", Kind: "string"},
	{Name: "TEMPORAL_TLS_SERVER_CA_CERT_PATH", Kind: "string"},
	{Name: "TEMPORAL_TLS_SERVER_NAME", Kind: "string"},
	{Name: "TEMPORAL_PROFILE", Kind: "string", Default: "default"},
	{Name: "TEMPORAL_CONFIG_FILE", Kind: "string"},
}

// FanoutEnvConstants are variables read by name outside the structs' tags
// (os.Getenv), listed for the README test.
var FanoutEnvConstants = []string{TemporalAPIKeyFileVar}
