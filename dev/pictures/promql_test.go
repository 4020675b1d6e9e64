package pictures

import (
	"bytes"
	"context"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
)

// scrapesOf builds scrapes one second apart from a function of the
// scrape's index giving each series' value.
func scrapesOf(n int, f func(i int) []Sample) []Scrape {
	out := make([]Scrape, n)
	for i := range out {
		s := map[string]Sample{}
		for _, smp := range f(i) {
			s[smp.Labels.key()] = smp
		}
		out[i] = Scrape{At: float64(i), Series: s}
	}
	return out
}

func last(t *testing.T, pts map[string][]Point, labels map[string]Labels, want Labels) float64 {
	t.Helper()
	for k, l := range labels {
		if l.key() == want.key() {
			return pts[k][len(pts[k])-1].Y
		}
	}
	t.Fatalf("no series %v in %v", want, labels)
	return 0
}

func TestEval(t *testing.T) {
	// Deliveries: 10/s delivered, 2/s failed (one process restarted at
	// scrape 6: its counter starts again); calls in a histogram with half
	// under 0.1 s, all under 1 s.
	scrapes := scrapesOf(12, func(i int) []Sample {
		ok := float64(10 * i)
		failed := float64(2 * i)
		if i >= 6 {
			failed = float64(2 * (i - 6))
		}
		n := float64(100 * i)
		return []Sample{
			{Labels{"__name__": "fanout_deliveries_total", "outcome": "delivered", "event_type": "webhook"}, ok},
			{Labels{"__name__": "fanout_deliveries_total", "outcome": "failed", "event_type": "webhook"}, failed},
			{Labels{"__name__": "calls_bucket", "le": "0.1"}, n / 2},
			{Labels{"__name__": "calls_bucket", "le": "1"}, n},
			{Labels{"__name__": "calls_bucket", "le": "+Inf"}, n},
			{Labels{"__name__": "backlog", "taskqueue": "fanout-delivery-high"}, 7},
			{Labels{"__name__": "backlog", "taskqueue": "other"}, 100},
		}
	})
	pts, labels, err := Eval(`sum by (outcome) (rate(fanout_deliveries_total{event_type=~".*"}[1m]))`, scrapes, 3)
	if err != nil {
		t.Fatal(err)
	}
	if v := last(t, pts, labels, Labels{"outcome": "delivered"}); v != 10 {
		t.Errorf("delivered rate %v, want 10", v)
	}
	if v := last(t, pts, labels, Labels{"outcome": "failed"}); v != 2 {
		t.Errorf("failed rate across the reset %v, want 2", v)
	}
	if n := len(pts[Labels{"outcome": "delivered"}.key()]); n != 12-3 {
		t.Errorf("%d points, want one per scrape after the window (9)", n)
	}
	pts, labels, err = Eval(`sum(rate(fanout_deliveries_total{outcome="failed"}[1m])) / sum(rate(fanout_deliveries_total[1m]))`, scrapes, 3)
	if err != nil {
		t.Fatal(err)
	}
	if v := last(t, pts, labels, Labels{}); math.Abs(v-2.0/12) > 1e-9 {
		t.Errorf("failure ratio %v, want 1/6", v)
	}
	pts, labels, err = Eval(`histogram_quantile(0.75, sum by (le) (rate(calls_bucket[5m])))`, scrapes, 3)
	if err != nil {
		t.Fatal(err)
	}
	// Rank 75 of 100: halfway between 0.1 (50) and 1 (100).
	if v := last(t, pts, labels, Labels{}); math.Abs(v-0.55) > 1e-9 {
		t.Errorf("p75 %v, want 0.55", v)
	}
	pts, labels, err = Eval(`max by (taskqueue) (backlog{taskqueue=~"fanout-.*"})`, scrapes, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(labels) != 1 || last(t, pts, labels, Labels{"taskqueue": "fanout-delivery-high"}) != 7 {
		t.Errorf("backlog: %v", labels)
	}
	for _, bad := range []string{`topk(3, backlog)`, `rate(backlog)`, `backlog[1m]`, `sum by (x (backlog)`, `backlog{a~"b"}`} {
		if _, _, err := Eval(bad, scrapes, 1); err == nil {
			t.Errorf("%s: evaluated", bad)
		}
	}
}

// Every query of the shipped dashboard is one the page can draw: a query
// of another form would leave its panel saying "not drawn".
func TestDashboardQueriesParse(t *testing.T) {
	raw, err := os.ReadFile("../../deploy/helm/fanout/files/dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	d, err := ParseDashboard(raw)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range d.Panels {
		for _, q := range p.Targets {
			n++
			if _, err := parse(queryVars.Replace(q.Expr)); err != nil {
				t.Errorf("panel %q: %s: %v", p.Title, q.Expr, err)
			}
		}
	}
	if n < 10 {
		t.Fatalf("%d queries in the dashboard", n)
	}
}

func TestRender(t *testing.T) {
	d := Dashboard{Title: "fanout", Panels: []Panel{
		{Type: "row", Title: "Deliveries", GridPos: GridPos{H: 1, W: 24}},
		{Type: "timeseries", Title: "Deliveries/s", GridPos: GridPos{H: 8, W: 12, Y: 1}},
		{Type: "timeseries", Title: "Unsupported", GridPos: GridPos{H: 8, W: 12, X: 12, Y: 1}},
	}}
	d.Panels[1].Targets = append(d.Panels[1].Targets, struct {
		Expr         string `json:"expr"`
		LegendFormat string `json:"legendFormat"`
	}{Expr: `sum by (outcome) (rate(d_total[$__rate_interval]))`, LegendFormat: "{{outcome}}"})
	d.Panels[2].Targets = append(d.Panels[2].Targets, struct {
		Expr         string `json:"expr"`
		LegendFormat string `json:"legendFormat"`
	}{Expr: `topk(1, d_total)`})
	scrapes := scrapesOf(10, func(i int) []Sample {
		return []Sample{{Labels{"__name__": "d_total", "outcome": "delivered"}, float64(i * i)}}
	})
	var b bytes.Buffer
	if err := Render(&b, d, scrapes, 2); err != nil {
		t.Fatal(err)
	}
	html := b.String()
	for _, want := range []string{"Deliveries/s", "<polyline", ">delivered<", "not drawn: topk(1, d_total)", "width: 1400px; height: 278px"} {
		if !strings.Contains(html, want) {
			t.Errorf("page has no %q", want)
		}
	}
}

// A histogram read from the text format becomes Prometheus's _bucket
// series, one +Inf bucket whether the exposition listed it or not, and
// each series carries its target as instance.
func TestScrapeHistogram(t *testing.T) {
	text := `# TYPE calls histogram
calls_bucket{result="ok",le="0.1"} 5
calls_bucket{result="ok",le="1"} 8
calls_bucket{result="ok",le="+Inf"} 10
calls_sum{result="ok"} 3.5
calls_count{result="ok"} 10
`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, text) }))
	defer srv.Close()
	series := map[string]Sample{}
	if err := scrapeInto(context.Background(), srv.URL, series); err != nil {
		t.Fatal(err)
	}
	host := strings.TrimPrefix(srv.URL, "http://")
	want := map[string]float64{"0.1": 5, "1": 8, "+Inf": 10}
	got := map[string]float64{}
	for _, s := range series {
		if s.Labels["instance"] != host || s.Labels["result"] != "ok" {
			t.Errorf("series %v: want instance %s and result ok", s.Labels, host)
		}
		if s.Labels["__name__"] == "calls_bucket" {
			got[s.Labels["le"]] = s.Value
		}
	}
	if len(got) != len(want) {
		t.Fatalf("buckets %v, want %v", got, want)
	}
	for le, v := range want {
		if got[le] != v {
			t.Errorf("bucket le=%s: %v, want %v", le, got[le], v)
		}
	}
}
