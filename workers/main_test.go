package workers

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/internal/config"
	"github.com/fanout/fanout/internal/config/configtest"
	"github.com/fanout/fanout/types"
	"github.com/fanout/fanout/workers/webhook"
)

// newsFile writes a types file defining "news" (line 2) and returns its path.
func newsFile(t *testing.T) string {
	t.Helper()
	secret, err := filepath.Abs(filepath.Join("..", "types", "testdata", "secrets", "news-signing"))
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "types.yaml")
	text := "types:\n  news:\n    recipients: {inline: {pointer: /to}}\n    message: {passthrough: {pointer: /m}}\n    channel: {webhook: {signing_secret_file: " + secret + "}}\n"
	if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// goRegistry is a registry with Go types of the given semantics.
func goRegistry(types map[string]fanout.Semantics) *fanout.Registry {
	reg := fanout.NewRegistry()
	for name, s := range types {
		reg.MustRegister(name, fanout.HandlerFuncs{}, fanout.TypeOptions{Semantics: s})
	}
	return reg
}

// A custom main serves its Go types beside a types file's; a type defined
// in both is refused by load (before anything connects), naming the
// variable, the file, its line and the type.
func TestMainLoadsTypesBesideGo(t *testing.T) {
	configtest.ClearFanoutEnv(t)
	file := newsFile(t)
	t.Setenv("FANOUT_TYPES_FILE", file)

	reg := goRegistry(map[string]fanout.Semantics{"orders": fanout.AtLeastOnce})
	if _, err := newMain(reg, nil).load(); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(reg.Types(), ","); got != "news,orders" {
		t.Fatalf("registered %s, want news,orders (no webhook without WithWebhook)", got)
	}

	clash := goRegistry(map[string]fanout.Semantics{"news": fanout.AtLeastOnce})
	_, err := newMain(clash, nil).load()
	if err == nil || !strings.Contains(err.Error(), "FANOUT_TYPES_FILE") || !strings.Contains(err.Error(), file+`:2: type "news": already registered`) {
		t.Fatalf("a type in Go and in the file: %v; want FANOUT_TYPES_FILE, %s:2 and the type", err, file)
	}
}

// WithWebhook registers the stock type as the stock binary does, and its
// settings are read (a bad one refused naming the variable); the process's
// outbound policy reaches the file's types either way.
func TestMainWebhook(t *testing.T) {
	configtest.ClearFanoutEnv(t)
	reg := goRegistry(map[string]fanout.Semantics{"orders": fanout.AtLeastOnce})
	if _, err := newMain(reg, []MainOption{WithWebhook()}).load(); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(reg.Types(), ","); got != "orders,"+webhook.EventType {
		t.Fatalf("registered %s, want orders and %s", got, webhook.EventType)
	}
	t.Setenv("FANOUT_HTTP_TIMEOUT", "0s")
	if _, err := newMain(nil, []MainOption{WithWebhook()}).load(); err == nil || !strings.Contains(err.Error(), "FANOUT_HTTP_TIMEOUT") {
		t.Fatalf("a bad webhook setting with WithWebhook: %v", err)
	}
	// Without the stock type its settings are not read.
	reg = goRegistry(map[string]fanout.Semantics{"orders": fanout.AtLeastOnce})
	if _, err := newMain(reg, nil).load(); err != nil {
		t.Fatalf("a custom main read FANOUT_HTTP_TIMEOUT: %v", err)
	}
	for _, with := range [][]MainOption{nil, {WithWebhook()}} {
		t.Setenv("FANOUT_HTTP_TIMEOUT", "")
		t.Setenv("FANOUT_OUTBOUND_ALLOW", "127.0.0.0/8")
		m := newMain(fanout.NewRegistry(), with)
		s := &settings{}
		if err := config.Load(m.configs(s)...); err != nil {
			t.Fatal(err)
		}
		if got := m.outboundOf(s).Allow(); len(got) != 1 || got[0].String() != "127.0.0.0/8" {
			t.Fatalf("webhook %v: the types file's outbound policy is %v, want 127.0.0.0/8", m.webhook, got)
		}
		t.Setenv("FANOUT_OUTBOUND_ALLOW", "nonsense")
		if _, err := m.load(); err == nil || !strings.Contains(err.Error(), "FANOUT_OUTBOUND_ALLOW") {
			t.Fatalf("webhook %v: a bad FANOUT_OUTBOUND_ALLOW: %v", m.webhook, err)
		}
	}
}

// The pool must be able to serve every type, the Go ones included: an
// at-most-once Go type without the gate is refused naming it; and a main
// with no type at all is refused.
func TestMainChecksGoTypes(t *testing.T) {
	configtest.ClearFanoutEnv(t)
	t.Setenv("FANOUT_DEDUP", "false")
	reg := goRegistry(map[string]fanout.Semantics{"alerts": fanout.AtMostOnce})
	if _, err := newMain(reg, nil).load(); err == nil || !strings.Contains(err.Error(), `"alerts"`) || !strings.Contains(err.Error(), "FANOUT_DEDUP") {
		t.Fatalf("an at-most-once Go type without the gate: %v", err)
	}
	t.Setenv("FANOUT_DEDUP", "true")
	if _, err := newMain(nil, nil).load(); err == nil || !strings.Contains(err.Error(), "no event types") {
		t.Fatalf("no types: %v", err)
	}
}

// -h lists the variables the main reads: the stock type's only with
// WithWebhook; the types file's and the outbound policy always; and the Go
// types it serves.
func TestMainHelp(t *testing.T) {
	listed := func(h string, name string) bool {
		return regexp.MustCompile(`(?m)^  ` + name + `\b`).MatchString(h)
	}
	var b strings.Builder
	reg := goRegistry(map[string]fanout.Semantics{"orders": fanout.AtLeastOnce})
	custom := newMain(reg, []MainOption{WithName("mine")}).help()
	custom.Write(&b, nil)
	h := b.String()
	for _, v := range append(config.EnvVars(Config{}, types.Settings{}, webhook.Outbound{}), config.EnvVar{Name: "GOGC"}) {
		if !listed(h, v.Name) {
			t.Errorf("custom main -h: %s not listed", v.Name)
		}
	}
	for _, v := range []string{"FANOUT_RECIPIENTS_URL", "FANOUT_WEBHOOK_SECRETS"} {
		if listed(h, v) {
			t.Errorf("custom main -h lists %s, which it does not read", v)
		}
	}
	if !strings.Contains(h, "mine runs fanout's Temporal workers") || !strings.Contains(h, "registered in Go (orders)") || !strings.Contains(h, "mine check-types FILE") {
		t.Errorf("custom main -h does not name itself and its types:\n%s", h)
	}
	b.Reset()
	stock().help().Write(&b, nil)
	for _, v := range config.EnvVars(Config{}, webhook.Config{}, types.Settings{}) {
		if !listed(b.String(), v.Name) {
			t.Errorf("stock -h: %s not listed", v.Name)
		}
	}
}
