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
	}
}
