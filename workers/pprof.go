package workers

import (
	"net/http"
	"net/http/pprof"
	"time"
)

// The pprof server's timeouts: a slow or stalled client is dropped; a
// response may take a CPU or trace profile's seconds (30 by default) and
// its writing.
const (
	pprofReadHeaderTimeout = 5 * time.Second
	pprofReadTimeout       = 10 * time.Second
	pprofWriteTimeout      = 2 * time.Minute
	pprofIdleTimeout       = 2 * time.Minute
)

// pprofServer serves net/http/pprof on addr (FANOUT_PPROF_ADDR, which the
// configuration holds to loopback), from its own mux, with timeouts.
func pprofServer(addr string) *http.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: pprofReadHeaderTimeout, ReadTimeout: pprofReadTimeout,
		WriteTimeout: pprofWriteTimeout, IdleTimeout: pprofIdleTimeout, MaxHeaderBytes: 64 << 10}
}
