package types

import (
	"github.com/fanout/fanout"
	"github.com/fanout/fanout/internal/config"
)

// Settings name a process's types file as the environment sets it
// (config.Load reads it; `-h` lists it with config.EnvVars).
type Settings struct {
	// TypesFile: a types file (YAML or JSON) whose event types the
	// process registers beside the built-in ones; empty: none.
	TypesFile string `env:"FANOUT_TYPES_FILE"`
}

// Register loads the settings' types file, if any, and builds its types
// into reg; it returns the file (nil without one). Every mistake is in its
// error, each naming the file, line, type and field.
func (s Settings) Register(reg *fanout.Registry, deps Deps) (*File, error) {
	if s.TypesFile == "" {
		return nil, nil
	}
	f, err := Load(s.TypesFile)
	if err != nil {
		return nil, err
	}
	return f, Build(f, reg, deps)
}

// FromEnv is the one call of a process that serves a types file: it reads
// FANOUT_TYPES_FILE and registers the file's types in reg (nothing when it
// is unset).
func FromEnv(reg *fanout.Registry, deps Deps) (*File, error) {
	var s Settings
	if err := config.Load(&s); err != nil {
		return nil, err
	}
	return s.Register(reg, deps)
}
