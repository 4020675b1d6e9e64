package workers

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fanout/fanout"
)

// `worker check-types` prints a good file's types and exits 0.
func TestCheckTypesGood(t *testing.T) {
	var out, errb bytes.Buffer
	file := filepath.Join("..", "types", "testdata", "valid.yaml")
	if code := stock().checkTypes([]string{file}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, want := range []string{"TYPE", "news       high      http      webhook  3", "alerts     normal    inline    webhook", "followers  low       postgres  webhook", "3 types, ok"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// stock is the stock worker's Main.
func stock() *mainSetup { return newMain(nil, []MainOption{WithWebhook()}) }

// The worker's own types count as defined: the stock webhook type, and a
// custom main's Go types.
func TestCheckTypesOwnTypes(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "types.yaml")
	secret, err := filepath.Abs(filepath.Join("..", "types", "testdata", "secrets", "news-signing"))
	if err != nil {
		t.Fatal(err)
	}
	text := "types:\n  webhook:\n    recipients: {inline: {}}\n    message: {passthrough: {}}\n    channel: {webhook: {signing_secret_file: " + secret + "}}\n"
	if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := stock().checkTypes([]string{file}, &out, &errb); code != 1 || !strings.Contains(errb.String(), file+`:2: type "webhook": already registered`) {
		t.Fatalf("a file redefining webhook: exit %d, stderr %q", code, errb.String())
	}
	// A custom main's Go types count as defined too, and the stock type is
	// not one of them.
	reg := fanout.NewRegistry()
	reg.MustRegister("news", fanout.HandlerFuncs{}, fanout.TypeOptions{})
	text = "types:\n  news:\n    recipients: {inline: {pointer: /to}}\n    message: {passthrough: {pointer: /m}}\n    channel: {webhook: {signing_secret_file: " + secret + "}}\n" +
		"  webhook:\n    recipients: {inline: {pointer: /to}}\n    message: {passthrough: {pointer: /m}}\n    channel: {webhook: {signing_secret_file: " + strings.Replace(secret, "news-", "alerts-", 1) + "}}\n"
	if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	errb.Reset()
	code := newMain(reg, nil).checkTypes([]string{file}, &out, &errb)
	if code != 1 || strings.TrimSpace(errb.String()) != file+`:2: type "news": already registered (by the worker's environment or in Go): each type is defined once` {
		t.Fatalf("a file redefining a Go type: exit %d, stderr %q", code, errb.String())
	}
}
