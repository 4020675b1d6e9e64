package config

import (
	"strings"
	"testing"
)

// TestRecipientsURLAllowEndsAtTheHostOrASlash: an allow entry is an origin
// (scheme, host, optional port) with an optional path ending in "/"; a
// string prefix that ends anywhere else (after the colon of a port, inside a
// path segment) or that carries user information, a query or a fragment is
// refused, naming the variable.
func TestRecipientsURLAllowEndsAtTheHostOrASlash(t *testing.T) {
	for _, bad := range []string{
		"http://127.0.0.1:",             // a prefix of every port
		"https://a.example.com/api",     // a prefix of /api-admin
		"http://u:p@127.0.0.1:9999",     // user information
		"https://a.example.com/?x=1",    // a query
		"https://a.example.com/#f",      // a fragment
		"https://a.example.com/a/../b/", // a dot segment
		"http://127.0.0.1:99999",        // not a port
		"ftp://a.example.com/",
		"http:///path/",
	} {
		t.Run(bad, func(t *testing.T) {
			clearFanoutEnv(t)
			t.Setenv("FANOUT_RECIPIENTS_URL_ALLOW", bad)
			var w Worker
			err := Load(&w)
			if err == nil || !strings.Contains(err.Error(), "FANOUT_RECIPIENTS_URL_ALLOW") {
				t.Fatalf("FANOUT_RECIPIENTS_URL_ALLOW=%s: %v, want it refused", bad, err)
			}
		})
	}
	clearFanoutEnv(t)
	t.Setenv("FANOUT_RECIPIENTS_URL_ALLOW", "http://127.0.0.1:9999,https://a.example.com/api/,https://B.example.com")
	var w Worker
	if err := Load(&w); err != nil {
		t.Fatalf("good entries: %v", err)
	}
}
