// Command sink serves the demo webhook sink (dev/demo) as its own
// process on loopback, as a real destination runs: it answers deliveries at
// POST /deliver with 204 and counts them per event and recipient, and
// serves its counts at GET /stats (?event=ID) and POST /stats/events. The
// dev stack starts it for `task dev` and the bench (stack.Options.SinkProcess).
// With -verify TYPE=FILE it checks the Standard Webhooks signature of every
// delivery of that event type with the secret(s) in FILE, as that type's
// receiver does (demo.Sink.Verify).
//
//	go run ./dev/cmd/sink -addr 127.0.0.1:8091 [-verify new_post=secrets/new_post-signing]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/fanout/fanout/dev/demo"
	"github.com/fanout/fanout/internal/config"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8091", "loopback address to serve on")
	pprofAddr := flag.String("pprof", "", "loopback address to serve net/http/pprof on (empty: off)")
	sink := demo.NewSink()
	flag.Func("verify", "TYPE=FILE: check the signature of every delivery of event type TYPE with the Standard Webhooks secrets in FILE (one per line); repeat for each type", func(v string) error {
		typ, file, ok := strings.Cut(v, "=")
		if !ok || typ == "" || file == "" {
			return errors.New("want TYPE=FILE")
		}
		sec, err := config.ReadSecretFile("-verify "+typ, file)
		if err != nil {
			return err
		}
		return sink.Verify(typ, config.SecretList(sec)...)
	})
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(log, sink, *addr, *pprofAddr); err != nil {
		log.Error("sink stopped", "err", err)
		os.Exit(1)
	}
}

func run(log *slog.Logger, sink *demo.Sink, addr, pprofAddr string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ln, err := listenLoopback(addr)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	sink.Routes(mux)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 2 * time.Minute}
	if pprofAddr != "" {
		if err := servePprof(log, pprofAddr); err != nil {
			return err
		}
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	log.Info("sink serving", "url", "http://"+ln.Addr().String())
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}

// listenLoopback listens on addr, which must be a loopback address: the
// demo sink counts whatever it is sent and is no service for a network.
func listenLoopback(addr string) (net.Listener, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	if ip, err := netip.ParseAddr(host); host != "localhost" && (err != nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("address %q: want 127.0.0.1, ::1 or localhost", addr)
	}
	return net.Listen("tcp", addr)
}

// servePprof serves the profiles on their own loopback listener, away from
// the sink's mux.
func servePprof(log *slog.Logger, addr string) error {
	ln, err := listenLoopback(addr)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	go func() {
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		log.Warn("pprof stopped", "err", srv.Serve(ln))
	}()
	return nil
}
