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

	"github.com/fanout/fanout/internal/config"
	"github.com/fanout/fanout/starter"
	"github.com/fanout/fanout/workers"
	"github.com/fanout/fanout/workers/webhook"
)

var bin string // the worker binary, built by TestMain

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "worker-cli-")
	if err != nil {
		panic(err)
	}
	bin = filepath.Join(dir, "worker")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		_, _ = os.Stderr.Write(out)
		_ = os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// countingListener counts the connections made to a loopback port.
func countingListener(t *testing.T) (string, *atomic.Int32) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	var n atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			defer func() { _ = c.Close() }()
		}
	}()
	return ln.Addr().String(), &n
}

// env points Temporal, Kafka and Redis at addr, with a log level Load
// refuses unless level is given.
func env(addr, level string) []string {
	return append(os.Environ(), "TEMPORAL_ADDRESS="+addr, "FANOUT_KAFKA_BROKERS="+addr,
		"FANOUT_REDIS_URL=redis://"+addr+"/0", "FANOUT_LOG_LEVEL="+level, "FANOUT_METRICS_ADDR=", "FANOUT_PPROF_ADDR=")
}

func runWorker(t *testing.T, environ []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = environ
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Fatalf("worker %s: still running after 20s (it started working)", strings.Join(args, " "))
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return code, out.String(), errb.String()
}

// worker -h prints its purpose and every variable of the configuration it
// loads (worker, in-process bridge, Temporal, codec) and exits 0 without
// reading the (invalid) configuration or connecting to the port every
// address points at; without -h it does connect there.
func TestHelpStartsNothing(t *testing.T) {
	addr, accepted := countingListener(t)
	want := append(config.EnvVars(workers.Config{}, webhook.Config{}, starter.Settings{}, config.Codec{}), config.TemporalEnv...)
	for _, h := range []string{"-h", "-help", "--help"} {
		code, out, errOut := runWorker(t, env(addr, "bogus"), h)
		if code != 0 {
			t.Fatalf("worker %s: exit %d, stderr %q", h, code, errOut)
		}
		for _, s := range []string{"worker runs fanout's Temporal workers", "Usage:", "-version", "GOGC"} {
			if !strings.Contains(out, s) {
				t.Fatalf("worker %s: no %q in\n%s", h, s, out)
			}
		}
		for _, v := range want {
			if !regexp.MustCompile(`(?m)^  ` + v.Name + `\b`).MatchString(out) {
				t.Fatalf("worker %s: variable %s not listed in\n%s", h, v.Name, out)
			}
		}
	}
	if n := accepted.Load(); n != 0 {
		t.Fatalf("worker -h made %d connections", n)
	}

	// The control: the same environment, valid, without -h, connects.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = env(addr, "error")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	for accepted.Load() == 0 {
		if ctx.Err() != nil {
			t.Fatal("worker made no connection in 20s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestUsageErrorsAndVersion(t *testing.T) {
	addr, accepted := countingListener(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-nope"}, "flag provided but not defined: -nope"},
		{[]string{"serve"}, `unexpected argument "serve"`},
	} {
		code, _, errOut := runWorker(t, env(addr, "info"), tc.args...)
		if code != 2 || !strings.Contains(errOut, tc.want) || !strings.Contains(errOut, "worker -h") {
			t.Fatalf("worker %q: exit %d, stderr %q; want 2, %q and a pointer to -h", tc.args, code, errOut, tc.want)
		}
	}
	for _, args := range [][]string{{"-version"}, {"--version"}, {"version"}} {
		code, out, _ := runWorker(t, env(addr, "bogus"), args...)
		// A plain go build: Go's stamp when it made one (a git clone),
		// else a line that says the commit is unknown and how to get it.
		if code != 0 || !strings.HasPrefix(out, "worker ") || !strings.Contains(out, ", commit ") || !strings.Contains(out, " go1.") {
			t.Fatalf("worker %s: exit %d, %q", args, code, out)
		}
	}
	if n := accepted.Load(); n != 0 {
		t.Fatalf("made %d connections", n)
	}
}

// A release build stamps the version and commit at link time (as go tool
// task build/release and the Dockerfile do); -version prints them.
func TestVersionStamped(t *testing.T) {
	const rev = "0123456789abcdef0123456789abcdef01234567"
	stamped := filepath.Join(t.TempDir(), "worker")
	ld := "-X github.com/fanout/fanout/internal/version.version=v9.8.7 " +
		"-X github.com/fanout/fanout/internal/version.commit=" + rev + " " +
		"-X github.com/fanout/fanout/internal/version.modified=false"
	if out, err := exec.Command("go", "build", "-trimpath", "-ldflags", ld, "-o", stamped, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(stamped, "-version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if want := "worker v9.8.7, commit " + rev + ", tree clean, go1."; !strings.HasPrefix(string(out), want) {
		t.Fatalf("stamped worker -version: %q, want the prefix %q", out, want)
	}
}

// A types file (FANOUT_TYPES_FILE) is loaded at start-up: a mistake in it,
// or a type the pool cannot serve (at most once without the gate), stops
// the worker naming the variable, the file, its line and the type, before
// it connects anywhere.
func TestTypesFileCheckedAtStart(t *testing.T) {
	addr, conns := countingListener(t)
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	secret := write("secret", "whsec_"+strings.Repeat("QUJD", 8)+"\n")
	bad := write("bad.yaml", "types:\n  news:\n    recipients: {inline: {pointer: /to}}\n    message: {passthrough: {pointer: /m}}\n    channel: {webhook: {signing_secret_file: "+secret+"}}\n    windoww: 3\n")
	code, _, stderr := runWorker(t, append(env(addr, "info"), "FANOUT_TYPES_FILE="+bad))
	if code != 1 || !strings.Contains(stderr, "FANOUT_TYPES_FILE") || !strings.Contains(stderr, bad+":6") || !strings.Contains(stderr, "windoww") {
		t.Fatalf("a types file with an unknown field: exit %d, stderr %q; want 1 naming FANOUT_TYPES_FILE, %s:6 and the field", code, stderr, bad)
	}
	amo := write("amo.yaml", "types:\n  alerts:\n    semantics: at-most-once\n    recipients: {inline: {pointer: /to}}\n    message: {passthrough: {pointer: /m}}\n    channel: {webhook: {signing_secret_file: "+secret+"}}\n")
	code, _, stderr = runWorker(t, append(env(addr, "info"), "FANOUT_TYPES_FILE="+amo, "FANOUT_DEDUP=false"))
	if code != 1 || !strings.Contains(stderr, amo+":2") || !strings.Contains(stderr, "alerts") || !strings.Contains(stderr, "FANOUT_DEDUP") {
		t.Fatalf("an at-most-once file type without the gate: exit %d, stderr %q; want 1 naming %s:2, the type and FANOUT_DEDUP", code, stderr, amo)
	}
	if n := conns.Load(); n != 0 {
		t.Fatalf("the worker connected %d times before refusing its types file", n)
	}
}
