//go:build integration

package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/dev/stack"
)

// The acceptance: a worker killed under task dev's supervisor
// mid-event is restarted (and says so), and the event completes with every
// recipient delivered.
func TestSupervisorRestartsKilledWorkerAndEventCompletes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	s, err := stack.Start(ctx, stack.Options{Log: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, w := range []struct{ name, queues string }{{"worker-events", "events"}, {"worker-delivery", "high,normal,low"}} {
		if err := s.StartWorker(w.name, w.queues); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.StartBridge("bridge"); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	var said []string
	sup := newSupervisor(s, []string{"worker-events", "worker-delivery", "bridge"}, []string{"temporal", "redis"}, func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		said = append(said, fmt.Sprintf(format, args...))
		t.Logf(format, args...)
	})
	supCtx, stopSup := context.WithCancel(ctx)
	supErr := make(chan error, 1)
	go func() { supErr <- sup.run(supCtx) }()
	defer func() {
		stopSup()
		if err := <-supErr; err != nil {
			t.Errorf("supervisor: %v", err)
		}
	}()

	ev := stack.Event{ID: fmt.Sprintf("sup-%d", time.Now().UnixNano()), Audience: 40_000, Priority: fanout.PriorityNormal}
	if err := s.Publish(ctx, ev); err != nil {
		t.Fatal(err)
	}
	// Kill the delivery worker once deliveries are under way.
	for {
		st, err := s.SinkClient.Event(ctx, ev.ID)
		if err == nil && st.Unique >= 2_000 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("no deliveries under way: %+v, %v", st, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	old := s.Proc("worker-delivery").Pid()
	s.Kill("worker-delivery")
	at, err := s.SinkClient.Event(ctx, ev.ID)
	if err != nil {
		t.Fatal(err)
	}
	if at.Unique >= ev.Audience {
		t.Fatalf("the event was delivered (%d) before the kill: not a kill mid-event; raise the audience", at.Unique)
	}
	t.Logf("killed worker-delivery (pid %d) at %d of %d deliveries", old, at.Unique, ev.Audience)

	// The supervisor restarts it within its first backoff.
	deadline := time.Now().Add(30 * time.Second)
	for {
		if p := s.Proc("worker-delivery"); p.Pid() != old && !p.Exited() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("worker-delivery not restarted within 30s")
		}
		time.Sleep(100 * time.Millisecond)
	}

	wctx, wcancel := context.WithTimeout(ctx, 5*time.Minute)
	defer wcancel()
	res, err := s.Wait(wctx, ev.ID)
	if err != nil {
		t.Fatal(err)
	}
	st, err := s.SinkClient.Event(ctx, ev.ID)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("result %+v; sink %+v", res, st)
	if st.Unique != ev.Audience {
		t.Fatalf("the sink got %d of %d recipients: %d missing", st.Unique, ev.Audience, ev.Audience-st.Unique)
	}
	if n := sup.Restarts("worker-delivery"); n != 1 {
		t.Fatalf("worker-delivery restarted %d times, want 1", n)
	}
	mu.Lock()
	all := strings.Join(said, "\n")
	mu.Unlock()
	for _, want := range []string{"worker-delivery exited (signal: killed); restarting it in 1s", "worker-delivery restarted (pid"} {
		if !strings.Contains(all, want) {
			t.Fatalf("the supervisor did not say %q; it said:\n%s", want, all)
		}
	}
}
