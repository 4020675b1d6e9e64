// Command preflight checks that the programs the tests run are installed
// (`go tool task test` runs it first): redis-server, kcat, chromium and
// PostgreSQL.
// Root on Debian, it installs the missing ones with apt-get, as `task dev`
// does for redis-server; otherwise it prints the one command that installs
// them and exits 1, before any test has started.
//
//	go run ./dev/cmd/preflight [-install=false]
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// tool is a program the tests run and where it comes from.
type tool struct {
	bin    string // looked up on PATH
	also   string // or found by this glob (a package that installs it off PATH)
	apt    string // Debian package
	brew   string // Homebrew formula ("--cask name" for a cask)
	needBy string // who needs it, for the message
}

// tools are the programs `go tool task test` needs beside Go.
var tools = []tool{
	{bin: "redis-server", apt: "redis-server", brew: "redis", needBy: "the dev stack's Redis (task dev, the integration tests)"},
	{bin: "kcat", apt: "kcat", brew: "kcat", needBy: "the integration tests that publish as the README shows"},
	{bin: "chromium", apt: "chromium", brew: "--cask chromium", needBy: "the Temporal UI checks (dev/e2e)"},
	{bin: "initdb", also: "/usr/lib/postgresql/*/bin/initdb", apt: "postgresql", brew: "postgresql", needBy: "the PostgreSQL recipients source's tests (dev/stack.StartPostgres)"},
}

// host is what the checks and the installer read of the machine.
type host struct {
	lookPath func(string) (string, error)
	glob     func(string) ([]string, error) // nil: no globbing
	root     bool
	debian   bool   // apt-get on PATH and /etc/debian_version
	goos     string // runtime.GOOS
}

func main() {
	install := flag.Bool("install", true, "install missing programs with apt-get when root on Debian")
	flag.Parse()
	h := host{lookPath: exec.LookPath, glob: filepath.Glob, root: os.Geteuid() == 0, goos: runtime.GOOS}
	if _, err := os.Stat("/etc/debian_version"); err == nil {
		if _, err := exec.LookPath("apt-get"); err == nil {
			h.debian = true
		}
	}
	if err := run(h, *install, aptGet, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "preflight:", err)
		os.Exit(1)
	}
}

// run checks the tools and installs the missing ones when it may.
func run(h host, install bool, apt func(args ...string) error, out io.Writer) error {
	missing := missingTools(h)
	if len(missing) == 0 {
		return nil
	}
	if !install || !h.root || !h.debian {
		return errors.New(advice(h, missing))
	}
	pkgs := make([]string, len(missing))
	for i, t := range missing {
		pkgs[i] = t.apt
	}
	fmt.Fprintf(out, "preflight: installing %s with apt-get (missing: %s)\n", strings.Join(pkgs, " "), names(missing))
	if err := apt("update", "-qq"); err != nil {
		return fmt.Errorf("apt-get update: %w", err)
	}
	if err := apt(append([]string{"install", "-y", "-qq"}, pkgs...)...); err != nil {
		return fmt.Errorf("apt-get install %s: %w", strings.Join(pkgs, " "), err)
	}
	if still := missingTools(h); len(still) > 0 {
		return fmt.Errorf("still missing after apt-get install: %s", names(still))
	}
	return nil
}

func missingTools(h host) []tool {
	var missing []tool
	for _, t := range tools {
		if _, err := h.lookPath(t.bin); err == nil {
			continue
		}
		if t.also != "" && h.glob != nil {
			if m, _ := h.glob(t.also); len(m) > 0 {
				continue
			}
		}
		missing = append(missing, t)
	}
	return missing
}

// advice names what is missing, why, and the one command that installs it.
func advice(h host, missing []tool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "missing %s:\n", names(missing))
	for _, t := range missing {
		fmt.Fprintf(&b, "  %s: %s\n", t.bin, t.needBy)
	}
	switch h.goos {
	case "darwin":
		var formulas, casks []string
		for _, t := range missing {
			if c, ok := strings.CutPrefix(t.brew, "--cask "); ok {
				casks = append(casks, c)
			} else {
				formulas = append(formulas, t.brew)
			}
		}
		var cmds []string
		if len(formulas) > 0 {
			cmds = append(cmds, "brew install "+strings.Join(formulas, " "))
		}
		if len(casks) > 0 {
			cmds = append(cmds, "brew install --cask "+strings.Join(casks, " "))
		}
		fmt.Fprintf(&b, "install them with:\n  %s", strings.Join(cmds, " && "))
	default:
		pkgs := make([]string, len(missing))
		for i, t := range missing {
			pkgs[i] = t.apt
		}
		sudo := "sudo "
		if h.root {
			sudo = ""
		}
		if !h.debian {
			b.WriteString("install them with your package manager; on Debian or Ubuntu:\n")
		} else {
			b.WriteString("install them with:\n")
		}
		fmt.Fprintf(&b, "  %sapt-get update && %sapt-get install -y %s", sudo, sudo, strings.Join(pkgs, " "))
	}
	return b.String()
}

func names(ts []tool) string {
	n := make([]string, len(ts))
	for i, t := range ts {
		n[i] = t.bin
	}
	return strings.Join(n, ", ")
}

// aptGet runs apt-get non-interactively, its output on ours.
func aptGet(args ...string) error {
	cmd := exec.Command("apt-get", args...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	return cmd.Run()
}
