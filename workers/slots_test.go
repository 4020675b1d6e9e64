package workers

import (
	"testing"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/workflows/vocab"
)

// TestFastPathCallsInFlightAreBounded: the events worker delivers small
// events on the fast path, in local activities, each with a batch's
// concurrency; its local-activity slots are its batch slots, so its calls in
// flight are bounded like a delivery worker's: at most batch slots ×
// DeliverConcurrency per queue served (README, "in flight"). The SDK's
// default (0: 1,000 slots) allowed 64,000.
func TestFastPathCallsInFlightAreBounded(t *testing.T) {
	for _, slots := range []int{0, 1, 8, 32} {
		o := Options{BatchSlots: slots}
		wo := workerOptions(vocab.QueueEvents, o, nil)
		want := o.batchSlots()
		if got := wo.MaxConcurrentLocalActivityExecutionSize; got <= 0 || got*fanout.DefaultDeliverConcurrency > want*fanout.DefaultDeliverConcurrency {
			t.Errorf("BatchSlots %d: the events worker runs %d local activities at once (0: the SDK's 1,000), want at most %d, so at most %d calls in flight",
				slots, got, want, want*fanout.DefaultDeliverConcurrency)
		}
		// The delivery queues run twice as many batches as the budget
		// needs; the budget itself is the shared pool's.
		if got := workerOptions(string(fanout.PriorityHigh), o, nil).MaxConcurrentActivityExecutionSize; got != want*SlotsPerBudget {
			t.Errorf("BatchSlots %d: the high queue runs %d batches at once, want %d", slots, got, want*SlotsPerBudget)
		}
		if got := o.callBudget(); got != want*fanout.DefaultDeliverConcurrency {
			t.Errorf("BatchSlots %d: a pool of %d calls, want %d", slots, got, want*fanout.DefaultDeliverConcurrency)
		}
	}
}
