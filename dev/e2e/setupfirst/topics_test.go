//go:build integration

package setupfirst

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/fanout/fanout/dev/stack"
	"github.com/fanout/fanout/internal/kafkatopic"
)

// `starter setup -topics` creates the three topics the environment names
// with the partitions and retentions of its flags (read back from the
// broker), then, run again, leaves them as they are and says they exist.
func TestSetupCreatesTopics(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	s, err := stack.Start(ctx, stack.Options{InMemory: true, Log: os.Stderr,
		Env: []string{"FANOUT_EVENTS_TOPIC=setup-events", "FANOUT_EVENTS_DLQ_TOPIC=setup-events-dlq", "FANOUT_DELIVERIES_DLQ_TOPIC=setup-deliveries-dlq"}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Build(ctx); err != nil {
		t.Fatal(err)
	}
	names := []string{"setup-events", "setup-events-dlq", "setup-deliveries-dlq"}
	out := setup(ctx, t, s, "-topics", "-partitions", "5", "-retention", "48h", "-dlq-partitions", "2", "-dlq-retention", "100h", "-replication", "1")
	t.Logf("starter setup -topics ...:\n%s", out)
	for _, re := range []string{
		`created\s+setup-events\s+5 partitions, replication 1, retention 48h0m0s`,
		`created\s+setup-events-dlq\s+2 partitions, replication 1, retention 100h0m0s`,
		`created\s+setup-deliveries-dlq\s+2 partitions, replication 1, retention 100h0m0s`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("no line matching %q in\n%s", re, out)
		}
	}
	got, err := kafkatopic.DescribeTopics(ctx, s.KafkaConn(), names)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]kafkatopic.Topic{
		"setup-events":         {Partitions: 5, Retention: 48 * time.Hour},
		"setup-events-dlq":     {Partitions: 2, Retention: 100 * time.Hour},
		"setup-deliveries-dlq": {Partitions: 2, Retention: 100 * time.Hour},
	}
	for _, g := range got {
		w := want[g.Name]
		if g.Partitions != w.Partitions || !g.RetentionKnown || g.Retention != w.Retention || g.ReplicationFactor != 1 {
			t.Errorf("topic %s: %+v, want %d partitions, retention %v, replication 1", g.Name, g, w.Partitions, w.Retention)
		}
	}

	// Again with other sizes: nothing changes, each is reported.
	out = setup(ctx, t, s, "-topics", "-partitions", "8", "-retention", "24h")
	for _, n := range names {
		if !regexp.MustCompile(`exists\s+` + n + `\s`).MatchString(out) {
			t.Errorf("second run: %s not reported as existing in\n%s", n, out)
		}
	}
	if !regexp.MustCompile(`setup-events has 5 partitions, fewer than the 8 asked`).MatchString(out) {
		t.Errorf("second run: the events topic's fewer partitions not noted in\n%s", out)
	}
	again, err := kafkatopic.DescribeTopics(ctx, s.KafkaConn(), names[:1])
	if err != nil || again[0].Partitions != 5 || again[0].Retention != 48*time.Hour {
		t.Errorf("after the second run: %+v, %v; want it unchanged", again, err)
	}
}

// On a server with Workflow Update and eager workflow start turned off in
// its dynamic config, `starter setup` prints both as MISSING with the
// setting to turn on, and fails naming the required one.
func TestSetupSaysWhatIsMissing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	s, err := stack.Start(ctx, stack.Options{InMemory: true, Log: os.Stderr, TemporalFlags: []string{
		"--dynamic-config-value", "frontend.enableUpdateWorkflowExecution=false",
		"--dynamic-config-value", "system.enableEagerWorkflowStart=false",
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Build(ctx); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, filepath.Join(s.Bin, "starter"), "setup")
	cmd.Env = append(os.Environ(), s.Env()...)
	b, err := cmd.CombinedOutput()
	out := string(b)
	t.Logf("starter setup:\n%s", out)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("starter setup: %v, want exit 1", err)
	}
	for _, re := range []string{
		`MISSING  Workflow Update .*: dynamic config frontend\.enableUpdateWorkflowExecution=true`,
		`MISSING  eager workflow start .*: dynamic config system\.enableEagerWorkflowStart=true`,
		`ok       Temporal server`, `ok       user metadata`, `ok       task-queue backlog stats`, `ok       task-queue fairness`,
		`the server lacks what fanout requires: Workflow Update`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("no line matching %q", re)
		}
	}
}
