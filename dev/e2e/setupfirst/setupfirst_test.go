//go:build integration

// Package setupfirst checks what happens when the bridges run before
// `starter setup`: on a namespace without fanout's search attributes they
// wait, saying which attributes are missing, instead of dead-lettering the
// events they cannot start; once the attributes are registered every event
// is fanned out.
package setupfirst

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"go.temporal.io/api/operatorservice/v1"

	"github.com/fanout/fanout/dev/stack"
	"github.com/fanout/fanout/internal/kafkatopic"
	"github.com/fanout/fanout/starter"
	"github.com/fanout/fanout/workflows/vocab"
)

const (
	events   = 8
	audience = 5
)

// TestBridgesWaitForSetup starts the dev server without fanout's search
// attributes, then a stand-alone bridge (`starter bridge`) and an events
// worker running the bridge in-process (FANOUT_BRIDGE=true), sharing the
// events topic's four partitions, and publishes events. Neither bridge may
// dead-letter any of them; both must log the names of the missing
// attributes. After the attributes are registered (as `starter setup` does)
// every event is fanned out to all its recipients, and still nothing is in
// the events DLQ.
func TestBridgesWaitForSetup(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s, err := stack.Start(ctx, stack.Options{InMemory: true, NoSearchAttributes: true, Log: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	have, err := s.TC.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: "default"})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range vocab.SearchAttributes() {
		if _, ok := have.GetCustomAttributes()[a.Name]; ok {
			t.Fatalf("the namespace already has %s: the stack registered the attributes", a.Name)
		}
	}
	if err := s.StartWorker("events", "events", "FANOUT_BRIDGE=true"); err != nil {
		t.Fatal(err)
	}
	if err := s.StartBridge("bridge"); err != nil {
		t.Fatal(err)
	}
	if err := s.StartWorker("delivery", "high,normal,low"); err != nil {
		t.Fatal(err)
	}
	stamp := time.Now().UTC().Format("150405")
	evs := make([]stack.Event, events)
	for i := range evs {
		evs[i] = stack.Event{ID: fmt.Sprintf("setup-first-%s-%d", stamp, i), Audience: audience}
	}
	if err := s.Publish(ctx, evs...); err != nil {
		t.Fatal(err)
	}

	// Both bridges name every missing attribute in their logs (within 60 s:
	// the processes build and start first).
	logsName := func() (missing map[string][]string) {
		missing = map[string][]string{}
		for _, p := range []string{"events", "bridge"} {
			b, _ := os.ReadFile(s.LogPath(p))
			for _, a := range vocab.SearchAttributes() {
				if !strings.Contains(string(b), a.Name) {
					missing[p] = append(missing[p], a.Name)
				}
			}
		}
		return missing
	}
	deadline := time.Now().Add(60 * time.Second)
	for len(logsName()) > 0 && time.Now().Before(deadline) {
		time.Sleep(500 * time.Millisecond)
	}
	// The old bridges had dead-lettered the events by now (start_rejected).
	time.Sleep(3 * time.Second)
	if dl := deadLetters(ctx, t, s); len(dl) > 0 {
		t.Errorf("before setup: %d events dead-lettered: %v", len(dl), dl)
	}
	if c := committed(ctx, t, s); c > 0 {
		t.Errorf("before setup: the bridges' group committed %d records of the events topic", c)
	}
	if m := logsName(); len(m) > 0 {
		t.Errorf("before setup: these logs do not name these missing attributes: %v", m)
	}
	for _, p := range []string{"events", "bridge"} {
		if s.Proc(p).Exited() {
			t.Errorf("before setup: process %s exited (see %s)", p, s.LogPath(p))
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	// `starter setup` registers them (and reports the server's checks).
	out := setup(ctx, t, s)
	for _, a := range vocab.SearchAttributes() {
		if !strings.Contains(out, "added  "+a.Name) {
			t.Errorf("starter setup did not add %s:\n%s", a.Name, out)
		}
	}
	registered := time.Now()
	for _, e := range evs {
		res, err := s.Wait(ctx, e.ID)
		if err != nil {
			t.Fatal(err)
		}
		if res.Delivered != audience {
			t.Errorf("event %s: delivered %d of %d", e.ID, res.Delivered, audience)
		}
	}
	deadline = time.Now().Add(30 * time.Second)
	for committed(ctx, t, s) < events && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	if c := committed(ctx, t, s); c != events {
		t.Errorf("after setup: the group committed %d records, want all %d", c, events)
	}
	t.Logf("all %d events fanned out %v after the attributes were registered", events, time.Since(registered).Round(time.Millisecond))
	if dl := deadLetters(ctx, t, s); len(dl) > 0 {
		t.Errorf("after setup: %d events dead-lettered: %v", len(dl), dl)
	}
}

// deadLetters are the events DLQ's records, as "reason: error".
func deadLetters(ctx context.Context, t *testing.T, s *stack.Stack) []string {
	t.Helper()
	var out []string
	rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	err := kafkatopic.ReadAll(rctx, s.KafkaConn(), starter.DefaultEventsDLQTopic, func(m kafka.Message) error {
		var reason, msg string
		for _, h := range m.Headers {
			switch h.Key {
			case starter.HeaderReason:
				reason = string(h.Value)
			case starter.HeaderError:
				msg = string(h.Value)
			}
		}
		out = append(out, reason+": "+msg)
		return nil
	})
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("read the events DLQ: %v", err)
	}
	return out
}

// committed is how many records of the events topic the bridges' consumer
// group has committed, over all partitions.
func committed(ctx context.Context, t *testing.T, s *stack.Stack) int64 {
	t.Helper()
	parts := make([]int, stack.Topics[starter.DefaultEventsTopic])
	for i := range parts {
		parts[i] = i
	}
	c := &kafka.Client{Addr: kafka.TCP(s.KafkaAddr)}
	res, err := c.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: starter.DefaultConsumerGroup, Topics: map[string][]int{starter.DefaultEventsTopic: parts}})
	if err == nil {
		err = res.Error
	}
	if errors.Is(err, kafka.GroupIdNotFound) {
		return 0 // the group never joined, so committed nothing
	}
	if err != nil {
		t.Fatalf("committed offsets of group %s: %v", starter.DefaultConsumerGroup, err)
	}
	var n int64
	for _, p := range res.Topics[starter.DefaultEventsTopic] {
		if p.Error != nil {
			t.Fatalf("committed offset of partition %d: %v", p.Partition, p.Error)
		}
		n += max(p.CommittedOffset, 0)
	}
	return n
}

// setup runs `starter setup` with the stack's environment and args, and
// returns its output; it fails the test unless it exits 0 with every check
// of the server ok (the dev server has them all on).
func setup(ctx context.Context, t *testing.T, s *stack.Stack, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, filepath.Join(s.Bin, "starter"), append([]string{"setup"}, args...)...)
	cmd.Env = append(os.Environ(), s.Env()...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("starter setup %v: %v\n%s", args, err, out)
	}
	for _, want := range []string{"ok       Redis", "ok       Temporal server", "ok       Workflow Update", "ok       eager workflow start",
		"ok       user metadata", "ok       task-queue backlog stats", "ok       task-queue fairness"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("starter setup %v: no %q in\n%s", args, want, out)
		}
	}
	if strings.Contains(string(out), "MISSING") || strings.Contains(string(out), "unknown ") {
		t.Errorf("starter setup %v: something missing or unknown on the dev server:\n%s", args, out)
	}
	return string(out)
}
