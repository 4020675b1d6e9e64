package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/fanout/fanout/activities/limits"
)

func TestParseLimitsArgs(t *testing.T) {
	a, err := parseLimitsArgs([]string{"set", "-type", "webhook", "-dest", "Hooks.Example.com", "-rate", "600/m"})
	if err != nil || a.verb != "set" || a.eventType != "webhook" || a.dest != "hooks.example.com" || a.rate != 10 {
		t.Fatalf("%+v %v", a, err)
	}
	if a, err := parseLimitsArgs([]string{"unset", "-type", "webhook"}); err != nil || a.verb != "unset" || a.dest != "" {
		t.Fatalf("unset: %+v %v", a, err)
	}
	for _, bad := range [][]string{
		{"set", "-type", "webhook"},                    // no rate
		{"set", "-type", "webhook", "-rate", "fast"},   // bad rate
		{"set", "-type", "webhook", "-rate", "-1"},     // negative
		{"show", "-type", "webhook", "-rate", "1"},     // rate not for show
		{"show", "-type", "webhook", "-dest", "h"},     // show takes no dest
		{"set", "-type", "Bad Type!", "-rate", "1"},    // type grammar
		{"drop", "-type", "webhook"},                   // verb
		{"-type", "webhook"},                           // no verb
		{"set", "-type", "webhook", "-rate", "1", "x"}, // stray argument
		{"set", "-dest", strings.Repeat("h", 5000), "-type", "webhook", "-rate", "1"},
	} {
		if _, err := parseLimitsArgs(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func FuzzParseLimitsArgs(f *testing.F) {
	f.Add("set", "webhook", "h:1", "200/s")
	f.Add("show", "t", "", "")
	f.Fuzz(func(t *testing.T, verb, typ, dest, rate string) {
		args := []string{verb, "-type", typ}
		if dest != "" {
			args = append(args, "-dest", dest)
		}
		if rate != "" {
			args = append(args, "-rate", rate)
		}
		a, err := parseLimitsArgs(args)
		if err != nil {
			return
		}
		if a.rate < 0 || a.rate > limits.MaxRate || (a.verb != "set" && a.rate != 0) {
			t.Fatalf("%q parsed as %+v", args, a)
		}
	})
}

func TestPrintLimits(t *testing.T) {
	var b bytes.Buffer
	printLimits(&b, "webhook", limits.Overrides{HasDefault: true, Default: 50, Dest: map[string]float64{"z": 1, "a": 0}, Bad: []string{"dest:x"}})
	want := "limits of webhook (in force on the workers within 3s):\n  default per destination: 50/s\n  a: off\n  z: 1/s\n  (ignored, not a rate: field \"dest:x\")\n"
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}

// TestLimitsDestIsADestinationKey (issue 23, item 14): -dest takes a
// destination key as the workers compute it, case-insensitively, and
// refuses what no destination can have as its key (a URL, a path, spaces,
// a trailing dot, a key too long), rather than store a limit that never
// applies.
func TestLimitsDestIsADestinationKey(t *testing.T) {
	for in, want := range map[string]string{"Hooks.Example.com": "hooks.example.com", "127.0.0.1:8080": "127.0.0.1:8080", "[::1]:9": "[::1]:9", "tenant-42": "tenant-42"} {
		a, err := parseLimitsArgs([]string{"set", "-type", "webhook", "-dest", in, "-rate", "1"})
		if err != nil || a.dest != want {
			t.Errorf("-dest %q: %q, %v; want %q", in, a.dest, err, want)
		}
	}
	for _, bad := range []string{"https://hooks.example.com/x", "hooks.example.com/x", "hooks example", "hooks.example.com.", "h.:8080", strings.Repeat("h", limits.MaxKeyLen+1), "h\x00"} {
		if a, err := parseLimitsArgs([]string{"set", "-type", "webhook", "-dest", bad, "-rate", "1"}); err == nil {
			t.Errorf("-dest %q: accepted as %q", bad, a.dest)
		}
	}
}
