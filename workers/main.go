package workers

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"strings"
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
	"github.com/fanout/fanout/workers/webhook"
)

// DefaultGCPercent is a worker's GOGC unless the environment sets one.
// Deliveries allocate per request over a small live heap: at Go's default
// of 100 the collector took ~14% of a delivery worker's CPU in the heavy
// bench. GOGC and GOMEMLIMIT still override.
const DefaultGCPercent = 400

// DefaultName is what Main calls the program in -h, -version and its
// errors unless WithName says otherwise: the name the image installs any
// main under (deploy/Dockerfile), so the chart and compose run it as they
// run the stock worker.
const DefaultName = "worker"

// MainOption configures Main.
type MainOption func(*mainSetup)

// WithWebhook registers the stock "webhook" event type as the stock worker
// does, configured by the environment (webhook.Config: FANOUT_RECIPIENTS_URL,
// FANOUT_WEBHOOK_SECRETS, ...; FANOUT_DELIVER_CONCURRENCY is then also the
// worker's own cap). Without it a main serves only the types registered in
// Go and those of its types file.
func WithWebhook() MainOption { return func(m *mainSetup) { m.webhook = true } }

// WithName names the program in -h, -version and its errors (DefaultName
// when empty).
func WithName(name string) MainOption {
	return func(m *mainSetup) {
		if name != "" {
			m.name = name
		}
	}
}

// Main is the stock worker binary's main, for a program of one's own: it
// serves the event types registered in reg (nil: none) on fanout's
// workers, with everything the stock binary has. It takes its
// configuration from the environment only (Config, webhook.Outbound,
// types.Settings, with FANOUT_BRIDGE=true starter.Settings, Temporal's
// variables and FANOUT_CODEC_KEYS): the Redis modes, Kafka's TLS and SASL,
// codec keys from files, metrics, traces and logs, GOGC (DefaultGCPercent),
// pprof, and the Kafka bridge inside the worker. FANOUT_TYPES_FILE adds
// the types of a types file beside reg's: a type defined both in Go and in
// the file is refused at start-up, naming the file, line and type.
//
// On the command line: -h lists every variable it reads and exits, as does
// -version; `check-types FILE` checks a types file beside reg's types.
//
// Main checks everything it can before it connects anywhere. It exits the
// process on -h, -version, check-types, a usage mistake (2) or a failure
// (1, the reason on stderr); it returns when SIGINT or SIGTERM has stopped
// the workers, so the caller's defers run.
//
//	func main() {
//		reg := fanout.NewRegistry()
//		reg.MustRegister("order-shipped", orderShipped{}, fanout.TypeOptions{})
//		workers.Main(reg)
//	}
func Main(reg *fanout.Registry, opts ...MainOption) {
	m := newMain(reg, opts)
	args := os.Args[1:]
	if len(args) > 0 && args[0] == checkTypesCmd {
		os.Exit(m.checkTypes(args[1:], os.Stdout, os.Stderr))
	}
	if err := m.parseArgs(args); err != nil {
		cli.Exit(m.name, err)
	}
	if err := m.run(); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", m.name, err)
		os.Exit(1)
	}
}

// mainSetup is one Main: the program's name, its registry and whether it
// serves the stock webhook type.
type mainSetup struct {
	name    string
	reg     *fanout.Registry
	webhook bool
}

func newMain(reg *fanout.Registry, opts []MainOption) *mainSetup {
	if reg == nil {
		reg = fanout.NewRegistry()
	}
	m := &mainSetup{name: DefaultName, reg: reg}
	for _, o := range opts {
		o(m)
	}
	return m
}

// settings are what Main loads from the environment.
type settings struct {
	pool     Config
	hook     webhook.Config   // with WithWebhook
	outbound webhook.Outbound // without it (with it: hook.Outbound)
	types    types.Settings
	bridge   starter.Settings // with FANOUT_BRIDGE
}

// configs are the structs Main loads, in order (the bridge's aside).
func (m *mainSetup) configs(s *settings) []any {
	if m.webhook {
		return []any{&s.pool, &s.hook, &s.types}
	}
	return []any{&s.pool, &s.outbound, &s.types}
}

// outboundOf is the process's outbound policy (FANOUT_OUTBOUND_ALLOW), which
// the types file's types share with the stock type.
func (m *mainSetup) outboundOf(s *settings) webhook.Outbound {
	if m.webhook {
		return s.hook.Outbound
	}
	return s.outbound
}

// help is `-h`: its variables come from the configuration structs.
func (m *mainSetup) help() cli.Help {
	worker := append(config.EnvVars(m.configs(&settings{})...), config.EnvVar{Name: "GOGC", Kind: "int", Default: strconv.Itoa(DefaultGCPercent)},
		config.EnvVar{Name: "GOMEMLIMIT", Kind: "string"})
	served := ` the built-in
"webhook" event type (recipients from FANOUT_RECIPIENTS_URL, delivery by HTTP POST)`
	if !m.webhook {
		served = "\nthe event types registered in Go"
		if ts := m.reg.Types(); len(ts) > 0 {
			served += " (" + strings.Join(ts, ", ") + ")"
		}
	}
	return cli.Help{
		Name: m.name, Args: "[-version] | check-types FILE",
		Summary: m.name + ` runs fanout's Temporal workers: it serves the task queues named in FANOUT_QUEUES
(events: the Fanout workflows; high, normal, low: the delivery batches) with` + served + `.
With FANOUT_BRIDGE=true it also runs the Kafka bridge, starting events eagerly on its
own events worker. It takes its configuration from the environment only and runs until
SIGINT or SIGTERM. FANOUT_TYPES_FILE adds the event types of a types file beside
those; '` + m.name + ` check-types FILE' validates such a file.`,
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
func (m *mainSetup) parseArgs(args []string) error {
	fs := flag.NewFlagSet(m.name, flag.ContinueOnError)
	showVersion := fs.Bool("version", false, "print the version and the commit it was built from, and exit")
	if len(args) == 1 && args[0] == "version" {
		args = []string{"-version"}
	}
	if err := cli.Parse(fs, args, m.help(), false); err != nil {
		return err
	}
	if *showVersion {
		fmt.Println(version.Line(m.name))
		return cli.ErrHelp
	}
	return nil
}

func (m *mainSetup) run() error {
	s, err := m.load()
	if err != nil {
		return err
	}
	log := telemetry.Logger(config.Logger(s.pool.LogLevel)) // trace_id, span_id in a span
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(DefaultGCPercent)
	}
	if s.pool.PprofAddr != "" {
		go func() {
			log.Info("pprof", "addr", s.pool.PprofAddr, "err", pprofServer(s.pool.PprofAddr).ListenAndServe())
		}()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	tel, err := telemetry.Setup(ctx, "fanout-worker", telemetry.WithMetricsAddr(s.pool.MetricsAddr), telemetry.WithLogger(log))
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
	rdb, err := config.RedisClient(s.pool.RedisConn)
	if err != nil {
		return err
	}
	defer func() { _ = rdb.Close() }()
	if err := rdb.Ping(ctx).Err(); err != nil {
		log.Warn("redis not reachable yet; deliveries wait for it", "err", err)
	} else if err := config.CheckEviction(ctx, rdb, s.pool.RedisConn, log); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	tc, err := config.DialTemporal(ctx, log, tel.ClientOptions)
	if err != nil {
		return err
	}
	defer tc.Close()
	return m.serve(ctx, s, log, tel, keys, rdb, tc)
}

// load loads the settings and registers the stock webhook type (with
// WithWebhook) and the types file's (FANOUT_TYPES_FILE) beside the Go
// types, and checks that the pool can serve every type: all before
// anything connects.
func (m *mainSetup) load() (*settings, error) {
	s := &settings{}
	if err := config.Load(m.configs(s)...); err != nil {
		return nil, err
	}
	if s.pool.Bridge {
		if err := config.Load(&s.bridge); err != nil {
			return nil, err
		}
	}
	// The Go types first, before the others join the registry.
	for _, name := range m.reg.Types() {
		_, o, _ := m.reg.Lookup(name)
		if err := s.pool.CheckType(o); err != nil {
			return nil, fmt.Errorf("config: event type %q (registered in Go): %w", name, err)
		}
	}
	conc := 0 // each type's own
	if m.webhook {
		if err := s.pool.CheckType(s.hook.TypeOptions()); err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		// FANOUT_DELIVER_CONCURRENCY is also this worker's own cap.
		conc = s.hook.DeliverConcurrency
		if err := m.reg.Register(webhook.EventType, s.hook.Handler(s.pool.DeliveriesInFlight(conc)), s.hook.TypeOptions()); err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
	}
	if s.types.TypesFile != "" {
		tf, err := types.Load(s.types.TypesFile)
		if err != nil {
			return nil, fmt.Errorf("FANOUT_TYPES_FILE: %w", err)
		}
		for _, t := range tf.Types {
			if e := s.pool.CheckType(t.Options); e != nil {
				return nil, fmt.Errorf("FANOUT_TYPES_FILE: %s:%d: type %s: %w", tf.Path, t.Line, t.Name, e)
			}
		}
		deps := types.Deps{InFlight: s.pool.DeliveriesInFlight(conc), OutboundAllow: m.outboundOf(s).Allow()}
		if err := types.Build(tf, m.reg, deps); err != nil {
			return nil, fmt.Errorf("FANOUT_TYPES_FILE: %w", err)
		}
	}
	if len(m.reg.Types()) == 0 {
		return nil, fmt.Errorf("config: no event types: register some in Go, set FANOUT_TYPES_FILE, or use workers.WithWebhook")
	}
	return s, nil
}

// serve opens the deliveries DLQ and runs the workers (and the bridge,
// with FANOUT_BRIDGE) until ctx ends.
func (m *mainSetup) serve(ctx context.Context, s *settings, log *slog.Logger,
	tel *telemetry.Telemetry, keys *codec.Keyring, rdb redis.UniversalClient, tc client.Client) error {
	cfg := s.pool
	brake, _ := cfg.LowPriorityBrakeRate() // checked by Load
	kc, err := cfg.Kafka().KafkaConn()
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	dlw := activities.NewDeadLetterWriter(kc, cfg.DeliveriesDLQ).WithSealer(Sealer(keys))
	if err := kc.Check(ctx); err != nil {
		log.Warn("cannot connect to Kafka as configured (FANOUT_KAFKA_*) yet; dead letters wait for it", "err", err)
	}
	defer func() { _ = dlw.Close() }()

	g, gctx := errgroup.WithContext(ctx)
	if cfg.Bridge {
		bc, err := s.bridge.Config(rdb, log, m.reg.Types())
		if err != nil {
			return fmt.Errorf("config: %w", err)
		}
		bc.TracerProvider, bc.MeterProvider, bc.Eager = tel.TracerProvider, tel.MeterProvider, true
		g.Go(func() error { return starter.New(bc, tc).Run(gctx) })
	}
	conc := 0
	if m.webhook {
		conc = s.hook.DeliverConcurrency
	}
	g.Go(func() error {
		return Run(gctx, Options{
			Client:             tc,
			Registry:           m.reg,
			Redis:              rdb,
			DisableDedup:       !cfg.Dedup,
			GateTTL:            cfg.GateTTL,
			Queues:             cfg.Queues,
			BatchSlots:         cfg.BatchSlots,
			LowPrioritySlots:   cfg.LowPrioritySlots,
			LowPriorityBrake:   brake,
			DeadLetters:        dlw,
			Sealer:             Sealer(keys),
			DeliverConcurrency: conc,
			Backoff:            cfg.Backoff(),
			Logger:             log,
		})
	})
	return g.Wait()
}
