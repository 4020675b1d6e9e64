package types

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fanout/fanout"
)

// writeFile writes a types file named types.yaml into a fresh directory
// beside a copy of testdata/secrets, and returns its path.
func writeFile(t *testing.T, text string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.CopyFS(filepath.Join(dir, "secrets"), os.DirFS("testdata/secrets")); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "types.yaml")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// loadErrors loads text and returns its mistakes (failing when it loads).
func loadErrors(t *testing.T, text string) (string, []*Error) {
	t.Helper()
	p := writeFile(t, text)
	_, err := Load(p)
	if err == nil {
		t.Fatalf("loaded without error:\n%s", text)
	}
	var out []*Error
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
		out = append(out, e)
	}
	walk(err)
	return p, out
}

// good is a valid type's body, indented for a type under types:.
const good = `
    recipients:
      inline: {}
    message:
      passthrough: {}
    channel:
      webhook: {signing_secret_file: secrets/news-signing}
`

func TestLoadValid(t *testing.T) {
	t.Setenv("NEWS_TOKEN", "x")
	for _, name := range []string{"testdata/valid.yaml", "testdata/valid.json"} {
		f, err := Load(name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(f.Types) == 0 {
			t.Fatalf("%s: no types", name)
		}
	}
	f, err := Load("testdata/valid.yaml")
	if err != nil {
		t.Fatal(err)
	}
	news, alerts := f.Types[0], f.Types[1]
	want := fanout.TypeOptions{DefaultPriority: fanout.PriorityHigh, BatchSize: 500, PageSize: 5000, Window: 20, DeliverConcurrency: 32,
		MaxAttempts: 5, DeliverTimeout: 2 * 60e9, CallTimeout: 15e9, Semantics: fanout.AtLeastOnce, DestinationRate: 50,
		BreakerFailures: 10, BreakerCooldown: 60e9, FairnessWeight: 2}
	if news.Name != "news" || news.Options != want || news.SourceKind != "http" || news.ChannelKind != "webhook" || news.Line != 3 {
		t.Errorf("news: %+v\nwant options %+v", news, want)
	}
	if alerts.Name != "alerts" || alerts.Options != (fanout.TypeOptions{}) || alerts.SourceKind != "inline" {
		t.Errorf("alerts: %+v, want no options (the Go API's defaults) and the inline source", alerts)
	}
}

// The mistakes a types file can make: each is refused at load, named by
// the file, the line, the type and the field.
func TestLoadMistakes(t *testing.T) {
	cases := []struct {
		name       string
		text       string
		line       int
		typ, field string
		msg        string
	}{
		{"unknown field", "types:\n  news:\n    batch_sise: 5" + good, 3, "news", "batch_sise", "unknown field"},
		{"unknown top-level field", "typs:\n  news: {}\n", 1, "", "typs", "unknown field"},
		{"type defined twice", "types:\n  news:" + good + "  news:" + good, 9, "news", "", "defined twice (first at line 2)"},
		{"option out of range", "types:\n  news:\n    batch_size: 6000" + good, 3, "news", "batch_size", "6000 outside 1..5000"},
		{"non-positive page size", "types:\n  news:\n    page_size: 0" + good, 3, "news", "page_size", "0 is not a value here"},
		{"negative page size", "types:\n  news:\n    page_size: -5" + good, 3, "news", "page_size", "-5 outside 1..20000"},
		{"unknown priority", "types:\n  news:\n    default_priority: urgent" + good, 3, "news", "default_priority", `unknown priority "urgent"`},
		{"a number where a duration is", "types:\n  news:\n    deliver_timeout: 5" + good, 3, "news", "deliver_timeout", "want a string"},
		{"a default that does not fit", "types:\n  news:\n    deliver_timeout: 20s" + good, 3, "news", "call_timeout", "is over 5s"},
		{"an option of the wrong kind", "types:\n  news:\n    window: many" + good, 3, "news", "window", "want an integer"},
		{"a TTL over MaxTTL", "types:\n  news:\n    ttl: 721h" + good, 3, "news", "ttl", "outside 0..720h0m0s"},
		{"a canary ratio of 1", "types:\n  news:\n    canary_recipients: 100\n    canary_max_failure_ratio: 1" + good, 4, "news", "canary_max_failure_ratio", "outside 0 up to 1"},
		{"template that does not parse", "types:\n  news:\n    recipients: {inline: {}}\n    message:\n      template:\n        text: '{{ .ID'\n    channel: {webhook: {signing_secret_file: secrets/news-signing}}\n",
			6, "news", "message.template.text", "the template does not parse"},
		{"template that defines templates", "types:\n  news:\n    recipients: {inline: {}}\n    message:\n      template:\n        text: '{{define \"x\"}}{{end}}'\n    channel: {webhook: {signing_secret_file: secrets/news-signing}}\n",
			6, "news", "message.template.text", "not allowed in a types file"},
		{"template that reads the environment", "types:\n  news:\n    recipients: {inline: {}}\n    message:\n      template:\n        text: '{{env \"HOME\"}}'\n    channel: {webhook: {signing_secret_file: secrets/news-signing}}\n",
			6, "news", "message.template.text", `function "env" not defined`},
		{"template that reads a file", "types:\n  news:\n    recipients: {inline: {}}\n    message:\n      template:\n        text: '{{readFile \"/etc/passwd\"}}'\n    channel: {webhook: {signing_secret_file: secrets/news-signing}}\n",
			6, "news", "message.template.text", `function "readFile" not defined`},
		{"body template that reads the environment", "types:\n  news:\n    recipients:\n      http:\n        url: https://users.example.com/list\n        body: '{\"home\": {{json (env \"HOME\")}}}'\n    message: {passthrough: {}}\n    channel: {webhook: {signing_secret_file: secrets/news-signing}}\n",
			6, "news", "recipients.http.body", `function "env" not defined`},
		{"secret file that does not exist", "types:\n  news:\n    recipients: {inline: {}}\n    message: {passthrough: {}}\n    channel:\n      webhook:\n        signing_secret_file: secrets/nope\n",
			7, "news", "channel.webhook.signing_secret_file", "no such file"},
		{"signing secret that is not one", "types:\n  news:\n    recipients: {inline: {}}\n    message: {passthrough: {}}\n    channel:\n      webhook:\n        signing_secret_file: secrets/users-token\n",
			7, "news", "channel.webhook.signing_secret_file", `does not start with "whsec_"`},
		{"two types with one signing secret", "types:\n  news:" + good + "  sports:" + good, 15, "sports", "channel.webhook.signing_secret_file", `the same signing secret as type "news"`},
		{"two sources", "types:\n  news:\n    recipients:\n      inline: {}\n      http: {url: 'http://127.0.0.1:9/r'}\n    message: {passthrough: {}}\n    channel: {webhook: {signing_secret_file: secrets/news-signing}}\n",
			4, "news", "recipients", "2 sources (http, inline)"},
		{"no source", "types:\n  news:\n    recipients: {}\n    message: {passthrough: {}}\n    channel: {webhook: {signing_secret_file: secrets/news-signing}}\n",
			3, "news", "recipients", "no source: want one of http, inline, postgres"},
		{"unknown source", "types:\n  news:\n    recipients:\n      kafka: {}\n    message: {passthrough: {}}\n    channel: {webhook: {signing_secret_file: secrets/news-signing}}\n",
			4, "news", "recipients.kafka", "unknown field"},
		{"no recipients at all", "types:\n  news:\n    message: {passthrough: {}}\n    channel: {webhook: {signing_secret_file: secrets/news-signing}}\n",
			3, "news", "recipients", "missing"},
		{"bad URL", "types:\n  news:\n    recipients:\n      http:\n        url: ftp://files.example.com/list\n    message: {passthrough: {}}\n    channel: {webhook: {signing_secret_file: secrets/news-signing}}\n",
			5, "news", "recipients.http.url", `want an http or https URL, got scheme "ftp"`},
		{"URL with credentials", "types:\n  news:\n    recipients:\n      http:\n        url: https://me:secret@users.example.com/list\n    message: {passthrough: {}}\n    channel: {webhook: {signing_secret_file: secrets/news-signing}}\n",
			5, "news", "recipients.http.url", "user information in the URL"},
		{"header value_from with neither env nor file", "types:\n  news:\n    recipients:\n      http:\n        url: https://users.example.com/list\n        headers:\n          Authorization: {value_from: {}}\n    message: {passthrough: {}}\n    channel: {webhook: {signing_secret_file: secrets/news-signing}}\n",
			7, "news", "recipients.http.headers.Authorization.value_from", "no value source: want one of env, file"},
		{"header from an unset variable", "types:\n  news:\n    recipients:\n      http:\n        url: https://users.example.com/list\n        headers:\n          Authorization:\n            value_from: {env: FANOUT_TEST_UNSET_TOKEN}\n    message: {passthrough: {}}\n    channel: {webhook: {signing_secret_file: secrets/news-signing}}\n",
			8, "news", "recipients.http.headers.Authorization.value_from.env", "is not set or empty"},
		{"header the source sets", "types:\n  news:\n    recipients:\n      http:\n        url: https://users.example.com/list\n        headers: {Host: evil.example.com}\n    message: {passthrough: {}}\n    channel: {webhook: {signing_secret_file: secrets/news-signing}}\n",
			6, "news", "recipients.http.headers.Host", "not allowed here"},
		{"GET with a body", "types:\n  news:\n    recipients:\n      http:\n        url: https://users.example.com/list\n        method: GET\n        body: '{}'\n    message: {passthrough: {}}\n    channel: {webhook: {signing_secret_file: secrets/news-signing}}\n",
			7, "news", "recipients.http.body", "a GET request has no body"},
		{"JSON pointer that is not one", "types:\n  news:\n    recipients:\n      inline: {pointer: recipients}\n    message: {passthrough: {}}\n    channel: {webhook: {signing_secret_file: secrets/news-signing}}\n",
			4, "news", "recipients.inline.pointer", "is not a JSON pointer"},
		{"answer pointer with a bad escape", "types:\n  news:\n    recipients:\n      http:\n        url: https://users.example.com/list\n        answer: {id: /a~2b}\n    message: {passthrough: {}}\n    channel: {webhook: {signing_secret_file: secrets/news-signing}}\n",
			6, "news", "recipients.http.answer.id", `"~" not followed by 0 or 1`},
		{"unknown channel", "types:\n  news:\n    recipients: {inline: {}}\n    message: {passthrough: {}}\n    channel:\n      email: {from: a@example.com}\n",
			6, "news", "channel.email", "unknown field (known here: webhook)"},
		{"channel as a word", "types:\n  news:\n    recipients: {inline: {}}\n    message: {passthrough: {}}\n    channel: webhook\n",
			5, "news", "channel", "want a mapping of webhook"},
		{"content type that is not one", "types:\n  news:\n    recipients: {inline: {}}\n    message:\n      passthrough: {content_type: 'text/'}\n    channel: {webhook: {signing_secret_file: secrets/news-signing}}\n",
			5, "news", "message.passthrough.content_type", "is not a media type"},
		{"an OFFSET query", "types:\n  news:\n    recipients:\n      postgres:\n        dsn_file: secrets/followers-dsn\n        query: SELECT id, address FROM f WHERE id > :cursor ORDER BY id LIMIT :limit OFFSET 10\n    message: {passthrough: {}}\n    channel: {webhook: {signing_secret_file: secrets/news-signing}}\n",
			6, "news", "recipients.postgres.query", "OFFSET is refused"},
		{"a DSN file that does not exist", "types:\n  news:\n    recipients:\n      postgres:\n        dsn_file: secrets/nope\n        query: SELECT id, address FROM f WHERE id > :cursor ORDER BY id LIMIT :limit\n    message: {passthrough: {}}\n    channel: {webhook: {signing_secret_file: secrets/news-signing}}\n",
			5, "news", "recipients.postgres.dsn_file", "no such file"},
		{"a statement timeout out of range", "types:\n  news:\n    recipients:\n      postgres:\n        dsn_file: secrets/followers-dsn\n        query: SELECT id, address FROM f WHERE id > :cursor ORDER BY id LIMIT :limit\n        statement_timeout: 1h\n    message: {passthrough: {}}\n    channel: {webhook: {signing_secret_file: secrets/news-signing}}\n",
			7, "news", "recipients.postgres.statement_timeout", "is over 4m0s"},
		{"bad type name", "types:\n  news/sports:" + good, 2, "news/sports", "", "type"},
		{"not YAML", "types:\n  news: [\n", 2, "", "", "not YAML or JSON"},
		{"an alias", "types:\n  news: &n" + good + "  sports: *n\n", 2, "", "", "anchors and aliases are not supported"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path, errs := loadErrors(t, c.text)
			var found *Error
			for _, e := range errs {
				if e.Line == c.line && e.Type == c.typ && e.Field == c.field && strings.Contains(e.Err.Error(), c.msg) {
					found = e
				}
			}
			if found == nil {
				t.Fatalf("no error at line %d, type %q, field %q containing %q; got:\n%v", c.line, c.typ, c.field, c.msg, errs)
			}
			if found.File != path {
				t.Errorf("file %q, want %q", found.File, path)
			}
			// The message itself names them.
			want := fmt.Sprintf("%s:%d: ", path, c.line)
			if c.typ != "" {
				want += fmt.Sprintf("type %q: ", c.typ)
			}
			if c.field != "" {
				want += c.field + ": "
			}
			if !strings.HasPrefix(found.Error(), want) {
				t.Errorf("message %q does not start with %q", found.Error(), want)
			}
		})
	}
}

// Load reports every mistake of a file at once.
func TestLoadReportsAll(t *testing.T) {
	_, errs := loadErrors(t, "types:\n  news:\n    batch_size: 6000\n    windw: 3"+good+"  sports:\n    recipients: {}\n    message: {passthrough: {}}\n    channel: {webhook: {signing_secret_file: secrets/nope}}\n")
	if len(errs) != 4 {
		t.Fatalf("%d errors, want 4 (batch_size, windw, recipients, signing_secret_file): %v", len(errs), errs)
	}
}

// A type the registry has already (the stock worker's env-configured
// webhook type) is refused by Build, naming the file's line.
func TestBuildRefusesARegisteredType(t *testing.T) {
	p := writeFile(t, "types:\n  news:"+good+"  webhook:"+good[:len(good)-len("secrets/news-signing}\n")]+"secrets/alerts-signing}\n")
	f, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	reg := fanout.NewRegistry()
	reg.MustRegister("webhook", fanout.HandlerFuncs{}, fanout.TypeOptions{})
	err = Build(f, reg, Deps{})
	want := fmt.Sprintf(`%s:9: type "webhook": already registered`, p)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Build: %v, want %q", err, want)
	}
	if _, _, ok := reg.Lookup("news"); ok {
		t.Errorf("news was registered although the file was refused")
	}
	reg = fanout.NewRegistry()
	if err := Build(f, reg, Deps{}); err != nil {
		t.Fatal(err)
	}
	if got := reg.Types(); len(got) != 2 {
		t.Errorf("registered %v, want news and webhook", got)
	}
}

// FromEnv registers FANOUT_TYPES_FILE's types, and nothing without it; a
// JSON file indented with tabs is a types file too.
func TestFromEnv(t *testing.T) {
	t.Setenv("FANOUT_TYPES_FILE", "")
	reg := fanout.NewRegistry()
	if f, err := FromEnv(reg, Deps{}); f != nil || err != nil || len(reg.Types()) != 0 {
		t.Fatalf("without a file: %v, %v, %v", f, err, reg.Types())
	}
	p := writeFile(t, "{\n\t\"types\": {\n\t\t\"digest\": {\n\t\t\t\"recipients\": {\"inline\": {}},\n\t\t\t\"message\": {\"passthrough\": {}},\n\t\t\t\"channel\": {\"webhook\": {\"signing_secret_file\": \"secrets/news-signing\"}}\n\t\t}\n\t}\n}\n")
	t.Setenv("FANOUT_TYPES_FILE", p)
	f, err := FromEnv(reg, Deps{})
	if err != nil || f == nil || len(reg.Types()) != 1 || reg.Types()[0] != "digest" {
		t.Fatalf("with %s: %v, %v", p, err, reg.Types())
	}
}
