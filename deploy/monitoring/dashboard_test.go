package monitoring

import (
	"bytes"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/prometheus/prometheus/promql/parser"
)

// The committed dashboard.json is what Dashboard builds: edit dashboard.go
// and run go generate, never the JSON.
func TestDashboardFileFresh(t *testing.T) {
	want, err := JSON()
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(DashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is stale: run `go generate ./...` in deploy/monitoring (or `go run ./cmd/gendashboard`)", DashboardFile)
	}
}

// exprs reads the committed dashboard back with the SDK's types and returns
// each panel's title and its Prometheus queries.
func exprs(t *testing.T) map[string][]string {
	t.Helper()
	plugins.RegisterDefaultPlugins()
	b, err := os.ReadFile(DashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard.Dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s does not decode into the SDK's Dashboard: %v", DashboardFile, err)
	}
	if d.Uid == nil || *d.Uid != UID {
		t.Errorf("uid %v, want %s", d.Uid, UID)
	}
	out := map[string][]string{}
	ids := map[uint32]bool{}
	for _, p := range d.Panels {
		if p.RowPanel != nil {
			ids[p.RowPanel.Id] = true
			continue
		}
		if p.Panel == nil || p.Panel.Title == nil || p.Panel.Id == nil {
			t.Fatalf("panel without title or id: %+v", p)
		}
		title := *p.Panel.Title
		if ids[*p.Panel.Id] {
			t.Errorf("panel %q: id %d used twice", title, *p.Panel.Id)
		}
		ids[*p.Panel.Id] = true
		if _, dup := out[title]; dup {
			t.Errorf("two panels titled %q", title)
		}
		out[title] = nil
		for _, q := range p.Panel.Targets {
			pq, ok := q.(*prometheus.Dataquery)
			if !ok {
				t.Errorf("panel %q: query %T is not a Prometheus query", title, q)
				continue
			}
			if pq.Datasource == nil || pq.Datasource.Uid == nil || *pq.Datasource.Uid != "${datasource}" {
				t.Errorf("panel %q: query %q does not use the datasource variable", title, pq.Expr)
			}
			out[title] = append(out[title], pq.Expr)
		}
		if len(out[title]) == 0 {
			t.Errorf("panel %q has no query", title)
		}
	}
	return out
}

// Every query is valid PromQL (Grafana's variables replaced as Grafana
// does), and the panels the issue asks for are there: deliveries by outcome,
// retries, backlog per task queue, batch latency, DLQ rate, duplicates, the
// Temporal SDK's task latencies and polls.
func TestDashboardQueries(t *testing.T) {
	vars := strings.NewReplacer("$__rate_interval", "5m", "$event_type", ".*")
	var all []string
	for title, qs := range exprs(t) {
		for _, q := range qs {
			if _, err := parser.NewParser(parser.Options{}).ParseExpr(vars.Replace(q)); err != nil {
				t.Errorf("panel %q: %s: %v", title, q, err)
			}
			all = append(all, q)
		}
	}
	joined := strings.Join(all, "\n")
	for _, m := range []string{
		"fanout_deliveries_total", "fanout_delivery_retries_total", "approximate_backlog_count",
		"fanout_batch_duration_seconds_bucket", "fanout_dead_letters_total", "fanout_duplicates_skipped_total",
		"temporal_workflow_task_execution_latency_seconds_bucket", "temporal_activity_execution_latency_seconds_bucket",
		"temporal_long_request_total", "temporal_num_pollers",
	} {
		if !strings.Contains(joined, m) {
			t.Errorf("no panel queries %s", m)
		}
	}
	if slices.ContainsFunc(all, func(q string) bool { return strings.Contains(q, `outcome="retried"`) }) {
		t.Error(`a query reads outcome="retried": retries are fanout_delivery_retries_total`)
	}
}

// The test above would notice a broken query.
func TestDashboardQueriesCheckFails(t *testing.T) {
	if _, err := parser.NewParser(parser.Options{}).ParseExpr(`sum by (outcome) (rate(fanout_deliveries_total[5m])`); err == nil {
		t.Fatal("the PromQL parser accepted an unbalanced query")
	}
}
