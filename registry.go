package fanout

import (
	"fmt"
	"slices"
	"sync"
)

// Registry maps event types to their handlers and options. Workers are built
// from a Registry; the bridge validates event types against the same names.
type Registry struct {
	mu    sync.RWMutex
	types map[string]registered
}

type registered struct {
	h    Handler
	opts TypeOptions
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{types: map[string]registered{}} }

// Register adds an event type. It fails on an empty or duplicate name, a nil
// handler or invalid options.
func (r *Registry) Register(eventType string, h Handler, opts TypeOptions) error {
	if err := ValidateType(eventType); err != nil {
		return fmt.Errorf("register %q: %w", eventType, err)
	}
	if h == nil {
		return fmt.Errorf("register %q: nil handler", eventType)
	}
	if err := opts.Validate(); err != nil {
		return fmt.Errorf("register %q: %w", eventType, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.types[eventType]; ok {
		return fmt.Errorf("register %q: already registered", eventType)
	}
	r.types[eventType] = registered{h: h, opts: opts.WithDefaults()}
	return nil
}

// MustRegister is Register that panics, for use in main.
func (r *Registry) MustRegister(eventType string, h Handler, opts TypeOptions) {
	if err := r.Register(eventType, h, opts); err != nil {
		panic(err)
	}
}

// Lookup returns the handler and options (defaults applied) of eventType.
func (r *Registry) Lookup(eventType string) (Handler, TypeOptions, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	t, ok := r.types[eventType]
	return t.h, t.opts, ok
}

// Types lists the registered event types, sorted.
func (r *Registry) Types() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]string, 0, len(r.types))
	for k := range r.types {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
