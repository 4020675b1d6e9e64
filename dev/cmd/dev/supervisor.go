package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/fanout/fanout/dev/stack"
)

// supervisor restarts the stack's worker and bridge processes when they
// die, so killing one (what someone curious about durability tries first)
// shows Temporal carrying on and the restarted worker picking the work up,
// instead of tearing the stack down. A restart waits a backoff (Backoff,
// doubling per recent restart up to MaxBackoff); a process that dies more
// than MaxRestarts times within Window is given up on, which ends task dev
// with an error naming its log. The stack's own servers (temporal, redis,
// the sink) are not restarted: their death ends task dev.
type supervisor struct {
	s          *stack.Stack
	restart    []string // worker and bridge processes
	fatal      []string // the stack's servers
	say        func(format string, args ...any)
	logHint    func(name string) string
	Backoff    time.Duration
	MaxBackoff time.Duration
	// MaxRestarts within Window.
	MaxRestarts int
	Window      time.Duration
	// Poll is how often processes are checked.
	Poll time.Duration

	mu       sync.Mutex
	restarts map[string][]time.Time // recent restarts
	due      map[string]time.Time   // scheduled restarts
}

func newSupervisor(s *stack.Stack, restart, fatal []string, say func(string, ...any)) *supervisor {
	return &supervisor{
		s: s, restart: restart, fatal: fatal, say: say,
		logHint:     func(name string) string { return s.LogPath(name) },
		Backoff:     time.Second,
		MaxBackoff:  30 * time.Second,
		MaxRestarts: 5,
		Window:      10 * time.Minute,
		Poll:        250 * time.Millisecond,
		restarts:    map[string][]time.Time{},
		due:         map[string]time.Time{},
	}
}

// Restarts is how many times name was restarted within the window.
func (sv *supervisor) Restarts(name string) int {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	return len(sv.restarts[name])
}

// run checks the processes every Poll until ctx is done (nil) or a server
// died or a process restarted too often (the error).
func (sv *supervisor) run(ctx context.Context) error {
	t := time.NewTicker(sv.Poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err := sv.check(time.Now()); err != nil {
			return err
		}
	}
}

// check restarts what is due and schedules the restart of what died.
func (sv *supervisor) check(now time.Time) error {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	for _, name := range sv.fatal {
		if p := sv.s.Proc(name); p != nil && p.Exited() {
			return fmt.Errorf("%s exited (%s); see %s", name, p.ExitState(), sv.logHint(name))
		}
	}
	for _, name := range sv.restart {
		p := sv.s.Proc(name)
		if p == nil {
			continue
		}
		if at, ok := sv.due[name]; ok {
			if now.Before(at) {
				continue
			}
			delete(sv.due, name)
			if err := sv.s.Restart(name); err != nil {
				return fmt.Errorf("restart %s: %w", name, err)
			}
			sv.restarts[name] = append(sv.restarts[name], now)
			sv.say("%s restarted (pid %d); it picks up the work Temporal holds for its task queues", name, sv.s.Proc(name).Pid())
			continue
		}
		if !p.Exited() {
			continue
		}
		recent := sv.restarts[name][:0]
		for _, t := range sv.restarts[name] {
			if now.Sub(t) < sv.Window {
				recent = append(recent, t)
			}
		}
		sv.restarts[name] = recent
		if len(recent) >= sv.MaxRestarts {
			return fmt.Errorf("%s exited (%s) %d times within %v; giving up: see %s", name, p.ExitState(), len(recent)+1, sv.Window, sv.logHint(name))
		}
		wait := sv.Backoff << len(recent)
		if wait > sv.MaxBackoff || wait <= 0 {
			wait = sv.MaxBackoff
		}
		sv.due[name] = now.Add(wait)
		sv.say("%s exited (%s); restarting it in %v (restart %d of at most %d within %v); Temporal keeps its work meanwhile",
			name, p.ExitState(), wait, len(recent)+1, sv.MaxRestarts, sv.Window)
	}
	return nil
}
