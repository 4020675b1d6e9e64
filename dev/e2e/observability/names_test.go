//go:build integration

package observability_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.yaml.in/yaml/v3"

	"github.com/fanout/fanout/workflows/vocab"
)

const (
	dashboardFile = "../../../deploy/helm/fanout/files/dashboard.json"
	rulesFile     = "../../../deploy/helm/fanout/files/rules.yaml"
)

// promExpr is a PromQL expression and where it comes from.
type promExpr struct{ where, expr string }

// dashboardExprs returns every query of the dashboard: each panel target's
// expr and each query variable's query.
func dashboardExprs(t *testing.T) []promExpr {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Type  string `json:"type"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	var out []promExpr
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			out = append(out, promExpr{"panel " + p.Title, tg.Expr})
		}
	}
	for _, v := range d.Templating.List {
		if q, ok := v.Query.(string); ok && v.Type == "query" {
			out = append(out, promExpr{"variable " + v.Name, q})
		}
	}
	return out
}

// ruleExprs returns every rule's expression and the recording rules' names.
func ruleExprs(t *testing.T) ([]promExpr, map[string]bool) {
	t.Helper()
	b, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Rules []struct {
				Record, Alert, Expr string
			}
		}
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	var out []promExpr
	records := map[string]bool{}
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				records[r.Record] = true
			}
			out = append(out, promExpr{"rule " + r.Record + r.Alert, r.Expr})
		}
	}
	return out, records
}

var (
	strLit     = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	matchers   = regexp.MustCompile(`\{[^}]*\}`)
	ranges     = regexp.MustCompile(`\[[^\]]*\]`)
	grouping   = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	identifier = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
	keywords   = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true, "inf": true, "nan": true}
)

// metricNames returns the metric names a PromQL expression selects: the
// identifiers left once strings, label matchers, ranges and grouping clauses
// are cut, that are not a function call (followed by "("), a keyword or a
// number. label_values(metric, label) yields its metric.
func metricNames(expr string) []string {
	e := strLit.ReplaceAllString(expr, `""`)
	e = matchers.ReplaceAllString(e, " ")
	e = ranges.ReplaceAllString(e, " ")
	e = grouping.ReplaceAllString(e, " ")
	if m := regexp.MustCompile(`^\s*label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)`).FindStringSubmatch(e); m != nil {
		return []string{m[1]}
	}
	var names []string
	for _, loc := range identifier.FindAllStringIndex(e, -1) {
		name := e[loc[0]:loc[1]]
		if loc[0] > 0 && (e[loc[0]-1] == '$' || e[loc[0]-1] == '.' || (e[loc[0]-1] >= '0' && e[loc[0]-1] <= '9')) {
			continue // a variable, or part of a number (1e3)
		}
		if rest := strings.TrimLeft(e[loc[1]:], " \t\n"); strings.HasPrefix(rest, "(") {
			continue // a function or aggregation
		}
		if keywords[strings.ToLower(name)] {
			continue
		}
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	return names
}

// exposes reports whether a Prometheus text exposition has a sample of name.
func exposes(body, name string) bool {
	for l := range strings.SplitSeq(body, "\n") {
		if strings.HasPrefix(l, name) && len(l) > len(name) && (l[len(name)] == '{' || l[len(name)] == ' ') {
			return true
		}
	}
	return false
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
	}
	return string(b)
}

// where says which live /metrics must have a metric, or "" when none can:
// Prometheus makes up itself; approximate_backlog_* come from the Temporal
// server's matching service; everything else from the workers (and the
// bridge, which serves the same endpoint).
func where(name string) string {
	switch {
	case name == "up":
		return ""
	case strings.HasPrefix(name, "approximate_backlog_"):
		return "server"
	default:
		return "workers"
	}
}

// missing returns, for each expression, the metric names that are neither on
// the live bodies nor recording rules defined in the file.
func missing(exprs []promExpr, records map[string]bool, bodies map[string]string) []string {
	var out []string
	for _, e := range exprs {
		for _, n := range metricNames(e.expr) {
			if strings.Contains(n, ":") {
				if !records[n] {
					out = append(out, fmt.Sprintf("%s: %s is no recording rule of %s", e.where, n, rulesFile))
				}
				continue
			}
			w := where(n)
			if w != "" && !exposes(bodies[w], n) {
				out = append(out, fmt.Sprintf("%s: %s is not on the %s' /metrics", e.where, n, w))
			}
		}
	}
	return out
}

// The acceptance of issue 13: every metric each dashboard panel and alert
// rule names is on a live /metrics: the workers' (and bridge's) after real
// deliveries (retries, failures, dead letters, duplicates and a workflow
// task failure included, so those series exist), or the Temporal server's
// for its backlog gauges.
func TestDashboardAndRulesNameLiveMetrics(t *testing.T) {
	runMetricsEvents(t)
	workflowTaskFailure(t)

	dash := dashboardExprs(t)
	rules, records := ruleExprs(t)
	all := append(slices.Clone(dash), rules...)
	names := map[string]bool{}
	for _, e := range all {
		ns := metricNames(e.expr)
		if len(ns) == 0 {
			t.Errorf("%s: no metric name found in %q", e.where, e.expr)
		}
		for _, n := range ns {
			names[n] = true
		}
	}
	// The extraction finds what the files plainly name (a regexp that
	// found nothing would pass everything).
	for _, n := range []string{"fanout_deliveries_total", "fanout_delivery_retries_total", "approximate_backlog_count",
		"approximate_backlog_age_seconds", "temporal_num_pollers", "fanout:deliveries:failure_ratio5m", "up"} {
		if !names[n] {
			t.Errorf("no expression names %s (extraction broken?): %v", n, names)
		}
	}
	if len(dash) < 15 || len(rules) < 10 {
		t.Errorf("%d dashboard and %d rule expressions: files not read whole", len(dash), len(rules))
	}

	var left []string
	start := time.Now()
	deadline := start.Add(3 * time.Minute)
	for i := 0; ; i++ {
		bodies := map[string]string{"workers": scrape(t), "server": get(t, st.TemporalMetricsURL)}
		if left = missing(all, records, bodies); len(left) == 0 {
			break
		}
		if i == 0 {
			t.Logf("not yet exported, waiting:\n%s", strings.Join(left, "\n"))
		}
		if time.Now().After(deadline) {
			t.Fatalf("metrics named but not exported:\n%s", strings.Join(left, "\n"))
		}
		time.Sleep(time.Second)
	}
	t.Logf("%d expressions, %d metric names, all live after %v: %v", len(all), len(names), time.Since(start).Round(time.Second), slices.Sorted(func(yield func(string) bool) {
		for n := range names {
			if !yield(n) {
				return
			}
		}
	}))

	// The check fails on a name no one exports, and on a recording rule
	// that is not defined.
	bodies := map[string]string{"workers": scrape(t), "server": get(t, st.TemporalMetricsURL)}
	if got := missing([]promExpr{{"control", `sum(rate(fanout_no_such_metric_total{outcome="x"}[5m])) / fanout:undefined:rate5m`}}, records, bodies); len(got) != 2 {
		t.Errorf("control: %v, want the unknown metric and the unknown recording rule", got)
	}
}

// workflowTaskFailure makes a workflow task fail on the events queue (a
// workflow type no worker registers) so that
// temporal_workflow_task_execution_failed_total exists, then terminates it.
func workflowTaskFailure(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	run, err := st.TC.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:        "wft-failure-" + runID,
		TaskQueue: vocab.EventsTaskQueue,
	}, "NoSuchWorkflowType")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = st.TC.TerminateWorkflow(context.Background(), run.GetID(), run.GetRunID(), "observability test: workflow task failure made")
	}()
	for !exposes(scrape(t), "temporal_workflow_task_execution_failed_total") {
		if ctx.Err() != nil {
			t.Fatal("no temporal_workflow_task_execution_failed_total after a workflow of an unregistered type")
		}
		time.Sleep(200 * time.Millisecond)
	}
}
