package docs

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/fanout/fanout/types"
)

// MaxREADMELines bounds README.md: what fanout is, how to run, publish,
// define, deploy and operate it, in ten minutes of reading; the rest is in
// docs/.
const MaxREADMELines = 250

// pages are the user documentation: the README and every page of docs/,
// with SECURITY.md (whose links are checked too).
func pages(t *testing.T) []string {
	t.Helper()
	ps, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) < 12 {
		t.Fatalf("found only %d pages under docs/", len(ps))
	}
	return append([]string{filepath.Join(root, "README.md"), filepath.Join(root, "SECURITY.md")}, ps...)
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func rel(path string) string {
	r, err := filepath.Rel(root, path)
	if err != nil {
		return path
	}
	return r
}

// prose is a page without its fenced code blocks (each line blanked, so
// line numbers hold) and without inline code spans.
func prose(page string) []string {
	lines := strings.Split(page, "\n")
	out := make([]string, len(lines))
	fence := ""
	for i, l := range lines {
		trim := strings.TrimLeft(l, " ")
		switch {
		case fence == "" && (strings.HasPrefix(trim, "```") || strings.HasPrefix(trim, "~~~")):
			fence = trim[:3]
		case fence != "" && strings.HasPrefix(trim, fence):
			fence = ""
		case fence == "":
			out[i] = inlineCode.ReplaceAllString(l, "")
		}
	}
	return out
}

var (
	inlineCode = regexp.MustCompile("`[^`]*`")
	// link is an inline link or image: [text](target "title").
	link      = regexp.MustCompile(`!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^()\s]+)(?:\s+"[^"]*")?\)`)
	heading   = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
	htmlID    = regexp.MustCompile(`<a\s+(?:id|name)="([^"]+)"`)
	mdLink    = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
	hasScheme = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
)

// anchors are the fragments a page's headings make on GitHub: the heading's
// text (links as their text, code without backticks) lower-cased, every
// character but letters, digits, spaces, hyphens and underscores dropped,
// spaces made hyphens; a repeated one gets -1, -2, ...; and explicit
// <a id> / <a name> anchors.
func anchors(page string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	lines := strings.Split(page, "\n")
	fence := ""
	for _, l := range lines {
		trim := strings.TrimLeft(l, " ")
		if fence == "" && (strings.HasPrefix(trim, "```") || strings.HasPrefix(trim, "~~~")) {
			fence = trim[:3]
			continue
		}
		if fence != "" {
			if strings.HasPrefix(trim, fence) {
				fence = ""
			}
			continue
		}
		for _, m := range htmlID.FindAllStringSubmatch(l, -1) {
			out[m[1]] = true
		}
		m := heading.FindStringSubmatch(l)
		if m == nil || !strings.HasPrefix(l, "#") {
			continue
		}
		a := Slug(m[1])
		if n := seen[a]; n > 0 {
			out[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

// Slug is GitHub's anchor of a heading's text.
func Slug(text string) string {
	text = mdLink.ReplaceAllString(text, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// brokenLinks are the relative links of page (at path) whose file or
// anchor does not exist.
func brokenLinks(t *testing.T, path, page string) []string {
	t.Helper()
	var bad []string
	for i, l := range prose(page) {
		for _, m := range link.FindAllStringSubmatch(l, -1) {
			target := m[1]
			if hasScheme.MatchString(target) {
				continue
			}
			file, frag, _ := strings.Cut(target, "#")
			dest := path
			if file != "" {
				dest = filepath.Join(filepath.Dir(path), filepath.FromSlash(file))
				if r, err := filepath.Rel(root, dest); err != nil || strings.HasPrefix(r, "..") {
					bad = append(bad, fmt.Sprintf("%s:%d: %s leaves the repository", rel(path), i+1, target))
					continue
				}
				if _, err := os.Stat(dest); err != nil {
					bad = append(bad, fmt.Sprintf("%s:%d: %s: no such file", rel(path), i+1, target))
					continue
				}
			}
			if frag == "" || !strings.HasSuffix(dest, ".md") {
				continue
			}
			destPage := page
			if dest != path {
				destPage = read(t, dest)
			}
			if !anchors(destPage)[frag] {
				bad = append(bad, fmt.Sprintf("%s:%d: %s: %s has no heading with the anchor #%s", rel(path), i+1, target, rel(dest), frag))
			}
		}
	}
	return bad
}

// TestLinksResolve: every relative link and #anchor of the README and of
// docs/ resolves (a file of the repository, a heading of the page).
func TestLinksResolve(t *testing.T) {
	n := 0
	for _, p := range pages(t) {
		page := read(t, p)
		for _, l := range prose(page) {
			n += len(link.FindAllString(l, -1))
		}
		for _, b := range brokenLinks(t, p, page) {
			t.Error(b)
		}
	}
	if n < 60 {
		t.Fatalf("found only %d links", n)
	}
}

// The link check fires on a missing file, a missing anchor and a link
// leaving the repository, and reads anchors as GitHub makes them.
func TestLinksCheckFires(t *testing.T) {
	page := "# T\n\n## 3. Pause, resume, cap the rate\n## Temporal's `cost` [per](../README.md) event\n## Dup\n## Dup\n\n" +
		"[a](#3-pause-resume-cap-the-rate) [b](#temporals-cost-per-event) [c](#dup-1) [ok](../README.md#fanout)\n" +
		"[gone](nothere.md) [anchor](#nope) [out](../../../etc/passwd) [web](https://example.com/#x)\n" +
		"```\n[in code](nothere-either.md)\n```\n"
	bad := brokenLinks(t, filepath.Join(root, "docs", "test.md"), page)
	if len(bad) != 3 || !strings.Contains(bad[0], "nothere.md") || !strings.Contains(bad[1], "#nope") || !strings.Contains(bad[2], "leaves") {
		t.Fatalf("brokenLinks = %q; want the missing file, the missing anchor and the link out", bad)
	}
}

// TestREADMELength: the README stays short.
func TestREADMELength(t *testing.T) {
	n := strings.Count(read(t, filepath.Join(root, "README.md")), "\n")
	if n > MaxREADMELines {
		t.Fatalf("README.md has %d lines; at most %d (move the details to a page under docs/)", n, MaxREADMELines)
	}
}

// history are words that tell when, where or by whom something was
// measured or tried, which belong in git's history, not in user
// documentation: machines A/B, trials and reverted changes, sessions, who
// measured, per-run targets ticked or crossed, and dates (an RFC 3339
// time, 2026-12-24T09:00:00Z, or a time of day after the date, is an
// example of a scheduled event, not a date of measurement).
var history = []*regexp.Regexp{
	regexp.MustCompile(`\bmachines? [AB]\b`),
	regexp.MustCompile(`(?i)\bmachines A and B\b`),
	regexp.MustCompile(`(?i)\btrials?\b`),
	regexp.MustCompile(`(?i)\breverted\b`),
	regexp.MustCompile(`(?i)\b(this|last|earlier|previous|later|an earlier|the next) sessions?\b`),
	regexp.MustCompile(`(?i)\bsession's\b`),
	regexp.MustCompile(`(?i)\b(we|I|the helper) (measured|tried|ran|saw)\b`),
	regexp.MustCompile(`(?i)\bhelper's\b`),
	regexp.MustCompile(`(?i)\b(was|were) tried and\b`),
	regexp.MustCompile(`(?i)\banother day's\b`),
	regexp.MustCompile(`(?i)\b(a|the) (second|third|fourth|fifth|tenth) run\b`),
	regexp.MustCompile(`[✔✘]`),
	regexp.MustCompile(`\b20\d\d-[01]\d-[0-3]\d\b($|[^T0-9 ]| [^0-9]| \d[^0-9]| \d\d[^:])`),
}

// historyWords are the lines of page that speak of measurement history.
func historyWords(page string) []string {
	var out []string
	for i, l := range strings.Split(page, "\n") {
		for _, re := range history {
			if m := re.FindString(l); m != "" {
				out = append(out, fmt.Sprintf("%d: %q", i+1, m))
			}
		}
	}
	return out
}

// TestNoMeasurementHistory: no page says when or by whom something was
// measured, of machines A/B or of trials.
func TestNoMeasurementHistory(t *testing.T) {
	for _, p := range pages(t) {
		if filepath.Base(p) == "SECURITY.md" {
			continue
		}
		for _, w := range historyWords(read(t, p)) {
			t.Errorf("%s:%s: measurement history belongs in git, not in the docs", rel(p), w)
		}
	}
}

// The wording check fires on the lab notebook the README was (lines of
// its earlier text) and not on what the docs must say.
func TestNoMeasurementHistoryCheckFires(t *testing.T) {
	for _, l := range []string{
		"The table above was measured on the development machine of an earlier session (machine A). The",
		"| scenario (machine B) | run 1 | run 2 | run 3 | median | before | target |",
		"| floor | 1,000,000 deliveries | **heavy/floor 0.69** (median of three: 0.60, 0.76, 0.69; a fourth run 0.59) | ≥ 0.6 ✔ |",
		"| light-burst: Temporal CPU per event | 8.45 ms | 8.8 ms | 8.55 ms | **8.55 ms** | 9.55 ms | ≤ 5 ✘ |",
		"256 MiB limit was tried on machine B, where a `perf` profile put ~9 % of the server's CPU in",
		"(`system.enableActivityEagerExecution`) was tried and saved nothing",
		"0.87, 0.50, 1.14 alone in this session (brake 500/s instead: 0.93, 1.06, 0.98); the low event",
		"total CPU 205 µs (the helper's run with the old client) → 135 µs;",
		"\"before\" column is another day's runs on the same machine, and the floor moved with it (5.75–6.45",
		"Eager activity execution was a trial and was reverted.",
		"measured 2026-11-30 on the development machine",
	} {
		if len(historyWords(l)) == 0 {
			t.Errorf("not caught: %q", l)
		}
	}
	for _, l := range []string{
		"batch's retry comes back after the cooldown, when one probe call goes through (a success closes",
		`echo '{"id":"launch-1","type":"webhook","deliver_at":"2026-12-24T09:00:00Z","payload":{"audience":1000}}' |`,
		"workflow metadata --workflow-id fanout/webhook/launch-1`) read `**scheduled** for 2026-12-24 09:00:00 UTC (in …)`.",
		"| Redis | 7.0 | `SET ... NX GET` (the gate and the event record) |",
		"The sessions of a Temporal UI user; a machine's CPU; the runs of a big event (continue-as-new).",
		"`FANOUT_EVENT_TTL`, 30 days by default; the `reschedule` update takes `\"2026-12-24T10:30:00Z\"`",
	} {
		if w := historyWords(l); len(w) > 0 {
			t.Errorf("a legitimate line is caught (%v): %q", w, l)
		}
	}
}

var (
	fanoutName = regexp.MustCompile(`FANOUT_[A-Z0-9_]*[A-Z0-9](_?\*)?`)
)

// TestPagesNameOnlyVariablesTheCodeReads: every FANOUT_* the README and the
// docs name is a variable the code reads, or a wildcard (FANOUT_KAFKA_TLS*)
// that matches some.
func TestPagesNameOnlyVariablesTheCodeReads(t *testing.T) {
	code := codeReads(t)
	for _, p := range pages(t) {
		for i, l := range strings.Split(read(t, p), "\n") {
			for _, n := range fanoutName.FindAllString(l, -1) {
				if prefix, wild := strings.CutSuffix(n, "*"); wild {
					if !slices.ContainsFunc(keys(code), func(v string) bool { return strings.HasPrefix(v, prefix) }) {
						t.Errorf("%s:%d: %s matches no variable the code reads", rel(p), i+1, n)
					}
				} else if code[n] == "" {
					t.Errorf("%s:%d: %s is no variable the code reads", rel(p), i+1, n)
				}
			}
		}
	}
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

var secretPath = regexp.MustCompile(`secrets/[A-Za-z0-9._-]+`)

// readmeTypesFile is the README's types file example: the yaml block of
// its "Your own event type" section.
func readmeTypesFile(t *testing.T) string {
	t.Helper()
	readme := read(t, filepath.Join(root, "README.md"))
	i := strings.Index(readme, "\n## Your own event type\n")
	if i < 0 {
		t.Fatal("README.md has no ## Your own event type")
	}
	sec := readme[i+1:]
	if j := strings.Index(sec[3:], "\n## "); j >= 0 {
		sec = sec[:j+3]
	}
	const fence = "```yaml\n"
	k := strings.Index(sec, fence)
	if k < 0 {
		t.Fatal("README.md, Your own event type: no ```yaml block")
	}
	body := sec[k+len(fence):]
	end := strings.Index(body, "\n```")
	if end < 0 {
		t.Fatal("README.md, Your own event type: the yaml block is not closed")
	}
	return body[:end+1]
}

// loadTypesFile loads src as a types file, with the secret files it names
// (secrets/...) created beside it.
func loadTypesFile(t *testing.T, src string) (*types.File, error) {
	t.Helper()
	dir := t.TempDir()
	for _, s := range secretPath.FindAllString(src, -1) {
		p := filepath.Join(dir, s)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	file := filepath.Join(dir, "types.yaml")
	if err := os.WriteFile(file, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	return types.Load(file)
}

// TestREADMETypesFile: the README's types file is one the stock worker
// loads as it stands.
func TestREADMETypesFile(t *testing.T) {
	f, err := loadTypesFile(t, readmeTypesFile(t))
	if err != nil {
		t.Fatalf("the README's types file does not load: %v", err)
	}
	if len(f.Types) == 0 {
		t.Fatal("the README's types file defines no type")
	}
}

// The types file check fires: the README's file with an unknown option is
// refused.
func TestREADMETypesFileCheckFires(t *testing.T) {
	src := readmeTypesFile(t)
	broken := strings.Replace(src, "    recipients:\n", "    batch_sise: 10\n    recipients:\n", 1)
	if broken == src {
		t.Fatal("the README's types file has no recipients: line to put a mistake before")
	}
	if _, err := loadTypesFile(t, broken); err == nil || !strings.Contains(err.Error(), "batch_sise") {
		t.Fatalf("a types file with an unknown option loaded: %v", err)
	}
}
