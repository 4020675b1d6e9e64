package workers

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/internal/cli"
	"github.com/fanout/fanout/types"
	"github.com/fanout/fanout/workers/webhook"
)

// checkTypesCmd is the subcommand that checks a types file.
const checkTypesCmd = "check-types"

// checkTypesHelp is `NAME check-types -h`.
func (m *mainSetup) checkTypesHelp() cli.Help {
	return cli.Help{
		Name: m.name + " " + checkTypesCmd, Args: "FILE",
		Summary: `check-types checks a types file (YAML or JSON) as the worker loads it: every option,
recipients source, message and channel, the secret and header files it names, and that
no type is defined twice (the worker's own types, registered in Go or "webhook", included).
It prints the types the file defines and exits 0, or prints every mistake, each with its
file, line, type and field, and exits 1. It connects to nothing.`,
	}
}

// checkTypes runs `NAME check-types FILE`; it returns the exit status.
func (m *mainSetup) checkTypes(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(m.name+" "+checkTypesCmd, flag.ContinueOnError)
	err := cli.Parse(fs, args, m.checkTypesHelp(), true)
	if err == nil && fs.NArg() != 1 {
		err = cli.Usagef("want one types file, got %d arguments", fs.NArg())
	}
	if err != nil {
		if code := cli.Code(err); code != 1 {
			if code == 2 {
				fmt.Fprintf(stderr, "%s %s: %v\nRun '%s %s -h' for usage.\n", m.name, checkTypesCmd, err, m.name, checkTypesCmd)
			}
			return code
		}
	}
	f, err := types.Load(fs.Arg(0))
	if err == nil {
		// Built beside the worker's own types, as the worker builds it:
		// its clients are made, nothing is dialled.
		if m.webhook {
			m.reg.MustRegister(webhook.EventType, &webhook.Handler{}, fanout.TypeOptions{})
		}
		err = types.Build(f, m.reg, types.Deps{})
	}
	if err != nil {
		m.printErrors(stderr, err)
		return 1
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TYPE\tPRIORITY\tSOURCE\tCHANNEL\tLINE")
	for _, t := range f.Types {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\n", t.Name, t.Options.WithDefaults().DefaultPriority, t.SourceKind, t.ChannelKind, t.Line)
	}
	_ = tw.Flush()
	fmt.Fprintf(stdout, "%s: %d types, ok\n", f.Path, len(f.Types))
	return 0
}

// printErrors prints each of err's joined errors on its own line.
func (m *mainSetup) printErrors(w io.Writer, err error) {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			m.printErrors(w, e)
		}
		return
	}
	var te *types.Error
	if errors.As(err, &te) {
		fmt.Fprintln(w, te)
		return
	}
	fmt.Fprintf(w, "%s %s: %v\n", m.name, checkTypesCmd, err)
}
