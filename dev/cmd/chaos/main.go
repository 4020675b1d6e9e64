// Command chaos runs fanout's fault suite (`go tool task chaos`): each
// scenario of dev/chaos on a fresh real stack, then a table of
// recipients expected, delivered, missing and duplicated per scenario. It
// exits 1 when a recipient is missing or duplicates exceed what the scenario
// allows (scenarios 1, 4, 5: the deliveries in flight at the faults; the
// others: none). The at-most-once scenarios (11, 12) fail instead on any
// duplicate, or on a missing recipient that was not in flight at a fault.
//
//	go run ./dev/cmd/chaos [-only 1,3,7] [-scale 1.0] [-json FILE] [-dir DIR]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/fanout/fanout/dev/chaos"
)

func main() {
	code, err := run()
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
	}
	os.Exit(code)
}

func run() (int, error) {
	jsonPath := flag.String("json", "", "write the reports as a JSON array to `FILE`")
	only := flag.String("only", "", "comma-separated scenario numbers to run (default: all)")
	scale := flag.Float64("scale", 1.0, "multiply the scenario sizes (1.0: 50,000 recipients for scenario 1)")
	dir := flag.String("dir", "", "keep every scenario's stack (logs, databases) under `DIR` (default: a temporary directory, kept only for failed scenarios)")
	timeout := flag.Duration("timeout", 0, "bound on each scenario (default: 10m, scaled)")
	flag.Parse()
	if *scale <= 0 {
		return 2, fmt.Errorf("-scale must be positive")
	}

	var selected []chaos.Scenario
	if *only == "" {
		selected = chaos.Scenarios
	} else {
		for _, f := range strings.Split(*only, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil {
				return 2, fmt.Errorf("-only: %q is not a scenario number", f)
			}
			sc, ok := chaos.ByNumber(n)
			if !ok {
				return 2, fmt.Errorf("-only: no scenario %d (1..%d)", n, len(chaos.Scenarios))
			}
			selected = append(selected, sc)
		}
	}

	keepAll := *dir != ""
	base := *dir
	if base == "" {
		var err error
		if base, err = os.MkdirTemp("", "fanout-chaos-"); err != nil {
			return 1, err
		}
	}
	if *timeout == 0 {
		*timeout = time.Duration(float64(chaos.DefaultTimeout) * max(1, *scale))
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	o := chaos.Options{Log: os.Stdout, Dir: base, Timeout: *timeout}
	var reports []chaos.Report
	var failed []string
	for _, sc := range selected {
		size := chaos.Scaled(sc.Size, *scale, 10)
		r, err := sc.Run(ctx, o, size)
		probs := sc.Problems(r)
		if err != nil {
			probs = append([]string{err.Error()}, probs...)
		}
		reports = append(reports, r)
		scDir := fmt.Sprintf("%s/%d", base, sc.N)
		if len(probs) > 0 {
			failed = append(failed, fmt.Sprintf("scenario %d: %s (logs in %s)", sc.N, strings.Join(probs, "; "), scDir))
		} else if !keepAll {
			_ = os.RemoveAll(scDir)
		}
		if ctx.Err() != nil {
			break
		}
	}
	if len(failed) == 0 && !keepAll {
		_ = os.RemoveAll(base)
	}

	fmt.Println()
	printTable(os.Stdout, reports)
	if *jsonPath != "" {
		b, err := json.MarshalIndent(reports, "", "  ")
		if err != nil {
			return 1, err
		}
		if err := os.WriteFile(*jsonPath, append(b, '\n'), 0o644); err != nil {
			return 1, err
		}
	}
	if ctx.Err() != nil {
		return 1, fmt.Errorf("interrupted")
	}
	if len(failed) > 0 {
		fmt.Println()
		for _, f := range failed {
			fmt.Println("FAIL", f)
		}
		return 1, nil
	}
	fmt.Println("\nall scenarios passed: nothing missing, duplicates within bounds (at most once: no duplicate, missing only what was in flight)")
	return 0, nil
}

func printTable(w io.Writer, reports []chaos.Report) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "scenario\texpected\tdelivered\tmissing\tduplicated\tin flight at kills\tdead-lettered\tunconfirmed\tredriven\tseconds\tnotes\t")
	for _, r := range reports {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%.1f\t%s\t\n",
			r.Scenario, r.Expected, r.Delivered, r.Missing, r.Duplicated, r.InFlightAtKills, r.DeadLettered, r.Unconfirmed, r.Redriven, r.Seconds, r.Notes)
	}
	_ = tw.Flush()
}
