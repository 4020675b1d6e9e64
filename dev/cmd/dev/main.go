// Command dev runs the whole fanout stack on this machine and a demo:
// the Temporal dev server (UI on :8233), the embedded kfake broker on :9092,
// redis-server, PostgreSQL when it is installed, the worker and bridge
// binaries as separate processes, a loopback recipients source (:8090), the
// webhook sink as its own process (:8091, as a real destination runs), a
// codec server (:8234) through which the UI shows the encrypted payloads in
// clear, and a publisher of sample events. It prints live progress, read
// from the sink; Ctrl-C stops everything.
//
// The demo's event types come from a types file, dev/demo/types.yaml
// ("new post → followers"): new_post, whose followers are rows of a
// PostgreSQL table, and digest, whose subscribers come from the recipients
// source over HTTP. The workers and the bridge run a copy of it in
// .dev/types/ (FANOUT_TYPES_FILE), beside the secret files generated there:
// each type's signing secret, with which the sink checks every delivery of
// that type, and the followers' DSN. Without PostgreSQL, only digest events
// are published.
//
//	go tool task dev                 # run until Ctrl-C
//	go tool task dev -- -exit-when-done
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.temporal.io/api/enums/v1"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/dev/demo"
	"github.com/fanout/fanout/dev/stack"
	"github.com/fanout/fanout/starter"
	"github.com/fanout/fanout/workflows/vocab"
)

type flags struct {
	temporalPort, uiPort, kafkaPort, redisPort, demoPort, sinkPort int
	codecPort                                                      int
	big, small                                                     int
	exitWhenDone, noPostgres                                       bool
	dir                                                            string
}

func main() {
	var f flags
	flag.IntVar(&f.temporalPort, "temporal-port", 7233, "Temporal frontend port")
	flag.IntVar(&f.uiPort, "ui-port", 8233, "Temporal Web UI port")
	flag.IntVar(&f.kafkaPort, "kafka-port", 9092, "kfake broker port")
	flag.IntVar(&f.redisPort, "redis-port", 6379, "redis-server port")
	flag.IntVar(&f.demoPort, "demo-port", 8090, "demo recipients source port (the digest type's endpoint)")
	flag.IntVar(&f.sinkPort, "sink-port", 8091, "webhook sink process port")
	flag.IntVar(&f.codecPort, "codec-port", 8234, "codec server port (the Web UI decodes payloads through it)")
	flag.IntVar(&f.big, "big", 100_000, "followers of the first author (new_post; the next four have a tenth as many each), or recipients of the big digest without PostgreSQL")
	flag.IntVar(&f.small, "small", 10, "number of small digest events (10 to 1,000 recipients)")
	flag.BoolVar(&f.exitWhenDone, "exit-when-done", false, "stop everything once the demo events completed, after checking that each reached its whole audience")
	flag.BoolVar(&f.noPostgres, "no-postgres", false, "leave PostgreSQL out even when it is installed: only digest events")
	flag.StringVar(&f.dir, "dir", "", "state and logs (default: .dev in the repository)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if _, err := run(ctx, f); err != nil {
		fmt.Fprintln(os.Stderr, "dev:", err)
		os.Exit(1)
	}
}

func say(format string, args ...any) {
	fmt.Printf("[dev %s] %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

// noPostgresDSN is the followers' DSN when there is no PostgreSQL: the
// types file needs one to load, and nothing listens at port 1, so a
// new_post event published by hand fails with the reason in the UI.
const noPostgresDSN = "postgres://" + stack.FollowersReader + "@127.0.0.1:1/postgres?sslmode=disable&connect_timeout=2"

func run(ctx context.Context, f flags) ([]outcome, error) {
	root, err := stack.RepoRoot()
	if err != nil {
		return nil, err
	}
	for name, p := range map[string]int{"temporal": f.temporalPort, "ui": f.uiPort, "kafka": f.kafkaPort, "redis": f.redisPort, "demo": f.demoPort, "sink": f.sinkPort, "codec": f.codecPort} {
		if !stack.PortFree(p) {
			return nil, fmt.Errorf("port %d (%s) is in use: stop what holds it or pass -%s-port", p, name, name)
		}
	}
	dir := f.dir
	if dir == "" {
		dir = filepath.Join(root, ".dev")
	}
	typesDir := filepath.Join(dir, "types")
	// The types' signing secrets exist before the sink starts: it checks
	// every delivery of a type with that type's secret.
	secrets, err := demo.SigningSecrets(typesDir)
	if err != nil {
		return nil, err
	}
	say("building the worker, starter and sink binaries into .bin/ and starting the stack")
	s, err := stack.Start(ctx, stack.Options{
		Dir: dir, LogDir: filepath.Join(dir, "logs"),
		TemporalPort: f.temporalPort, UIPort: f.uiPort, KafkaPort: f.kafkaPort, RedisPort: f.redisPort, DemoPort: f.demoPort,
		SinkProcess: true, SinkPort: f.sinkPort, SinkVerify: secrets, Log: os.Stdout,
		// The UI decodes through an in-process codec server on loopback,
		// without a token: the dev UI has no login to pass one.
		CodecServer: true, CodecServerPort: f.codecPort,
		// Payloads, staged batches and dead letters encrypted, with a key
		// generated into .dev/codec-keys on the first run and kept.
		Encrypt: true,
	})
	if err != nil {
		return nil, err
	}
	stopPostgres := func() {}
	defer func() {
		say("stopping everything")
		s.Close()
		stopPostgres()
	}()
	say("temporal dev server on %s, Web UI on http://localhost:%d", s.TemporalAddr, f.uiPort)
	say("redis-server on %s", s.RedisAddr)
	say("codec server %s: the Web UI shows payloads in clear through it; the CLI too with `temporal workflow show --codec-endpoint %s -w <workflow id>`", s.CodecServerURL, s.CodecServerURL)
	say("payloads, staged batches and dead letters encrypted with key %s of %s (FANOUT_CODEC_KEYS_FILE; `temporal workflow show` shows them encrypted)", s.Keyring.ActiveKeyID(), s.KeysFile)
	say("kfake Kafka broker on %s (topics %s, %s)", s.KafkaAddr, starter.DefaultEventsTopic, starter.DefaultEventsDLQTopic)
	say("demo recipients source %s/recipients; webhook sink process %s/deliver (counts: %s/stats)", s.DemoURL, s.SinkURL, s.SinkURL)

	dsn, posts := noPostgresDSN, false
	counts := followerCounts(f.big)
	switch {
	case f.noPostgres:
		say("-no-postgres: the %s type (followers in PostgreSQL) gets no events; only %s events (recipients over HTTP) are published", demo.NewPostType, demo.DigestType)
	case !stack.PostgresInstalled():
		say("PostgreSQL is not installed (no initdb and postgres on PATH or in /usr/lib/postgresql/*/bin): the %s type (followers in PostgreSQL) gets no events; only %s events (recipients over HTTP) are published. "+
			"Install it (Debian/Ubuntu: sudo apt-get install -y postgresql; macOS: brew install postgresql) and run task dev again to see %s.", demo.NewPostType, demo.DigestType, demo.NewPostType)
	default:
		say("starting PostgreSQL (its log: %s)", filepath.Join(dir, "postgres.log"))
		super, stop, err := stack.StartPostgres(ctx, dir)
		if err != nil {
			return nil, fmt.Errorf("postgres: %w (or run with -no-postgres)", err)
		}
		stopPostgres = stop
		if dsn, err = stack.SeedFollowers(ctx, super, s.SinkURL+"/deliver", counts); err != nil {
			return nil, err
		}
		posts = true
		say("PostgreSQL on %s: table followers, authors 1 to %d with %s followers, each a webhook on the sink; the types file reads it as role %s (SELECT only)",
			hostOf(dsn), len(counts), joinInts(counts), stack.FollowersReader)
	}
	tf, err := demo.WriteTypes(typesDir, s.DemoURL, dsn)
	if err != nil {
		return nil, err
	}
	say("types file %s, a copy of dev/demo/types.yaml (FANOUT_TYPES_FILE of the workers and the bridge): %s (followers in PostgreSQL, paged by keyset) and %s (recipients from %s/recipients); each signs with its own secret in %s, and the sink checks each type's deliveries with it",
		tf, demo.NewPostType, demo.DigestType, s.DemoURL, filepath.Join(typesDir, "secrets"))

	if err := s.Build(ctx); err != nil { // done by Start for the sink; a no-op then
		return nil, err
	}
	if err := checkTypes(ctx, s, tf); err != nil {
		return nil, err
	}
	typesEnv := "FANOUT_TYPES_FILE=" + tf
	for _, w := range []struct{ name, queues string }{
		{"worker-events", "events"},
		{"worker-delivery", "high,normal,low"},
	} {
		if err := s.StartWorker(w.name, w.queues, typesEnv); err != nil {
			return nil, err
		}
	}
	if err := s.StartBridge("bridge", typesEnv); err != nil {
		return nil, err
	}
	say("workers (events; high,normal,low) and bridge started with the types file; logs in %s", s.LogDir)
	// Worker and bridge processes that die are restarted (with backoff, at
	// most 5 times in 10 minutes); the servers' death ends task dev.
	sup := newSupervisor(s, []string{"worker-events", "worker-delivery", "bridge"}, []string{"temporal", "redis", "sink"}, say)
	supErr := make(chan error, 1)
	supCtx, stopSup := context.WithCancel(ctx)
	supDone := make(chan struct{})
	go func() { defer close(supDone); supErr <- sup.run(supCtx) }()
	// Runs before s.Close: nothing is restarted while the stack stops.
	defer func() { stopSup(); <-supDone }()
	pids := s.Pids()
	say("try it: `kill -9 %d` (the delivery worker) while the big event runs; it is restarted and the event still completes, every recipient once (workers: events %d, delivery %d; bridge %d)",
		pids["worker-delivery"], pids["worker-events"], pids["worker-delivery"], pids["bridge"])

	stamp := time.Now().UTC().Format("20060102-150405")
	events := demoEvents(stamp, counts, f.big, f.small, posts)
	envs := make([]starter.Envelope, len(events))
	for i, e := range events {
		envs[i] = e.Envelope
	}
	if err := s.Publisher.Publish(ctx, envs...); err != nil {
		return nil, err
	}
	for _, typ := range []string{demo.NewPostType, demo.DigestType} {
		var ids []string
		for _, e := range events {
			if e.Type == typ {
				ids = append(ids, fmt.Sprintf("%s (%s)", e.ID, human(int64(e.Audience))))
			}
		}
		if len(ids) > 0 {
			say("published %d %s events: %s", len(ids), typ, strings.Join(ids, ", "))
		}
	}
	say("watch them: http://localhost:%d/namespaces/default/workflows?query=%s", f.uiPort,
		url.QueryEscape(fmt.Sprintf("WorkflowType='%s' AND (%s='%s' OR %s='%s')", vocab.FanoutWorkflow,
			vocab.SearchAttrEventType, demo.NewPostType, vocab.SearchAttrEventType, demo.DigestType)))
	return watch(ctx, s, events, supErr, f.exitWhenDone)
}

// checkTypes runs `worker check-types` on the types file, as a user
// checks one, and shows what it says.
func checkTypes(ctx context.Context, s *stack.Stack, file string) error {
	out, err := exec.CommandContext(ctx, filepath.Join(s.Bin, "worker"), "check-types", file).CombinedOutput()
	if err != nil {
		return fmt.Errorf("worker check-types %s: %w\n%s", file, err, out)
	}
	say("worker check-types %s:", file)
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		say("    %s", line)
	}
	return nil
}

// followerCounts are the followers of the demo's five authors: big, then
// a tenth as many for each next one (100,000 to 10 by default).
func followerCounts(big int) []int {
	out := make([]int, 5)
	n := big
	for i := range out {
		out[i] = max(n, 1)
		n /= 10
	}
	return out
}

// event is a demo event and the audience the sink should see.
type event struct {
	starter.Envelope
	Audience int
}

// WorkflowID is the event's Fanout workflow id.
func (e event) WorkflowID() string { return vocab.WorkflowID(e.Type, e.ID) }

func newEvent(typ, id string, prio fanout.Priority, audience int, payload map[string]any) event {
	b, _ := json.Marshal(payload) // maps of strings and numbers
	return event{Envelope: starter.Envelope{ID: id, Type: typ, Priority: prio, Payload: b}, Audience: audience}
}

// demoEvents are the events task dev publishes: with posts, a new_post
// of each author (the first, the big one, on the low priority) and small
// digests; without, a big digest and the small ones. The first is the big
// one.
func demoEvents(stamp string, followers []int, big, small int, posts bool) []event {
	var evs []event
	if posts {
		for i, n := range followers {
			prio := fanout.Priority("") // the type's default
			if i == 0 {
				prio = fanout.PriorityLow
			}
			evs = append(evs, newEvent(demo.NewPostType, fmt.Sprintf("post-%s-a%d", stamp, i+1), prio, n,
				map[string]any{"author_id": i + 1, "title": fmt.Sprintf("Hello from author %d", i+1)}))
		}
	} else {
		evs = append(evs, newEvent(demo.DigestType, "digest-"+stamp+"-big", fanout.PriorityLow, big,
			map[string]any{"audience": big, "subject": "The big digest"}))
	}
	for i := range small {
		n := 10 + (i*997)%991 // 10 .. 1,000 recipients, spread
		evs = append(evs, newEvent(demo.DigestType, fmt.Sprintf("digest-%s-%d", stamp, i), fanout.Priorities[i%len(fanout.Priorities)], n,
			map[string]any{"audience": n, "subject": fmt.Sprintf("Digest %d", i)}))
	}
	return evs
}

// watch prints progress every two seconds until ctx is done (or, with
// exitWhenDone, until every demo event completed) or the supervisor gives
// up (supErr).
func watch(ctx context.Context, s *stack.Stack, evs []event, supErr <-chan error, exitWhenDone bool) ([]outcome, error) {
	start := time.Now()
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	var lastTotal int64
	lastT := time.Now()
	bigDone := false
	for {
		select {
		case <-ctx.Done():
			return nil, nil
		case err := <-supErr:
			return nil, err
		case <-tick.C:
		}
		p := progress(ctx, s, evs)
		tot, err := s.SinkClient.Totals(ctx)
		if err != nil {
			say("reading the sink: %v", err)
			continue
		}
		big, err := s.SinkClient.Event(ctx, evs[0].ID)
		if err != nil {
			say("reading the sink: %v", err)
			continue
		}
		if p.bigCompleted && !bigDone {
			bigDone = true
			say("the big %s event (%d recipients) completed in %v (publish to last delivery %v)", evs[0].Type, evs[0].Audience,
				time.Since(start).Round(100*time.Millisecond), big.Last.Sub(start).Round(100*time.Millisecond))
		}
		now := time.Now()
		rate := float64(tot.Deliveries-lastTotal) / now.Sub(lastT).Seconds()
		lastTotal, lastT = tot.Deliveries, now
		say("%s | deliveries %s (%.0f/s) duplicates %d bad signatures %d | big %s event %s/%s",
			p.line(), human(tot.Deliveries), rate, tot.Duplicates, tot.BadSignatures, evs[0].Type, human(int64(big.Unique)), human(int64(evs[0].Audience)))
		if p.completed == len(evs) && exitWhenDone {
			say("all demo events completed in %v", time.Since(start).Round(100*time.Millisecond))
			return checkDelivered(ctx, s, evs)
		}
	}
}

// state is the demo events' progress: started and completed, in all and
// by type (in the order of the events).
type state struct {
	started, completed int
	bigCompleted       bool
	types              []string
	total, done        map[string]int
}

func (p state) line() string {
	parts := []string{fmt.Sprintf("events started %d completed %d", p.started, p.completed)}
	for _, t := range p.types {
		parts = append(parts, fmt.Sprintf("%s %d/%d", t, p.done[t], p.total[t]))
	}
	return strings.Join(parts, ", ")
}

// progress counts the demo events whose workflow started and completed,
// by type, and reports whether the big one (the first) completed.
func progress(ctx context.Context, s *stack.Stack, evs []event) state {
	p := state{total: map[string]int{}, done: map[string]int{}}
	for i, e := range evs {
		if p.total[e.Type] == 0 {
			p.types = append(p.types, e.Type)
		}
		p.total[e.Type]++
		d, err := s.TC.DescribeWorkflow(ctx, e.WorkflowID(), "")
		if err != nil {
			continue
		}
		p.started++
		if d.RawResponse.GetWorkflowExecutionInfo().GetStatus() == enums.WORKFLOW_EXECUTION_STATUS_COMPLETED {
			p.completed++
			p.done[e.Type]++
			p.bigCompleted = p.bigCompleted || i == 0
		}
	}
	return p
}

// outcome is what the sink saw of a demo event.
type outcome struct {
	Type, ID string
	Audience int
	Sink     demo.EventStats
}

// checkDelivered checks at the sink that every demo event reached its
// whole audience, every delivery signed with its type's secret (the sink
// checked each one), and returns what the sink saw.
func checkDelivered(ctx context.Context, s *stack.Stack, evs []event) ([]outcome, error) {
	ids := make([]string, len(evs))
	for i, e := range evs {
		ids[i] = e.ID
	}
	got, err := s.SinkClient.Events(ctx, ids)
	if err != nil {
		return nil, err
	}
	out := make([]outcome, len(evs))
	var errs []error
	for i, e := range evs {
		st := got[e.ID]
		out[i] = outcome{Type: e.Type, ID: e.ID, Audience: e.Audience, Sink: st}
		if st.Unique != e.Audience {
			errs = append(errs, fmt.Errorf("%s event %s reached %d of %d recipients", e.Type, e.ID, st.Unique, e.Audience))
		}
		if st.Verified != st.Deliveries {
			errs = append(errs, fmt.Errorf("%s event %s: the sink checked the signature of %d of its %d deliveries", e.Type, e.ID, st.Verified, st.Deliveries))
		}
	}
	tot, err := s.SinkClient.Totals(ctx)
	if err != nil {
		return out, err
	}
	if tot.BadSignatures > 0 {
		errs = append(errs, fmt.Errorf("the sink refused %d deliveries for a bad signature", tot.BadSignatures))
	}
	return out, errors.Join(errs...)
}

// hostOf is the host and port of a URL.
func hostOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "?"
	}
	return u.Host
}

func joinInts(ns []int) string {
	parts := make([]string, len(ns))
	for i, n := range ns {
		parts[i] = human(int64(n))
	}
	return strings.Join(parts, ", ")
}

func human(n int64) string {
	switch {
	case n >= 1_000_000:
		return fmt.Sprintf("%.2fM", float64(n)/1e6)
	case n >= 10_000:
		return fmt.Sprintf("%.1fk", float64(n)/1e3)
	default:
		return strconv.FormatInt(n, 10)
	}
}
