package validate

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"sigs.k8s.io/yaml"
)

const (
	runbookFile = "../../docs/runbook.md"
	chartFile   = ChartDir + "/Chart.yaml"
)

// headingAnchors returns the anchors GitHub gives a Markdown file's
// headings: lower case, punctuation but hyphens dropped, spaces to hyphens.
func headingAnchors(t *testing.T, file string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	drop := regexp.MustCompile(`[^\p{L}\p{N} _-]`)
	out := map[string]bool{}
	inFence := false
	for line := range strings.Lines(string(b)) {
		if strings.HasPrefix(line, "```") {
			inFence = !inFence
		}
		if inFence || !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.TrimSpace(strings.TrimLeft(line, "#"))
		out[strings.ReplaceAll(drop.ReplaceAllString(strings.ToLower(h), ""), " ", "-")] = true
	}
	return out
}

// alertRules parses rules.yaml with Prometheus' parser and returns its
// alerting rules.
func alertRules(t *testing.T) []rulefmt.Rule {
	t.Helper()
	b, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	groups, errs := rulefmt.Parse(b, false, model.UTF8Validation, parser.NewParser(parser.Options{}), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	var out []rulefmt.Rule
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				out = append(out, r)
			}
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s: no alerts", rulesFile)
	}
	return out
}

// TestAlertRunbookURLs: every alert has a runbook_url into this
// repository's docs/runbook.md, at an anchor one of its headings makes.
func TestAlertRunbookURLs(t *testing.T) {
	var chart struct {
		Home string `json:"home"`
	}
	b, err := os.ReadFile(chartFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &chart); err != nil || chart.Home == "" {
		t.Fatalf("%s: no home (%v)", chartFile, err)
	}
	prefix := strings.TrimSuffix(chart.Home, "/") + "/blob/main/docs/runbook.md#"
	anchors := headingAnchors(t, runbookFile)
	for _, r := range alertRules(t) {
		u := r.Annotations["runbook_url"]
		anchor, ok := strings.CutPrefix(u, prefix)
		switch {
		case u == "":
			t.Errorf("alert %s: no runbook_url annotation", r.Alert)
		case !ok:
			t.Errorf("alert %s: runbook_url %q is not under %s", r.Alert, u, prefix)
		case !anchors[anchor]:
			t.Errorf("alert %s: runbook_url %q: %s has no heading with anchor %q (it has %v)", r.Alert, u, runbookFile, anchor, slices.Sorted(maps.Keys(anchors)))
		}
	}
}

// commandRef is a `starter ...` or `temporal ...` command an alert text
// names (in backquotes).
var commandRef = regexp.MustCompile("`((?:starter|temporal) [^`]*)`")

// commandPath is the command's words up to its first flag or template.
func commandPath(cmd string) []string {
	var out []string
	for _, w := range strings.Fields(cmd) {
		if strings.HasPrefix(w, "-") || strings.HasPrefix(w, "{{") {
			break
		}
		out = append(out, w)
	}
	return out
}

// starterCommands lists the subcommands `starter -h` prints.
func starterCommands(t *testing.T) map[string]bool {
	t.Helper()
	cmd := exec.Command("go", "run", "./starter/cmd/starter", "-h")
	cmd.Dir = repoRoot
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go run ./starter/cmd/starter -h: %v", err)
	}
	subs := map[string]bool{}
	in := false
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "Commands:":
			in = true
		case in && strings.TrimSpace(line) == "":
			in = false
		case in:
			subs[strings.Fields(line)[0]] = true
		}
	}
	if !subs["redrive"] {
		t.Fatalf("starter -h lists no commands under \"Commands:\" (has its help changed?):\n%s", out)
	}
	return subs
}

// temporalCLI is the temporal CLI: the repository's .bin/temporal (what
// the dev stack uses), else the one on PATH.
func temporalCLI(t *testing.T) string {
	t.Helper()
	if p, err := filepath.Abs(filepath.Join(repoRoot, ".bin", "temporal")); err == nil {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	p, err := exec.LookPath("temporal")
	if err != nil {
		t.Fatalf("no temporal CLI in %s/.bin or on PATH (go tool task dev installs it)", repoRoot)
	}
	return p
}

// TestAlertCommandsExist: every `starter <command>` an alert's text names
// is a command `starter -h` lists, and every `temporal <command path>` is
// one the temporal CLI has (its -h prints that path's usage).
func TestAlertCommandsExist(t *testing.T) {
	subs := starterCommands(t)
	var temporal string
	checked := 0
	for _, r := range alertRules(t) {
		for key, text := range r.Annotations {
			for _, m := range commandRef.FindAllStringSubmatch(text, -1) {
				path := commandPath(m[1])
				where := fmt.Sprintf("alert %s %s: `%s`", r.Alert, key, m[1])
				if len(path) < 2 {
					t.Errorf("%s: name the subcommand", where)
					continue
				}
				checked++
				if path[0] == "starter" {
					if !subs[path[1]] {
						t.Errorf("%s: starter has no command %q (starter -h lists %v)", where, path[1], slices.Sorted(maps.Keys(subs)))
					}
					continue
				}
				if temporal == "" {
					temporal = temporalCLI(t)
				}
				out, _ := exec.Command(temporal, append(path[1:], "-h")...).CombinedOutput()
				if want := "Usage:\n  " + strings.Join(path, " ") + " "; !strings.Contains(string(out), want) {
					t.Errorf("%s: the temporal CLI has no command %q (its -h does not print %q)", where, strings.Join(path, " "), want)
				}
			}
		}
	}
	if checked == 0 {
		t.Errorf("%s: no alert names a command; the test checks nothing", rulesFile)
	}
}
