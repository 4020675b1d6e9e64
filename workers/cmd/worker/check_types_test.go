package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// `worker check-types` prints a good file's types and exits 0.
func TestCheckTypesGood(t *testing.T) {
	var out, errb bytes.Buffer
	file := filepath.Join("..", "..", "..", "types", "testdata", "valid.yaml")
	if code := checkTypes([]string{file}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, want := range []string{"TYPE", "news       high      http      webhook  3", "alerts     normal    inline    webhook", "followers  low       postgres  webhook", "3 types, ok"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// A bad file: every mistake on its own line, each with file, line, type and
// field, exit 1; the worker's own webhook type counts as defined. The
// binary is dispatched the same way.
func TestCheckTypesBad(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "types.yaml")
	secret, err := filepath.Abs(filepath.Join("..", "..", "..", "types", "testdata", "secrets", "news-signing"))
	if err != nil {
		t.Fatal(err)
	}
	text := "types:\n  webhook:\n    recipients: {inline: {}}\n    message: {passthrough: {}}\n    channel: {webhook: {signing_secret_file: " + secret + "}}\n"
	if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := checkTypes([]string{file}, &out, &errb); code != 1 || !strings.Contains(errb.String(), file+`:2: type "webhook": already registered`) {
		t.Fatalf("a file redefining webhook: exit %d, stderr %q", code, errb.String())
	}
	bad := "types:\n  news:\n    batch_size: 0\n    recipients: {}\n    message: {template: {text: '{{'}}\n    channel: {email: {}}\n"
	if err := os.WriteFile(file, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "check-types", file)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err = cmd.Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("worker check-types: %v, want exit 1", err)
	}
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	want := []string{
		file + `:3: type "news": batch_size: 0 is not a value here`,
		file + `:4: type "news": recipients: no source`,
		file + `:5: type "news": message.template.text: the template does not parse`,
		file + `:6: type "news": channel.email: unknown field`,
	}
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(want), stderr.String())
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("line %d: %q, want it to start with %q", i, lines[i], w)
		}
	}
}
