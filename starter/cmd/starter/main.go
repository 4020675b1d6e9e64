// Command starter is fanout's front door.
//
//	starter bridge    consume the events topic and start one Fanout workflow per event
//	starter publish   publish events to the events topic (for demos and tests)
//	starter redrive   re-deliver dead letters of the deliveries DLQ through the same gate
//	starter redrive-events   re-publish records of the events DLQ after a fix
//	starter replay    replay workflow histories (files or a live query) against this code
//	starter limits    set, unset or show the per-destination rate limits of an event type
//	starter setup     register the search attributes, create the topics (-topics), check the server
//	starter codec-server   serve the payload codec to the Temporal UI and CLI (token, CORS)
//
// Configuration comes from FANOUT_* and TEMPORAL_* environment variables
// (docs/configuration.md); publish also takes flags.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"go.temporal.io/sdk/client"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/internal/cli"
	"github.com/fanout/fanout/internal/config"
	"github.com/fanout/fanout/internal/telemetry"
	"github.com/fanout/fanout/internal/version"
	"github.com/fanout/fanout/starter"
	"github.com/fanout/fanout/types"
	"github.com/fanout/fanout/workers"
	"github.com/fanout/fanout/workers/webhook"
)

func main() {
	args := os.Args[1:]
	if len(args) == 0 {
		usage(os.Stderr)
		os.Exit(2)
	}
	switch sub := args[0]; {
	case cli.IsHelpFlag(sub), sub == "help" && len(args) == 1:
		usage(os.Stdout)
		os.Exit(0)
	case sub == "help":
		// starter help <command>: that command's -h.
		args = []string{args[1], "-h"}
	case cli.IsVersionFlag(sub):
		args = []string{"version"}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// Each run* parses its flags (cli.Parse) before it reads the
	// environment or connects anywhere: -h prints the help and exits 0.
	var err error
	switch args[0] {
	case "bridge":
		err = runBridge(ctx, args[1:])
	case "publish":
		err = runPublish(ctx, args[1:])
	case "redrive":
		err = runRedrive(ctx, args[1:])
	case "redrive-events":
		err = runRedriveEvents(ctx, args[1:])
	case "replay":
		err = runReplay(ctx, args[1:])
	case "limits":
		err = runLimits(ctx, args[1:])
	case "status":
		err = runStatus(ctx, args[1:])
		if errors.Is(err, starter.ErrSomeUnknown) {
			stop()
			os.Exit(exitUnknown)
		}
	case "resend":
		err = runResend(ctx, args[1:])
	case "setup":
		err = runSetup(ctx, args[1:])
	case "codec-server":
		err = runCodecServer(ctx, args[1:])
	case "version":
		err = runVersion(args[1:])
	default:
		stop()
		cli.Exit("starter", cli.Usagef("unknown command %q (commands: %s)", args[0], strings.Join(commandNames(), ", ")))
	}
	stop()
	cli.Exit("starter "+args[0], err)
}

// commands are starter's subcommands as the top-level help lists them.
var commands = []struct{ name, summary string }{
	{"bridge", "consume the events topic and start one Fanout workflow per event"},
	{"publish", "publish events to the events topic (for demos and tests)"},
	{"redrive", "re-deliver dead letters of the deliveries DLQ through the same gate (-dry-run lists them)"},
	{"redrive-events", "re-publish records of the events DLQ after a fix (-dry-run lists them)"},
	{"replay", "replay workflow histories (files or a live query) against this code"},
	{"status", "answer for recipients of an event: delivered (when, attempts), retrying, dead-lettered, ... and their batch"},
	{"resend", "deliver an event's message again to listed recipients, on purpose (-reason), with the same webhook-id"},
	{"limits", "set, unset or show the per-destination rate limits of an event type (no restart)"},
	{"setup", "register fanout's search attributes, create the Kafka topics (-topics), check the server (idempotent)"},
	{"codec-server", "serve the payload codec to the Temporal UI and CLI (token, CORS)"},
	{"version", "print the version, the commit it was built from (and whether the tree was modified), Go and platform"},
}

func commandNames() []string {
	names := make([]string, len(commands))
	for i, c := range commands {
		names[i] = c.name
	}
	return names
}

// usage is `starter -h`: the commands; each one's -h has its flags and
// environment variables.
func usage(w io.Writer) {
	fmt.Fprint(w, `starter is fanout's front door: the Kafka bridge that starts one Fanout workflow per
event, and the operator's commands around it.

Usage:
  starter <command> [flags]

Commands:
`)
	for _, c := range commands {
		fmt.Fprintf(w, "  %-15s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, `
Run 'starter <command> -h' (or 'starter help <command>') for a command's flags and the
environment variables it reads. Configuration comes from FANOUT_* and TEMPORAL_* variables
(docs/configuration.md).
`)
}

func runVersion(args []string) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	if err := cli.Parse(fs, args, cli.Help{Name: "starter version", Summary: "starter version prints the version, the commit it was built from and whether that tree had uncommitted changes, the Go version and the platform (the same as -version)."}, false); err != nil {
		return err
	}
	fmt.Println(version.Line("starter"))
	return nil
}

func bridgeHelp() cli.Help {
	return cli.Help{Name: "starter bridge", Summary: `starter bridge consumes the events topic (FANOUT_EVENTS_TOPIC) in a consumer group and
starts one Fanout workflow per event on the events task queue; bad records go to the events
DLQ with their reason. Before it consumes, it waits until the namespace has fanout's search
attributes ('starter setup'), logging which are missing. It runs until SIGINT or SIGTERM. (A
worker with FANOUT_BRIDGE=true runs the same bridge in-process.)`,
		Env:   []cli.EnvGroup{{Vars: config.EnvVars(starter.Settings{}, types.Settings{})}, cli.TemporalGroup()},
		Notes: []string{cli.OTelNote, "With FANOUT_TYPES_FILE, the bridge accepts the file's types beside FANOUT_EVENT_TYPES: give it the workers' file."},
	}
}

// bridgeTypes are the event types a stand-alone bridge accepts: the
// settings' FANOUT_EVENT_TYPES and the types of FANOUT_TYPES_FILE.
func bridgeTypes(cfg starter.Settings, ts types.Settings) ([]string, error) {
	names := slices.Clone(cfg.EventTypes)
	if ts.TypesFile == "" {
		return names, nil
	}
	f, err := types.Load(ts.TypesFile)
	if err != nil {
		return nil, fmt.Errorf("FANOUT_TYPES_FILE: %w", err)
	}
	for _, t := range f.Types {
		if !slices.Contains(names, t.Name) {
			names = append(names, t.Name)
		}
	}
	return names, nil
}

func runBridge(ctx context.Context, args []string) error {
	if err := cli.Parse(flag.NewFlagSet("bridge", flag.ContinueOnError), args, bridgeHelp(), false); err != nil {
		return err
	}
	var cfg starter.Settings
	var ts types.Settings
	if err := config.Load(&cfg, &ts); err != nil {
		return err
	}
	names, err := bridgeTypes(cfg, ts)
	if err != nil {
		return err
	}
	log := telemetry.Logger(config.Logger(cfg.LogLevel)) // trace_id, span_id in a span
	tel, err := telemetry.Setup(ctx, "fanout-bridge", telemetry.WithMetricsAddr(cfg.MetricsAddr), telemetry.WithLogger(log))
	if err != nil {
		return err
	}
	defer shutdown(tel)
	rdb, err := config.RedisClient(cfg.RedisConn)
	if err != nil {
		return err
	}
	defer func() { _ = rdb.Close() }()
	if err := config.CheckEviction(ctx, rdb, cfg.RedisConn, log); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	tc, err := config.DialTemporal(ctx, log, tel.ClientOptions)
	if err != nil {
		return err
	}
	defer tc.Close()
	bc, err := cfg.Config(rdb, log, names)
	if err != nil {
		return err
	}
	bc.TracerProvider, bc.MeterProvider = tel.TracerProvider, tel.MeterProvider
	return starter.New(bc, tc).Run(ctx)
}

func runPublish(ctx context.Context, args []string) error {
	f, err := parsePublishFlags(args)
	if err != nil {
		return err
	}
	var cfg starter.Kafka
	if err := config.Load(&cfg); err != nil {
		return err
	}
	kc, err := cfg.KafkaConn()
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	// Each event's record carries a W3C trace context: a "publish" span of
	// its own (a child of -traceparent when given), exported when OTEL_* say
	// so. With -traceparent and no exporter, the given context is passed on
	// as it is, so the trace has no span the backend never sees.
	tel, err := telemetry.Setup(ctx, "fanout-publish", telemetry.WithSDKTracer())
	if err != nil {
		return err
	}
	defer shutdown(tel)
	tracer := tel.TracerProvider.Tracer("github.com/fanout/fanout/starter")
	parent := ctx
	if f.traceparent != "" {
		var ok bool
		if parent, ok = telemetry.ContextWithTraceparent(ctx, f.traceparent, f.tracestate); !ok {
			return cli.Usagef("-traceparent %q is not a valid W3C traceparent", f.traceparent)
		}
		if !tel.Exporting() {
			tracer = tracenoop.NewTracerProvider().Tracer("")
		}
	}
	msgs, spans, err := f.records(parent, tracer, cfg.EventsTopic)
	defer func() {
		for _, s := range spans {
			s.End()
		}
	}()
	if err != nil {
		return err
	}
	pub := starter.NewPublisher(kc, cfg.EventsTopic)
	defer func() { _ = pub.Close() }()
	if err := pub.PublishRecords(ctx, msgs...); err != nil {
		return err
	}
	fmt.Printf("published %d event(s) to %s\n", len(msgs), cfg.EventsTopic)
	if len(spans) == 1 {
		fmt.Printf("trace id %s\n", spans[0].SpanContext().TraceID())
	}
	return nil
}

// publishFlags are starter publish's flags, checked.
type publishFlags struct {
	id, typ, prio, payload  string
	count                   int
	traceparent, tracestate string
	at                      time.Time // -deliver-at
	delay                   string
}

// parsePublishFlags parses and checks starter publish's flags.
func parsePublishFlags(args []string) (publishFlags, error) {
	var f publishFlags
	fs := flag.NewFlagSet("publish", flag.ContinueOnError)
	fs.StringVar(&f.id, "id", "", "event id (required; with -count N, ids are <id>-<i>)")
	fs.StringVar(&f.typ, "type", "webhook", "event type")
	fs.StringVar(&f.prio, "priority", "", "priority: high, normal, low (empty: the type's default)")
	fs.StringVar(&f.payload, "payload", "{}", "JSON payload")
	fs.IntVar(&f.count, "count", 1, "number of events to publish")
	fs.StringVar(&f.traceparent, "traceparent", "", "W3C traceparent of the events' parent span (default: each event starts a trace)")
	fs.StringVar(&f.tracestate, "tracestate", "", "W3C tracestate to go with -traceparent")
	deliverAt := fs.String("deliver-at", "", "schedule the events for this RFC 3339 time (deliver_at), e.g. 2026-12-24T09:00:00Z")
	fs.StringVar(&f.delay, "delay", "", "schedule the events this long after publishing (delay, a Go duration: 90s, 2h)")
	h := cli.Help{Name: "starter publish", Args: "-id ID [flags]", Summary: `starter publish writes events ({"id","type","priority","payload"} envelopes) to the events
topic, for demos and tests; producers write the same records with any Kafka client.`,
		Env:   []cli.EnvGroup{{Vars: config.EnvVars(starter.Kafka{})}},
		Notes: []string{cli.OTelNote}}
	if err := cli.Parse(fs, args, h, false); err != nil {
		return f, err
	}
	switch {
	case f.id == "":
		return f, cli.Usagef("-id is required")
	case !json.Valid([]byte(f.payload)):
		return f, cli.Usagef("-payload is not valid JSON")
	case f.count < 1:
		return f, cli.Usagef("-count %d: want 1 or more", f.count)
	case *deliverAt != "" && f.delay != "":
		return f, cli.Usagef("-deliver-at and -delay: give one of them")
	case *deliverAt != "":
		var err error
		if f.at, err = time.Parse(time.RFC3339, *deliverAt); err != nil {
			return f, cli.Usagef("-deliver-at %q is not an RFC 3339 time such as 2026-12-24T09:00:00Z", *deliverAt)
		}
	case f.delay != "":
		if d, err := time.ParseDuration(f.delay); err != nil || d < 0 {
			return f, cli.Usagef("-delay %q is not a non-negative Go duration such as 90s or 2h", f.delay)
		}
	}
	return f, nil
}

// records are the events' records for topic, each with its publish span
// (ended by the caller, also on an error).
func (f publishFlags) records(parent context.Context, tracer trace.Tracer, topic string) ([]kafka.Message, []trace.Span, error) {
	msgs := make([]kafka.Message, 0, f.count)
	spans := make([]trace.Span, 0, f.count)
	for i := range f.count {
		evID := f.id
		if f.count > 1 {
			evID = fmt.Sprintf("%s-%d", f.id, i)
		}
		sctx, span := tracer.Start(parent, "publish "+topic, trace.WithSpanKind(trace.SpanKindProducer),
			trace.WithAttributes(attribute.String("messaging.system", "kafka"), attribute.String("messaging.operation.type", "send"),
				attribute.String("messaging.destination.name", topic), attribute.String("fanout.event.id", evID)))
		spans = append(spans, span)
		m, err := starter.Record(sctx, starter.Envelope{ID: evID, Type: f.typ, Priority: fanout.Priority(f.prio), Payload: json.RawMessage(f.payload),
			DeliverAt: f.at, Delay: f.delay})
		if err != nil {
			return nil, spans, err
		}
		msgs = append(msgs, m)
	}
	return msgs, spans, nil
}

// shutdown flushes the process's telemetry (pending spans) within 5s.
func shutdown(tel *telemetry.Telemetry) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = tel.Shutdown(ctx)
}

func runRedrive(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("redrive", flag.ContinueOnError)
	var f starter.RedriveFilter
	fs.StringVar(&f.EventID, "event-id", "", "only dead letters of this event id")
	fs.StringVar(&f.EventType, "event-type", "", "only dead letters of this event type")
	fs.StringVar(&f.ErrorContains, "error", "", "only dead letters whose last error contains this text")
	rps := fs.Float64("rate", 100, "re-deliveries per second, at most")
	round := fs.String("round", "", "name of this redrive (default: a timestamp); rerunning a round is idempotent")
	wait := fs.Bool("wait", true, "wait for the redrive batches and print their outcome")
	dryRun := fs.Bool("dry-run", false, "read the DLQ and list what would be redriven (dead letters per event and last error, batches); start nothing, no Temporal connection")
	every := fs.Duration("progress", 5*time.Second, "print progress counts this often while reading, starting and waiting (0: never)")
	h := cli.Help{Name: "starter redrive", Args: "[flags]", Summary: `starter redrive re-delivers dead letters of the deliveries DLQ (FANOUT_DELIVERIES_DLQ_TOPIC):
the matching letters are grouped by event and batch attempt and delivered again by DeliveryBatch
workflows that present the original attempt id, so they pass the same gate (a recipient
delivered meanwhile is skipped). Rerunning a -round is idempotent. -dry-run lists what would
be redriven and starts nothing.`,
		Env: []cli.EnvGroup{{Vars: config.EnvVars(workers.Config{}, webhook.Config{})}, cli.TemporalGroup()}}
	if err := cli.Parse(fs, args, h, false); err != nil {
		return err
	}
	if *rps <= 0 {
		return cli.Usagef("-rate %v: want more than 0", *rps)
	}
	// The worker's settings, loaded and checked as the worker does.
	var cfg workers.Config
	var hook webhook.Config
	if err := config.Load(&cfg, &hook); err != nil {
		return err
	}
	if err := cfg.CheckType(hook.TypeOptions()); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	kc, err := cfg.Kafka().KafkaConn()
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	log := telemetry.Logger(config.Logger(cfg.LogLevel)) // trace_id, span_id in a span
	// The keys open sealed dead letters (and DialTemporal encrypts the
	// redrive batches' input with them).
	keys, err := config.LoadKeyring()
	if err != nil {
		return err
	}
	var tc client.Client
	if !*dryRun {
		if tc, err = config.DialTemporal(ctx, log); err != nil {
			return err
		}
		defer tc.Close()
	}
	opts := starter.RedriveOptions{
		Kafka: kc, Topic: cfg.DeliveriesDLQ, Filter: f, Rate: *rps, Round: *round, Wait: *wait,
		Keys: workers.Sealer(keys), DryRun: *dryRun, ProgressEvery: *every,
	}
	if *every > 0 {
		opts.Progress = func(p starter.RedriveProgress) { printRedriveProgress(os.Stdout, p) }
	}
	res, err := starter.RedriveDeliveries(ctx, tc, opts)
	if *dryRun {
		printRedrivePlan(os.Stdout, res, cfg.DeliveriesDLQ)
		return err
	}
	fmt.Printf("redrive: matched %d dead letters in %d batches; delivered %d, already delivered %d, failed again %d\n",
		res.Matched, res.Batches, res.Delivered, res.Skipped, res.Failed)
	if res.Invalid > 0 {
		fmt.Printf("redrive: %d records of the topic are not valid dead letters (see the log) and are left in the DLQ\n", res.Invalid)
	}
	if res.Unsealed > 0 {
		fmt.Printf("redrive: %d dead letters are in clear while keys are configured (not written by fanout) and are left in the DLQ\n", res.Unsealed)
	}
	if res.Unredrivable > 0 {
		fmt.Printf("redrive: %d dead letters were written without their message and no letter of their batch holds it; left in the DLQ\n", res.Unredrivable)
	}
	return err
}

func runRedriveEvents(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("redrive-events", flag.ContinueOnError)
	reason := fs.String("reason", "", "only records dead-lettered for this reason (e.g. unknown_type)")
	rps := fs.Float64("rate", 100, "records per second, at most")
	dryRun := fs.Bool("dry-run", false, "read the DLQ and count what would be re-published per reason; publish nothing")
	every := fs.Duration("progress", 5*time.Second, "print progress counts this often (0: never)")
	h := cli.Help{Name: "starter redrive-events", Args: "[flags]", Summary: `starter redrive-events re-publishes records of the events DLQ (FANOUT_EVENTS_DLQ_TOPIC) to
the events topic after a fix (a type deployed, a producer corrected), with their key and
headers; a record the DLQ holds cut is read back whole from the events topic. -dry-run
counts them per reason and publishes nothing.`,
		Env: []cli.EnvGroup{{Vars: config.EnvVars(starter.Kafka{})}}}
	if err := cli.Parse(fs, args, h, false); err != nil {
		return err
	}
	if *rps <= 0 {
		return cli.Usagef("-rate %v: want more than 0", *rps)
	}
	var cfg starter.Kafka
	if err := config.Load(&cfg); err != nil {
		return err
	}
	kc, err := cfg.KafkaConn()
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	opts := starter.RedriveEventsOptions{
		Kafka: kc, DLQTopic: cfg.EventsDLQ, EventsTopic: cfg.EventsTopic, Reason: *reason, Rate: *rps,
		DryRun: *dryRun, ProgressEvery: *every,
	}
	if *every > 0 {
		opts.Progress = func(p starter.RedriveEventsProgress) {
			if !p.Done {
				fmt.Printf("redrive-events: read %d records, matched %d, re-published %d\n", p.Read, sum(p.ByReason), p.Republished)
			}
		}
	}
	res, err := starter.RedriveEvents(ctx, opts)
	if *dryRun {
		fmt.Printf("redrive-events: dry run: would re-publish %d records of %s to %s (%d cut, read back from the events topic); nothing published\n",
			sum(res.ByReason), cfg.EventsDLQ, cfg.EventsTopic, res.Cut)
		for _, r := range slices.Sorted(maps.Keys(res.ByReason)) {
			fmt.Printf("  %-20s %d\n", cmp.Or(r, "(no reason)"), res.ByReason[r])
		}
		return err
	}
	fmt.Printf("redrive-events: re-published %d records to %s (%d cut dead letters from their source topic)\n", res.Republished, cfg.EventsTopic, res.FromSource)
	if res.Lost > 0 {
		fmt.Printf("redrive-events: %d cut dead letters whose original is gone from its source topic are left in the DLQ\n", res.Lost)
	}
	return err
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// printRedriveProgress prints one progress line of a redrive.
func printRedriveProgress(w io.Writer, p starter.RedriveProgress) {
	switch p.Phase {
	case "read":
		fmt.Fprintf(w, "redrive: reading the DLQ: %d records, %d dead letters matched\n", p.Read, p.Matched)
	case "start":
		fmt.Fprintf(w, "redrive: %d dead letters matched; starting batches: %d/%d\n", p.Matched, p.Batches, p.Planned)
	case "wait":
		fmt.Fprintf(w, "redrive: batches finished %d/%d: delivered %d, already delivered %d, failed again %d\n",
			p.Finished, p.Batches, p.Delivered, p.Skipped, p.Failed)
	}
}

// printRedrivePlan prints what a -dry-run redrive found.
func printRedrivePlan(w io.Writer, res starter.RedriveResult, topic string) {
	fmt.Fprintf(w, "redrive: dry run: %d dead letters of %s match, in %d events; a redrive would start %d batches; nothing started\n",
		res.Matched, topic, len(res.Plan), res.Batches)
	for _, pl := range res.Plan {
		fmt.Fprintf(w, "  event %s/%s (priority %s): %d dead letters, %d batches", pl.EventType, pl.EventID, cmp.Or(string(pl.Priority), "normal"), pl.DeadLetters, pl.Batches)
		if pl.Unredrivable > 0 {
			fmt.Fprintf(w, ", %d without their message (left in the DLQ)", pl.Unredrivable)
		}
		fmt.Fprintln(w)
		for _, e := range slices.Sorted(maps.Keys(pl.Errors)) {
			fmt.Fprintf(w, "    %6d  %s\n", pl.Errors[e], cmp.Or(e, "(no error recorded)"))
		}
	}
	if res.Invalid > 0 {
		fmt.Fprintf(w, "redrive: %d records of the topic are not valid dead letters (see the log)\n", res.Invalid)
	}
	if res.Unsealed > 0 {
		fmt.Fprintf(w, "redrive: %d dead letters are in clear while keys are configured (see the log)\n", res.Unsealed)
	}
}
