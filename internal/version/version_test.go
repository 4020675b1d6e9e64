package version

import (
	"runtime/debug"
	"strings"
	"testing"
)

func bi(mainVersion string, settings ...string) *debug.BuildInfo {
	b := &debug.BuildInfo{GoVersion: "go1.26.4", Main: debug.Module{Path: "github.com/fanout/fanout", Version: mainVersion}}
	for i := 0; i+1 < len(settings); i += 2 {
		b.Settings = append(b.Settings, debug.BuildSetting{Key: settings[i], Value: settings[i+1]})
	}
	return b
}

func TestResolve(t *testing.T) {
	const rev = "36d1f1b4c5e6aa00bb11cc22dd33ee44ff556677"
	for _, tc := range []struct {
		name                 string
		bi                   *debug.BuildInfo
		ldv, ldc, ldm        string
		version, commit, mod string
	}{
		{"no build information", nil, "", "", "", "devel", "", ""},
		{"go run or a worktree: (devel), no VCS", bi("(devel)"), "", "", "", "devel", "", ""},
		{"go build in a clone: pseudo-version and VCS",
			bi("v0.0.0-20261202013723-36d1f1b4c5e6+dirty", "vcs.revision", rev, "vcs.modified", "true"), "", "", "",
			"v0.0.0-20261202013723-36d1f1b4c5e6+dirty", rev, "true"},
		{"go install @v1.2.0", bi("v1.2.0"), "", "", "", "v1.2.0", "", ""},
		{"release: link-time stamp over Go's", bi("(devel)", "vcs.revision", "aaaa", "vcs.modified", "true"), "v1.3.0", rev, "false",
			"v1.3.0", rev, "false"},
		{"image: version and commit, tree unknown", bi("(devel)"), "v1.3.0", rev, "", "v1.3.0", rev, ""},
		{"version alone keeps Go's commit", bi("(devel)", "vcs.revision", rev, "vcs.modified", "false"), "v1.3.0", "", "",
			"v1.3.0", rev, "false"},
	} {
		in := resolve(tc.bi, tc.ldv, tc.ldc, tc.ldm)
		if in.Version != tc.version || in.Commit != tc.commit || in.Modified != tc.mod {
			t.Errorf("%s: got %q %q %q, want %q %q %q", tc.name, in.Version, in.Commit, in.Modified, tc.version, tc.commit, tc.mod)
		}
		if in.GoVersion == "" || !strings.Contains(in.Platform, "/") {
			t.Errorf("%s: Go %q, platform %q", tc.name, in.GoVersion, in.Platform)
		}
	}
}

func TestString(t *testing.T) {
	in := Info{Version: "v1.3.0", Commit: "abc123", Modified: "true", GoVersion: "go1.26.4", Platform: "linux/arm64"}
	if got, want := in.String("worker"), "worker v1.3.0, commit abc123, tree modified (uncommitted changes), go1.26.4 linux/arm64"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	in.Modified = "false"
	if got := in.String("starter"); !strings.Contains(got, "commit abc123, tree clean,") {
		t.Errorf("clean tree: %q", got)
	}
	in.Modified = ""
	if got := in.String("starter"); strings.Contains(got, "tree") {
		t.Errorf("unknown tree state stated: %q", got)
	}
	// Without a commit the line says so and how to get one, rather than
	// a bare "(devel)".
	if got := (Info{Version: "devel", GoVersion: "go1.26.4", Platform: "linux/amd64"}).String("worker"); !strings.Contains(got, "commit unknown (") || strings.Contains(got, "(devel)") {
		t.Errorf("no commit: %q", got)
	}
}
