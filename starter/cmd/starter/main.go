// Command starter is fanout's front door.
//
//	starter bridge    consume the events topic and start one Fanout workflow per event
//	starter publish   publish events to the events topic (for demos and tests)
//	starter redrive   re-deliver dead letters of the deliveries DLQ through the same gate
//	starter redrive-events   re-publish records of the events DLQ after a fix
//	starter replay    replay workflow histories (files or a live query) against this code
//	starter setup     register fanout's search attributes on a namespace (idempotent)
//	starter codec-server   serve the payload codec to the Temporal UI and CLI (token, CORS)
//
// Configuration comes from FANOUT_* and TEMPORAL_* environment variables
// (see the README); publish also takes flags.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/internal/config"
	"github.com/fanout/fanout/internal/telemetry"
	"github.com/fanout/fanout/starter"
)

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch os.Args[1] {
	case "bridge":
		err = runBridge(ctx)
	case "publish":
		err = runPublish(ctx, os.Args[2:])
	case "redrive":
		err = runRedrive(ctx, os.Args[2:])
	case "redrive-events":
		err = runRedriveEvents(ctx, os.Args[2:])
	case "replay":
		err = runReplay(ctx, os.Args[2:])
	case "setup":
		err = runSetup(ctx, os.Args[2:])
	case "codec-server":
		err = runCodecServer(ctx, os.Args[2:])
	default:
		usage()
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "starter:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: starter bridge | publish [flags] | redrive [flags] | redrive-events [flags] | replay [flags] | setup [flags] | codec-server [flags]")
}

func runBridge(ctx context.Context) error {
	var cfg config.Bridge
	if err := config.Load(&cfg); err != nil {
		return err
	}
	log := telemetry.Logger(config.Logger(cfg.LogLevel)) // trace_id, span_id in a span
	tel, err := telemetry.Setup(ctx, "fanout-bridge", telemetry.WithMetricsAddr(cfg.MetricsAddr), telemetry.WithLogger(log))
	if err != nil {
		return err
	}
	defer shutdown(tel)
	tc, err := config.DialTemporal(ctx, log, tel.ClientOptions)
	if err != nil {
		return err
	}
	defer tc.Close()
	rdb, err := config.RedisClient(cfg.RedisConn)
	if err != nil {
		return err
	}
	defer rdb.Close()
	bc, err := cfg.StarterConfig(rdb, log, nil)
	if err != nil {
		return err
	}
	bc.TracerProvider, bc.MeterProvider = tel.TracerProvider, tel.MeterProvider
	return starter.New(bc, tc).Run(ctx)
}

func runPublish(ctx context.Context, args []string) error {
	var cfg config.Kafka
	if err := config.Load(&cfg); err != nil {
		return err
	}
	kc, err := cfg.KafkaConn()
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	fs := flag.NewFlagSet("publish", flag.ContinueOnError)
	id := fs.String("id", "", "event id (required; with -count N, ids are <id>-<i>)")
	typ := fs.String("type", "webhook", "event type")
	prio := fs.String("priority", "", "priority: high, normal, low (empty: the type's default)")
	payload := fs.String("payload", "{}", "JSON payload")
	count := fs.Int("count", 1, "number of events to publish")
	traceparent := fs.String("traceparent", "", "W3C traceparent of the events' parent span (default: each event starts a trace)")
	tracestate := fs.String("tracestate", "", "W3C tracestate to go with -traceparent")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *id == "" {
		return fmt.Errorf("publish: -id is required")
	}
	if !json.Valid([]byte(*payload)) {
		return fmt.Errorf("publish: -payload is not valid JSON")
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
	if *traceparent != "" {
		var ok bool
		if parent, ok = telemetry.ContextWithTraceparent(ctx, *traceparent, *tracestate); !ok {
			return fmt.Errorf("publish: -traceparent %q is not a valid W3C traceparent", *traceparent)
		}
		if !tel.Exporting() {
			tracer = tracenoop.NewTracerProvider().Tracer("")
		}
	}
	msgs := make([]kafka.Message, 0, *count)
	spans := make([]trace.Span, 0, *count)
	defer func() {
		for _, s := range spans {
			s.End()
		}
	}()
	for i := range *count {
		evID := *id
		if *count > 1 {
			evID = fmt.Sprintf("%s-%d", *id, i)
		}
		sctx, span := tracer.Start(parent, "publish "+cfg.EventsTopic, trace.WithSpanKind(trace.SpanKindProducer),
			trace.WithAttributes(attribute.String("messaging.system", "kafka"), attribute.String("messaging.operation.type", "send"),
				attribute.String("messaging.destination.name", cfg.EventsTopic), attribute.String("fanout.event.id", evID)))
		spans = append(spans, span)
		m, err := starter.Record(sctx, starter.Envelope{ID: evID, Type: *typ, Priority: fanout.Priority(*prio), Payload: json.RawMessage(*payload)})
		if err != nil {
			return err
		}
		msgs = append(msgs, m)
	}
	pub := starter.NewPublisher(kc, cfg.EventsTopic)
	defer pub.Close()
	if err := pub.PublishRecords(ctx, msgs...); err != nil {
		return err
	}
	fmt.Printf("published %d event(s) to %s\n", len(msgs), cfg.EventsTopic)
	if len(spans) == 1 {
		fmt.Printf("trace id %s\n", spans[0].SpanContext().TraceID())
	}
	return nil
}

// shutdown flushes the process's telemetry (pending spans) within 5s.
func shutdown(tel *telemetry.Telemetry) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = tel.Shutdown(ctx)
}

func runRedrive(ctx context.Context, args []string) error {
	var cfg config.Worker
	if err := config.Load(&cfg); err != nil {
		return err
	}
	kc, err := cfg.KafkaConn()
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	fs := flag.NewFlagSet("redrive", flag.ContinueOnError)
	var f starter.RedriveFilter
	fs.StringVar(&f.EventID, "event-id", "", "only dead letters of this event id")
	fs.StringVar(&f.EventType, "event-type", "", "only dead letters of this event type")
	fs.StringVar(&f.ErrorContains, "error", "", "only dead letters whose last error contains this text")
	rps := fs.Float64("rate", 100, "re-deliveries per second, at most")
	round := fs.String("round", "", "name of this redrive (default: a timestamp); rerunning a round is idempotent")
	wait := fs.Bool("wait", true, "wait for the redrive batches and print their outcome")
	if err := fs.Parse(args); err != nil {
		return err
	}
	log := telemetry.Logger(config.Logger(cfg.LogLevel)) // trace_id, span_id in a span
	// The keys open sealed dead letters (and DialTemporal encrypts the
	// redrive batches' input with them).
	keys, err := config.LoadKeyring()
	if err != nil {
		return err
	}
	tc, err := config.DialTemporal(ctx, log)
	if err != nil {
		return err
	}
	defer tc.Close()
	res, err := starter.RedriveDeliveries(ctx, tc, starter.RedriveOptions{
		Kafka: kc, Topic: cfg.DeliveriesDLQ, Filter: f, Rate: *rps, Round: *round, Wait: *wait,
		Keys: config.Sealer(keys),
	})
	fmt.Printf("redrive: matched %d dead letters in %d batches; delivered %d, already delivered %d, failed again %d\n",
		res.Matched, res.Batches, res.Delivered, res.Skipped, res.Failed)
	if res.Invalid > 0 {
		fmt.Printf("redrive: %d records of the topic are not valid dead letters (see the log) and are left in the DLQ\n", res.Invalid)
	}
	if res.Unredrivable > 0 {
		fmt.Printf("redrive: %d dead letters were written without their message (the DLQ topic refused them whole) and are left in the DLQ\n", res.Unredrivable)
	}
	return err
}

func runRedriveEvents(ctx context.Context, args []string) error {
	var cfg config.Kafka
	if err := config.Load(&cfg); err != nil {
		return err
	}
	kc, err := cfg.KafkaConn()
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	fs := flag.NewFlagSet("redrive-events", flag.ContinueOnError)
	reason := fs.String("reason", "", "only records dead-lettered for this reason (e.g. unknown_type)")
	rps := fs.Float64("rate", 100, "records per second, at most")
	if err := fs.Parse(args); err != nil {
		return err
	}
	res, err := starter.RedriveEvents(ctx, starter.RedriveEventsOptions{
		Kafka: kc, DLQTopic: cfg.EventsDLQ, EventsTopic: cfg.EventsTopic, Reason: *reason, Rate: *rps,
	})
	fmt.Printf("redrive-events: re-published %d records to %s (%d cut dead letters from their source topic)\n", res.Republished, cfg.EventsTopic, res.FromSource)
	if res.Lost > 0 {
		fmt.Printf("redrive-events: %d cut dead letters whose original is gone from its source topic are left in the DLQ\n", res.Lost)
	}
	return err
}
