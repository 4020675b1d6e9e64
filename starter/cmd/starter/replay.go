package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/fanout/fanout/internal/cli"
	"github.com/fanout/fanout/internal/config"
	"github.com/fanout/fanout/workflows/replay"
)

// multiFlag is a repeatable string flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// runReplay replays workflow histories against the workflow code built into
// this binary and reports, per history, OK or the non-determinism. It fails
// (exit status 1) when any history fails.
//
//	starter replay -dir workflows/testdata/histories
//	starter replay -file 'exported/*.json'
//	starter replay -file h.json -workflow-id fanout/webhook/e1 -run-id RUN
//	starter replay -query "WorkflowType='Fanout' AND ExecutionStatus='Running'"
//	starter replay -workflow-id fanout/webhook/e1            (latest run, from the cluster)
func runReplay(ctx context.Context, args []string) error {
	f, err := parseReplayFlags(args)
	if err != nil {
		return err
	}
	// Histories of workers that encrypt (FANOUT_CODEC_KEYS) replay with
	// the same keys; histories in clear replay either way.
	keys, err := config.LoadKeyring()
	if err != nil {
		return err
	}
	var opts []replay.Option
	if keys != nil {
		opts = append(opts, replay.WithDataConverter(keys.DataConverter()))
	}
	hs, err := f.load(ctx, opts)
	if err != nil {
		return err
	}
	return replayAndReport(ctx, opts, hs)
}

// replayFlags are the histories a replay is asked for: paths (the -file
// patterns expanded), dirs, and executions of the cluster when fromCluster.
type replayFlags struct {
	paths, dirs []string
	query       string
	limit       int
	wfID, runID string
	fromCluster bool
}

// parseReplayFlags parses the replay command's flags, expands the -file
// patterns and checks that the flags go together.
func parseReplayFlags(args []string) (replayFlags, error) {
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	var files, dirs multiFlag
	fs.Var(&files, "file", "history exported with `temporal workflow show --output json` (repeatable; a glob pattern is expanded)")
	fs.Var(&dirs, "dir", "directory of exported histories, with an optional index.json giving their executions (repeatable)")
	query := fs.String("query", "", "visibility query selecting executions to fetch from the cluster (TEMPORAL_* settings), e.g. \"WorkflowType='Fanout'\"")
	limit := fs.Int("limit", 1000, "with -query: replay at most this many executions (0: all)")
	wfID := fs.String("workflow-id", "", "workflow id of the single -file (needed when its children's ids and input do not tell it); without -file: fetch this execution from the cluster")
	runID := fs.String("run-id", "", "run id of the single -file, or of the execution to fetch (default: its latest run)")
	h := cli.Help{Name: "starter replay", Args: "-file F | -dir D | -query Q | -workflow-id ID [flags]", Summary: `starter replay replays workflow histories against the workflow code built into this binary and
prints, per history, OK or the non-determinism; it exits 1 when any fails (replay them before a
rollout). Histories come from files exported with 'temporal workflow show --output json', or
from the cluster (-query, -workflow-id: TEMPORAL_*). Encrypted histories replay with the codec keys.`,
		Env: []cli.EnvGroup{cli.TemporalGroup()}}
	if err := cli.Parse(fs, args, h, false); err != nil {
		return replayFlags{}, err
	}
	f := replayFlags{dirs: dirs, query: *query, limit: *limit, wfID: *wfID, runID: *runID}
	for _, p := range files {
		m, err := filepath.Glob(p)
		if err != nil {
			return replayFlags{}, fmt.Errorf("replay: -file %q: %w", p, err)
		}
		if len(m) == 0 {
			return replayFlags{}, cli.Usagef("-file %q: no such file", p)
		}
		f.paths = append(f.paths, m...)
	}
	f.fromCluster = f.query != "" || (f.wfID != "" && len(f.paths) == 0)
	if len(f.paths) == 0 && len(f.dirs) == 0 && !f.fromCluster {
		return replayFlags{}, cli.Usagef("give -file, -dir, -query or -workflow-id")
	}
	if (f.wfID != "" || f.runID != "") && len(f.paths) > 1 {
		return replayFlags{}, cli.Usagef("-workflow-id/-run-id go with a single -file")
	}
	if f.runID != "" && f.wfID == "" && len(f.paths) == 0 {
		return replayFlags{}, cli.Usagef("-run-id needs -workflow-id")
	}
	return f, nil
}

// load reads the histories of the files, then of the directories, then
// those fetched from the cluster.
func (f replayFlags) load(ctx context.Context, opts []replay.Option) ([]replay.History, error) {
	var hs []replay.History
	for _, p := range f.paths {
		h, err := replay.LoadFile(p, f.wfID, f.runID, opts...)
		if err != nil {
			return nil, fmt.Errorf("replay: %w", err)
		}
		hs = append(hs, h)
	}
	for _, d := range f.dirs {
		dh, err := replay.LoadDir(d, opts...)
		if err != nil {
			return nil, fmt.Errorf("replay: %w", err)
		}
		hs = append(hs, dh...)
	}
	if !f.fromCluster {
		return hs, nil
	}
	ch, err := f.loadFromCluster(ctx, opts)
	return append(hs, ch...), err
}

// loadFromCluster fetches the executions -query selects, then the one
// -workflow-id names (without -file).
func (f replayFlags) loadFromCluster(ctx context.Context, opts []replay.Option) ([]replay.History, error) {
	tc, err := config.DialTemporal(ctx, config.Logger("warn"))
	if err != nil {
		return nil, err
	}
	defer tc.Close()
	var hs []replay.History
	if f.query != "" {
		qh, err := replay.LoadQuery(ctx, tc, f.query, f.limit, opts...)
		if err != nil {
			return nil, fmt.Errorf("replay: %w", err)
		}
		if len(qh) == 0 {
			fmt.Printf("replay: no execution matches %q\n", f.query)
		}
		hs = append(hs, qh...)
	}
	if f.wfID != "" && len(f.paths) == 0 {
		h, err := replay.LoadExecution(ctx, tc, f.wfID, f.runID, opts...)
		if err != nil {
			return nil, fmt.Errorf("replay: %w", err)
		}
		hs = append(hs, h)
	}
	return hs, nil
}

// replayAndReport replays the histories and prints OK or the
// non-determinism of each, then the totals; it fails when any history
// fails or the replay stopped.
func replayAndReport(ctx context.Context, opts []replay.Option, hs []replay.History) error {
	results, rerr := replay.ReplayWith(ctx, replay.NewReplayer(opts...), nil, hs...)
	failed := 0
	for _, r := range results {
		what := fmt.Sprintf("%s %s run %s, %d events", r.WorkflowType, r.WorkflowID, r.RunID, len(r.History.History.GetEvents()))
		if r.Err != nil {
			failed++
			fmt.Printf("FAIL  %s (%s)\n      %v\n", r.Name, what, r.Err)
			continue
		}
		fmt.Printf("OK    %s (%s)\n", r.Name, what)
	}
	fmt.Printf("replay: %d histories, %d OK, %d failed\n", len(results), len(results)-failed, failed)
	if rerr != nil {
		if failed == 0 {
			return fmt.Errorf("replay: %w", rerr) // e.g. interrupted
		}
		fmt.Fprintln(os.Stderr, "A failure means the current workflow code would not continue those executions: version the change (workflow.GetVersion) or keep the old code path.")
		return fmt.Errorf("replay: %d of %d histories failed", failed, len(results))
	}
	return nil
}
