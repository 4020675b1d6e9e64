package main

import (
	"archive/tar"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
	"sigs.k8s.io/yaml"
)

const chartDir = "../../../helm/fanout"

// The release's chart: an archive Helm loads, whose Chart.yaml carries the
// release version (and its tag as appVersion), with every file of the chart.
func TestPackage(t *testing.T) {
	out := filepath.Join(t.TempDir(), "dist") // created by the command
	path, err := run([]string{"-version", "v1.2.3-rc.1", "-out", out, "-chart", chartDir})
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(out, "fanout-1.2.3-rc.1.tgz"); path != want {
		t.Fatalf("archive %s, want %s", path, want)
	}
	// The archive's own Chart.yaml, as bytes in the tar.
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	files := map[string][]byte{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = b
	}
	var meta struct {
		Name, Version, AppVersion string
	}
	if err := yaml.Unmarshal(files["fanout/Chart.yaml"], &meta); err != nil {
		t.Fatalf("fanout/Chart.yaml in the archive: %v (files: %d)", err, len(files))
	}
	if meta.Name != "fanout" || meta.Version != "1.2.3-rc.1" || meta.AppVersion != "v1.2.3-rc.1" {
		t.Fatalf("archive's Chart.yaml: name %q version %q appVersion %q", meta.Name, meta.Version, meta.AppVersion)
	}
	// Every file of the chart is in it (the templates, values, schema).
	src, err := loader.LoadDir(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, tf := range src.Templates {
		if _, ok := files["fanout/"+tf.Name]; !ok {
			t.Errorf("archive lacks %s", tf.Name)
		}
	}
	if _, ok := files["fanout/values.yaml"]; !ok {
		t.Error("archive lacks values.yaml")
	}
	// And Helm loads it back as the same chart.
	ch, err := loader.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if ch.Metadata.Version != "1.2.3-rc.1" || len(ch.Templates) != len(src.Templates) {
		t.Fatalf("loaded: version %q, %d templates (source %d)", ch.Metadata.Version, len(ch.Templates), len(src.Templates))
	}
}

// A version Helm would refuse fails naming the flag, and writes nothing.
func TestPackageRefuses(t *testing.T) {
	out := t.TempDir()
	for _, args := range [][]string{
		{"-version", "banana", "-out", out, "-chart", chartDir},
		{"-version", "v1.2", "-out", out, "-chart", chartDir},
		{"-out", out, "-chart", chartDir},
		{"-version", "v1.2.3", "-out", out, "-chart", chartDir, "extra"},
	} {
		if _, err := run(args); err == nil || !strings.Contains(err.Error(), "-version") && !strings.Contains(err.Error(), "extra") {
			t.Errorf("package %q: err %v, want one naming -version", args, err)
		}
	}
	if left, _ := os.ReadDir(out); len(left) != 0 {
		t.Errorf("refused versions left %d files in %s", len(left), out)
	}
}
