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
		return err
	}
	var paths []string
	for _, f := range files {
		m, err := filepath.Glob(f)
		if err != nil {
			return fmt.Errorf("replay: -file %q: %w", f, err)
		}
		if len(m) == 0 {
			return cli.Usagef("-file %q: no such file", f)
		}
		paths = append(paths, m...)
	}
	fromCluster := *query != "" || (*wfID != "" && len(paths) == 0)
	if len(paths) == 0 && len(dirs) == 0 && !fromCluster {
		return cli.Usagef("give -file, -dir, -query or -workflow-id")
	}
	if (*wfID != "" || *runID != "") && len(paths) > 1 {
		return cli.Usagef("-workflow-id/-run-id go with a single -file")
	}
	if *runID != "" && *wfID == "" && len(paths) == 0 {
		return cli.Usagef("-run-id needs -workflow-id")
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
	var hs []replay.History
	for _, p := range paths {
		h, err := replay.LoadFile(p, *wfID, *runID, opts...)
		if err != nil {
			return fmt.Errorf("replay: %w", err)
		}
		hs = append(hs, h)
	}
	for _, d := range dirs {
		dh, err := replay.LoadDir(d, opts...)
		if err != nil {
			return fmt.Errorf("replay: %w", err)
		}
		hs = append(hs, dh...)
	}
	if fromCluster {
		tc, err := config.DialTemporal(ctx, config.Logger("warn"))
		if err != nil {
			return err
		}
		defer tc.Close()
		if *query != "" {
			qh, err := replay.LoadQuery(ctx, tc, *query, *limit, opts...)
			if err != nil {
				return fmt.Errorf("replay: %w", err)
			}
			if len(qh) == 0 {
				fmt.Printf("replay: no execution matches %q\n", *query)
			}
			hs = append(hs, qh...)
		}
		if *wfID != "" && len(paths) == 0 {
			h, err := replay.LoadExecution(ctx, tc, *wfID, *runID, opts...)
			if err != nil {
				return fmt.Errorf("replay: %w", err)
			}
			hs = append(hs, h)
		}
	}

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
