package pictures

import (
	"os"
	"strings"
	"testing"

	"github.com/fanout/fanout/dev/e2e/footprint"
)

func TestWriteFigures(t *testing.T) {
	f := footprint.Figures{Rules: footprint.ActionRules, SmallAudience: 20, BatchedAudience: 2000, BatchedBatches: 2, BigAudience: 60_000, BigBatches: 51,
		Small:    &footprint.Cost{Actions: footprint.Actions{footprint.ActWorkflowStarted: 1, footprint.ActLocalActivities: 1, footprint.ActUpsert: 1}, ActionsTotal: 3, Requests: 2, WorkflowTasks: 1, HistoryEvents: 7, VisibilityWrites: 1.36},
		Batched:  &footprint.Cost{Actions: footprint.Actions{footprint.ActChildWorkflow: 4, footprint.ActHeartbeat: 2}, ActionsTotal: 11},
		PerBatch: &footprint.Cost{ActionsTotal: 4.29},
		Per1000:  &footprint.Cost{ActionsTotal: 3.65},
		HandCount: map[string][]footprint.HandEvent{
			"small event": {{Event: "WorkflowExecutionStarted", Actions: 1}, {Event: "MarkerRecorded", Actions: 1}, {Event: "UpsertWorkflowSearchAttributes", Actions: 1}},
			"batch":       {{Event: "WorkflowExecutionStarted"}, {Event: "ActivityTaskScheduled", Actions: 1}},
		}}
	var b strings.Builder
	if err := WriteFigures(&b, f); err != nil {
		t.Fatal(err)
	}
	md := b.String()
	for _, want := range []string{
		"| **Temporal Cloud Actions** | 3 | 11 | 4.29 | 3.65 |",
		"per event of 2,000 recipients (2 batches)",
		"| child workflow started | 0 | 4 | 0 | 0 |",
		"| activity heartbeat | not in the history",
		"60,000 recipients, delivered in 51 batches",
		"(3 in all; the test counted 3",
		"| 2 | ActivityTaskScheduled | 1 |",
		"heartbeats, which are not in a history (1 per batch):\n4 per batch",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("no %q in:\n%s", want, md)
		}
	}
	// Kinds nothing spent are left out of the by-kind table.
	if strings.Contains(md, "| timer started | 0") {
		t.Error("a kind with no Actions has a row")
	}
	if err := WriteFigures(&b, footprint.Figures{}); err == nil {
		t.Error("figures with nothing measured were written")
	}
}

// The committed page is what its committed figures render to: regenerated
// together (go tool task pictures), never edited by hand.
func TestFiguresPageMatchesItsRun(t *testing.T) {
	page, err := os.ReadFile("../../docs/performance-figures.md")
	if err != nil {
		t.Fatal(err)
	}
	f, err := footprint.ReadFigures("../../docs/img/footprint.json")
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := WriteFigures(&b, f); err != nil {
		t.Fatal(err)
	}
	if b.String() != string(page) {
		t.Error("docs/performance-figures.md is not docs/img/footprint.json rendered: run go tool task pictures")
	}
}
