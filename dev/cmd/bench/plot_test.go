package main

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"strings"
	"testing"
)

// plotRows are a run's rows: every kind the plot draws.
var plotRows = []Row{
	{Scenario: "heavy", Size: 1_000_000, Seconds: 60, DeliveriesPerSec: 16_500},
	{Scenario: "floor", Size: 1_000_000, Seconds: 30, DeliveriesPerSec: 33_000},
	{Scenario: "light", Size: 2000, Seconds: 20, DeliveriesPerSec: 2000, EventsPerSec: 100, P50Ms: 180, P99Ms: 950},
	{Scenario: "light-burst", Size: 2000, Seconds: 12, DeliveriesPerSec: 3300, EventsPerSec: 165, P50Ms: 2400, P99Ms: 7100},
	{Scenario: "isolation", Size: 2000, Seconds: 40, DeliveriesPerSec: 12_000, P50Ms: 300, P99Ms: 1400},
	{Scenario: "scaling", Size: 40_000, Seconds: 42, DeliveriesPerSec: 4900, Ratio: 3.7, RatioOf: "4 workers/1",
		Notes: "sink 25ms per call, 2×16 concurrency per worker: 1 worker(s) 1310/s (1.00x), 2 worker(s) 2580/s (1.97x), 4 worker(s) 4900/s (3.74x)"},
	{Scenario: "noop-burst", Size: 2000, Seconds: 8, EventsPerSec: 250},
}

func TestRenderPlot(t *testing.T) {
	var buf bytes.Buffer
	if err := renderPlot(&buf, plotRows); err != nil {
		t.Fatal(err)
	}
	// Valid XML whose root is <svg>.
	dec := xml.NewDecoder(bytes.NewReader(buf.Bytes()))
	root := ""
	var text strings.Builder
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("not valid XML: %v", err)
		}
		switch tk := tok.(type) {
		case xml.StartElement:
			if root == "" {
				root = tk.Name.Local
			}
		case xml.CharData:
			text.Write(tk)
			text.WriteByte('\n')
		}
	}
	if root != "svg" {
		t.Fatalf("root element %q, want svg", root)
	}
	// Every scenario with deliveries/s or latencies is named; the scaling
	// plot's axis and the latency plot are there.
	for _, want := range []string{"heavy", "floor", "light", "light-burst", "isolation", "scaling", "delivery workers", "p99", "Throughput per scenario"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("the plot's text has no %q", want)
		}
	}
	// noop-burst has neither deliveries/s nor latencies: not drawn.
	if strings.Contains(text.String(), "noop-burst") {
		t.Error("noop-burst is drawn without anything to draw")
	}
	if buf.Len() > 300_000 {
		t.Errorf("plot of %d bytes: too big for docs/img", buf.Len())
	}
}

func TestRenderPlotNothing(t *testing.T) {
	if err := renderPlot(io.Discard, []Row{{Scenario: "noop-burst", EventsPerSec: 250}}); err == nil {
		t.Fatal("a plot of rows with nothing to draw did not fail")
	}
}
