// Package harness runs fanout as separate processes on the real stack, for
// the fault suite and the benchmarks: the Temporal dev server (file-backed,
// so it can be restarted), redis-server (append-only, restartable), the
// kfake broker and the demo source and sink in-process, and worker and
// bridge processes built from this repository, each of which can be killed
// and restarted.
package stack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kfake"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/internal/dev/demo"
	"github.com/fanout/fanout/starter"
	"github.com/fanout/fanout/workers/webhook"
	"github.com/fanout/fanout/workflows"
	"github.com/fanout/fanout/workflows/vocab"
)

// Options configure a Stack.
type Options struct {
	// Dir holds logs and state; empty makes a temporary one (removed on Close).
	Dir string
	// Env is added to every worker and bridge process.
	Env []string
	// Log receives progress lines; nil discards them.
	Log io.Writer
}

// Stack is a running stack.
type Stack struct {
	Root, Dir, Bin string
	TemporalAddr   string
	KafkaAddr      string
	RedisAddr      string
	DemoURL        string

	TC   client.Client
	RDB  *redis.Client
	Sink *demo.Sink

	opts      Options
	tempDir   bool
	tbin      string
	tport     int
	rport     int
	mu        sync.Mutex
	temporal  *Proc
	redis     *Proc
	kafka     *kfake.Cluster
	srv       *http.Server
	procs     map[string]*Proc
	procSpecs map[string]procSpec
}

type procSpec struct {
	bin  string
	args []string
	env  []string
}

// Build compiles the worker and starter binaries into .bin/ (under the .bin
// lock: test packages running in parallel build them one at a time).
func Build(ctx context.Context, root string) error {
	return withBinLock(root, func() error {
		cmd := exec.CommandContext(ctx, "go", "build", "-o", BinDir(root)+"/", "./workers/cmd/worker", "./starter/cmd/starter")
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("go build: %w: %s", err, out)
		}
		return nil
	})
}

// Start builds the binaries and starts Temporal, Redis, kfake and the demo
// source and sink. Workers and the bridge are started with StartWorker and
// StartBridge.
func Start(ctx context.Context, o Options) (_ *Stack, err error) {
	if o.Log == nil {
		o.Log = io.Discard
	}
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	s := &Stack{Root: root, Bin: BinDir(root), opts: o, procs: map[string]*Proc{}, procSpecs: map[string]procSpec{}}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if o.Dir == "" {
		if s.Dir, err = os.MkdirTemp("", "fanout-harness-"); err != nil {
			return nil, err
		}
		s.tempDir = true
	} else {
		s.Dir = o.Dir
		if err := os.MkdirAll(s.Dir, 0o755); err != nil {
			return nil, err
		}
	}
	if s.tbin, err = EnsureTemporalCLI(ctx, root, o.Log); err != nil {
		return nil, err
	}
	if err := Build(ctx, root); err != nil {
		return nil, err
	}
	if s.tport, err = FreePort(); err != nil {
		return nil, err
	}
	if err := s.startTemporal(ctx); err != nil {
		return nil, err
	}
	if s.rport, err = FreePort(); err != nil {
		return nil, err
	}
	if err := s.startRedis(ctx); err != nil {
		return nil, err
	}
	s.RDB = redis.NewClient(&redis.Options{Addr: s.RedisAddr, MaxRetries: -1})
	kport, err := FreePort()
	if err != nil {
		return nil, err
	}
	if s.kafka, s.KafkaAddr, err = StartKafka(kport); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s.DemoURL = "http://" + ln.Addr().String()
	s.Sink = demo.NewSink()
	s.srv = &http.Server{Handler: demo.Mux(&demo.Source{DeliverURL: s.DemoURL + "/deliver"}, s.Sink), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	if s.TC, err = client.Dial(client.Options{HostPort: s.TemporalAddr, Logger: QuietLogger{}}); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Stack) startTemporal(ctx context.Context) error {
	p, addr, err := StartTemporal(ctx, TemporalOptions{
		Port: s.tport, Headless: true, Bin: s.tbin,
		DBFile: filepath.Join(s.Dir, "temporal.db"), LogPath: filepath.Join(s.Dir, "temporal.log"),
	})
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.temporal, s.TemporalAddr = p, addr
	s.mu.Unlock()
	return nil
}

func (s *Stack) startRedis(ctx context.Context) error {
	dir := filepath.Join(s.Dir, "redis")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	p, addr, err := StartRedis(ctx, s.rport, dir, filepath.Join(s.Dir, "redis.log"), s.opts.Log)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.redis, s.RedisAddr = p, addr
	s.mu.Unlock()
	return nil
}

// Env is the environment of worker and bridge processes.
func (s *Stack) Env() []string {
	env := []string{
		"TEMPORAL_ADDRESS=" + s.TemporalAddr, "TEMPORAL_NAMESPACE=default",
		"FANOUT_KAFKA_BROKERS=" + s.KafkaAddr, "FANOUT_REDIS_URL=redis://" + s.RedisAddr + "/0",
		"FANOUT_RECIPIENTS_URL=" + s.DemoURL + "/recipients", "FANOUT_LOG_LEVEL=warn",
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
	p, err := StartProc(name, filepath.Join(s.Dir, name+".log"), spec.bin, spec.args, spec.env)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.procs[name], s.procSpecs[name] = p, spec
	s.mu.Unlock()
	return nil
}

// Proc returns a started worker or bridge process.
func (s *Stack) Proc(name string) *Proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.procs[name]
}

// Kill SIGKILLs a worker or bridge process.
func (s *Stack) Kill(name string) {
	if p := s.Proc(name); p != nil {
		p.Kill()
	}
}

// Restart starts a killed or stopped process again with the same spec.
func (s *Stack) Restart(name string) error {
	s.mu.Lock()
	spec, ok := s.procSpecs[name]
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
	s.mu.Lock()
	p := s.redis
	s.mu.Unlock()
	p.Stop(10 * time.Second)
	time.Sleep(down)
	return s.startRedis(ctx)
}

// RestartTemporal kills the dev server and starts it again on the same
// port and database file after down.
func (s *Stack) RestartTemporal(ctx context.Context, down time.Duration) error {
	s.mu.Lock()
	p := s.temporal
	s.mu.Unlock()
	p.Kill()
	time.Sleep(down)
	return s.startTemporal(ctx)
}

// Event is a demo event to publish.
type Event struct {
	ID             string
	Audience       int
	Priority       fanout.Priority
	DuplicateEvery int
}

// Publish writes demo events to the events topic.
func (s *Stack) Publish(ctx context.Context, evs ...Event) error {
	envs := make([]starter.Envelope, 0, len(evs))
	for _, e := range evs {
		payload, err := json.Marshal(demo.Payload{Audience: e.Audience, DuplicateEvery: e.DuplicateEvery, Message: json.RawMessage(`{"text":"hi"}`)})
		if err != nil {
			return err
		}
		envs = append(envs, starter.Envelope{ID: e.ID, Type: webhook.EventType, Priority: string(e.Priority), Payload: payload})
	}
	pub := starter.NewPublisher([]string{s.KafkaAddr}, starter.DefaultEventsTopic)
	defer pub.Close()
	return pub.Publish(ctx, envs...)
}

// WorkflowID is the Fanout workflow id of a demo event.
func WorkflowID(eventID string) string { return vocab.WorkflowID(webhook.EventType, eventID) }

// Wait waits for a demo event's fan-out (through continue-as-new and
// Temporal restarts) and returns its result.
func (s *Stack) Wait(ctx context.Context, eventID string) (workflows.FanoutResult, error) {
	for {
		var res workflows.FanoutResult
		err := s.TC.GetWorkflow(ctx, WorkflowID(eventID), "").Get(ctx, &res)
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
	n := 0
	iter := s.RDB.Scan(ctx, 0, "fanout:r:"+eventID+":*", 1000).Iterator()
	var keys []string
	flush := func() error {
		if len(keys) == 0 {
			return nil
		}
		vals, err := s.RDB.MGet(ctx, keys...).Result()
		if err != nil {
			return err
		}
		for _, v := range vals {
			if str, ok := v.(string); ok && len(str) > 0 && !strings.HasPrefix(str, "delivered:") && !strings.HasPrefix(str, "dead:") {
				n++
			}
		}
		keys = keys[:0]
		return nil
	}
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
		if len(keys) == 1000 {
			if err := flush(); err != nil {
				return 0, err
			}
		}
	}
	if err := iter.Err(); err != nil {
		return 0, err
	}
	return n, flush()
}

// Close stops every process and removes a temporary Dir.
func (s *Stack) Close() {
	s.mu.Lock()
	procs := make([]*Proc, 0, len(s.procs))
	for _, p := range s.procs {
		procs = append(procs, p)
	}
	s.mu.Unlock()
	for _, p := range procs {
		p.Stop(5 * time.Second)
	}
	if s.TC != nil {
		s.TC.Close()
	}
	if s.RDB != nil {
		s.RDB.Close()
	}
	if s.srv != nil {
		s.srv.Close()
	}
	if s.kafka != nil {
		s.kafka.Close()
	}
	s.redis.Stop(5 * time.Second)
	s.temporal.Stop(10 * time.Second)
	if s.tempDir {
		os.RemoveAll(s.Dir)
	}
}

// Pids returns the process id of every process of the stack by name
// (temporal, redis, and the started workers and bridges).
func (s *Stack) Pids() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	if s.temporal != nil && !s.temporal.Exited() {
		out["temporal"] = s.temporal.Pid()
	}
	if s.redis != nil && !s.redis.Exited() {
		out["redis"] = s.redis.Pid()
	}
	for name, p := range s.procs {
		if !p.Exited() {
			out[name] = p.Pid()
		}
	}
	return out
}

// Stop stops a worker or bridge process gracefully (SIGTERM).
func (s *Stack) Stop(name string) {
	if p := s.Proc(name); p != nil {
		p.Stop(10 * time.Second)
	}
}

// Renice sets the scheduling niceness of a worker or bridge process (and
// lets a bench emulate giving bulk delivery lower CPU priority than the
// Temporal server and the events worker, as separate nodes would).
func (s *Stack) Renice(name string, nice int) error {
	p := s.Proc(name)
	if p == nil {
		return fmt.Errorf("no process %q", name)
	}
	return syscall.Setpriority(syscall.PRIO_PROCESS, p.Pid(), nice)
}
