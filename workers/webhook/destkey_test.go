package webhook

import (
	"testing"

	"github.com/fanout/fanout"
)

// TestDestinationKey: the destination is the address's host and port,
// lower-case; path, query and user information never reach the key.
func TestDestinationKey(t *testing.T) {
	var h Handler
	var _ fanout.DestinationKeyer = &h
	for addr, want := range map[string]string{
		"https://Hooks.Example.COM/a/secret?token=x": "hooks.example.com",
		"http://127.0.0.1:8080/hook":                 "127.0.0.1:8080",
		"http://user:pw@[::1]:9/x":                   "[::1]:9",
		"not a url":                                  "invalid",
		"http://%zz":                                 "invalid",
		"":                                           "invalid",
	} {
		if got := h.DestinationKey(fanout.Recipient{ID: "r", Address: addr}); got != want {
			t.Errorf("DestinationKey(%q) = %q, want %q", addr, got, want)
		}
	}
}

// TestPlainHostTakesTheCommonAddresses: the addresses of the common case
// are read without url.Parse.
func TestPlainHostTakesTheCommonAddresses(t *testing.T) {
	for addr, want := range map[string]string{
		"https://Hooks.Example.COM/a/secret?token=x": "Hooks.Example.COM",
		"http://127.0.0.1:8080/hook":                 "127.0.0.1:8080",
		"HTTP://sink:80":                             "sink:80",
		"http://a?x/y#z":                             "a",
	} {
		if got, ok := plainHost(addr); !ok || got != want {
			t.Errorf("plainHost(%q) = %q, %v; want %q", addr, got, ok, want)
		}
	}
	for _, addr := range []string{"http://user:pw@[::1]:9/x", "http://%zz", "http://a/%zz", "http://a:b/", "ftp://a/", "http:///x", "http://:80/", "http://a/ b"} {
		if host, ok := plainHost(addr); ok {
			t.Errorf("plainHost(%q) = %q, want it left to url.Parse", addr, host)
		}
	}
}

// FuzzDestinationKey: the key of any address is the one url.Parse gives
// (the fast path never disagrees with it).
func FuzzDestinationKey(f *testing.F) {
	for _, s := range []string{"https://Hooks.Example.COM/a/secret?token=x", "http://127.0.0.1:8080/hook",
		"http://user:pw@[::1]:9/x", "not a url", "http://%zz", "http://a/%zz", "http://a:/", "http://a:1:2/",
		"http://a\x7f/", "http://a/\x00", "http://a#%zz", "http://a?%zz", "HTTPS://x_y~z.-:0099", "http://a:9x/"} {
		f.Add(s)
	}
	var h Handler
	f.Fuzz(func(t *testing.T, addr string) {
		if got, want := h.DestinationKey(fanout.Recipient{ID: "r", Address: addr}), parsedHost(addr); got != want {
			t.Fatalf("DestinationKey(%q) = %q, url.Parse says %q", addr, got, want)
		}
	})
}
