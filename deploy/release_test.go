//go:build integration

package deploy

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// `go tool task release` end to end for this machine's platform (the
// cross-compiles of the other three are the same command with other GOOS
// and GOARCH): an archive with the shipped binaries, stamped, static and
// trimmed, the license and changelog; the packaged chart; SHA256SUMS that
// match both.
func TestReleaseTask(t *testing.T) {
	const version = "v0.0.0-test.1"
	dist := t.TempDir()
	platform := runtime.GOOS + "/" + runtime.GOARCH
	cmd := exec.Command("go", "tool", "task", "release", "VERSION="+version, "PLATFORMS="+platform, "DIST="+dist)
	cmd.Dir = repoRoot
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go tool task release: %v\n%s", err, out)
	}
	commit, err := exec.Command("git", "-C", repoRoot, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatal(err)
	}

	// SHA256SUMS names the archive and the chart, with their digests.
	archive := "fanout_" + version + "_" + runtime.GOOS + "_" + runtime.GOARCH + ".tar.gz"
	chart := "fanout-" + strings.TrimPrefix(version, "v") + ".tgz"
	sums, err := os.Open(filepath.Join(dist, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sums.Close() }()
	listed := map[string]bool{}
	sc := bufio.NewScanner(sums)
	for sc.Scan() {
		sum, name, ok := strings.Cut(sc.Text(), "  ")
		if !ok {
			t.Fatalf("SHA256SUMS line %q", sc.Text())
		}
		b, err := os.ReadFile(filepath.Join(dist, name))
		if err != nil {
			t.Fatal(err)
		}
		if h := sha256.Sum256(b); hex.EncodeToString(h[:]) != sum {
			t.Errorf("SHA256SUMS: %s does not match its file", name)
		}
		listed[name] = true
	}
	for _, want := range []string{archive, chart} {
		if !listed[want] {
			t.Errorf("SHA256SUMS does not list %s (lists %v)", want, listed)
		}
	}

	// The archive: one folder with the binaries and the documents.
	bin := t.TempDir()
	f, err := os.Open(filepath.Join(dist, archive))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	found := map[string]bool{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		name := filepath.Base(h.Name)
		found[name] = true
		out, err := os.OpenFile(filepath.Join(bin, name), os.O_CREATE|os.O_WRONLY, os.FileMode(h.Mode))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(out, tr); err != nil {
			t.Fatal(err)
		}
		_ = out.Close()
	}
	for _, want := range []string{"worker", "starter", "LICENSE", "README.md", "CHANGELOG.md"} {
		if !found[want] {
			t.Errorf("%s lacks %s (has %v)", archive, want, found)
		}
	}
	for _, b := range []string{"worker", "starter"} {
		p := filepath.Join(bin, b)
		bi, err := buildinfo.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		settings := map[string]string{}
		for _, s := range bi.Settings {
			settings[s.Key] = s.Value
		}
		if settings["CGO_ENABLED"] != "0" || settings["-trimpath"] != "true" {
			t.Errorf("%s: built with CGO_ENABLED=%q -trimpath=%q, want 0 and true", b, settings["CGO_ENABLED"], settings["-trimpath"])
		}
		out, err := exec.Command(p, "-version").Output()
		if err != nil {
			t.Fatalf("%s -version: %v", b, err)
		}
		if want := b + " " + version + ", commit " + strings.TrimSpace(string(commit)); !strings.HasPrefix(string(out), want) {
			t.Errorf("%s -version: %q, want the prefix %q", b, out, want)
		}
	}
}
