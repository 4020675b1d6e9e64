// Command dev runs the whole fanout stack on this machine and a demo:
// the Temporal dev server (UI on :8233), the embedded kfake broker on :9092,
// redis-server, the worker and bridge binaries as separate processes, a
// loopback recipients source (:8090), the webhook sink as its own process
// (:8091, as a real destination runs), a codec server (:8234) through which
// the UI shows the encrypted payloads in clear, and a publisher of sample
// events. It prints live progress, read from the sink; Ctrl-C stops
// everything.
//
//	go tool task dev                 # run until Ctrl-C
//	go tool task dev -- -exit-when-done
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"go.temporal.io/api/enums/v1"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/dev/stack"
	"github.com/fanout/fanout/starter"
	"github.com/fanout/fanout/workflows/vocab"
)

type flags struct {
	temporalPort, uiPort, kafkaPort, redisPort, demoPort, sinkPort int
	codecPort                                                      int
	big, small                                                     int
	exitWhenDone                                                   bool
}

func main() {
	var f flags
	flag.IntVar(&f.temporalPort, "temporal-port", 7233, "Temporal frontend port")
	flag.IntVar(&f.uiPort, "ui-port", 8233, "Temporal Web UI port")
	flag.IntVar(&f.kafkaPort, "kafka-port", 9092, "kfake broker port")
	flag.IntVar(&f.redisPort, "redis-port", 6379, "redis-server port")
	flag.IntVar(&f.demoPort, "demo-port", 8090, "demo recipients source port")
	flag.IntVar(&f.sinkPort, "sink-port", 8091, "webhook sink process port")
	flag.IntVar(&f.codecPort, "codec-port", 8234, "codec server port (the Web UI decodes payloads through it)")
	flag.IntVar(&f.big, "big", 100_000, "recipients of the big demo event")
	flag.IntVar(&f.small, "small", 10, "number of small demo events (10 to 1,000 recipients)")
	flag.BoolVar(&f.exitWhenDone, "exit-when-done", false, "stop everything once the demo events completed")
	flag.Parse()
	if err := run(f); err != nil {
		fmt.Fprintln(os.Stderr, "dev:", err)
		os.Exit(1)
	}
}

func say(format string, args ...any) {
	fmt.Printf("[dev %s] %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func run(f flags) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root, err := stack.RepoRoot()
	if err != nil {
		return err
	}
	for name, p := range map[string]int{"temporal": f.temporalPort, "ui": f.uiPort, "kafka": f.kafkaPort, "redis": f.redisPort, "demo": f.demoPort, "sink": f.sinkPort, "codec": f.codecPort} {
		if !stack.PortFree(p) {
			return fmt.Errorf("port %d (%s) is in use: stop what holds it or pass -%s-port", p, name, name)
		}
	}
	say("building the worker, starter and sink binaries into .bin/ and starting the stack")
	s, err := stack.Start(ctx, stack.Options{
		Dir: filepath.Join(root, ".dev"), LogDir: filepath.Join(root, ".dev", "logs"),
		TemporalPort: f.temporalPort, UIPort: f.uiPort, KafkaPort: f.kafkaPort, RedisPort: f.redisPort, DemoPort: f.demoPort,
		SinkProcess: true, SinkPort: f.sinkPort, Log: os.Stdout,
		// The UI decodes through an in-process codec server on loopback,
		// without a token: the dev UI has no login to pass one.
		CodecServer: true, CodecServerPort: f.codecPort,
		// Payloads, staged batches and dead letters encrypted, with a key
		// generated into .dev/codec-keys on the first run and kept.
		Encrypt: true,
	})
	if err != nil {
		return err
	}
	defer func() {
		say("stopping everything")
		s.Close()
	}()
	say("temporal dev server on %s, Web UI on http://localhost:%d", s.TemporalAddr, f.uiPort)
	say("redis-server on %s", s.RedisAddr)
	say("codec server %s: the Web UI shows payloads in clear through it; the CLI too with `temporal workflow show --codec-endpoint %s -w <workflow id>`", s.CodecServerURL, s.CodecServerURL)
	say("payloads, staged batches and dead letters encrypted with key %s of %s (FANOUT_CODEC_KEYS_FILE; `temporal workflow show` shows them encrypted)", s.Keyring.ActiveKeyID(), s.KeysFile)
	say("kfake Kafka broker on %s (topics %s, %s)", s.KafkaAddr, starter.DefaultEventsTopic, starter.DefaultEventsDLQTopic)
	say("demo recipients source %s/recipients; webhook sink process %s/deliver (counts: %s/stats)", s.DemoURL, s.SinkURL, s.SinkURL)

	if err := s.Build(ctx); err != nil { // done by Start for the sink; a no-op then
		return err
	}
	for _, w := range []struct{ name, queues string }{
		{"worker-events", "events"},
		{"worker-delivery", "high,normal,low"},
	} {
		if err := s.StartWorker(w.name, w.queues); err != nil {
			return err
		}
	}
	if err := s.StartBridge("bridge"); err != nil {
		return err
	}
	say("workers (events; high,normal,low) and bridge started; logs in .dev/logs/")
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
	events := demoEvents(stamp, f.big, f.small)
	if err := s.Publish(ctx, events...); err != nil {
		return err
	}
	say("published %d demo events: %s with %d recipients and %d with 10 to 1,000", len(events), events[0].ID, f.big, len(events)-1)
	say("watch them: http://localhost:%d/namespaces/default/workflows?query=%s", f.uiPort,
		url.QueryEscape(fmt.Sprintf("WorkflowType='%s' AND %s='webhook'", vocab.FanoutWorkflow, vocab.SearchAttrEventType)))
	return watch(ctx, s, events, supErr, f.exitWhenDone)
}

func demoEvents(stamp string, big, small int) []stack.Event {
	const text = "hello from fanout"
	evs := []stack.Event{{ID: "demo-" + stamp + "-big", Audience: big, Priority: fanout.PriorityLow, Text: text}}
	for i := range small {
		// 10 .. 1,000 recipients, spread.
		n := 10 + (i*997)%991
		evs = append(evs, stack.Event{ID: fmt.Sprintf("demo-%s-%d", stamp, i), Audience: n, Priority: fanout.Priorities[i%len(fanout.Priorities)], Text: text})
	}
	return evs
}

// watch prints progress every two seconds until ctx is done (or, with
// exitWhenDone, until every demo event completed) or the supervisor gives
// up (supErr).
func watch(ctx context.Context, s *stack.Stack, evs []stack.Event, supErr <-chan error, exitWhenDone bool) error {
	start := time.Now()
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	var lastTotal int64
	lastT := time.Now()
	bigDone := false
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-supErr:
			return err
		case <-tick.C:
		}
		started, completed, bigCompleted := progress(ctx, s, evs)
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
		if bigCompleted && !bigDone {
			bigDone = true
			say("the %d-recipient event completed in %v (publish to last delivery %v)", evs[0].Audience,
				time.Since(start).Round(100*time.Millisecond), big.Last.Sub(start).Round(100*time.Millisecond))
		}
		now := time.Now()
		rate := float64(tot.Deliveries-lastTotal) / now.Sub(lastT).Seconds()
		lastTotal, lastT = tot.Deliveries, now
		say("events started %d/%d completed %d/%d | deliveries %s (%.0f/s) duplicates %d | big event %s/%s",
			started, len(evs), completed, len(evs), human(tot.Deliveries), rate, tot.Duplicates, human(int64(big.Unique)), human(int64(evs[0].Audience)))
		if completed == len(evs) && exitWhenDone {
			say("all demo events completed in %v", time.Since(start).Round(100*time.Millisecond))
			return checkDelivered(ctx, s, evs)
		}
	}
}

// progress counts the demo events whose workflow started and completed, and
// reports whether the big one (the first) completed.
func progress(ctx context.Context, s *stack.Stack, evs []stack.Event) (started, completed int, bigCompleted bool) {
	for i, e := range evs {
		d, err := s.TC.DescribeWorkflow(ctx, stack.WorkflowID(e.ID), "")
		if err != nil {
			continue
		}
		started++
		if d.RawResponse.GetWorkflowExecutionInfo().GetStatus() == enums.WORKFLOW_EXECUTION_STATUS_COMPLETED {
			completed++
			bigCompleted = bigCompleted || i == 0
		}
	}
	return started, completed, bigCompleted
}

// checkDelivered checks at the sink that every demo event reached its
// whole audience.
func checkDelivered(ctx context.Context, s *stack.Stack, evs []stack.Event) error {
	ids := make([]string, len(evs))
	for i, e := range evs {
		ids[i] = e.ID
	}
	got, err := s.SinkClient.Events(ctx, ids)
	if err != nil {
		return err
	}
	for _, e := range evs {
		if n := got[e.ID].Unique; n != e.Audience {
			return errors.New("event " + e.ID + " reached " + strconv.Itoa(n) + " of " + strconv.Itoa(e.Audience) + " recipients")
		}
	}
	return nil
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
