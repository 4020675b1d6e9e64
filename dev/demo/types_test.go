package demo

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fanout/fanout/types"
	"github.com/fanout/fanout/workers/webhook"
)

// The shipped file is what the embedded bytes are, and a written copy at
// the default address is those bytes: task dev runs the file as shipped.
func TestWriteTypesAsShipped(t *testing.T) {
	shipped, err := os.ReadFile("types.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(shipped, TypesYAML) {
		t.Fatal("the embedded types file differs from dev/demo/types.yaml")
	}
	dir := t.TempDir()
	path, err := WriteTypes(dir, DefaultSourceURL, "postgres://r:p@127.0.0.1:5432/postgres")
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(path); !bytes.Equal(got, shipped) {
		t.Fatalf("the copy at the default address is not the shipped file:\n%s", got)
	}
	f, err := types.Load(path)
	if err != nil {
		t.Fatalf("the shipped file does not load: %v", err)
	}
	got := map[string]string{}
	for _, ty := range f.Types {
		got[ty.Name] = ty.SourceKind + "/" + ty.ChannelKind
	}
	want := map[string]string{NewPostType: "postgres/webhook", DigestType: "http/webhook"}
	if len(got) != len(want) || got[NewPostType] != want[NewPostType] || got[DigestType] != want[DigestType] {
		t.Fatalf("types %v, want %v", got, want)
	}
}

// At another address only the source's URL changes; the secrets are made
// once, one per type, valid and different, and kept by the next call.
func TestWriteTypesElsewhereKeepsSecrets(t *testing.T) {
	dir := t.TempDir()
	path, err := WriteTypes(dir, "http://127.0.0.1:40123", "postgres://r:p@127.0.0.1:5432/postgres")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(path)
	gl, sl := strings.Split(string(got), "\n"), strings.Split(string(TypesYAML), "\n")
	if len(gl) != len(sl) {
		t.Fatalf("%d lines, want %d", len(gl), len(sl))
	}
	var changed []string
	for i := range gl {
		if gl[i] != sl[i] {
			changed = append(changed, gl[i])
		}
	}
	if len(changed) != 1 || strings.TrimSpace(changed[0]) != "url: http://127.0.0.1:40123/recipients" {
		t.Fatalf("changed lines %q, want the url alone", changed)
	}
	if _, err := types.Load(path); err != nil {
		t.Fatal(err)
	}
	read := func() map[string]string {
		out := map[string]string{}
		for _, typ := range []string{NewPostType, DigestType} {
			p := filepath.Join(dir, SigningSecretFile(typ))
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o600 {
				t.Errorf("%s: mode %v, want 0600", p, fi.Mode().Perm())
			}
			out[typ] = strings.TrimSpace(string(b))
			if _, err := webhook.NewSigner(out[typ]); err != nil {
				t.Fatalf("%s: %v", typ, err)
			}
		}
		return out
	}
	first := read()
	if first[NewPostType] == first[DigestType] {
		t.Fatal("both types have the same secret")
	}
	if _, err := WriteTypes(dir, DefaultSourceURL, "postgres://other@127.0.0.1:1/x"); err != nil {
		t.Fatal(err)
	}
	if again := read(); again[NewPostType] != first[NewPostType] || again[DigestType] != first[DigestType] {
		t.Fatal("the secrets changed on the second call")
	}
	if b, _ := os.ReadFile(filepath.Join(dir, FollowersDSNFile)); strings.TrimSpace(string(b)) != "postgres://other@127.0.0.1:1/x" {
		t.Fatalf("dsn file holds %q", b)
	}
}
