// Command worker is fanout's stock worker binary: it serves the task queues
// named in FANOUT_QUEUES with the built-in "webhook" event type (recipients
// from FANOUT_RECIPIENTS_URL, delivery by HTTP POST). With FANOUT_BRIDGE=true
// it also runs the Kafka bridge, starting events eagerly on its own events
// worker.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"go.temporal.io/sdk/client"
	"golang.org/x/sync/errgroup"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/activities"
	"github.com/fanout/fanout/internal/cli"
	"github.com/fanout/fanout/internal/codec"
	"github.com/fanout/fanout/internal/config"
	"github.com/fanout/fanout/internal/telemetry"
	"github.com/fanout/fanout/internal/version"
	"github.com/fanout/fanout/starter"
	"github.com/fanout/fanout/types"
	"github.com/fanout/fanout/workers"
	"github.com/fanout/fanout/workers/webhook"
)

// defaultGCPercent is the worker's GOGC unless the environment sets one.
const defaultGCPercent = 400

func main() {
	if len(os.Args) > 1 && os.Args[1] == checkTypesCmd {
		os.Exit(checkTypes(os.Args[2:], os.Stdout, os.Stderr))
	}
	if err := parseArgs(os.Args[1:]); err != nil {
		cli.Exit("worker", err)
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}

// help is `worker -h`: its variables come from the configuration structs.
func help() cli.Help {
	worker := append(config.EnvVars(workers.Config{}, webhook.Config{}, types.Settings{}), config.EnvVar{Name: "GOGC", Kind: "int", Default: strconv.Itoa(defaultGCPercent)},
		config.EnvVar{Name: "GOMEMLIMIT", Kind: "string"})
	return cli.Help{
		Name: "worker", Args: "[-version]",
		Summary: `worker runs fanout's Temporal workers: it serves the task queues named in FANOUT_QUEUES
(events: the Fanout workflows; high, normal, low: the delivery batches) with the built-in
"webhook" event type (recipients from FANOUT_RECIPIENTS_URL, delivery by HTTP POST).
With FANOUT_BRIDGE=true it also runs the Kafka bridge, starting events eagerly on its
own events worker. It takes its configuration from the environment only and runs until
SIGINT or SIGTERM. FANOUT_TYPES_FILE adds the event types of a types file beside
"webhook"; 'worker check-types FILE' validates such a file.`,
		Env: []cli.EnvGroup{
			{Vars: worker},
			{Title: "the bridge, with FANOUT_BRIDGE=true", Vars: cli.Except(config.EnvVars(starter.Settings{}), worker)},
			cli.TemporalGroup(),
		},
		Notes: []string{cli.OTelNote},
	}
}

// parseArgs handles -h and -version (ErrHelp: exit 0) and refuses
// anything else on the command line before any work starts.
func parseArgs(args []string) error {
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	showVersion := fs.Bool("version", false, "print the version and the commit it was built from, and exit")
	if len(args) == 1 && args[0] == "version" {
		args = []string{"-version"}
	}
	if err := cli.Parse(fs, args, help(), false); err != nil {
		return err
	}
	if *showVersion {
		fmt.Println(version.Line("worker"))
		return cli.ErrHelp
	}
	return nil
}

func run() error {
	cfg, hook, tf, bcfg, err := loadSettings()
	if err != nil {
		return err
	}
	log := telemetry.Logger(config.Logger(cfg.LogLevel)) // trace_id, span_id in a span
	if os.Getenv("GOGC") == "" {
		// Deliveries allocate per request over a small live heap: at the
		// default GOGC=100 the collector took ~14% of a delivery worker's
		// CPU in the heavy bench. GOGC and GOMEMLIMIT still override.
		debug.SetGCPercent(defaultGCPercent)
	}
	if cfg.PprofAddr != "" {
		go func() {
			log.Info("pprof", "addr", cfg.PprofAddr, "err", pprofServer(cfg.PprofAddr).ListenAndServe())
		}()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	tel, err := telemetry.Setup(ctx, "fanout-worker", telemetry.WithMetricsAddr(cfg.MetricsAddr), telemetry.WithLogger(log))
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = tel.Shutdown(sctx)
	}()
	// FANOUT_CODEC_KEYS: DialTemporal encrypts payloads with them; staged
	// batches and dead letters are sealed with the same keys.
	keys, err := config.LoadKeyring()
	if err != nil {
		return err
	}
	rdb, err := config.RedisClient(cfg.RedisConn)
	if err != nil {
		return err
	}
	defer func() { _ = rdb.Close() }()
	if err := rdb.Ping(ctx).Err(); err != nil {
		log.Warn("redis not reachable yet; deliveries wait for it", "err", err)
	} else if err := config.CheckEviction(ctx, rdb, cfg.RedisConn, log); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	tc, err := config.DialTemporal(ctx, log, tel.ClientOptions)
	if err != nil {
		return err
	}
	defer tc.Close()
	return serve(ctx, cfg, hook, tf, bcfg, log, tel, keys, rdb, tc)
}

// loadSettings loads the worker pool's settings, the stock webhook type's,
// the types file's (FANOUT_TYPES_FILE; nil without one) and, with
// FANOUT_BRIDGE, the bridge's.
func loadSettings() (cfg workers.Config, hook webhook.Config, tf *types.File, bcfg starter.Settings, err error) {
	var ts types.Settings
	if err = config.Load(&cfg, &hook, &ts); err != nil {
		return
	}
	if err = cfg.CheckType(hook.TypeOptions()); err != nil {
		err = fmt.Errorf("config: %w", err)
		return
	}
	if ts.TypesFile != "" {
		if tf, err = types.Load(ts.TypesFile); err != nil {
			err = fmt.Errorf("FANOUT_TYPES_FILE: %w", err)
			return
		}
		for _, t := range tf.Types {
			if e := cfg.CheckType(t.Options); e != nil {
				err = fmt.Errorf("FANOUT_TYPES_FILE: %s:%d: type %s: %w", tf.Path, t.Line, t.Name, e)
				return
			}
		}
	}
	if cfg.Bridge {
		err = config.Load(&bcfg)
	}
	return
}

// serve registers the webhook type and the types file's, opens the deliveries DLQ and runs the
// workers (and the bridge, with FANOUT_BRIDGE) until ctx ends.
func serve(ctx context.Context, cfg workers.Config, hook webhook.Config, tf *types.File, bcfg starter.Settings, log *slog.Logger,
	tel *telemetry.Telemetry, keys *codec.Keyring, rdb redis.UniversalClient, tc client.Client) error {
	brake, _ := cfg.LowPriorityBrakeRate() // checked by Load
	reg := fanout.NewRegistry()
	reg.MustRegister(webhook.EventType, hook.Handler(cfg.DeliveriesInFlight(hook.DeliverConcurrency)), hook.TypeOptions())
	if tf != nil {
		allow, _ := webhook.ParseAllow(hook.OutboundAllow) // checked by Load
		deps := types.Deps{InFlight: cfg.DeliveriesInFlight(hook.DeliverConcurrency), OutboundAllow: allow}
		if err := types.Build(tf, reg, deps); err != nil {
			return fmt.Errorf("FANOUT_TYPES_FILE: %w", err)
		}
	}
	kc, err := cfg.Kafka().KafkaConn()
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	dlw := activities.NewDeadLetterWriter(kc, cfg.DeliveriesDLQ).WithSealer(workers.Sealer(keys))
	if err := kc.Check(ctx); err != nil {
		log.Warn("cannot connect to Kafka as configured (FANOUT_KAFKA_*) yet; dead letters wait for it", "err", err)
	}
	defer func() { _ = dlw.Close() }()

	g, gctx := errgroup.WithContext(ctx)
	if cfg.Bridge {
		bc, err := bcfg.Config(rdb, log, reg.Types())
		if err != nil {
			return fmt.Errorf("config: %w", err)
		}
		bc.TracerProvider, bc.MeterProvider, bc.Eager = tel.TracerProvider, tel.MeterProvider, true
		g.Go(func() error { return starter.New(bc, tc).Run(gctx) })
	}
	g.Go(func() error {
		return workers.Run(gctx, workers.Options{
			Client:           tc,
			Registry:         reg,
			Redis:            rdb,
			DisableDedup:     !cfg.Dedup,
			GateTTL:          cfg.GateTTL,
			Queues:           cfg.Queues,
			BatchSlots:       cfg.BatchSlots,
			LowPrioritySlots: cfg.LowPrioritySlots,
			LowPriorityBrake: brake,
			DeadLetters:      dlw,
			Sealer:           workers.Sealer(keys),
			// FANOUT_DELIVER_CONCURRENCY is also this worker's own cap.
			DeliverConcurrency: hook.DeliverConcurrency,
			Backoff:            cfg.Backoff(),
			Logger:             log,
		})
	})
	return g.Wait()
}
