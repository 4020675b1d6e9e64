// Command bench measures fanout on the real stack on this machine (go tool
// task bench): the temporal dev server, kfake, redis-server, the project's
// worker and bridge processes and the loopback HTTP sink as its own process
// (dev/cmd/sink), as a real destination runs. It prints one row
// per scenario, then the CPU each process spent per delivery in heavy,
// heavy-stock and the floor, and writes the same numbers to -json FILE and
// a plot of them to -plot FILE (SVG).
// Ratios are measured side by side in one run; nothing here asserts a
// speed.
//
// Scenarios (-only picks some): heavy, floor, heavy-stock, light,
// light-burst, noop-burst, light-relative, noop-relative, isolation,
// isolation-relative, slow, fairness, scaling, dedup; opt-in: huge (one
// event of 5,000,000 recipients) and heavy-file (heavy's event with an
// event type defined in a types file, four runs alternating with the
// environment's webhook type, both signed; its ratio is file/webhook).
//
//	go tool task bench
//	go tool task bench -- -quick -json out.json
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/fanout/fanout/dev/stack"
)

// Row is one scenario's result.
type Row struct {
	Scenario         string             `json:"scenario"`
	Size             int                `json:"size"`
	Seconds          float64            `json:"seconds"`
	DeliveriesPerSec float64            `json:"deliveries_per_sec,omitempty"`
	EventsPerSec     float64            `json:"events_per_sec,omitempty"`
	P50Ms            float64            `json:"p50_ms,omitempty"`
	P99Ms            float64            `json:"p99_ms,omitempty"`
	Ratio            float64            `json:"ratio,omitempty"`
	RatioOf          string             `json:"ratio_of,omitempty"`
	PeakRSSMB        map[string]float64 `json:"peak_rss_mb,omitempty"`
	// CPUSeconds each process spent during the scenario: where the time goes.
	CPUSeconds map[string]float64 `json:"cpu_seconds,omitempty"`
	// CPUUsPerDelivery is each process's CPU per delivery in microseconds
	// (heavy runs: every process, sink, Temporal, Redis, workers and this
	// one with the broker; the floor: its client and the sink), and
	// CPUUsPerDeliveryTotal their sum: a cost that, unlike deliveries/s,
	// does not move with whatever else shares the machine.
	CPUUsPerDelivery      map[string]float64 `json:"cpu_us_per_delivery,omitempty"`
	CPUUsPerDeliveryTotal float64            `json:"cpu_us_per_delivery_total,omitempty"`
	// TemporalMsPerEvent is the Temporal server's CPU per event
	// (milliseconds), for the scenarios of small events;
	// TemporalMsPer1000 its CPU per 1,000 deliveries, for every scenario
	// that delivers through fanout.
	TemporalMsPerEvent float64 `json:"temporal_ms_per_event,omitempty"`
	TemporalMsPer1000  float64 `json:"temporal_ms_per_1000_deliveries,omitempty"`
	// CPURatio is a total CPU per delivery divided by the floor's.
	CPURatio   float64 `json:"cpu_ratio,omitempty"`
	CPURatioOf string  `json:"cpu_ratio_of,omitempty"`
	// SinkTimeWait counts the TCP sockets in TIME_WAIT towards the sink
	// after the scenario, SinkTimeWaitPeak the most seen during it (sampled
	// every 2 s) and SinkTimeWaitBefore those left from earlier scenarios
	// (a socket stays in TIME_WAIT for a minute): connections closed
	// instead of reused.
	SinkTimeWait       *int   `json:"sink_time_wait,omitempty"`
	SinkTimeWaitPeak   *int   `json:"sink_time_wait_peak,omitempty"`
	SinkTimeWaitBefore *int   `json:"sink_time_wait_before,omitempty"`
	Notes              string `json:"notes,omitempty"`
}

// Sizes of the scenarios at scale 1.
type sizes struct {
	heavy        int // recipients of the heavy event
	heavyStock   int // recipients of heavy-stock's event
	huge         int // recipients of the opt-in huge event
	lightEvents  int
	lightAud     int
	lightRate    float64 // events/s published in the paced light run
	isoRate      float64 // events/s published in the isolation scenario
	scaling      int     // recipients per scaling run
	scaleDelay   time.Duration
	isolationAud int // heavy event running under the isolation scenario
	slow         int // recipients of the slow scenario's event
	fairBig      int // recipients of each big event in fairness
	fairSmall    int // recipients of fairness's small events
}

func fullSizes() sizes {
	return sizes{huge: 5_000_000, heavy: 1_000_000, heavyStock: 200_000, lightEvents: 2000, lightAud: 20, lightRate: 100, isoRate: 50, scaling: 40_000, scaleDelay: 25 * time.Millisecond, isolationAud: 1_000_000,
		slow: 100_000, fairBig: 300_000, fairSmall: 2000}
}

func (s sizes) scaled(f float64) sizes {
	sc := func(n int) int { return max(int(float64(n)*f), 1) }
	s.heavy, s.heavyStock, s.lightEvents, s.scaling, s.isolationAud, s.huge = sc(s.heavy), sc(s.heavyStock), sc(s.lightEvents), sc(s.scaling), sc(s.isolationAud), sc(s.huge)
	s.slow, s.fairBig, s.fairSmall = sc(s.slow), sc(s.fairBig), sc(s.fairSmall)
	return s
}

var allScenarios = []string{"heavy", "floor", "heavy-stock", "light", "light-burst", "noop-burst", "light-relative", "noop-relative", "isolation", "isolation-relative", "slow", "fairness", "scaling", "dedup"}

// optInScenarios run only when named with -only: huge (5,000,000
// recipients) and heavy-file (four heavy runs, heavyFile).
var optInScenarios = []string{"huge", "heavy-file"}

func main() {
	quick := flag.Bool("quick", false, "every scenario at a tenth of the size")
	scale := flag.Float64("scale", 0, "every scenario at this fraction of the size (0.1 is -quick), e.g. 0.001 for a smoke run; not a measurement")
	jsonOut := flag.String("json", "", "write the rows as JSON to this file")
	plotOut := flag.String("plot", "", "write an SVG plot of the rows to this file (deliveries/s beside the floor, latency percentiles, scaling)")
	only := flag.String("only", "", "comma-separated scenarios (default all: "+strings.Join(allScenarios, ",")+"; opt-in: "+strings.Join(optInScenarios, ",")+"; heavy-file compares heavy's event of a types file's type with the environment's webhook type)")
	keep := flag.String("dir", "", "keep logs and state in this directory")
	lightRate := flag.Float64("light-rate", 100, "events/s published in the light scenario")
	isoRate := flag.Float64("isolation-rate", 50, "events/s published in the isolation scenario, alone and beside the heavy event (below light's rate: at 100/s the light scenario alone keeps both cores ~90% busy)")
	separateBridge := flag.Bool("separate-bridge", false, "run the bridge as its own process (`starter bridge`, ordinary starts) instead of inside the events worker (FANOUT_BRIDGE=true, eager starts)")
	secure := flag.Bool("secure", false, "run with payload encryption (a generated AES-256-GCM key for Temporal payloads, staged batches and dead letters) and Standard Webhooks signing on, to measure what they cost against a run without")
	temporalEnv := flag.String("temporal-env", "", "space-separated KEY=VALUE pairs added to the dev server's environment, after the stack's tuned runtime setting (stack.TemporalRuntimeEnv), e.g. \"GOMAXPROCS=2\": for experiments")
	temporalFlags := flag.String("temporal-flags", "", "space-separated flags added to the tuned dev server's, after the stack's own, e.g. \"--dynamic-config-value matching.enableFairness=false\": for experiments")
	niceLow := flag.Int("nice-low", 19, "niceness of the low-priority delivery worker (0: same CPU priority as everything else)")
	flag.Parse()
	sz := fullSizes()
	if *quick {
		sz = sz.scaled(0.1)
	}
	if *scale > 0 {
		sz = fullSizes().scaled(*scale)
	}
	sz.lightRate, sz.isoRate = *lightRate, *isoRate
	want := allScenarios
	if *only != "" {
		want = strings.Split(*only, ",")
		for _, w := range want {
			if !slices.Contains(allScenarios, w) && !slices.Contains(optInScenarios, w) {
				fmt.Fprintf(os.Stderr, "bench: unknown scenario %q (have %s)\n", w, strings.Join(allScenarios, ","))
				os.Exit(2)
			}
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rows, err := run(ctx, sz, want, *keep, *temporalEnv, *temporalFlags, *niceLow, *separateBridge, *secure, os.Stdout)
	printTable(os.Stdout, rows)
	if *jsonOut != "" {
		b, _ := json.MarshalIndent(rows, "", "  ")
		if werr := os.WriteFile(*jsonOut, append(b, '\n'), 0o644); werr != nil && err == nil {
			err = werr
		}
	}
	if *plotOut != "" && len(rows) > 0 {
		if perr := writePlot(*plotOut, rows); perr != nil && err == nil {
			err = perr
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, sz sizes, want []string, dir, temporalEnv, temporalFlags string, nice int, separateBridge, secure bool, out io.Writer) ([]Row, error) {
	fmt.Fprintln(out, "[bench] starting the stack (temporal dev server, redis-server, kfake, sink process, workers, bridge)...")
	// FANOUT_BENCH_ENV adds to every fanout process's environment,
	// temporalEnv (-temporal-env) to the dev server's, after its tuned
	// runtime setting, so that the same key overrides it.
	opts := stack.Options{Dir: dir, Log: out, Env: strings.Fields(os.Getenv("FANOUT_BENCH_ENV")), SinkProcess: true,
		TemporalEnv: strings.Fields(temporalEnv), TemporalFlags: strings.Fields(temporalFlags)}
	if secure {
		// Encryption everywhere (the stack's generated key reaches every
		// process) and every delivery signed.
		opts.Encrypt = true
		opts.Env = append(opts.Env, "FANOUT_WEBHOOK_SECRETS="+benchSigningSecret)
		fmt.Fprintln(out, "[bench] secure: payload encryption and webhook signing on")
	}
	if os.Getenv("FANOUT_BENCH_PPROF") != "" {
		// go tool pprof http://127.0.0.1:6063/debug/pprof/profile
		opts.SinkPprof = "127.0.0.1:6063"
	}
	st, err := stack.Start(ctx, opts)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	b := &bench{st: st, sz: sz, out: out, stamp: time.Now().UTC().Format("150405"), secure: secure}
	var env []string
	if slices.Contains(want, "heavy-file") {
		// heavy-file's type is served by the same processes as webhook.
		if b.typesFile, err = writeBenchTypes(st.Dir, st.DemoURL+"/recipients"); err != nil {
			return nil, err
		}
		env = append(env, "FANOUT_TYPES_FILE="+b.typesFile)
		fmt.Fprintf(out, "[bench] the workers serve the types file %s beside webhook (heavy-file)\n", b.typesFile)
	}
	if err := b.startWorkers(separateBridge, env...); err != nil {
		return nil, err
	}
	if nice != 0 {
		if err := st.Renice("delivery-low", nice); err != nil {
			return nil, err
		}
		fmt.Fprintf(out, "[bench] low-priority delivery worker at niceness %d\n", nice)
	}
	var rows []Row
	scenarios := map[string]func(context.Context) (Row, error){
		"heavy": b.heavy, "floor": b.floor, "heavy-stock": b.heavyStock, "light": b.lightPaced, "light-burst": b.lightBurst,
		"isolation": b.isolation, "slow": b.slow, "fairness": b.fairness, "scaling": b.scaling, "dedup": b.dedup, "huge": b.huge,
		"light-relative": b.lightRelative, "isolation-relative": b.isolationRelative,
		"noop-burst": b.noopBurst, "noop-relative": b.noopRelative, "heavy-file": b.heavyFile,
	}
	defer func() {
		if b.noopWorker != nil {
			b.noopWorker.Stop()
		}
	}()
	for _, name := range append(allScenarios, optInScenarios...) {
		if !slices.Contains(want, name) {
			continue
		}
		fmt.Fprintf(out, "[bench %s] running\n", name)
		start := time.Now()
		cpu0 := b.cpuTimes()
		row, err := scenarios[name](ctx)
		if row.CPUSeconds == nil {
			// Scenarios that measure their own window (heavy runs, the
			// floor) leave out their set-up.
			row.CPUSeconds = roundCPU(diffCPU(cpu0, b.cpuTimes()))
		}
		if err != nil {
			return rows, fmt.Errorf("%s: %w", name, err)
		}
		row.Scenario = name
		temporalCosts(&row)
		rows = append(rows, row)
		fmt.Fprintf(out, "[bench %s] done in %v\n", name, time.Since(start).Round(100*time.Millisecond))
	}
	floorRatios(rows)
	return rows, nil
}

// temporalCosts sets the Temporal server's CPU per event for the scenarios
// of small events alone, and per 1,000 deliveries for those and the ones
// of one big event (the isolation and scaling rows mix kinds, and the floor
// has no Temporal).
func temporalCosts(r *Row) {
	cpu, ok := r.CPUSeconds["temporal"]
	if !ok || r.Seconds <= 0 {
		return
	}
	small := slices.Contains([]string{"light", "light-burst", "light-relative", "noop-burst", "noop-relative"}, r.Scenario)
	if !small && !slices.Contains([]string{"heavy", "heavy-stock", "dedup", "huge", "heavy-file"}, r.Scenario) {
		return
	}
	if small {
		r.TemporalMsPerEvent = cpu * 1000 / float64(r.Size)
	}
	if deliveries := r.DeliveriesPerSec * r.Seconds; deliveries > 0 {
		r.TemporalMsPer1000 = cpu * 1e6 / deliveries
	}
}

// benchSigningSecret signs the deliveries of a -secure run (a bench-only
// secret: the sink does not check signatures).
const benchSigningSecret = "whsec_YmVuY2gtb25seS1zaWduaW5nLXNlY3JldC0zMmJ5dGU="

func printTable(w io.Writer, rows []Row) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "scenario\tsize\tseconds\tdeliveries/s\tevents/s\tp50 ms\tp99 ms\tratio\tTemporal CPU ms/event\tms/1000 deliveries\tCPU µs/delivery\tpeak RSS MB\tCPU s\tnotes")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%d\t%.1f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Scenario, r.Size, r.Seconds,
			num(r.DeliveriesPerSec), num(r.EventsPerSec), num(r.P50Ms), num(r.P99Ms), ratioOf(r.Ratio, r.RatioOf), dec(r.TemporalMsPerEvent), dec(r.TemporalMsPer1000),
			cpuCell(r), perProc(r.PeakRSSMB, "%.0f"), perProc(r.CPUSeconds, "%.1f"), r.Notes)
	}
	_ = tw.Flush()
	printCPUTable(w, rows)
}

func ratioOf(ratio float64, of string) string {
	if of == "" {
		return "-"
	}
	return fmt.Sprintf("%.2f (%s)", ratio, of)
}

func cpuCell(r Row) string {
	if r.CPUUsPerDeliveryTotal == 0 {
		return "-"
	}
	if r.CPURatioOf == "" {
		return fmt.Sprintf("%.0f", r.CPUUsPerDeliveryTotal)
	}
	return fmt.Sprintf("%.0f, %s", r.CPUUsPerDeliveryTotal, ratioOf(r.CPURatio, r.CPURatioOf))
}

// printCPUTable prints CPU µs per delivery by process (rows) and scenario
// (columns), for the scenarios that measured it.
func printCPUTable(w io.Writer, rows []Row) {
	var cols []Row
	procs := map[string]bool{}
	for _, r := range rows {
		if r.CPUUsPerDeliveryTotal > 0 {
			cols = append(cols, r)
			for p := range r.CPUUsPerDelivery {
				procs[p] = true
			}
		}
	}
	if len(cols) == 0 {
		return
	}
	names := slices.Sorted(maps.Keys(procs))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "\nCPU µs per delivery")
	fmt.Fprint(tw, "process\t")
	for _, c := range cols {
		fmt.Fprintf(tw, "%s\t", c.Scenario)
	}
	fmt.Fprintln(tw)
	for _, p := range append(names, "total") {
		fmt.Fprintf(tw, "%s\t", p)
		for _, c := range cols {
			v, ok := c.CPUUsPerDelivery[p]
			if p == "total" {
				v, ok = c.CPUUsPerDeliveryTotal, true
			}
			if ok {
				fmt.Fprintf(tw, "%.1f\t", v)
			} else {
				fmt.Fprint(tw, "-\t")
			}
		}
		fmt.Fprintln(tw)
	}
	_ = tw.Flush()
}

func dec(f float64) string {
	if f == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", f)
}

func num(f float64) string {
	if f == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f", f)
}

// perProc prints a value per process, sorted by process, in format f.
func perProc(m map[string]float64, f string) string {
	if len(m) == 0 {
		return "-"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + " " + fmt.Sprintf(f, m[k])
	}
	return strings.Join(parts, ", ")
}
