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
