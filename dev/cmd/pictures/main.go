// Command pictures makes the documentation's generated parts (go tool task
// pictures runs it with the footprint test and the bench):
//
//	pictures screenshots [-out docs/img] [-dashboard FILE] [-scale F]
//	    the Temporal UI's page of one demo event (ui-event.png) and the
//	    Grafana dashboard drawn from the demo's metrics (dashboard.png)
//	pictures figures -in FILE [-out docs/performance-figures.md]
//	    the footprint test's figures (FOOTPRINT_FIGURES=FILE) as Markdown
//	pictures bench -in FILE [-out docs/performance-bench.md]
//	    one bench run's rows (bench -json FILE) as one table
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/fanout/fanout/dev/e2e/footprint"
	"github.com/fanout/fanout/dev/pictures"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: pictures screenshots|figures|bench [flags] (-h for each)")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch cmd, args := os.Args[1], os.Args[2:]; cmd {
	case "screenshots":
		fs := flag.NewFlagSet(cmd, flag.ExitOnError)
		o := pictures.Options{Log: os.Stdout}
		fs.StringVar(&o.OutDir, "out", "docs/img", "directory of "+pictures.UIFile+" and "+pictures.DashboardFile)
		fs.StringVar(&o.Dashboard, "dashboard", "deploy/helm/fanout/files/dashboard.json", "the Grafana dashboard to draw")
		fs.Float64Var(&o.Scale, "scale", 1, "multiplies the demo's audiences")
		_ = fs.Parse(args)
		err = pictures.Screenshots(ctx, o)
	case "figures":
		fs := flag.NewFlagSet(cmd, flag.ExitOnError)
		in := fs.String("in", "", "the footprint test's figures (FOOTPRINT_FIGURES)")
		out := fs.String("out", "docs/performance-figures.md", "the Markdown to write")
		_ = fs.Parse(args)
		err = figures(*in, *out)
	case "bench":
		fs := flag.NewFlagSet(cmd, flag.ExitOnError)
		in := fs.String("in", "", "the bench run's rows (bench -json FILE)")
		out := fs.String("out", "docs/performance-bench.md", "the Markdown to write")
		_ = fs.Parse(args)
		err = bench(*in, *out)
	default:
		fmt.Fprintf(os.Stderr, "pictures: unknown command %q (screenshots, figures, bench)\n", cmd)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "pictures:", err)
		os.Exit(1)
	}
}

func figures(in, out string) error {
	if in == "" {
		return fmt.Errorf("figures: -in is required")
	}
	f, err := footprint.ReadFigures(in)
	if err != nil {
		return err
	}
	return write(out, func(w io.Writer) error { return pictures.WriteFigures(w, f) })
}

func bench(in, out string) error {
	if in == "" {
		return fmt.Errorf("bench: -in is required")
	}
	rows, err := pictures.ReadBench(in)
	if err != nil {
		return err
	}
	return write(out, func(w io.Writer) error { return pictures.WriteBench(w, rows, pictures.Machine()) })
}

// write creates out and writes it with fn.
func write(out string, fn func(io.Writer) error) error {
	w, err := os.Create(out)
	if err != nil {
		return err
	}
	if err := fn(w); err != nil {
		_ = w.Close()
		return err
	}
	return w.Close()
}
