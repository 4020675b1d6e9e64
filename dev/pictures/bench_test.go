package pictures

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

func TestWriteBench(t *testing.T) {
	rows := []BenchRow{
		{Scenario: "heavy", Size: 1_000_000, DeliveriesPerSec: 12345.6, Ratio: 0.62, RatioOf: "heavy/floor", CPUUsPerDeliveryTotal: 95.24, TemporalMsPer1000: 16.23,
			CPUUsPerDelivery: map[string]float64{"sink": 30.04, "delivery": 50.2, "temporal": 15}},
		{Scenario: "light", Size: 2000, EventsPerSec: 99.7, P50Ms: 85.31, P99Ms: 412.4, TemporalMsPerEvent: 1.853},
	}
	var b strings.Builder
	if err := WriteBench(&b, rows, "2 cores"); err != nil {
		t.Fatal(err)
	}
	md := b.String()
	for _, want := range []string{
		"(2 cores)",
		"| `heavy` | 1,000,000 | 12,346 | — | — | — | 0.62 (heavy/floor) | 95.2 | 16.2 ms per 1,000 deliveries |",
		"| `light` | 2,000 | — | 100 | 85.3 | 412 | — | — | 1.85 ms per event |",
		"](img/bench.svg)",
		"| scenario | delivery | sink | temporal | total |",
		"| `heavy` | 50.2 | 30.0 | 15.0 | 95.2 |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("no %q in:\n%s", want, md)
		}
	}
	if err := WriteBench(&b, nil, "2 cores"); err == nil {
		t.Error("no rows: no error")
	}
}

// The committed page is what its committed run renders to: regenerated
// together (go tool task pictures), never edited by hand.
func TestBenchPageMatchesItsRun(t *testing.T) {
	page, err := os.ReadFile("../../docs/performance-bench.md")
	if err != nil {
		t.Fatal(err)
	}
	rows, err := ReadBench("../../docs/img/bench.json")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`on one machine \(([^)]*)\)`).FindSubmatch(page)
	if m == nil {
		t.Fatal("docs/performance-bench.md does not say its machine")
	}
	var b strings.Builder
	if err := WriteBench(&b, rows, strings.ReplaceAll(string(m[1]), "\n", " ")); err != nil {
		t.Fatal(err)
	}
	if b.String() != string(page) {
		t.Error("docs/performance-bench.md is not docs/img/bench.json rendered: run go tool task pictures")
	}
}
