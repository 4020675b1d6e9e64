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

// The six kinds of mistake issue 27 names, in one file: `worker
// check-types` prints each on its own line with the file, line, type and
// field, and exits 1.
func TestCheckTypesEveryMistake(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "types.yaml")
	dsn := filepath.Join(dir, "followers-dsn")
	secret, err := filepath.Abs(filepath.Join("..", "..", "..", "types", "testdata", "secrets", "news-signing"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dsn, []byte("postgres://fanout@127.0.0.1:5432/app\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	text := `types:
  news:
    batch_size: 6000
    windw: 3
    recipients: {inline: {}}
    message: {template: {text: '{{ .ID'}}
    channel: {webhook: {signing_secret_file: ` + filepath.Join(dir, "nope") + `}}
  feed:
    recipients:
      postgres:
        dsn_file: ` + dsn + `
        query: SELECT id, address FROM f WHERE id > :cursor ORDER BY id LIMIT :limit OFFSET 5
    message: {passthrough: {}}
    channel: {webhook: {signing_secret_file: ` + secret + `}}
  news:
    recipients: {inline: {}}
    message: {passthrough: {}}
    channel: {webhook: {signing_secret_file: ` + secret + `}}
`
	if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "check-types", file)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("worker check-types: %v, want exit 1", err)
	}
	if stdout.Len() != 0 {
		t.Errorf("stdout %q, want nothing (no types are listed for a bad file)", stdout.String())
	}
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	want := []string{
		file + `:3: type "news": batch_size: 6000 outside 1..5000`,
		file + `:4: type "news": windw: unknown field`,
		file + `:6: type "news": message.template.text: the template does not parse`,
		file + `:7: type "news": channel.webhook.signing_secret_file: `,
		file + `:12: type "feed": recipients.postgres.query: OFFSET is refused`,
		file + `:15: type "news": defined twice (first at line 2)`,
	}
	for _, w := range want {
		found := false
		for _, l := range lines {
			found = found || strings.HasPrefix(l, w)
		}
		if !found {
			t.Errorf("no line starts with %q:\n%s", w, stderr.String())
		}
	}
	if len(lines) != len(want) {
		t.Errorf("%d lines, want %d (one per mistake):\n%s", len(lines), len(want), stderr.String())
	}
	if !strings.Contains(stderr.String(), "no such file") {
		t.Errorf("the missing secret file is not said to be missing:\n%s", stderr.String())
	}
}
