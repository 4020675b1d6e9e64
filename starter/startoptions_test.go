package starter

import (
	"testing"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/workflows/vocab"
)

// An event's workflow carries its fairness key, so its workflow tasks (and
// the activities that inherit it) dispatch fairly on the events queue.
func TestStartOptionsFairness(t *testing.T) {
	for _, ev := range []fanout.Event{
		{Type: "webhook", ID: "a"},
		{Type: "webhook", ID: "b", Tenant: "acme"},
	} {
		o := StartOptions(ev)
		if o.Priority.FairnessKey != vocab.FairnessKey(ev) || o.Priority.FairnessKey == "" {
			t.Errorf("StartOptions(%+v).Priority = %+v, want the key %q", ev, o.Priority, vocab.FairnessKey(ev))
		}
		if o.Priority.PriorityKey != 0 {
			t.Errorf("StartOptions(%+v).Priority = %+v, want the default priority key", ev, o.Priority)
		}
	}
	// A high event's workflow tasks pass the others' on the events queue.
	if o := StartOptions(fanout.Event{Type: "webhook", ID: "h", Priority: fanout.PriorityHigh}); o.Priority.PriorityKey != vocab.HighPriorityKey {
		t.Errorf("a high event's start has priority %+v, want key %d", o.Priority, vocab.HighPriorityKey)
	}
}
