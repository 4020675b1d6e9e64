package stack

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/fanout/fanout/dev/demo"
	"github.com/fanout/fanout/internal/config"
	"go.temporal.io/sdk/client"
)

// demoHandler starts the sink (in this process, or as the "sink" process
// with Options.SinkProcess) and returns the handler of the demo server at
// DemoURL: the recipients source, whose recipients' address is the sink,
// and the in-process sink when there is one.
func (s *Stack) demoHandler(ctx context.Context) (http.Handler, error) {
	if !s.opts.SinkProcess {
		s.Sink = demo.NewSink()
		for _, typ := range slices.Sorted(maps.Keys(s.opts.SinkVerify)) {
			sec, err := config.ReadSecretFile("sink verify "+typ, s.opts.SinkVerify[typ])
			if err != nil {
				return nil, err
			}
			if err := s.Sink.Verify(typ, config.SecretList(sec)...); err != nil {
				return nil, err
			}
		}
		s.SinkURL = s.DemoURL
		s.SinkClient = demo.NewSinkClient(s.SinkURL)
		return demo.Mux(&demo.Source{DeliverURL: s.SinkURL + "/deliver"}, s.Sink), nil
	}
	if err := s.startSink(ctx); err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("POST /recipients", &demo.Source{DeliverURL: s.SinkURL + "/deliver"})
	return mux, nil
}

// startSink builds and starts the sink process on Options.SinkPort (or a
// free port) and waits until it answers.
func (s *Stack) startSink(ctx context.Context) error {
	port := s.opts.SinkPort
	if port == 0 {
		var err error
		if port, err = FreePort(); err != nil {
			return err
		}
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	spec := procSpec{bin: filepath.Join(s.Bin, "sink"), args: []string{"-addr", addr}}
	if s.opts.SinkPprof != "" {
		spec.args = append(spec.args, "-pprof", s.opts.SinkPprof)
	}
	for _, typ := range slices.Sorted(maps.Keys(s.opts.SinkVerify)) {
		spec.args = append(spec.args, "-verify", typ+"="+s.opts.SinkVerify[typ])
	}
	if err := s.startProc("sink", spec); err != nil {
		return err
	}
	s.SinkURL = "http://" + addr
	s.SinkClient = demo.NewSinkClient(s.SinkURL)
	return s.waitSink(ctx)
}

// waitSink waits (at most 30 s) until the sink process answers its stats.
func (s *Stack) waitSink(ctx context.Context) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if s.Proc("sink").Exited() {
			return fmt.Errorf("sink exited during start-up (see %s)", s.LogPath("sink"))
		}
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := s.SinkClient.Totals(cctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("sink at %s not ready after 30s", s.SinkURL)
}

// SwitchTemporal stops the dev server and starts it again on the same port,
// stock (plain `temporal server start-dev --db-filename`, on a fresh
// temporal-stock.db, as a user would start it) or tuned (the stack's flags,
// on its own temporal.db). Workers, bridges and clients reconnect by
// themselves; the search attributes are registered as `starter setup` does.
func (s *Stack) SwitchTemporal(ctx context.Context, stock bool) error {
	s.Proc("temporal").Stop(10 * time.Second)
	s.stock = stock
	if stock && !s.opts.InMemory {
		// A fresh database: what a new user starts with, and no state of an
		// earlier stock run to replay.
		base := filepath.Join(s.Dir, "temporal-stock.db")
		for _, f := range []string{base, base + "-wal", base + "-shm", base + "-journal"} {
			if err := os.Remove(f); err != nil && !os.IsNotExist(err) {
				return err
			}
		}
	}
	if err := s.startTemporal(ctx); err != nil {
		return err
	}
	return s.waitClient(ctx)
}

// waitClient waits (30 s at most) until the stack's Temporal client answers
// again: after a server restart its connection is in gRPC's reconnect
// backoff for a while, and the first calls fail with "connection refused".
func (s *Stack) waitClient(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		_, err := s.TC.CheckHealth(ctx, &client.CheckHealthRequest{})
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the Temporal client did not reconnect after the restart: %w", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
