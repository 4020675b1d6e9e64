// Command dev runs the whole fanout stack on this machine and a demo:
// the Temporal dev server (UI on :8233), the embedded kfake broker on :9092,
// redis-server, the worker and bridge binaries as separate processes, a
// loopback recipients source and webhook sink, and a publisher of sample
// events. It prints live progress; Ctrl-C stops everything.
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
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/segmentio/kafka-go"
	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/internal/dev/demo"
	"github.com/fanout/fanout/internal/dev/stack"
	"github.com/fanout/fanout/starter"
	"github.com/fanout/fanout/workers/webhook"
	"github.com/fanout/fanout/workflows/vocab"
)

type flags struct {
	temporalPort, uiPort, kafkaPort, redisPort, demoPort int
	big, small                                           int
	exitWhenDone                                         bool
}

func main() {
	var f flags
	flag.IntVar(&f.temporalPort, "temporal-port", 7233, "Temporal frontend port")
	flag.IntVar(&f.uiPort, "ui-port", 8233, "Temporal Web UI port")
	flag.IntVar(&f.kafkaPort, "kafka-port", 9092, "kfake broker port")
	flag.IntVar(&f.redisPort, "redis-port", 6379, "redis-server port")
	flag.IntVar(&f.demoPort, "demo-port", 8090, "demo recipients source and sink port")
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
	state := filepath.Join(root, ".dev")
	logs := filepath.Join(state, "logs")
	if err := os.MkdirAll(logs, 0o755); err != nil {
		return err
	}
	for name, p := range map[string]int{"temporal": f.temporalPort, "ui": f.uiPort, "kafka": f.kafkaPort, "redis": f.redisPort, "demo": f.demoPort} {
		if !stack.PortFree(p) {
			return fmt.Errorf("port %d (%s) is in use: stop what holds it or pass -%s-port", p, name, name)
		}
	}

	tbin, err := stack.EnsureTemporalCLI(ctx, root, os.Stdout)
	if err != nil {
		return err
	}
	say("building the worker and starter binaries into .bin/")
	if err := stack.Build(ctx, root); err != nil {
		return err
	}

	var procs []*stack.Proc
	defer func() {
		say("stopping everything")
		for i := len(procs) - 1; i >= 0; i-- {
			procs[i].Stop(10 * time.Second)
		}
	}()

	tproc, taddr, err := stack.StartTemporal(ctx, stack.TemporalOptions{
		Port: f.temporalPort, UIPort: f.uiPort, Bin: tbin,
		DBFile: filepath.Join(state, "temporal.db"), LogPath: filepath.Join(logs, "temporal.log"),
	})
	if err != nil {
		return err
	}
	procs = append(procs, tproc)
	say("temporal dev server on %s, Web UI on http://localhost:%d", taddr, f.uiPort)

	if err := os.MkdirAll(filepath.Join(state, "redis"), 0o755); err != nil {
		return err
	}
	rproc, raddr, err := stack.StartRedis(ctx, f.redisPort, filepath.Join(state, "redis"), filepath.Join(logs, "redis.log"), os.Stdout)
	if err != nil {
		return err
	}
	procs = append(procs, rproc)
	say("redis-server on %s", raddr)

	kc, kaddr, err := stack.StartKafka(f.kafkaPort)
	if err != nil {
		return err
	}
	defer kc.Close()
	say("kfake Kafka broker on %s (topics %s, %s)", kaddr, starter.DefaultEventsTopic, starter.DefaultEventsDLQTopic)

	sink := demo.NewSink()
	demoAddr := fmt.Sprintf("127.0.0.1:%d", f.demoPort)
	ln, err := net.Listen("tcp", demoAddr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: demo.Mux(&demo.Source{DeliverURL: "http://" + demoAddr + "/deliver"}, sink), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	say("demo recipients source http://%s/recipients, webhook sink http://%s/deliver", demoAddr, demoAddr)

	env := []string{
		"TEMPORAL_ADDRESS=" + taddr, "TEMPORAL_NAMESPACE=default",
		"FANOUT_KAFKA_BROKERS=" + kaddr, "FANOUT_REDIS_URL=redis://" + raddr + "/0",
		"FANOUT_RECIPIENTS_URL=http://" + demoAddr + "/recipients", "FANOUT_LOG_LEVEL=warn",
	}
	bin := stack.BinDir(root)
	for _, w := range []struct{ name, queues string }{
		{"worker-events", "events"},
		{"worker-delivery", "high,normal,low"},
	} {
		p, err := stack.StartProc(w.name, filepath.Join(logs, w.name+".log"), filepath.Join(bin, "worker"), nil, append(env, "FANOUT_QUEUES="+w.queues))
		if err != nil {
			return err
		}
		procs = append(procs, p)
	}
	bp, err := stack.StartProc("bridge", filepath.Join(logs, "starter.log"), filepath.Join(bin, "starter"), []string{"bridge"}, env)
	if err != nil {
		return err
	}
	procs = append(procs, bp)
	say("workers (events; high,normal,low) and bridge started; logs in .dev/logs/")

	tc, err := client.Dial(client.Options{HostPort: taddr, Logger: stack.QuietLogger{}})
	if err != nil {
		return err
	}
	defer tc.Close()

	stamp := time.Now().UTC().Format("20060102-150405")
	events := demoEvents(stamp, f.big, f.small)
	if err := publish(ctx, kaddr, events); err != nil {
		return err
	}
	say("published %d demo events: %s with %d recipients and %d with 10 to 1,000", len(events), events[0].ID, f.big, len(events)-1)
	say("watch them: http://localhost:%d/namespaces/default/workflows?query=%s", f.uiPort,
		urlQuery(fmt.Sprintf("WorkflowType='%s' AND %s='webhook'", vocab.FanoutWorkflow, vocab.SearchAttrEventType)))
	return watch(ctx, tc, sink, events, procs, f.exitWhenDone)
}

type demoEvent struct {
	ID       string
	Audience int
	Priority fanout.Priority
}

func demoEvents(stamp string, big, small int) []demoEvent {
	evs := []demoEvent{{ID: "demo-" + stamp + "-big", Audience: big, Priority: fanout.PriorityLow}}
	for i := range small {
		// 10 .. 1,000 recipients, spread.
		n := 10 + (i*997)%991
		evs = append(evs, demoEvent{ID: fmt.Sprintf("demo-%s-%d", stamp, i), Audience: n, Priority: fanout.Priorities[i%len(fanout.Priorities)]})
	}
	return evs
}

func publish(ctx context.Context, broker string, evs []demoEvent) error {
	w := &kafka.Writer{Addr: kafka.TCP(broker), Topic: starter.DefaultEventsTopic, Balancer: &kafka.Hash{}, RequiredAcks: kafka.RequireAll, BatchTimeout: 5 * time.Millisecond}
	defer w.Close()
	msgs := make([]kafka.Message, 0, len(evs))
	for _, e := range evs {
		payload, _ := json.Marshal(demo.Payload{Audience: e.Audience, Message: json.RawMessage(`{"text":"hello from fanout"}`)})
		v, err := json.Marshal(starter.Envelope{ID: e.ID, Type: webhook.EventType, Priority: string(e.Priority), Payload: payload})
		if err != nil {
			return err
		}
		msgs = append(msgs, kafka.Message{Key: []byte(e.ID), Value: v})
	}
	return w.WriteMessages(ctx, msgs...)
}

// watch prints progress every two seconds until ctx is done (or, with
// exitWhenDone, until every demo event completed).
func watch(ctx context.Context, tc client.Client, sink *demo.Sink, evs []demoEvent, procs []*stack.Proc, exitWhenDone bool) error {
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
		case <-tick.C:
		}
		for _, p := range procs {
			if p.Exited() {
				return fmt.Errorf("%s exited; see .dev/logs/%s.log", p.Name, p.Name)
			}
		}
		started, completed := 0, 0
		for i, e := range evs {
			d, err := tc.DescribeWorkflowExecution(ctx, vocab.WorkflowID(webhook.EventType, e.ID), "")
			if err != nil {
				continue
			}
			started++
			if d.GetWorkflowExecutionInfo().GetStatus() == enums.WORKFLOW_EXECUTION_STATUS_COMPLETED {
				completed++
				if i == 0 && !bigDone {
					bigDone = true
					say("the %d-recipient event completed in %v (publish to last delivery %v)", e.Audience,
						time.Since(start).Round(100*time.Millisecond), sink.Event(e.ID).Last.Sub(start).Round(100*time.Millisecond))
				}
			}
		}
		total := sink.Total()
		now := time.Now()
		rate := float64(total-lastTotal) / now.Sub(lastT).Seconds()
		lastTotal, lastT = total, now
		big := sink.Event(evs[0].ID)
		say("events started %d/%d completed %d/%d | deliveries %s (%.0f/s) duplicates %d | big event %s/%s",
			started, len(evs), completed, len(evs), human(total), rate, sink.Duplicates(), human(int64(big.Unique)), human(int64(evs[0].Audience)))
		if completed == len(evs) && exitWhenDone {
			say("all demo events completed in %v", time.Since(start).Round(100*time.Millisecond))
			for _, e := range evs {
				if got := sink.Event(e.ID); got.Unique != e.Audience {
					return errors.New("event " + e.ID + " reached " + strconv.Itoa(got.Unique) + " of " + strconv.Itoa(e.Audience) + " recipients")
				}
			}
			return nil
		}
	}
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

func urlQuery(q string) string { return url.QueryEscape(q) }
