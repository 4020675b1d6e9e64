// Package cli is what fanout's commands (worker, starter and its
// subcommands) share on the command line: help that names the command's
// purpose, its flags and the environment variables it reads (from the
// configuration structs' tags, internal/config.EnvVars), flag parsing that
// never starts work on -h, exit statuses (0 done or help, 1 failed, 2 usage
// error) and the -version flag (the version line itself: internal/version).
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/fanout/fanout/internal/config"
)

// ErrHelp is returned by Parse once it has printed the help: the command
// exits 0 without doing anything else.
var ErrHelp = errors.New("help shown")

// UsageError is a mistake on the command line (an unknown flag or command,
// a missing or bad argument): exit status 2.
type UsageError struct{ Msg string }

func (e UsageError) Error() string { return e.Msg }

// Usagef returns a UsageError.
func Usagef(format string, args ...any) error {
	return UsageError{Msg: fmt.Sprintf(format, args...)}
}

// Help describes a command for -h.
type Help struct {
	// Name as typed: "worker", "starter redrive".
	Name string
	// Args follow the name in the usage line, e.g. "[flags]".
	Args string
	// Summary: what the command does, a paragraph (wrapped as written).
	Summary string
	// Env are the variables the command reads, in groups; Notes follow them.
	Env   []EnvGroup
	Notes []string
}

// EnvGroup is a titled list of variables ("" for the command's own).
type EnvGroup struct {
	Title string
	Vars  []config.EnvVar
}

// Except is vars without those named in except.
func Except(vars, except []config.EnvVar) []config.EnvVar {
	drop := map[string]bool{}
	for _, e := range except {
		drop[e.Name] = true
	}
	var out []config.EnvVar
	for _, e := range vars {
		if !drop[e.Name] {
			out = append(out, e)
		}
	}
	return out
}

// TemporalGroup is the variables of the connection to Temporal
// (config.DialTemporal), the codec keys included.
func TemporalGroup() EnvGroup {
	return EnvGroup{Title: "Temporal (the temporal CLI's variables, or a temporal.toml profile) and payload encryption",
		Vars: append(append([]config.EnvVar{}, config.TemporalEnv...), config.EnvVars(config.Codec{})...)}
}

// OTelNote says which OpenTelemetry variables apply.
const OTelNote = "OpenTelemetry: the SDK's OTEL_* variables (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_PROTOCOL,\nOTEL_TRACES_EXPORTER, OTEL_SERVICE_NAME, ...). What each variable means: docs/configuration.md."

// Write prints the help with fs's flags (nil: none but -h).
func (h Help) Write(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintf(w, "%s\n\nUsage:\n  %s %s\n", strings.TrimSpace(h.Summary), h.Name, h.Args)
	fmt.Fprintf(w, "\nFlags:\n")
	if fs != nil {
		fs.SetOutput(w)
		fs.PrintDefaults()
	}
	fmt.Fprintf(w, "  -h, -help\n    \tprint this help and exit\n")
	for _, g := range h.Env {
		if len(g.Vars) == 0 {
			continue
		}
		title := "Environment"
		if g.Title != "" {
			title += ": " + g.Title
		}
		fmt.Fprintf(w, "\n%s:\n", title)
		var b strings.Builder
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		for _, e := range g.Vars {
			def := ""
			if e.Default != "" {
				def = "default " + e.Default
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\n", e.Name, e.Kind, def)
		}
		_ = tw.Flush() // into a bytes.Buffer, which does not fail
		for line := range strings.Lines(b.String()) {
			fmt.Fprintln(w, strings.TrimRight(line, " \n"))
		}
	}
	for _, n := range h.Notes {
		fmt.Fprintf(w, "\n%s\n", n)
	}
}

// Parse parses args into fs (flags only unless allowArgs). On -h, -help or
// --help it prints h to stdout and returns ErrHelp; a bad flag or an
// unexpected argument is a UsageError. fs must be flag.ContinueOnError.
func Parse(fs *flag.FlagSet, args []string, h Help, allowArgs bool) error {
	fs.SetOutput(io.Discard) // the errors are said once, by Exit
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		h.Write(os.Stdout, fs)
		return ErrHelp
	}
	if err != nil {
		return UsageError{Msg: err.Error()}
	}
	if !allowArgs && fs.NArg() > 0 {
		return Usagef("unexpected argument %q", fs.Arg(0))
	}
	return nil
}

// Code is the exit status for err: 0 for nil and ErrHelp, 2 for a
// UsageError, else 1.
func Code(err error) int {
	var ue UsageError
	switch {
	case err == nil, errors.Is(err, ErrHelp):
		return 0
	case errors.As(err, &ue):
		return 2
	default:
		return 1
	}
}

// Exit ends the command name ("worker", "starter redrive") with err's exit
// status, saying the error on stderr (with a pointer to -h for a usage error).
func Exit(name string, err error) {
	code := Code(err)
	switch code {
	case 1:
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
	case 2:
		fmt.Fprintf(os.Stderr, "%s: %v\nRun '%s -h' for usage.\n", name, err, name)
	}
	os.Exit(code)
}

// IsVersionFlag reports whether arg asks for the version (-version, --version).
func IsVersionFlag(arg string) bool { return arg == "-version" || arg == "--version" }

// IsHelpFlag reports whether arg asks for help (-h, -help, --help, and
// their -- forms).
func IsHelpFlag(arg string) bool {
	switch arg {
	case "-h", "--h", "-help", "--help":
		return true
	}
	return false
}
