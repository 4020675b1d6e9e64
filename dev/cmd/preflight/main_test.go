package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// machine is a host whose PATH holds the programs in installed; apt-get
// install adds the packages it is given (unless broken).
type machine struct {
	installed map[string]bool
	calls     [][]string
	broken    bool // install "succeeds" but installs nothing
	fail      bool // apt-get exits non-zero
}

func (m *machine) host(root, debian bool, goos string) host {
	return host{root: root, debian: debian, goos: goos, lookPath: func(bin string) (string, error) {
		if m.installed[bin] {
			return "/usr/bin/" + bin, nil
		}
		return "", exec.ErrNotFound
	}, glob: func(pattern string) ([]string, error) {
		// Debian's postgresql puts initdb off PATH, under its version.
		if m.installed["postgresql"] && pattern == "/usr/lib/postgresql/*/bin/initdb" {
			return []string{"/usr/lib/postgresql/15/bin/initdb"}, nil
		}
		return nil, nil
	}}
}

func (m *machine) apt(args ...string) error {
	m.calls = append(m.calls, args)
	if m.fail {
		return errors.New("exit status 100")
	}
	if args[0] == "install" && !m.broken {
		for _, p := range args[1:] {
			if !strings.HasPrefix(p, "-") {
				m.installed[p] = true
			}
		}
	}
	return nil
}

func TestPreflight(t *testing.T) {
	all := map[string]bool{"redis-server": true, "kcat": true, "chromium": true, "postgresql": true}

	// Everything there: nothing to do.
	m := &machine{installed: all}
	if err := run(m.host(false, true, "linux"), true, m.apt, &bytes.Buffer{}); err != nil || len(m.calls) != 0 {
		t.Fatalf("all present: err %v, apt-get %v", err, m.calls)
	}

	// Root on Debian: one apt-get install of what is missing.
	m = &machine{installed: map[string]bool{"redis-server": true, "postgresql": true}}
	var out bytes.Buffer
	if err := run(m.host(true, true, "linux"), true, m.apt, &out); err != nil {
		t.Fatalf("root on Debian: %v", err)
	}
	want := [][]string{{"update", "-qq"}, {"install", "-y", "-qq", "kcat", "chromium"}}
	if !slices.EqualFunc(m.calls, want, slices.Equal[[]string]) {
		t.Fatalf("apt-get calls %q, want %q", m.calls, want)
	}
	if !strings.Contains(out.String(), "installing kcat chromium") {
		t.Fatalf("no word of the install: %q", out.String())
	}

	// PostgreSQL's initdb, found neither on PATH nor under
	// /usr/lib/postgresql: its package is installed.
	m = &machine{installed: map[string]bool{"redis-server": true, "kcat": true, "chromium": true}}
	if err := run(m.host(true, true, "linux"), true, m.apt, &bytes.Buffer{}); err != nil ||
		len(m.calls) != 2 || !slices.Equal(m.calls[1], []string{"install", "-y", "-qq", "postgresql"}) {
		t.Fatalf("without PostgreSQL: err %v, apt-get %q", err, m.calls)
	}

	// An install that leaves a program missing, or fails, is an error.
	m = &machine{installed: map[string]bool{}, broken: true}
	if err := run(m.host(true, true, "linux"), true, m.apt, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "still missing after apt-get install: redis-server, kcat, chromium, initdb") {
		t.Fatalf("broken install: %v", err)
	}
	m = &machine{installed: map[string]bool{}, fail: true}
	if err := run(m.host(true, true, "linux"), true, m.apt, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "apt-get update") {
		t.Fatalf("failing apt-get: %v", err)
	}

	// Not root, or not Debian, or told not to: the one command, and why.
	for _, tc := range []struct {
		name          string
		root, debian  bool
		goos          string
		install       bool
		want, wantNot string
	}{
		{"user on Debian", false, true, "linux", true, "\n  sudo apt-get update && sudo apt-get install -y kcat chromium", ""},
		{"root, -install=false", true, true, "linux", false, "\n  apt-get update && apt-get install -y kcat chromium", "sudo"},
		{"other Linux", false, false, "linux", true, "your package manager; on Debian or Ubuntu:\n  sudo apt-get", ""},
		{"macOS", false, false, "darwin", true, "\n  brew install kcat && brew install --cask chromium", "apt-get"},
	} {
		m := &machine{installed: map[string]bool{"redis-server": true, "postgresql": true}}
		err := run(m.host(tc.root, tc.debian, tc.goos), tc.install, m.apt, &bytes.Buffer{})
		if err == nil || len(m.calls) != 0 {
			t.Fatalf("%s: err %v, apt-get %v; want advice and no install", tc.name, err, m.calls)
		}
		msg := err.Error()
		if !strings.Contains(msg, tc.want) || (tc.wantNot != "" && strings.Contains(msg, tc.wantNot)) ||
			!strings.Contains(msg, "missing kcat, chromium") || !strings.Contains(msg, "chromium: the Temporal UI checks") {
			t.Fatalf("%s: %q; want %q", tc.name, msg, tc.want)
		}
	}
}

// The command itself, on a PATH without the programs (and without
// apt-get): it exits 1 naming them and the command to run.
func TestPreflightCommand(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "preflight")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "PATH="+t.TempDir())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("preflight on an empty PATH: %v, want exit 1", err)
	}
	want := "apt-get install -y redis-server kcat chromium"
	if runtime.GOOS == "darwin" {
		want = "brew install redis kcat && brew install --cask chromium"
	}
	if !strings.Contains(stderr.String(), "missing redis-server, kcat, chromium") || !strings.Contains(stderr.String(), want) {
		t.Fatalf("stderr %q", stderr.String())
	}
}
