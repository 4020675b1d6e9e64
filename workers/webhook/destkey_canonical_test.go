package webhook

import (
	"testing"

	"github.com/fanout/fanout"
)

// TestDestinationKeyIsCanonical (issue 23, item 14): the addresses of one
// destination share one key (one limit, one breaker): the host in any case,
// with or without its trailing dot, with or without the scheme's default
// port; another port, or the other scheme's default port, is another one.
func TestDestinationKeyIsCanonical(t *testing.T) {
	var h Handler
	key := func(addr string) string { return h.DestinationKey(fanout.Recipient{ID: "r", Address: addr}) }
	for want, addrs := range map[string][]string{
		"h.example.com":      {"https://h.example.com/x", "https://h.example.com./x", "https://h.example.com:443/x", "HTTPS://H.Example.COM.:443", "https://h.example.com:0443/", "http://h.example.com:80/", "http://user@h.example.com.:80/x"},
		"h.example.com:8443": {"https://h.example.com:8443/", "https://h.example.com.:8443/"},
		"h.example.com:443":  {"http://h.example.com:443/"},
		"[::1]":              {"https://[::1]:443/", "http://[::1]/"},
	} {
		for _, addr := range addrs {
			if got := key(addr); got != want {
				t.Errorf("DestinationKey(%q) = %q, want %q", addr, got, want)
			}
		}
	}
}
