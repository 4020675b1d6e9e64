package activities

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/fanout/fanout"
)

// TestNotSent: only errors that prove the request never left are retried at
// most once. Each error comes from a real call on loopback.
func TestNotSent(t *testing.T) {
	client := &http.Client{Timeout: 2 * time.Second}
	post := func(url string) error {
		resp, err := client.Post(url, "text/plain", strings.NewReader("x"))
		if err == nil {
			_ = resp.Body.Close()
		}
		return err
	}
	// A port nothing listens on: connection refused.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + l.Addr().String()
	_ = l.Close()
	// A server that reads the request and drops the connection.
	drop := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if c, _, err := http.NewResponseController(w).Hijack(); err == nil {
			_ = c.Close()
		}
	}))
	defer drop.Close()
	// A server slower than the caller's deadline.
	slow := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { time.Sleep(300 * time.Millisecond) }))
	defer slow.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, slow.URL, strings.NewReader("x"))
	_, timeoutErr := client.Do(req)

	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"connection refused", post(closed), true},
		{"refused, wrapped by a handler", fmt.Errorf("deliver: %w", post(closed)), true},
		{"marked NotSent", fanout.NotSent(errors.New("rejected by the client library")), true},
		{"dropped after the request was read", post(drop.URL), false},
		{"timed out waiting for the answer", timeoutErr, false},
		{"an HTTP 500", errors.New("HTTP 500"), false},
		{"retry after", fanout.RetryAfter(time.Second, errors.New("HTTP 429")), false},
	} {
		if c.err == nil {
			t.Fatalf("%s: no error", c.name)
		}
		if got := notSent(c.err); got != c.want {
			t.Errorf("%s (%v): notSent = %v, want %v", c.name, c.err, got, c.want)
		}
	}
}
