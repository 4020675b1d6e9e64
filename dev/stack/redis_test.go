//go:build integration

package stack

import (
	"context"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"
)

// StartRedis on a port another process holds fails with ErrRedisExited
// (which Stack.startRedis retries on another port) instead of taking the
// other process, here an HTTP server as the dev server's, for Redis.
func TestStartRedisPortTaken(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.NotFoundHandler(), ReadHeaderTimeout: time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	port := ln.Addr().(*net.TCPAddr).Port
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, addr, err := StartRedis(ctx, port, "", filepath.Join(t.TempDir(), "redis.log"), nil)
	if err == nil {
		p.Kill()
		t.Fatalf("StartRedis on a taken port answered %s", addr)
	}
	if !errors.Is(err, ErrRedisExited) {
		t.Fatalf("StartRedis on a taken port: %v, want ErrRedisExited", err)
	}
}
