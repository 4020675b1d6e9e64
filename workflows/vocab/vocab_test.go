package vocab

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fanout/fanout"
)

// FuzzIDsAreInjective: for ids and types that pass fanout's grammar, two
// different events never get the same workflow id, event key or attempt id,
// and no event's workflow id equals another event's batch workflow id.
func FuzzIDsAreInjective(f *testing.F) {
	f.Add("webhook", "x", "webhook", "x-batch-0", 0, 0)
	f.Add("a", "1", "b", "1", 3, 3)
	f.Add("a.b", "c", "a", "b.c", 1, 10)
	f.Fuzz(func(t *testing.T, t1, id1, t2, id2 string, n1, n2 int) {
		if fanout.ValidateType(t1) != nil || fanout.ValidateType(t2) != nil || fanout.ValidateID(id1) != nil || fanout.ValidateID(id2) != nil {
			return
		}
		same := t1 == t2 && id1 == id2
		if !same && WorkflowID(t1, id1) == WorkflowID(t2, id2) {
			t.Fatalf("workflow ids collide: %q/%q and %q/%q", t1, id1, t2, id2)
		}
		if !same && EventKey(t1, id1) == EventKey(t2, id2) {
			t.Fatalf("event keys collide: %q/%q and %q/%q", t1, id1, t2, id2)
		}
		if (!same || n1 != n2) && n1 >= 0 && n2 >= 0 && AttemptID(t1, id1, n1) == AttemptID(t2, id2, n2) {
			t.Fatalf("attempt ids collide")
		}
		if n2 >= 0 && WorkflowID(t1, id1) == BatchWorkflowID(WorkflowID(t2, id2), n2) {
			t.Fatalf("event %q/%q has the workflow id of batch %d of %q/%q", t1, id1, n2, t2, id2)
		}
	})
}

// TestOccurrenceID: an occurrence of a recurring broadcast keeps the id
// grammar and differs per nominal time (to the second), whatever the zone.
func TestOccurrenceID(t *testing.T) {
	nominal := time.Date(2026, 12, 24, 9, 0, 0, 0, time.UTC)
	id := OccurrenceID("daily-digest", nominal)
	if id != "daily-digest-20261224T090000Z" {
		t.Errorf("OccurrenceID = %q", id)
	}
	if err := fanout.ValidateID(id); err != nil {
		t.Errorf("%q: %v", id, err)
	}
	if OccurrenceID("daily-digest", nominal.Add(time.Second)) == id {
		t.Error("occurrences a second apart share an id")
	}
	if got := OccurrenceID("daily-digest", nominal.In(time.FixedZone("CET", 3600))); got != id {
		t.Errorf("the same instant in another zone: %q, want %q", got, id)
	}
}

// Attempt ids read back: the batch's number, a resend's name, and nothing
// of another event or outside the grammar.
func TestParseAttemptID(t *testing.T) {
	if n, name, err := ParseAttemptID("webhook", "e1", AttemptID("webhook", "e1", 12)); n != 12 || name != "" || err != nil {
		t.Errorf("batch: %d %q %v", n, name, err)
	}
	if n, name, err := ParseAttemptID("webhook", "e1", ResendAttemptID("webhook", "e1", "t42")); n != -1 || name != "t42" || err != nil {
		t.Errorf("resend: %d %q %v", n, name, err)
	}
	for _, a := range []string{"", "webhook/e1", "webhook/e1#", "webhook/e2#1", "other/e1#1", "webhook/e1#-1", "webhook/e1#01",
		"webhook/e1#1x", "webhook/e1#resend-", "webhook/e1#resend-a:b", "webhook/e1#9999999999"} {
		if _, _, err := ParseAttemptID("webhook", "e1", a); err == nil {
			t.Errorf("ParseAttemptID(%q): no error", a)
		}
	}
}

// A worker of high or normal serves the priority's delivery queue and its
// large-batch queue; low's pages share its one queue; an unknown name is
// an error naming the choices.
func TestTaskQueues(t *testing.T) {
	for q, want := range map[string][]string{
		"events": {"fanout-events"},
		"high":   {"fanout-delivery-high", "fanout-delivery-high-large"},
		"normal": {"fanout-delivery-normal", "fanout-delivery-normal-large"},
		"low":    {"fanout-delivery-low"},
	} {
		got, err := TaskQueues(q)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("TaskQueues(%q) = %v, %v; want %v", q, got, err, want)
		}
		for _, tq := range got {
			if IsLargeDeliveryTaskQueue(tq) != strings.HasSuffix(tq, "-large") {
				t.Errorf("IsLargeDeliveryTaskQueue(%q) = %v", tq, !strings.HasSuffix(tq, "-large"))
			}
		}
	}
	if _, err := TaskQueues("urgent"); err == nil || !strings.Contains(err.Error(), "events or a priority") {
		t.Errorf("TaskQueues(urgent): %v", err)
	}
}
