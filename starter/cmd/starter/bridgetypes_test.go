package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fanout/fanout/starter"
	"github.com/fanout/fanout/types"
)

// A stand-alone bridge given the workers' types file accepts the file's
// types beside FANOUT_EVENT_TYPES, once each; a bad file stops it naming
// the variable.
func TestBridgeTypesFromTheTypesFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "types.yaml")
	text := "types:\n"
	for i, name := range []string{"alerts", "webhook"} {
		secret := filepath.Join(dir, name+"-secret")
		if err := os.WriteFile(secret, []byte("whsec_"+strings.Repeat("QUJD", 8+i)), 0o600); err != nil {
			t.Fatal(err)
		}
		text += "  " + name + ":\n    recipients: {inline: {pointer: /to}}\n    message: {passthrough: {pointer: /m}}\n    channel: {webhook: {signing_secret_file: " + secret + "}}\n"
	}
	if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := bridgeTypes(starter.Settings{EventTypes: []string{"webhook"}}, types.Settings{TypesFile: file})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"webhook", "alerts"}; !slices.Equal(got, want) {
		t.Fatalf("bridge types %v, want %v", got, want)
	}
	if got, _ := bridgeTypes(starter.Settings{EventTypes: []string{"webhook"}}, types.Settings{}); !slices.Equal(got, []string{"webhook"}) {
		t.Fatalf("without a file: %v", got)
	}
	if _, err := bridgeTypes(starter.Settings{}, types.Settings{TypesFile: filepath.Join(dir, "missing.yaml")}); err == nil || !strings.Contains(err.Error(), "FANOUT_TYPES_FILE") {
		t.Fatalf("a missing file: %v", err)
	}
}
