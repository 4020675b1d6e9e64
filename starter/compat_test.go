package starter

import (
	"errors"
	"strings"
	"testing"
)

// A server with everything on passes every check; one missing some gets a
// MISSING line naming the setting for each, and the required ones among
// them are what Missing returns; facts that could not be read are unknown,
// neither ok nor missing.
func TestChecks(t *testing.T) {
	all := ServerFacts{Version: "1.29.1", SyncUpdate: true, EagerStart: true, UserMetadata: true, BacklogStats: true, Fairness: true}
	for _, c := range Checks(all) {
		if !c.Known || !c.OK || !strings.HasPrefix(c.String(), "ok ") {
			t.Errorf("all on: %q", c.String())
		}
	}
	if m := Missing(Checks(all)); len(m) != 0 {
		t.Errorf("all on: missing %v", m)
	}

	some := ServerFacts{Version: "1.24.3", SyncUpdate: false, EagerStart: false, UserMetadata: true, BacklogStats: false, Fairness: false}
	lines := map[string]string{}
	for _, c := range Checks(some) {
		lines[c.What] = c.String()
	}
	for what, want := range map[string]string{
		"Temporal server":      "upgrade the Temporal server to " + MinTemporalServer,
		"Workflow Update":      "frontend.enableUpdateWorkflowExecution=true",
		"eager workflow start": "system.enableEagerWorkflowStart=true",
		"task-queue backlog":   "a server 1.25 or later",
		"task-queue fairness":  "matching.enableFairness=true",
		"user metadata":        "",
	} {
		var line string
		for w, l := range lines {
			if strings.HasPrefix(w, what) {
				line = l
			}
		}
		switch {
		case line == "":
			t.Errorf("no check of %s in %v", what, lines)
		case want == "" && !strings.HasPrefix(line, "ok "):
			t.Errorf("%s: %q, want ok", what, line)
		case want != "" && (!strings.HasPrefix(line, "MISSING ") || !strings.Contains(line, want)):
			t.Errorf("%s: %q, want MISSING naming %q", what, line, want)
		}
	}
	var missing []string
	for _, c := range Missing(Checks(some)) {
		missing = append(missing, c.What)
	}
	if len(missing) != 2 || !strings.HasPrefix(missing[0], "Temporal server") || !strings.HasPrefix(missing[1], "Workflow Update") {
		t.Errorf("required missing: %q, want the server version and Workflow Update", missing)
	}

	unread := ServerFacts{VersionErr: errors.New("denied"), NamespaceErr: errors.New("denied"), UserMetadataErr: errors.New("x"), BacklogErr: errors.New("x"), FairnessErr: errors.New("x")}
	for _, c := range Checks(unread) {
		if c.Known || !strings.HasPrefix(c.String(), "unknown ") {
			t.Errorf("unread: %q, want unknown", c.String())
		}
	}
	if m := Missing(Checks(unread)); len(m) != 0 {
		t.Errorf("unread: missing %v", m)
	}
	if c := Checks(ServerFacts{Version: "dev-build"})[0]; c.Known {
		t.Errorf("unparsable version: %q, want unknown", c.String())
	}
}

func TestCompareVersions(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
		ok   bool
	}{
		{"1.29.1", "1.29.0", 1, true}, {"1.29.0", "1.29.0", 0, true}, {"1.28.9", "1.29.0", -1, true},
		{"v1.30.0-rc.1", "1.29.0", 1, true}, {"2.0.0", "1.29.0", 1, true}, {"1.3.0", "1.29.0", -1, true},
		{"1.29", "1.29.0", 0, false}, {"", "1.29.0", 0, false},
	} {
		if got, ok := compareVersions(tc.a, tc.b); got != tc.want || ok != tc.ok {
			t.Errorf("compareVersions(%q, %q) = %d, %v; want %d, %v", tc.a, tc.b, got, ok, tc.want, tc.ok)
		}
	}
}

func TestRedisCheck(t *testing.T) {
	for _, tc := range []struct {
		version string
		err     error
		want    string
	}{
		{"7.0.15", nil, "ok "}, {"7.4.2", nil, "ok "}, {"6.2.14", nil, "MISSING "}, {"", errors.New("NOAUTH"), "unknown "}, {"x", nil, "unknown "},
	} {
		c := RedisCheck(tc.version, tc.err)
		if !strings.HasPrefix(c.String(), tc.want) {
			t.Errorf("RedisCheck(%q, %v) = %q, want %s", tc.version, tc.err, c.String(), tc.want)
		}
		if tc.want == "MISSING " && (len(Missing([]Check{c})) != 1 || !strings.Contains(c.String(), "upgrade Redis to "+MinRedis)) {
			t.Errorf("RedisCheck(%q): %q not a required miss naming the fix", tc.version, c.String())
		}
	}
}
