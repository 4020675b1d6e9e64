package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fanout/fanout/internal/codecserver"
	"github.com/fanout/fanout/internal/config"
	"github.com/fanout/fanout/starter"
	"github.com/fanout/fanout/workers"
	"github.com/fanout/fanout/workers/webhook"
)

var bin string // the starter binary, built by TestMain

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "starter-cli-")
	if err != nil {
		panic(err)
	}
	bin = filepath.Join(dir, "starter")
	// -buildvcs=true: the version command reads the VCS stamp.
	if out, err := exec.Command("go", "build", "-buildvcs=true", "-o", bin, ".").CombinedOutput(); err != nil {
		// Outside a checkout (no .git) the stamp is not possible.
		if out2, err2 := exec.Command("go", "build", "-buildvcs=false", "-o", bin, ".").CombinedOutput(); err2 != nil {
			_, _ = os.Stderr.Write(append(out, out2...))
			_ = os.RemoveAll(dir)
			os.Exit(1)
		}
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// listener counts the connections made to a loopback port that every
// address of the environment points at.
type listener struct {
	addr     string
	accepted atomic.Int32
}

func listen(t *testing.T) *listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	l := &listener{addr: ln.Addr().String()}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			l.accepted.Add(1)
			defer func() { _ = c.Close() }() // held open until the test ends
		}
	}()
	return l
}

// env points Temporal, Kafka and Redis at addr and sets a variable Load
// would refuse, so a command that read its configuration before -h fails.
func env(addr string) []string {
	return append(os.Environ(), "TEMPORAL_ADDRESS="+addr, "FANOUT_KAFKA_BROKERS="+addr,
		"FANOUT_REDIS_URL=redis://"+addr+"/0", "FANOUT_LOG_LEVEL=bogus", "FANOUT_CODEC_KEYS=", "FANOUT_CODEC_KEYS_FILE=")
}

type result struct {
	code           int
	stdout, stderr string
	took           time.Duration
}

func run(t *testing.T, environ []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = environ
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String(), took: time.Since(start)}
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Fatalf("starter %s: still running after 20s", strings.Join(args, " "))
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return r
}

// The variables each subcommand's help must name: those of the
// configuration structs it loads, read by reflection as the help is.
var subEnv = map[string][]config.EnvVar{
	"bridge":         config.EnvVars(starter.Settings{}, config.Codec{}),
	"publish":        config.EnvVars(starter.Kafka{}),
	"redrive":        config.EnvVars(workers.Config{}, webhook.Config{}, config.Codec{}),
	"redrive-events": config.EnvVars(starter.Kafka{}),
	"replay":         append(config.EnvVars(config.Codec{}), config.TemporalEnv...),
	"setup":          append(config.EnvVars(config.Codec{}, config.RedisConn{}), config.TemporalEnv...),
	"codec-server":   config.EnvVars(codecserver.Config{}, config.Codec{}),
	"status":         append(config.EnvVars(starter.Support{}, config.Codec{}), config.TemporalEnv...),
	"resend":         append(config.EnvVars(starter.Support{}, config.Codec{}), config.TemporalEnv...),
	"version":        nil,
}

// -h, -help and --help on every subcommand print its purpose, flags and
// variables and exit 0 at once, though every address points at a port that
// counts connections and the configuration is invalid: nothing was read,
// nothing connected.
func TestHelpStartsNothing(t *testing.T) {
	l := listen(t)
	for sub, vars := range subEnv {
		for _, h := range []string{"-h", "-help", "--help"} {
			r := run(t, env(l.addr), sub, h)
			if r.code != 0 || r.took > 10*time.Second {
				t.Fatalf("starter %s %s: exit %d after %v, stderr %q", sub, h, r.code, r.took, r.stderr)
			}
			for _, want := range []string{"starter " + sub, "Usage:", "Flags:", "-h, -help"} {
				if !strings.Contains(r.stdout, want) {
					t.Fatalf("starter %s %s: no %q in\n%s", sub, h, want, r.stdout)
				}
			}
			for _, v := range vars {
				if !regexp.MustCompile(`(?m)^  ` + v.Name + `\b`).MatchString(r.stdout) {
					t.Fatalf("starter %s %s: variable %s not listed in\n%s", sub, h, v.Name, r.stdout)
				}
			}
		}
	}
	// help <sub> is <sub> -h, for every subcommand.
	for sub := range subEnv {
		want := run(t, env(l.addr), sub, "-h")
		if r := run(t, env(l.addr), "help", sub); r.code != 0 || r.stdout != want.stdout {
			t.Fatalf("starter help %s: exit %d, stdout %q, stderr %q; want exit 0 and the output of starter %s -h:\n%s", sub, r.code, r.stdout, r.stderr, sub, want.stdout)
		}
	}
	for _, h := range [][]string{{"-h"}, {"--help"}, {"help"}} {
		r := run(t, env(l.addr), h...)
		if r.code != 0 {
			t.Fatalf("starter %s: exit %d", h, r.code)
		}
		for sub := range subEnv {
			if !strings.Contains(r.stdout, "  "+sub+" ") {
				t.Fatalf("starter %s: command %s not listed in\n%s", h, sub, r.stdout)
			}
		}
	}
	if n := l.accepted.Load(); n != 0 {
		t.Fatalf("help made %d connections", n)
	}
}

// The control: without -h, the bridge does connect to that port (so the
// zero above means something).
func TestBridgeWithoutHelpConnects(t *testing.T) {
	l := listen(t)
	environ := append(env(l.addr), "FANOUT_LOG_LEVEL=error")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "bridge")
	cmd.Env = environ
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	for l.accepted.Load() == 0 {
		if ctx.Err() != nil {
			t.Fatal("starter bridge made no connection in 20s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Usage errors exit 2 and say what was wrong and where help is.
func TestUsageErrors(t *testing.T) {
	l := listen(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "Usage:"},
		{[]string{"bogus"}, `unknown command "bogus"`},
		{[]string{"help", "bogus"}, `unknown command "bogus"`},
		{[]string{"redrive", "-nope"}, "flag provided but not defined: -nope"},
		{[]string{"redrive", "-rate", "x"}, `invalid value "x" for flag -rate`},
		{[]string{"redrive", "-rate", "0"}, "-rate 0"},
		{[]string{"bridge", "extra"}, `unexpected argument "extra"`},
		{[]string{"setup", "extra"}, `unexpected argument "extra"`},
		{[]string{"publish"}, "-id is required"},
		{[]string{"publish", "-id", "x", "-payload", "{"}, "-payload is not valid JSON"},
		{[]string{"publish", "-id", "x", "-deliver-at", "tomorrow"}, "-deliver-at \"tomorrow\" is not an RFC 3339 time"},
		{[]string{"publish", "-id", "x", "-delay", "-1m"}, "-delay \"-1m\" is not a non-negative Go duration"},
		{[]string{"publish", "-id", "x", "-delay", "1m", "-deliver-at", "2026-12-24T09:00:00Z"}, "-deliver-at and -delay: give one of them"},
		{[]string{"replay"}, "give -file, -dir, -query or -workflow-id"},
		{[]string{"codec-server", "-addr"}, "flag needs an argument: -addr"},
		{[]string{"version", "extra"}, `unexpected argument "extra"`},
	} {
		r := run(t, env(l.addr), tc.args...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.want) {
			t.Fatalf("starter %q: exit %d, stderr %q; want 2 and %q", tc.args, r.code, r.stderr, tc.want)
		}
		if len(tc.args) > 0 && !strings.Contains(r.stderr, "-h' for usage") {
			t.Fatalf("starter %q: stderr %q does not point at -h", tc.args, r.stderr)
		}
	}
	if n := l.accepted.Load(); n != 0 {
		t.Fatalf("usage errors made %d connections", n)
	}
}

// version, -version and --version print the same line: what go build
// stamped (the checkout's revision and whether it was modified), or that
// the commit is unknown.
func TestVersion(t *testing.T) {
	var first string
	for _, args := range [][]string{{"version"}, {"-version"}, {"--version"}} {
		r := run(t, os.Environ(), args...)
		if r.code != 0 || !strings.HasPrefix(r.stdout, "starter ") || !strings.Contains(r.stdout, ", commit ") || !strings.Contains(r.stdout, " go1.") {
			t.Fatalf("starter %s: exit %d, %q", args, r.code, r.stdout)
		}
		if first != "" && r.stdout != first {
			t.Fatalf("starter %s: %q, but %q before", args, r.stdout, first)
		}
		first = r.stdout
	}
	// What go build stamped, read by the go command itself.
	out, err := exec.Command("go", "version", "-m", bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	stamp := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^\s*build\s+(vcs\.\w+)=(\S+)`).FindAllStringSubmatch(string(out), -1) {
		stamp[m[1]] = m[2]
	}
	if rev := stamp["vcs.revision"]; rev != "" {
		if !strings.Contains(first, "commit "+rev) {
			t.Fatalf("binary stamped with revision %s, version says %q", rev, first)
		}
		if dirty := stamp["vcs.modified"] == "true"; dirty != strings.Contains(first, "tree modified") {
			t.Fatalf("binary stamped vcs.modified=%s, version says %q", stamp["vcs.modified"], first)
		}
	} else if !strings.Contains(first, "commit unknown (") {
		t.Fatalf("no VCS stamp in the binary, but version says %q", first)
	}
}
