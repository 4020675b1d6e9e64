package stack

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kfake"
	"go.temporal.io/sdk/client"

	"github.com/fanout/fanout/activities"
	"github.com/fanout/fanout/starter"
	"github.com/fanout/fanout/workflows/vocab"
)

// TemporalCLIVersion is the pinned temporal CLI (internal/tools/temporalcli/go.mod).
const TemporalCLIVersion = "v1.5.1"

// RepoRoot finds the repository root (the directory of fanout's go.mod)
// from the working directory upwards.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.HasPrefix(string(b), "module github.com/fanout/fanout\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("not inside the fanout repository")
		}
		dir = parent
	}
}

// BinDir is the ignored folder for built tools and binaries.
func BinDir(root string) string { return filepath.Join(root, ".bin") }

// ensureTemporalCLI returns the temporal CLI to run: the pinned one in .bin
// when it is built there; else a `temporal` on PATH whose version fits
// (TemporalVersionFits), so a user who has one skips the build; else it
// builds the pinned one into .bin once. `go tool task temporal-cli` builds
// it before the tests; should several processes get here without it (test
// packages run in parallel), a lock on .bin makes one build it and the
// others wait for it.
func ensureTemporalCLI(ctx context.Context, root string, progress io.Writer) (string, error) {
	bin := filepath.Join(BinDir(root), "temporal")
	if fi, err := os.Stat(bin); err == nil && fi.Mode().IsRegular() {
		return bin, nil
	}
	if p, err := exec.LookPath("temporal"); err == nil {
		vctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		out, err := exec.CommandContext(vctx, p, "--version").Output()
		cancel()
		if v, ok := TemporalVersionFits(string(out)); err == nil && ok {
			fmt.Fprintf(progress, "using the temporal CLI %s on PATH (%s): it fits the pinned %s\n", v, p, TemporalCLIVersion)
			return p, nil
		}
		fmt.Fprintf(progress, "the temporal CLI on PATH (%s, %q) does not fit the pinned %s (same major version, minor at least as high)\n",
			p, strings.TrimSpace(string(out)), TemporalCLIVersion)
	}
	return bin, withBinLock(root, func() error {
		if fi, err := os.Stat(bin); err == nil && fi.Mode().IsRegular() {
			return nil // built by another process meanwhile
		}
		fmt.Fprintf(progress, "building the temporal CLI %s once into %s (several minutes on 2 cores)...\n", TemporalCLIVersion, bin)
		tmp := fmt.Sprintf("%s.tmp.%d", bin, os.Getpid())
		cmd := exec.CommandContext(ctx, "go", "build", "-o", tmp, "github.com/temporalio/cli/cmd/temporal")
		cmd.Dir = filepath.Join(root, "internal", "tools", "temporalcli")
		cmd.Stdout, cmd.Stderr = progress, progress
		if err := cmd.Run(); err != nil {
			_ = os.Remove(tmp)
			return fmt.Errorf("build temporal CLI: %w", err)
		}
		return os.Rename(tmp, bin)
	})
}

var temporalVersionRE = regexp.MustCompile(`^temporal version v?(\d+)\.(\d+)\.(\d+)\S*`)

// TemporalVersionFits reads `temporal --version` output ("temporal version
// 1.5.1 (Server 1.29.1, UI 2.42.1)") and reports its version and whether it
// can stand in for the pinned TemporalCLIVersion: the same major version and
// a minor version at least the pinned one's (1.5.x, 1.6.0: yes; 1.4.2,
// 2.0.0, a 0.0.0-DEV build: no). The stack uses `server start-dev` flags
// that 1.5 has (--sqlite-pragma, --dynamic-config-value, --ui-codec-endpoint,
// --search-attribute); a new major version may drop some, an older minor may
// lack them, and the patch level does not change them.
func TemporalVersionFits(out string) (version string, ok bool) {
	m := temporalVersionRE.FindStringSubmatch(strings.TrimSpace(out))
	p := temporalVersionRE.FindStringSubmatch("temporal version " + TemporalCLIVersion)
	if m == nil || p == nil {
		return "", false
	}
	maj, _ := strconv.Atoi(m[1])
	minor, _ := strconv.Atoi(m[2])
	pmaj, _ := strconv.Atoi(p[1])
	pmin, _ := strconv.Atoi(p[2])
	return strings.TrimPrefix(m[0], "temporal version "), maj == pmaj && minor >= pmin
}

// withBinLock runs fn holding an exclusive lock on .bin, so that builds into
// it from parallel test processes never interleave.
func withBinLock(root string, fn func() error) error {
	if err := os.MkdirAll(BinDir(root), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(BinDir(root), ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("lock %s: %w", f.Name(), err)
	}
	defer func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN) }()
	return fn()
}

// FreePort returns a free TCP port on 127.0.0.1.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// RefusedPort returns a port of 127.0.0.1 that refuses connections until
// release is called: a TCP socket is bound to it and never listens. A port
// from FreePort is only free for a moment, and any process (another test
// package's sink) may listen on it later and answer; a bound socket keeps
// every other bind off it, and keeps the kernel from handing it out.
func RefusedPort() (port int, release func(), err error) {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, nil, fmt.Errorf("refused port: %w", err)
	}
	release = func() { _ = syscall.Close(fd) }
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		release()
		return 0, nil, fmt.Errorf("refused port: bind: %w", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		release()
		return 0, nil, fmt.Errorf("refused port: %w", err)
	}
	return sa.(*syscall.SockaddrInet4).Port, release, nil
}

// PortFree reports whether nothing listens on 127.0.0.1:port.
func PortFree(port int) bool {
	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 200*time.Millisecond)
	if err != nil {
		return true
	}
	_ = c.Close()
	return false
}

// Proc is a child process in its own process group.
type Proc struct {
	Name string
	cmd  *exec.Cmd
	done chan struct{}
}

// startProc runs bin with args and env (added to the current environment),
// logging its output to logPath (or discarding it when empty).
func startProc(name, logPath, bin string, args, env []string) (*Proc, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	return launch(name, logPath, cmd)
}

// launch starts cmd in its own process group, killed with this process: by
// the kernel on Linux (Pdeathsig), by a watchdog in the group elsewhere
// (procs_linux.go, procs_other.go); its output goes to logPath (nowhere
// when empty). cmd's SysProcAttr, if set, keeps its credential.
func launch(name, logPath string, cmd *exec.Cmd) (*Proc, error) {
	attr := procAttr()
	if cmd.SysProcAttr != nil {
		attr.Credential = cmd.SysProcAttr.Credential
	}
	cmd.SysProcAttr = attr
	if logPath != "" {
		f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return nil, err
		}
		cmd.Stdout, cmd.Stderr = f, f
		defer func() { _ = f.Close() }()
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Proc{Name: name, cmd: cmd, done: make(chan struct{})}
	unwatch := watchParent(cmd.Process.Pid)
	go func() {
		_ = cmd.Wait()
		unwatch()
		close(p.done)
	}()
	return p, nil
}

// Pid is the process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// ExitState says how the process ended ("exit status 1", "signal:
// killed"), or "running".
func (p *Proc) ExitState() string {
	if !p.Exited() {
		return "running"
	}
	return p.cmd.ProcessState.String()
}

// Exited reports whether the process has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Stop sends SIGTERM to the process group and SIGKILL after grace.
func (p *Proc) Stop(grace time.Duration) {
	if p == nil || p.Exited() {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		p.Kill()
	}
}

// Kill sends SIGKILL to the process group and waits for the process.
func (p *Proc) Kill() {
	if p == nil || p.Exited() {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// TemporalRuntimeEnv is the tuned dev server's Go runtime setting.
//
// GOGC=off GOMEMLIMIT=1GiB: collect when the heap reaches 1 GiB rather than
// each time it doubles. The server allocates a lot per request and keeps
// little, so with Go's default (GOGC=100) it collected every ~100 MB and
// spent 5-6 % of its CPU in the collector. The footprint test measured
// 4.5-4.8 ms of server CPU per small event with it against 5.2-7.2 ms
// without, in alternated runs. This is the bench's tuning of a dev server
// sharing two cores, not advice for production servers
// (docs/performance.md, "The bench's dev server"). A 256 MiB limit was tried on a 2.1 GHz EPYC VM, where a perf profile put
// ~9 % of the server's CPU in page faults (a heap growing to 1 GiB over
// fresh pages): a small event in a burst cost 6.5-7.55 ms instead of
// 8.85-9.2 and light-burst's capacity rose to 108-121 events/s, but the
// relative scenarios then ran at 54-59 events/s, where the server, paced,
// saturated beside the low-priority event (isolation-relative 13.2 and
// 9.5; 1.07 in a slower run at 45/s), so it went back to 1 GiB.
//
// GOMAXPROCS=1: the dev server shares two cores with Redis, the broker, the
// sink and the workers, and with a second P the Go runtime wakes an idle
// thread for nearly every request it receives; on a virtual machine each
// of those wake-ups costs the server more than the work it hands over.
// With one P, paced small events cost the server 12.8-13.3 ms instead of
// 16.1-17.0 ms on a 2.1 GHz EPYC VM (footprint test at 40/s, alternated
// runs; no-op workflows 12.0-13.6 against 13.7-16.0), and the bench's
// light-burst 8.6-10.1 ms against 11.3-12.3 ms, its capacity unchanged
// (85-97 against 87-91 events/s). On a faster machine it made no
// difference either way.
var TemporalRuntimeEnv = []string{"GOGC=off", "GOMEMLIMIT=1GiB", "GOMAXPROCS=1"}

// VisibilityPollRPS is how often the tuned dev server reads its visibility
// queue per second (the server's default is 20).
const VisibilityPollRPS = 2

// temporalArgs are the `temporal server start-dev` arguments, with dbFile
// as the database ("": in memory). Tuned, they add fanout's search
// attributes and the flags below; stock, they are what a user types (the
// search attributes are then registered by waitTemporal, as `starter setup`
// does), so the bench can measure what users run.
func temporalArgs(port, uiPort, metricsPort int, dbFile string, stock bool) []string {
	args := []string{"server", "start-dev", "--ip", "127.0.0.1", "--port", strconv.Itoa(port)}
	if uiPort == 0 {
		args = append(args, "--headless")
	} else {
		args = append(args, "--ui-port", strconv.Itoa(uiPort))
	}
	if metricsPort != 0 {
		args = append(args, "--metrics-port", strconv.Itoa(metricsPort))
	}
	if dbFile != "" {
		args = append(args, "--db-filename", dbFile)
	}
	if stock {
		return args
	}
	args = append(args, "--log-level", "warn")
	if dbFile != "" {
		// WAL without fsync per commit: state survives a kill of the server
		// (the OS keeps the writes), which is what restarts here need, at a
		// fraction of the cost of fsync on every history write.
		args = append(args, "--sqlite-pragma", "journal_mode=wal", "--sqlite-pragma", "synchronous=off")
	}
	// One partition per task queue: on a single-node dev server more
	// partitions only add forwarding between them.
	args = append(args,
		"--dynamic-config-value", "matching.numTaskqueueReadPartitions=1",
		"--dynamic-config-value", "matching.numTaskqueueWritePartitions=1")
	// Task-queue fairness (off by default on self-hosted servers): each
	// event's workflow tasks and batches carry a fairness key
	// (vocab.TaskPriority), and the server dispatches the keys of a queue
	// round-robin, so a small event is not queued behind a big one's
	// batches. Production servers set the same dynamic config (docs/deploy.md).
	args = append(args, "--dynamic-config-value", "matching.enableFairness=true")
	// start-dev re-reads the search attributes from the database on every
	// read (several times per workflow start and visibility write) so
	// that ones added while it runs show at once; a production server
	// caches them. The attributes are registered before the first start
	// (by the flags below, or by waitTemporal, which then restarts the
	// server: see startTemporal), so the cache is never stale here.
	args = append(args, "--dynamic-config-value", "system.forceSearchAttributesCacheRefreshOnRead=false")
	// The visibility queue is read at most twice a second instead of 20
	// times: a small event that completes within that gets one visibility
	// write (closed) instead of two (the started record is skipped when
	// the workflow has already closed); lists and counts lag by <= 0.5 s.
	args = append(args, "--dynamic-config-value", "history.visibilityProcessorMaxPollRPS="+strconv.Itoa(VisibilityPollRPS))
	for _, sa := range vocab.SearchAttributes() {
		args = append(args, "--search-attribute", sa.Name+"="+vocab.TypeName(sa.Type))
	}
	return args
}

// withoutSearchAttributes is args without the search attributes and the
// flag that has the server cache them (Options.NoSearchAttributes).
func withoutSearchAttributes(args []string) []string {
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		if i+1 < len(args) && (args[i] == "--search-attribute" ||
			args[i] == "--dynamic-config-value" && strings.HasPrefix(args[i+1], "system.forceSearchAttributesCacheRefreshOnRead=")) {
			i++
			continue
		}
		out = append(out, args[i])
	}
	return out
}

// errTemporalExited: the dev server exited before it answered, e.g. because
// its port was taken.
var errTemporalExited = errors.New("temporal dev server exited during start-up (see its log)")

// waitTemporal waits until the Temporal frontend at addr answers a health
// check, then (with register) registers fanout's search attributes:
// --search-attribute registers them only when the database is created, and
// a dev database from an older fanout lacks the newer ones; added reports
// whether it registered any.
func waitTemporal(ctx context.Context, addr string, p *Proc, register bool) (added bool, _ error) {
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		if p.Exited() {
			return false, errTemporalExited
		}
		if c, err := client.Dial(client.Options{HostPort: addr, Logger: QuietLogger{}}); err == nil {
			_, err := c.CheckHealth(ctx, &client.CheckHealthRequest{})
			if err == nil && !register {
				c.Close()
				return false, nil
			}
			if err == nil {
				outs, err := vocab.Ensure(ctx, c.OperatorService(), "default", vocab.SearchAttributes())
				c.Close()
				if err != nil {
					return false, fmt.Errorf("register search attributes: %w", err)
				}
				for _, o := range outs {
					added = added || o.Added
				}
				return added, nil
			}
			c.Close()
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(300 * time.Millisecond):
		}
	}
	return false, fmt.Errorf("temporal dev server at %s not ready after 90s", addr)
}

// ensureRedisServer returns the redis-server path, installing the Debian
// package when it is missing and we are root.
func ensureRedisServer(progress io.Writer) (string, error) {
	if p, err := exec.LookPath("redis-server"); err == nil {
		return p, nil
	}
	if os.Geteuid() != 0 {
		return "", errors.New("redis-server not found: install it (Debian/Ubuntu: sudo apt-get install -y redis-server; macOS: brew install redis)")
	}
	fmt.Fprintln(progress, "redis-server not found; installing it with apt-get...")
	for _, args := range [][]string{{"update"}, {"install", "-y", "redis-server"}} {
		cmd := exec.Command("apt-get", args...)
		cmd.Stdout, cmd.Stderr = progress, progress
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		if err := cmd.Run(); err != nil {
			return "", fmt.Errorf("apt-get %s: %w (install redis-server by hand)", strings.Join(args, " "), err)
		}
	}
	return exec.LookPath("redis-server")
}

// StartRedis starts redis-server on 127.0.0.1:port without persistence (or
// with an append-only file in dir when dir is set) and waits until it answers.
// Tests that need only Redis use it; Start uses it for the Stack's.
func StartRedis(ctx context.Context, port int, dir, logPath string, progress io.Writer) (*Proc, string, error) {
	bin, err := ensureRedisServer(progress)
	if err != nil {
		return nil, "", err
	}
	args := []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--protected-mode", "no"}
	if dir != "" {
		args = append(args, "--dir", dir, "--appendonly", "yes", "--appendfsync", "everysec")
	} else {
		args = append(args, "--appendonly", "no")
	}
	p, err := startProc("redis", logPath, bin, args, nil)
	if err != nil {
		return nil, "", err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	if err := waitRedis(ctx, p, addr, nil); err != nil {
		if errors.Is(err, ErrRedisExited) {
			return nil, "", fmt.Errorf("redis-server exited at start (port %d taken?): %w", port, err)
		}
		return nil, "", err
	}
	return p, addr, nil
}

// waitRedis waits until the redis-server p answers PING on addr (over TLS
// with tlsConfig when set). A bare TCP connect is not enough: it also
// succeeds when another process holds the port, and then redis-server
// exits and the stack's clients talk to that process (seen: the dev
// server's HTTP port, answering "400 Bad Request"). It returns
// ErrRedisExited if p exits first, and kills p after 10 s or when ctx ends.
func waitRedis(ctx context.Context, p *Proc, addr string, tlsConfig *tls.Config) error {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond, TLSConfig: tlsConfig})
	defer func() { _ = c.Close() }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if p.Exited() {
			return ErrRedisExited
		}
		if c.Ping(ctx).Err() == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			p.Kill()
			return fmt.Errorf("redis-server on %s not ready", addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ErrRedisExited is StartRedis's error when redis-server exits during
// start-up, most often because its port was taken.
var ErrRedisExited = errors.New("redis-server exited")

// Topics of the dev stack and their partition counts.
var Topics = map[string]int32{
	starter.DefaultEventsTopic:           4,
	starter.DefaultEventsDLQTopic:        1,
	activities.DefaultDeliveriesDLQTopic: 1,
}

// startKafka starts the embedded kfake broker on 127.0.0.1:port with the
// Topics; port 0 binds a free port, and the address returned names it.
func startKafka(port int) (*kfake.Cluster, string, error) {
	opts := []kfake.Opt{kfake.NumBrokers(1), kfake.Ports(port), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(1)}
	for t, n := range Topics {
		opts = append(opts, kfake.SeedTopics(n, t))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return nil, "", fmt.Errorf("start kfake on %d: %w", port, err)
	}
	return c, c.ListenAddrs()[0], nil
}

// QuietLogger discards Temporal client logs.
type QuietLogger struct{}

func (QuietLogger) Debug(string, ...any) {}
func (QuietLogger) Info(string, ...any)  {}
func (QuietLogger) Warn(string, ...any)  {}
func (QuietLogger) Error(string, ...any) {}
