// Command demo serves the demo recipients endpoint and webhook sink
// (dev/demo) for the image, so that `docker compose up` (deploy/compose.yaml)
// delivers out of the box:
//
//	demo recipients -addr :8080 -deliver-url http://sink:8091/deliver
//	demo sink -addr :8091
//
// recipients answers the stock webhook type's POST /recipients with pages of
// a synthetic audience (the event payload's "audience": N recipients r0 ..
// rN-1), each recipient's address being -deliver-url. sink answers
// deliveries at POST /deliver with 204 and counts them per event and
// recipient, its counts at GET /stats (?event=ID). Both are demos: they
// serve anyone who reaches them, so publish their ports on loopback only.
// dev/cmd/sink is the sink the dev stack runs on loopback.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/fanout/fanout/dev/demo"
)

const usage = `usage: demo recipients [-addr :8080] -deliver-url URL
       demo sink [-addr :8091]`

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(os.Args[1:], log); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(2)
	}
}

func run(args []string, log *slog.Logger) error {
	if len(args) == 0 {
		return errors.New(usage)
	}
	mode := args[0]
	fs := flag.NewFlagSet("demo "+mode, flag.ContinueOnError)
	var addr, deliverURL string
	switch mode {
	case "recipients":
		fs.StringVar(&addr, "addr", ":8080", "address to serve POST /recipients on")
		fs.StringVar(&deliverURL, "deliver-url", "", "every recipient's address: the sink's /deliver URL")
	case "sink":
		fs.StringVar(&addr, "addr", ":8091", "address to serve POST /deliver and GET /stats on")
	default:
		return fmt.Errorf("unknown mode %q\n%s", mode, usage)
	}
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	h, err := handler(mode, deliverURL)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	log.Info("demo serving", "mode", mode, "addr", ln.Addr().String())
	return serve(ln, h)
}

// handler is the mode's handler: the recipients source or the sink.
func handler(mode, deliverURL string) (http.Handler, error) {
	if mode == "sink" {
		mux := http.NewServeMux()
		demo.NewSink().Routes(mux)
		return mux, nil
	}
	u, err := url.Parse(deliverURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("-deliver-url %q: want an http(s) URL, the sink's /deliver", deliverURL)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /recipients", &demo.Source{DeliverURL: deliverURL})
	return mux, nil
}

// serve serves h on ln until SIGINT or SIGTERM, then shuts down.
func serve(ln net.Listener, h http.Handler) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 2 * time.Minute}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Shutdown(sctx)
}
