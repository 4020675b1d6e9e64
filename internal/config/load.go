package config

import (
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/caarlos0/env/v11"
)

// Load reads the environment into each of cfgs (pointers to configuration
// structs: a stage's settings, RedisConn, Codec, ...): it sets their
// defaults (Defaulter), parses the variables of their `env` tags and
// validates each (Validator), in order. Its errors start with "config: "
// and name the variable.
func Load(cfgs ...any) error {
	return load(env.Options{}, cfgs)
}

// LoadFrom is Load with the variables of environ instead of the process's
// environment (the deploy tests check manifests with it).
func LoadFrom(environ map[string]string, cfgs ...any) error {
	if environ == nil {
		environ = map[string]string{}
	}
	return load(env.Options{Environment: environ}, cfgs)
}

func load(opts env.Options, cfgs []any) error {
	for _, cfg := range cfgs {
		if reflect.TypeOf(cfg).Kind() != reflect.Pointer {
			return fmt.Errorf("config: Load needs a pointer, got %T", cfg)
		}
		if d, ok := cfg.(Defaulter); ok {
			d.SetDefaults()
		}
		if err := env.ParseWithOptions(cfg, opts); err != nil {
			return fmt.Errorf("config: %w", nameVars(reflect.TypeOf(cfg).Elem(), err))
		}
		if v, ok := cfg.(Validator); ok {
			if err := v.Validate(); err != nil {
				return fmt.Errorf("config: %w", err)
			}
		}
	}
	return nil
}

// nameVars rewrites caarlos0/env parse errors so they name the environment
// variable, not the Go field of typ.
func nameVars(typ reflect.Type, err error) error {
	var agg env.AggregateError
	if !errors.As(err, &agg) {
		return err
	}
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
