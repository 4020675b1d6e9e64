package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// `worker check-types FILE` is dispatched by the binary: every mistake on
// its own line, each with file, line, type and field, exit 1.
func TestCheckTypesBad(t *testing.T) {
	file := filepath.Join(t.TempDir(), "types.yaml")
	bad := "types:\n  news:\n    batch_size: 0\n    recipients: {}\n    message: {template: {text: '{{'}}\n    channel: {email: {}}\n"
	if err := os.WriteFile(file, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "check-types", file)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
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
