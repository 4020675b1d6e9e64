package types

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzLoad: whatever the file, Load returns types or errors (never
// panics), and every error is an *Error at a line of the file or a
// read error, never both a File and an error.
func FuzzLoad(f *testing.F) {
	for _, name := range []string{"testdata/valid.yaml", "testdata/valid.json"} {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("types:\n  news:\n    batch_size: 6000\n    recipients: {inline: {pointer: x}}\n"))
	f.Add([]byte("types: {a: {message: {template: {text: '{{range .Payload}}{{end}}'}}}}"))
	dir := f.TempDir()
	if err := os.CopyFS(filepath.Join(dir, "secrets"), os.DirFS("testdata/secrets")); err != nil {
		f.Fatal(err)
	}
	path := filepath.Join(dir, "types.yaml")
	f.Fuzz(func(t *testing.T, b []byte) {
		file, err := parseFile(path, b)
		if (file == nil) == (err == nil) {
			t.Fatalf("file %v and error %v", file, err)
		}
		if err != nil {
			lines := yamlLines(b)
			var walk func(error)
			walk = func(err error) {
				if j, ok := err.(interface{ Unwrap() []error }); ok {
					for _, e := range j.Unwrap() {
						walk(e)
					}
					return
				}
				var e *Error
				if !errors.As(err, &e) {
					t.Fatalf("an error that is not an *Error: %v", err)
				}
				if e.File != path || e.Line < 1 || e.Line > lines+1 {
					t.Fatalf("error at %s:%d of a file of %d lines: %v", e.File, e.Line, lines, e)
				}
			}
			walk(err)
			return
		}
		for _, ty := range file.Types {
			if ty.source == nil || ty.message == nil || ty.channel == nil {
				t.Fatalf("type %q loaded without a source, message or channel", ty.Name)
			}
			if err := ty.Options.Validate(); err != nil {
				t.Fatalf("type %q loaded with invalid options: %v", ty.Name, err)
			}
		}
	})
}

// yamlLines counts b's lines as the YAML parser does: "\r\n", "\r", "\n",
// NEL, LS and PS each end one.
func yamlLines(b []byte) int {
	s := strings.ReplaceAll(string(b), "\r\n", "\n")
	n := 1
	for _, r := range s {
		switch r {
		case '\n', '\r', '\u0085', '\u2028', '\u2029':
			n++
		}
	}
	return n
}
