package monitoring

import (
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/config"
	_ "github.com/prometheus/prometheus/discovery/dns" // dns_sd_configs, as in the prometheus binary
)

// compose's Prometheus configuration loads with Prometheus' own loader,
// scrapes the fanout processes as job "fanout" (what FanoutWorkerDown's
// up{job=~".*fanout.*"} selects) and the Temporal server on the metrics
// port compose gives it; a broken copy is refused.
func TestComposePrometheusConfig(t *testing.T) {
	const file = "compose/prometheus.yaml"
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(string(b), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	jobs := map[string]bool{}
	for _, sc := range c.ScrapeConfigs {
		jobs[sc.JobName] = true
	}
	if !jobs["fanout"] || !jobs["temporal"] {
		t.Errorf("%s: jobs %v, want fanout and temporal", file, jobs)
	}
	compose, err := os.ReadFile("../compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"temporal:8000"`) || !strings.Contains(string(compose), `"--metrics-port", "8000"`) {
		t.Errorf("the temporal target and compose's --metrics-port disagree")
	}
	if _, err := config.Load(strings.Replace(string(b), "scrape_interval:", "scrape_intervall:", 1), slog.New(slog.DiscardHandler)); err == nil {
		t.Error("a misspelt field was accepted: the check is toothless")
	}
}
