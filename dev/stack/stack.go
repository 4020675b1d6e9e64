// Package stack builds the real stack fanout runs against in development,
// the one way `task dev`, the integration tests (dev/e2e), the fault
// suite, the bench and the histories tool all get it: the Temporal dev server
// (from the temporal CLI built once from a pinned tool module), redis-server,
// the embedded kfake Kafka broker, and the demo recipients source and
// webhook sink on loopback HTTP, with clients for them. The sink runs in the
// caller's process (Stack.Sink, whose knobs tests set directly) or, with
// Options.SinkProcess, as its own process as a real destination does
// (dev/cmd/sink); Stack.SinkClient reads its counts either way. On top of it fanout
// runs either as worker and bridge processes built from this repository,
// each of which can be killed and restarted (StartWorker, StartBridge), or
// in the caller's process (RunWorkers, RunBridge). Processes run in their own
// process groups and are killed with their parent.
package stack

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/activities"
	"github.com/fanout/fanout/activities/gate"
	"github.com/fanout/fanout/dev/demo"
	"github.com/fanout/fanout/internal/codec"
	"github.com/fanout/fanout/internal/codecserver"
	"github.com/fanout/fanout/starter"
	"github.com/fanout/fanout/workers"
	"github.com/fanout/fanout/workers/webhook"
	"github.com/fanout/fanout/workflows"
	"github.com/fanout/fanout/workflows/vocab"
)

// Options configure a Stack. The zero value is a stack on free ports in a
// temporary directory, its state in files there, Temporal headless.
type Options struct {
	// Dir holds state and logs; empty makes a temporary one (removed on Close).
	Dir string
	// LogDir holds the processes' logs (<name>.log); empty means Dir.
	LogDir string
	// InMemory keeps Temporal's database and Redis's data in memory instead
	// of in Dir (temporal.db, redis/), where they survive RestartTemporal,
	// RestartRedis and, in a kept Dir, the next run.
	InMemory bool
	// Ports on 127.0.0.1; 0 picks a free one. UIPort 0 runs Temporal
	// headless.
	TemporalPort, UIPort, RedisPort, KafkaPort, DemoPort int
	// TemporalMetrics has the dev server serve Prometheus metrics at
	// Stack.TemporalMetricsURL.
	TemporalMetrics bool
	// DemoHandler, when set, wraps the demo source and sink's handler (the
	// source's alone with SinkProcess).
	DemoHandler func(http.Handler) http.Handler
	// SinkProcess runs the webhook sink as its own process ("sink", on
	// SinkPort, 0 picks a free one) instead of in this one: its CPU is its
	// own and it serves requests the way a separate destination does.
	// Stack.Sink is then nil; read its counts with Stack.SinkClient.
	SinkProcess bool
	SinkPort    int
	// SinkVerify has the sink check the signature of every delivery of an
	// event type with the secrets in a file (type → file; demo.Sink.Verify),
	// as that type's receivers do.
	SinkVerify map[string]string
	// SinkPprof, with SinkProcess, is a loopback address where the sink
	// process serves net/http/pprof.
	SinkPprof string
	// StockTemporal starts the dev server as a user would, with plain
	// `temporal server start-dev --db-filename` and none of the stack's
	// tuning flags (see temporalArgs); SwitchTemporal changes it later.
	StockTemporal bool
	// TemporalFlags are added to the dev server's flags (not the stock
	// server's), TemporalEnv to its environment: for experiments with its
	// dynamic config and runtime.
	TemporalFlags, TemporalEnv []string
	// NoSearchAttributes starts the dev server without fanout's search
	// attributes, as a namespace is before `starter setup`, for tests of
	// what runs before it. The server then re-reads them on every use
	// (start-dev's default), so ones registered later count at once.
	NoSearchAttributes bool
	// Client configures Stack.TC; Start sets HostPort, and a Logger that
	// discards when there is none.
	Client client.Options
	// Env is added to every worker and bridge process.
	Env []string
	// Encrypt turns payload encryption on (internal/codec): the stack's key
	// is read from Dir/codec-keys, or generated there on the first start
	// (random, mode 0600), so a kept Dir stays readable across runs and a
	// temporary one gets a fresh key. Stack.TC, the worker and bridge
	// processes (FANOUT_CODEC_KEYS_FILE), RunWorkers and the codec server
	// (unless CodecServerCodec is set) use it; Stack.Keyring holds it.
	Encrypt bool
	// CodecServer runs a codec server (internal/codecserver) in this
	// process on 127.0.0.1:CodecServerPort (0 picks a free one) with
	// CodecServerCodec, and has the dev server's UI decode payloads
	// through it (--ui-codec-endpoint; Stack.CodecServerURL). Without
	// CodecServerTokens it serves without a token, on loopback only (the
	// dev UI has no login, so no token to pass); with them it refuses the
	// UI, which then shows the payloads encrypted.
	CodecServer       bool
	CodecServerPort   int
	CodecServerCodec  converter.PayloadCodec
	CodecServerTokens []string
	// Log receives progress (building the temporal CLI, installing
	// redis-server); nil discards it.
	Log io.Writer
}

// Stack is a running stack.
type Stack struct {
	Root, Dir, LogDir, Bin string
	TemporalAddr           string
	TemporalMetricsURL     string // "" without Options.TemporalMetrics
	KafkaAddr              string
	RedisAddr              string
	DemoURL                string // the recipients source (and the in-process sink)
	// SinkURL is the webhook sink's base URL: deliveries go to
	// SinkURL/deliver. It is DemoURL unless Options.SinkProcess.
	SinkURL string
	// CodecServerURL is the codec server's endpoint with
	// Options.CodecServer, else "".
	CodecServerURL string
	// Keyring and KeysFile, with Options.Encrypt: the stack's keys and the
	// file that holds them (else nil and "").
	Keyring  *codec.Keyring
	KeysFile string

	TC   client.Client
	RDB  *redis.Client
	Sink *demo.Sink // the in-process sink; nil with Options.SinkProcess
	// SinkClient reads the sink's counts over HTTP, wherever it runs.
	SinkClient *demo.SinkClient
	Publisher  *starter.Publisher // to the events topic

	opts      Options
	stock     bool // the dev server runs without the tuning flags
	tempDir   bool
	tbin      string
	mport     int
	buildOnce sync.Once
	buildErr  error
	kafka     *kfake.Cluster
	srv       *http.Server
	codecSrv  *codecserver.Server
	mu        sync.Mutex
	procs     map[string]*Proc // temporal, redis, workers and bridges
	specs     map[string]procSpec
	routes    routes // Route's handlers on the demo server, under mu

	redisPortChosen    bool // Options.RedisPort was 0: startRedis may choose another
	temporalPortChosen bool // Options.TemporalPort was 0: Start may choose another
}

type procSpec struct {
	bin  string
	args []string
	env  []string
}

// Start starts Temporal, Redis, kfake and the demo source and sink. Workers
// and the bridge run on top with StartWorker and StartBridge (processes) or
// RunWorkers and RunBridge (in this process).
func Start(ctx context.Context, o Options) (_ *Stack, err error) {
	if o.Log == nil {
		o.Log = io.Discard
	}
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	s := &Stack{Root: root, Dir: o.Dir, Bin: BinDir(root), procs: map[string]*Proc{}, specs: map[string]procSpec{}}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if s.Dir == "" {
		if s.Dir, err = os.MkdirTemp("", "fanout-stack-"); err != nil {
			return nil, err
		}
		s.tempDir = true
	}
	s.LogDir = cmp.Or(o.LogDir, s.Dir)
	for _, d := range []string{s.Dir, s.LogDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	s.redisPortChosen = o.RedisPort == 0
	s.temporalPortChosen = o.TemporalPort == 0
	// KafkaPort 0 stays 0: kfake binds 127.0.0.1:0 itself, so no other
	// process (the dev server picks ports of its own as it starts) can take
	// a port chosen here before the broker binds it.
	for _, p := range []*int{&o.TemporalPort, &o.RedisPort} {
		if *p == 0 {
			if *p, err = FreePort(); err != nil {
				return nil, err
			}
		}
	}
	if o.TemporalMetrics {
		if s.mport, err = FreePort(); err != nil {
			return nil, err
		}
		s.TemporalMetricsURL = fmt.Sprintf("http://127.0.0.1:%d/metrics", s.mport)
	}
	s.opts = o
	s.stock = o.StockTemporal
	s.TemporalAddr = fmt.Sprintf("127.0.0.1:%d", o.TemporalPort)
	s.RedisAddr = fmt.Sprintf("127.0.0.1:%d", o.RedisPort)
	if s.tbin, err = ensureTemporalCLI(ctx, root, o.Log); err != nil {
		return nil, err
	}
	if o.Encrypt {
		if err := s.setupKeyring(); err != nil {
			return nil, err
		}
		if o.CodecServerCodec == nil {
			o.CodecServerCodec = s.Keyring.PayloadCodec()
		}
	}
	if o.CodecServer {
		if err := s.startCodecServer(o.CodecServerCodec); err != nil {
			return nil, err
		}
	}
	// Redis first: the dev server picks free ports of its own as it starts
	// and could take the one chosen for Redis.
	if err := s.startRedis(ctx); err != nil {
		return nil, err
	}
	if err := onChosenPort(s.temporalPortChosen, errTemporalExited, 3, &s.opts.TemporalPort, &s.TemporalAddr,
		func() error { return s.startTemporal(ctx) }); err != nil {
		return nil, err
	}
	s.RDB = redis.NewClient(&redis.Options{Addr: s.RedisAddr})
	if s.kafka, s.KafkaAddr, err = startKafka(o.KafkaPort); err != nil {
		return nil, err
	}
	s.Publisher = starter.NewPublisher(s.KafkaConn(), starter.DefaultEventsTopic)
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", o.DemoPort))
	if err != nil {
		return nil, err
	}
	s.DemoURL = "http://" + ln.Addr().String()
	h, err := s.demoHandler(ctx)
	if err != nil {
		_ = ln.Close()
		return nil, err
	}
	if o.DemoHandler != nil {
		h = o.DemoHandler(h)
	}
	s.routes.next = h
	s.srv = &http.Server{Handler: http.HandlerFunc(s.serveRoutes), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	copts := o.Client
	copts.HostPort = s.TemporalAddr
	if s.Keyring != nil && copts.DataConverter == nil {
		workers.WithEncryption(s.Keyring)(&copts)
	}
	if copts.Logger == nil {
		copts.Logger = QuietLogger{}
	}
	if s.TC, err = client.Dial(copts); err != nil {
		return nil, err
	}
	return s, nil
}

// LogPath is the log file of the process name.
func (s *Stack) LogPath(name string) string { return filepath.Join(s.LogDir, name+".log") }

func (s *Stack) setProc(name string, p *Proc, spec *procSpec) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.procs[name] = p
	if spec != nil {
		s.specs[name] = *spec
	}
}

// startTemporal starts the dev server, tuned or stock (s.stock), each on
// its own database file: temporal.db or temporal-stock.db.
func (s *Stack) startTemporal(ctx context.Context) error {
	db := ""
	if !s.opts.InMemory {
		db = filepath.Join(s.Dir, "temporal.db")
	}
	if s.stock && db != "" {
		db = strings.TrimSuffix(db, ".db") + "-stock.db"
	}
	args := temporalArgs(s.opts.TemporalPort, s.opts.UIPort, s.mport, db, s.stock)
	if s.CodecServerURL != "" && s.opts.UIPort != 0 {
		args = append(args, "--ui-codec-endpoint", s.CodecServerURL)
	}
	if s.opts.NoSearchAttributes {
		args = withoutSearchAttributes(args)
	}
	var env []string
	if !s.stock {
		args = append(args, s.opts.TemporalFlags...)
		env = append(slices.Clone(TemporalRuntimeEnv), s.opts.TemporalEnv...) // the last of a key wins
	}
	p, err := startProc("temporal", s.LogPath("temporal"), s.tbin, args, env)
	if err != nil {
		return err
	}
	added, err := waitTemporal(ctx, s.TemporalAddr, p, !s.opts.NoSearchAttributes)
	if err == nil && added && !s.stock {
		// The tuned server caches search attributes (see temporalArgs):
		// start it again so that every service sees the ones just added.
		p.Kill()
		if p, err = startProc("temporal", s.LogPath("temporal"), s.tbin, args, env); err != nil {
			return err
		}
		_, err = waitTemporal(ctx, s.TemporalAddr, p, true)
	}
	if err != nil {
		p.Kill()
		return err
	}
	s.setProc("temporal", p, nil)
	return nil
}

func (s *Stack) startRedis(ctx context.Context) error {
	dir := ""
	if !s.opts.InMemory {
		dir = filepath.Join(s.Dir, "redis")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	var p *Proc
	err := onChosenPort(s.redisPortChosen, ErrRedisExited, 5, &s.opts.RedisPort, &s.RedisAddr, func() (err error) {
		p, _, err = StartRedis(ctx, s.opts.RedisPort, dir, s.LogPath("redis"), s.opts.Log)
		return err
	})
	if err != nil {
		return err
	}
	s.setProc("redis", p, nil)
	return nil
}

// onChosenPort runs start and, while the stack chose *port (chosen) and
// start failed as it does when the port is taken (taken), picks another
// free port, names it in *addr and runs start again, up to tries times: a
// port from FreePort may be taken before the process binds it (by another
// test package's process, or the dev server's own ports).
func onChosenPort(chosen bool, taken error, tries int, port *int, addr *string, start func() error) error {
	err := start()
	for i := 0; i < tries && chosen && errors.Is(err, taken); i++ {
		if *port, err = FreePort(); err != nil {
			return err
		}
		*addr = fmt.Sprintf("127.0.0.1:%d", *port)
		err = start()
	}
	return err
}

// Build compiles the worker and starter binaries (and the sink's, with
// Options.SinkProcess) into Bin, once per Stack.
// Test packages running in parallel build them one at a time (under the
// .bin lock), and each binary is renamed into place, so a build never
// rewrites a binary another package is running. StartWorker and StartBridge
// call it.
func (s *Stack) Build(ctx context.Context) error {
	s.buildOnce.Do(func() {
		s.buildErr = withBinLock(s.Root, func() error {
			tmp, err := os.MkdirTemp(s.Bin, ".build-")
			if err != nil {
				return err
			}
			defer func() { _ = os.RemoveAll(tmp) }()
			pkgs, names := []string{"./workers/cmd/worker", "./starter/cmd/starter"}, []string{"worker", "starter"}
			if s.opts.SinkProcess {
				pkgs, names = append(pkgs, "./dev/cmd/sink"), append(names, "sink")
			}
			cmd := exec.CommandContext(ctx, "go", append([]string{"build", "-o", tmp + "/"}, pkgs...)...)
			cmd.Dir = s.Root
			if out, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("go build: %w: %s", err, out)
			}
			for _, name := range names {
				if err := os.Rename(filepath.Join(tmp, name), filepath.Join(s.Bin, name)); err != nil {
					return err
				}
			}
			return nil
		})
	})
	return s.buildErr
}

// Env is the environment of worker and bridge processes.
func (s *Stack) Env() []string {
	env := []string{
		"TEMPORAL_ADDRESS=" + s.TemporalAddr, "TEMPORAL_NAMESPACE=default",
		"FANOUT_KAFKA_BROKERS=" + s.KafkaAddr, "FANOUT_REDIS_URL=redis://" + s.RedisAddr + "/0",
		"FANOUT_RECIPIENTS_URL=" + s.DemoURL + "/recipients", "FANOUT_LOG_LEVEL=warn",
		// The recipients endpoint (FANOUT_RECIPIENTS_URL) is trusted for its
		// own host and port, but deliveries to the sink and the tests'
		// servers, and payload recipients_urls on the demo server (Route),
		// go through the guard: they are on loopback.
		"FANOUT_OUTBOUND_ALLOW=127.0.0.0/8,::1", "FANOUT_RECIPIENTS_URL_ALLOW=" + s.RecipientsURLAllow(),
	}
	if s.KeysFile != "" {
		env = append(env, "FANOUT_CODEC_KEYS_FILE="+s.KeysFile)
	}
	return append(env, s.opts.Env...)
}

// StartWorker starts a worker process serving queues (e.g. "events" or
// "high,normal,low") under name, with extra environment.
func (s *Stack) StartWorker(name, queues string, env ...string) error {
	return s.startProc(name, procSpec{bin: filepath.Join(s.Bin, "worker"), env: append(append(s.Env(), "FANOUT_QUEUES="+queues), env...)})
}

// StartBridge starts the bridge process under name.
func (s *Stack) StartBridge(name string, env ...string) error {
	return s.startProc(name, procSpec{bin: filepath.Join(s.Bin, "starter"), args: []string{"bridge"}, env: append(s.Env(), env...)})
}

func (s *Stack) startProc(name string, spec procSpec) error {
	if err := s.Build(context.Background()); err != nil {
		return err
	}
	p, err := startProc(name, s.LogPath(name), spec.bin, spec.args, spec.env)
	if err != nil {
		return err
	}
	s.setProc(name, p, &spec)
	return nil
}

// Proc returns a process of the stack: "temporal", "redis", "sink" (with
// Options.SinkProcess), or a started worker or bridge.
func (s *Stack) Proc(name string) *Proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.procs[name]
}

// Kill SIGKILLs a process.
func (s *Stack) Kill(name string) { s.Proc(name).Kill() }

// Stop stops a process gracefully (SIGTERM).
func (s *Stack) Stop(name string) { s.Proc(name).Stop(10 * time.Second) }

// Restart starts a killed or stopped worker or bridge again with the same spec.
func (s *Stack) Restart(name string) error {
	s.mu.Lock()
	spec, ok := s.specs[name]
	s.mu.Unlock()
	if !ok {
		return fmt.Errorf("no process %q", name)
	}
	s.Kill(name)
	return s.startProc(name, spec)
}

// RestartRedis stops redis-server (SIGTERM, so its append-only file is
// flushed) and starts it again on the same port after down.
func (s *Stack) RestartRedis(ctx context.Context, down time.Duration) error {
	s.Proc("redis").Stop(10 * time.Second)
	time.Sleep(down)
	return s.startRedis(ctx)
}

// RestartTemporal kills the dev server and starts it again on the same
// port, flags and database file after down.
func (s *Stack) RestartTemporal(ctx context.Context, down time.Duration) error {
	s.Kill("temporal")
	time.Sleep(down)
	return s.startTemporal(ctx)
}

// Pids returns the process id of every running process of the stack by
// name (temporal, redis, the sink process, and the started workers and
// bridges).
func (s *Stack) Pids() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for name, p := range s.procs {
		if !p.Exited() {
			out[name] = p.Pid()
		}
	}
	return out
}

// Renice sets the scheduling niceness of a process (and lets a bench
// emulate giving bulk delivery lower CPU priority than the Temporal server
// and the events worker, as separate nodes would).
func (s *Stack) Renice(name string, nice int) error {
	p := s.Proc(name)
	if p == nil {
		return fmt.Errorf("no process %q", name)
	}
	return syscall.Setpriority(syscall.PRIO_PROCESS, p.Pid(), nice)
}

// RunWorkers runs the workers in this process until stop is called. o's
// Client, Redis, Queues and DeadLetters default to the stack's client and
// Redis, every queue, and the deliveries DLQ; with Options.Encrypt, Sealer
// defaults to the stack's keys, which seal the DLQ's letters too.
func (s *Stack) RunWorkers(o workers.Options) (stop func()) {
	o.Client = cmp.Or(o.Client, client.Client(s.TC))
	o.Redis = cmp.Or(o.Redis, redis.UniversalClient(s.RDB))
	if o.Queues == nil {
		o.Queues = vocab.Queues()
	}
	dlw := activities.NewDeadLetterWriter(s.KafkaConn(), activities.DefaultDeliveriesDLQTopic)
	if s.Keyring != nil {
		// Staged batches and dead letters sealed like the processes'.
		dlw.WithSealer(s.Keyring)
		if o.Sealer == nil {
			o.Sealer = s.Keyring
		}
	}
	o.DeadLetters = cmp.Or(o.DeadLetters, activities.DeadLetterPublisher(dlw))
	return s.run("workers", o.Logger, func(ctx context.Context) error { return workers.Run(ctx, o) }, dlw.Close)
}

// KafkaConn is the connection to the stack's broker (plain TCP on
// 127.0.0.1).
func (s *Stack) KafkaConn() starter.KafkaConn {
	return starter.KafkaConn{Brokers: []string{s.KafkaAddr}}
}

// RunBridge runs a bridge in this process until stop is called. cfg's
// Kafka, Topic, GroupID, DLQTopic and Events default to the stack's
// broker, the events topic, group fanout-bridge, the events DLQ, and a
// record of started events in the stack's Redis (for an hour).
func (s *Stack) RunBridge(cfg starter.Config) (b *starter.Bridge, stop func()) {
	if cfg.Kafka.Brokers == nil {
		cfg.Kafka = s.KafkaConn()
	}
	cfg.Topic = cmp.Or(cfg.Topic, starter.DefaultEventsTopic)
	cfg.GroupID = cmp.Or(cfg.GroupID, starter.DefaultConsumerGroup)
	cfg.DLQTopic = cmp.Or(cfg.DLQTopic, starter.DefaultEventsDLQTopic)
	cfg.Events = cmp.Or(cfg.Events, starter.NewEventRecord(s.RDB, time.Hour))
	b = starter.New(cfg, s.TC)
	return b, s.run("bridge", cfg.Logger, b.Run, nil)
}

// run runs fn in a goroutine until the returned stop, which waits for it and
// then calls after (if set).
func (s *Stack) run(name string, log *slog.Logger, fn func(context.Context) error, after func() error) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := fn(ctx); err != nil {
			cmp.Or(log, slog.Default()).Error(name+" stopped", "err", err)
		}
	}()
	return func() {
		cancel()
		<-done
		if after != nil {
			_ = after()
		}
	}
}

// Event is a demo event to publish.
type Event struct {
	ID             string
	Audience       int
	Priority       fanout.Priority
	DuplicateEvery int
	// Text is the message's text ("hi" when empty).
	Text string
	// RecipientsURL, when set, is where the workers get this event's
	// recipients from instead of the demo source.
	RecipientsURL string
}

// Envelope is the event as a producer publishes it.
func (e Event) Envelope() starter.Envelope {
	msg, _ := json.Marshal(map[string]string{"text": cmp.Or(e.Text, "hi")})
	payload, _ := json.Marshal(demo.Payload{Audience: e.Audience, DuplicateEvery: e.DuplicateEvery, Message: msg, RecipientsURL: e.RecipientsURL})
	return starter.Envelope{ID: e.ID, Type: webhook.EventType, Priority: e.Priority, Payload: payload}
}

// Record is the event's Kafka record (without trace context), for tests
// that add to it before publishing it with Publisher.PublishRecords.
func (e Event) Record() kafka.Message {
	m, _ := starter.Record(context.Background(), e.Envelope()) // an Envelope always marshals
	return m
}

// Publish writes demo events to the events topic.
func (s *Stack) Publish(ctx context.Context, evs ...Event) error {
	envs := make([]starter.Envelope, len(evs))
	for i, e := range evs {
		envs[i] = e.Envelope()
	}
	return s.Publisher.Publish(ctx, envs...)
}

// WorkflowID is the Fanout workflow id of a demo event.
func WorkflowID(eventID string) string { return vocab.WorkflowID(webhook.EventType, eventID) }

// Wait waits for a demo event's fan-out (through continue-as-new and
// Temporal restarts) and returns its result.
func (s *Stack) Wait(ctx context.Context, eventID string) (workflows.FanoutResult, error) {
	return s.WaitWorkflow(ctx, WorkflowID(eventID), eventID)
}

// WaitWorkflow is Wait for the Fanout workflow wid of an event of any type
// (named eventID in errors): it waits for the start, then for the end.
func (s *Stack) WaitWorkflow(ctx context.Context, wid, eventID string) (workflows.FanoutResult, error) {
	for {
		var res workflows.FanoutResult
		err := s.TC.GetWorkflow(ctx, wid, "").Get(ctx, &res)
		if err == nil {
			return res, nil
		}
		if ctx.Err() != nil {
			return res, fmt.Errorf("event %s: %w", eventID, err)
		}
		var nf *serviceerror.NotFound
		var unavail *serviceerror.Unavailable
		if !errors.As(err, &nf) && !errors.As(err, &unavail) && !isConnErr(err) {
			return res, fmt.Errorf("event %s: %w", eventID, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func isConnErr(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded)
}

// HeldNotDelivered counts an event's gate keys that an attempt holds without
// a delivered mark: the deliveries that were in flight (or done but not yet
// marked) — the most a crash right now can duplicate.
func (s *Stack) HeldNotDelivered(ctx context.Context, eventID string) (int, error) {
	states, err := s.GateStates(ctx, eventID)
	n := 0
	for _, st := range states {
		if st == gate.StateHeld || st == gate.StateSending {
			n++
		}
	}
	return n, err
}

// Close stops the workers and bridges, then the stack, and removes a
// temporary Dir.
func (s *Stack) Close() {
	s.mu.Lock()
	var procs []*Proc
	for name, p := range s.procs {
		if name != "temporal" && name != "redis" {
			procs = append(procs, p)
		}
	}
	s.mu.Unlock()
	for _, p := range procs {
		p.Stop(5 * time.Second)
	}
	if s.TC != nil {
		s.TC.Close()
	}
	if s.RDB != nil {
		_ = s.RDB.Close()
	}
	if s.Publisher != nil {
		_ = s.Publisher.Close()
	}
	if s.kafka != nil {
		s.kafka.Close()
	}
	if s.srv != nil {
		_ = s.srv.Close()
	}
	if s.codecSrv != nil {
		_ = s.codecSrv.Close()
	}
	if s.SinkClient != nil {
		s.SinkClient.HTTP.CloseIdleConnections()
	}
	s.Proc("redis").Stop(5 * time.Second)
	s.Proc("temporal").Stop(10 * time.Second)
	if s.tempDir {
		_ = os.RemoveAll(s.Dir)
	}
}
