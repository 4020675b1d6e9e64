package fanout_test

import (
	"encoding/json"
	"fmt"
	"go/format"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/fanout/fanout/internal/codecserver"
	"github.com/fanout/fanout/internal/config"
	"github.com/fanout/fanout/starter"
	"github.com/fanout/fanout/workers"
	"github.com/fanout/fanout/workers/webhook"
)

// settings are every configuration struct of the binaries: each stage's
// settings, the connections and the codec server's.
var settings = []any{workers.Config{}, webhook.Config{}, starter.Settings{}, starter.Kafka{},
	config.RedisConn{}, config.Codec{}, codecserver.Config{}}

// codeVars are the FANOUT_* variables fanout's code reads: the env tags of
// every configuration struct and the names read outside them.
func codeVars() map[string]bool {
	vars := map[string]bool{}
	for _, e := range config.EnvVars(settings...) {
		vars[e.Name] = true
	}
	for _, n := range config.FanoutEnvConstants {
		vars[n] = true
	}
	return vars
}

var (
	fanoutName = regexp.MustCompile(`FANOUT_[A-Z0-9_]*[A-Z0-9](_?\*)?`)
	heading    = regexp.MustCompile(`(?m)^## `)
)

// configurationSection is README.md's "## Configuration" section, up to the
// next level-2 heading (its subsections, Security in production among
// them, included).
func configurationSection(t *testing.T, readme string) string {
	t.Helper()
	i := strings.Index(readme, "\n## Configuration\n")
	if i < 0 {
		t.Fatal("README.md has no ## Configuration section")
	}
	sec := readme[i+1:]
	if loc := heading.FindStringIndex(sec[3:]); loc != nil {
		sec = sec[:loc[0]+3]
	}
	return sec
}

// documented are the variables named in the first column of the tables of
// the section, wildcards (FANOUT_KAFKA_TLS*) apart.
func documented(sec string) (names, wildcards []string) {
	for line := range strings.Lines(sec) {
		cells := strings.Split(line, "|")
		if !strings.HasPrefix(line, "|") || len(cells) < 3 {
			continue
		}
		for _, n := range fanoutName.FindAllString(cells[1], -1) {
			if strings.HasSuffix(n, "*") {
				wildcards = append(wildcards, n)
			} else {
				names = append(names, n)
			}
		}
	}
	return names, wildcards
}

// Every FANOUT_* variable the code reads has a row in a table of the
// README's Configuration section (the main table or those of Security in
// production), and every FANOUT_* the README names anywhere is one the code
// reads (or a wildcard that matches some).
func TestREADMEConfigurationTables(t *testing.T) {
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	code := codeVars()
	if len(code) < 40 || !code["FANOUT_TEMPORAL_API_KEY_FILE"] || !code["FANOUT_CODEC_TOKEN"] || !code["FANOUT_KAFKA_SASL_PASSWORD_FILE"] {
		t.Fatalf("read only %d variables from the code: %v", len(code), slices.Sorted(maps.Keys(code)))
	}
	names, wildcards := documented(configurationSection(t, readme))
	if len(names) == 0 {
		t.Fatal("found no table rows naming FANOUT_* variables in ## Configuration")
	}
	inTables := map[string]bool{}
	for _, n := range names {
		inTables[n] = true
	}
	var missing []string
	for v := range code {
		if !inTables[v] {
			missing = append(missing, v)
		}
	}
	slices.Sort(missing)
	if len(missing) > 0 {
		t.Errorf("README.md's Configuration tables lack %d variables the code reads: %s", len(missing), strings.Join(missing, ", "))
	}
	for _, w := range wildcards {
		prefix := strings.TrimSuffix(w, "*")
		if !slices.ContainsFunc(slices.Collect(maps.Keys(code)), func(v string) bool { return strings.HasPrefix(v, prefix) }) {
			t.Errorf("README.md names %s, which matches no variable the code reads", w)
		}
	}
	unknown := map[string]bool{}
	for _, n := range fanoutName.FindAllString(readme, -1) {
		if !strings.HasSuffix(n, "*") && !code[n] {
			unknown[n] = true
		}
	}
	if len(unknown) > 0 {
		t.Errorf("README.md names variables no code reads: %v", slices.Sorted(maps.Keys(unknown)))
	}
}

// The checks above fire: a table without a row, and a name the code does
// not read, are both caught.
func TestREADMECheckFires(t *testing.T) {
	sec := "## Configuration\n\n| variable | meaning |\n| --- | --- |\n| `FANOUT_QUEUES` | queues |\n| `FANOUT_KAFKA_TLS*` | TLS |\n\nText `FANOUT_REDIS_URL` outside a table.\n"
	names, wild := documented(configurationSection(t, "# x\n"+sec+"## Next\n| `FANOUT_BRIDGE` | no |\n"))
	if !slices.Equal(names, []string{"FANOUT_QUEUES"}) || !slices.Equal(wild, []string{"FANOUT_KAFKA_TLS*"}) {
		t.Fatalf("documented = %v, %v; want only the table's FANOUT_QUEUES and the wildcard", names, wild)
	}
	if code := codeVars(); code["FANOUT_NOT_A_VARIABLE"] || !code["FANOUT_QUEUES"] {
		t.Fatal("codeVars is wrong")
	}
}

var backticked = regexp.MustCompile("`([^`]*)`")

// documentedDefaults are the defaults of the section's tables that have a
// "default" column, for the rows that name variables in their first
// column: the backticked values of that cell, one a variable (`1s`, `1m`
// for two variables), or "" when the cell of a single variable starts with
// none (prose: unset, —, "an eighth of ...", "10 batches, at most
// `20000`"); a row summing up several variables in prose is skipped.
func documentedDefaults(sec string) map[string]string {
	out := map[string]string{}
	col, inTable := -1, false
	for line := range strings.Lines(sec) {
		if !strings.HasPrefix(line, "|") {
			inTable = false
			continue
		}
		cells := strings.Split(line, "|")
		if !inTable { // the header row
			inTable, col = true, -1
			for i, c := range cells {
				if strings.TrimSpace(c) == "default" {
					col = i
				}
			}
			continue
		}
		names := fanoutName.FindAllString(cells[1], -1)
		if col < 0 || len(cells) <= col || len(names) == 0 || strings.HasSuffix(names[0], "*") {
			continue
		}
		cell := strings.TrimSpace(cells[col])
		var vals []string
		if strings.HasPrefix(cell, "`") {
			for _, m := range backticked.FindAllStringSubmatch(cell, -1) {
				vals = append(vals, m[1])
			}
		}
		for i, n := range names {
			switch {
			case len(vals) == len(names):
				out[n] = vals[i]
			case len(vals) == 0 && len(names) == 1:
				out[n] = ""
			case len(vals) == 0: // a summary row of several variables, detailed elsewhere
			default:
				out[n] = "?" + cell // one default for several variables: compared as a whole
			}
		}
	}
	return out
}

// sameDefault: the README's "0" and "false" are the zero value the code
// lists as no default.
func sameDefault(doc, code string) bool {
	return doc == code || code == "" && (doc == "0" || doc == "false")
}

// TestREADMEDefaults: every default the README's Configuration tables give
// is the default in the code (the one -h prints, from the stage's settings
// and the constants they read), and a variable with a default in the code
// has it in the README.
func TestREADMEDefaults(t *testing.T) {
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := documentedDefaults(configurationSection(t, string(b)))
	if doc["FANOUT_QUEUES"] == "" || doc["FANOUT_MAX_ATTEMPTS"] == "" {
		t.Fatalf("read no defaults from the README's tables: %v", doc)
	}
	for _, e := range config.EnvVars(settings...) {
		d, ok := doc[e.Name]
		if !ok {
			continue // rows of several variables: TestREADMEConfigurationTables
		}
		if !sameDefault(d, e.Default) {
			t.Errorf("README.md gives %s the default %q; the code's is %q", e.Name, d, e.Default)
		}
	}
}

// The defaults check fires on a documented default that is not the code's.
func TestREADMEDefaultsCheckFires(t *testing.T) {
	sec := "## Configuration\n\n| variable | used by | default | meaning |\n| --- | --- | --- | --- |\n" +
		"| `FANOUT_MAX_ATTEMPTS` | worker | `5` | attempts |\n| `FANOUT_RETRY_INITIAL`, `FANOUT_RETRY_MAX` | worker | `1s`, `1m` | backoff |\n" +
		"| `FANOUT_RECIPIENTS_URL` | worker | — | endpoint |\n"
	doc := documentedDefaults(configurationSection(t, "# x\n"+sec+"## Next\n"))
	want := map[string]string{"FANOUT_MAX_ATTEMPTS": "5", "FANOUT_RETRY_INITIAL": "1s", "FANOUT_RETRY_MAX": "1m", "FANOUT_RECIPIENTS_URL": ""}
	if !maps.Equal(doc, want) {
		t.Fatalf("documentedDefaults = %v, want %v", doc, want)
	}
	code := map[string]string{}
	for _, e := range config.EnvVars(settings...) {
		code[e.Name] = e.Default
	}
	if sameDefault(doc["FANOUT_MAX_ATTEMPTS"], code["FANOUT_MAX_ATTEMPTS"]) {
		t.Errorf("a README default of 5 passes against the code's %q", code["FANOUT_MAX_ATTEMPTS"])
	}
}

// readmeGoProgram is the Go program of README.md's "Define an event type in
// Go" section (its first go block, a package main) and the README line it
// starts on.
func readmeGoProgram(t *testing.T, readme string) (src string, line int) {
	t.Helper()
	const section = "\n## Define an event type in Go\n"
	i := strings.Index(readme, section)
	if i < 0 {
		t.Fatalf("README.md has no%s", strings.TrimRight(section, "\n"))
	}
	start := i + len(section)
	end := len(readme)
	if j := strings.Index(readme[start:], "\n## "); j >= 0 {
		end = start + j
	}
	const fence = "\n```go\n"
	k := strings.Index(readme[start:end], fence)
	if k < 0 {
		t.Fatal("README.md, Define an event type in Go: no ```go block")
	}
	body := start + k + len(fence)
	stop := strings.Index(readme[body:end], "\n```")
	if stop < 0 {
		t.Fatal("README.md, Define an event type in Go: the ```go block is not closed")
	}
	src = readme[body : body+stop+1]
	if !strings.HasPrefix(src, "package main\n") {
		t.Fatalf("README.md, Define an event type in Go: the first go block is not a program (package main): %.40q", src)
	}
	return src, strings.Count(readme[:body], "\n") + 1
}

// exampleDir is the package the README's program is compiled as, through
// go build -overlay: inside this module (its imports resolve with this
// go.mod) but never on disk.
const exampleDir = "readme-example-program"

// TestREADMEGoExample: the README's Go program is the one compiled, as it
// stands (errors point at README.md's lines); a user who copies it gets a
// program that builds against this module.
func TestREADMEGoExample(t *testing.T) {
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	src, line := readmeGoProgram(t, string(b))
	if formatted, err := format.Source([]byte(src)); err == nil && string(formatted) != src {
		t.Errorf("the README's Go example (README.md line %d) is not gofmt-formatted", line)
	}
	bin, err := buildProgram(t, fmt.Sprintf("//line README.md:%d\n%s", line, src))
	if err != nil {
		t.Fatalf("the README's Go example (README.md line %d) does not compile: %v", line, err)
	}
	// It is a main of its own on the stock wiring: workers.Main's -h names
	// its Go type and the variables it reads, the types file's among them,
	// and starts nothing (the type's own Redis is never dialled).
	if !strings.Contains(src, "\tworkers.Main(reg") {
		t.Errorf("the README's Go example (README.md line %d) does not run its registry with workers.Main", line)
	}
	out, err := exec.Command(bin, "-h").Output()
	if err != nil {
		t.Fatalf("the README's program -h: %v", err)
	}
	for _, want := range []string{"order-shipped", "FANOUT_TYPES_FILE", "FANOUT_QUEUES", "FANOUT_BRIDGE", "TEMPORAL_ADDRESS", "-version"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the README's program -h does not mention %s:\n%s", want, out)
		}
	}
}

// The check fires: the same program with one undefined name does not build.
func TestREADMEGoExampleCheckFires(t *testing.T) {
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	src, _ := readmeGoProgram(t, string(b))
	broken := strings.Replace(src, "func main() {\n", "func main() {\n\tundefinedInTheREADME()\n", 1)
	if broken == src {
		t.Fatal("the README's program has no func main")
	}
	if _, err := buildProgram(t, broken); err == nil || !strings.Contains(err.Error(), "undefinedInTheREADME") {
		t.Fatalf("a broken program built: %v", err)
	}
}

// buildProgram compiles src as package exampleDir of this module and
// returns the binary.
func buildProgram(t *testing.T, src string) (string, error) {
	t.Helper()
	if _, err := os.Stat(exampleDir); err == nil {
		t.Fatalf("%s exists in the tree; the overlay would mix with it", exampleDir)
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	file := filepath.Join(tmp, "main.go")
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	overlay, err := json.Marshal(map[string]map[string]string{"Replace": {filepath.Join(wd, exampleDir, "main.go"): file}})
	if err != nil {
		t.Fatal(err)
	}
	ovFile := filepath.Join(tmp, "overlay.json")
	if err := os.WriteFile(ovFile, overlay, 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(tmp, "example")
	out, err := exec.Command("go", "build", "-overlay", ovFile, "-o", bin, "./"+exampleDir).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%v\n%s", err, out)
	}
	return bin, nil
}
