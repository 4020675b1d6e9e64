// Package version is what a fanout binary says it is (`worker -version`,
// `starter version`): its version, the commit it was built from and whether
// that tree had uncommitted changes.
//
// Release builds (`go tool task release`, `go tool task build`, the image)
// stamp the version and commit at link time:
//
//	-ldflags "-X github.com/fanout/fanout/internal/version.version=v1.2.0
//	          -X github.com/fanout/fanout/internal/version.commit=<sha>
//	          -X github.com/fanout/fanout/internal/version.modified=false"
//
// A plain `go build` in a git clone gets them from Go's own build
// information instead: the main module's version (a tag, or a pseudo-version
// naming the commit) and the vcs.revision and vcs.modified settings. What
// the link time stamped wins over what Go recorded.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Set with -ldflags -X (see the package documentation); empty when not.
var (
	version  string
	commit   string
	modified string // "true" or "false"
)

// Info is a build's identity.
type Info struct {
	Version   string // "v1.2.0"; Go's pseudo-version or "devel" when not stamped
	Commit    string // full revision, "" when unknown
	Modified  string // "true" (uncommitted changes), "false", "" (unknown)
	GoVersion string // "go1.26.4"
	Platform  string // "linux/amd64"
}

// Get returns this binary's Info.
func Get() Info {
	bi, _ := debug.ReadBuildInfo()
	return resolve(bi, version, commit, modified)
}

// resolve merges the link-time stamp over Go's build information (nil when
// the binary has none).
func resolve(bi *debug.BuildInfo, ldVersion, ldCommit, ldModified string) Info {
	in := Info{Version: "devel", GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi != nil {
		if v := bi.Main.Version; v != "" && v != "(devel)" {
			in.Version = v
		}
		if bi.GoVersion != "" {
			in.GoVersion = bi.GoVersion
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				in.Commit = s.Value
			case "vcs.modified":
				in.Modified = s.Value
			}
		}
	}
	if ldVersion != "" {
		in.Version = ldVersion
	}
	if ldCommit != "" {
		in.Commit = ldCommit
		in.Modified = ldModified // Go's vcs.modified belongs to Go's revision
	}
	return in
}

// String is the one line a command prints for -version: "worker v1.2.0,
// commit 3f2a...e1, tree clean, go1.26.4 linux/amd64".
func (in Info) String(cmd string) string {
	c := "commit unknown (not stamped: go tool task build stamps it, as go build does in a git clone)"
	if in.Commit != "" {
		c = "commit " + in.Commit
		switch in.Modified {
		case "true":
			c += ", tree modified (uncommitted changes)"
		case "false":
			c += ", tree clean"
		}
	}
	return fmt.Sprintf("%s %s, %s, %s %s", cmd, in.Version, c, in.GoVersion, in.Platform)
}

// Line is cmd's version line for this binary.
func Line(cmd string) string { return Get().String(cmd) }
