package workflows_test

import (
	"path/filepath"
	"reflect"
	"testing"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"

	"github.com/fanout/fanout/activities"
	"github.com/fanout/fanout/workflows"
	"github.com/fanout/fanout/workflows/vocab"
)

// Every DeliveryBatch input in the saved histories (children started by
// Fanout, DeliveryBatch runs) decodes, and a DeliveryBatch run's recorded
// activity input is the embedded DeliverBatchInput it passes.
func TestSavedDeliveryBatchInputsDecode(t *testing.T) {
	dc := converter.GetDefaultDataConverter()
	decode := func(t *testing.T, ps *commonpb.Payloads, v any) {
		t.Helper()
		if len(ps.GetPayloads()) != 1 {
			t.Fatalf("%d payloads, want 1", len(ps.GetPayloads()))
		}
		if err := dc.FromPayload(ps.GetPayloads()[0], v); err != nil {
			t.Fatal(err)
		}
	}
	check := func(t *testing.T, ps *commonpb.Payloads) workflows.DeliveryBatchInput {
		t.Helper()
		var in workflows.DeliveryBatchInput
		decode(t, ps, &in)
		if in.Event.ID == "" || in.AttemptID == "" || (in.Ref == nil && len(in.Recipients) == 0) {
			t.Fatalf("decodes as %+v", in)
		}
		return in
	}
	inputs, activityInputs := 0, 0
	for _, h := range loadHistories(t) {
		t.Run(filepath.Base(h.Name), func(t *testing.T) {
			var batch *workflows.DeliveryBatchInput
			for _, e := range h.History.Events {
				if c := e.GetStartChildWorkflowExecutionInitiatedEventAttributes(); c.GetWorkflowType().GetName() == vocab.DeliveryBatchWorkflow {
					check(t, c.GetInput())
					inputs++
				}
				if s := e.GetWorkflowExecutionStartedEventAttributes(); s != nil && h.WorkflowType == vocab.DeliveryBatchWorkflow {
					in := check(t, s.GetInput())
					batch = &in
					inputs++
				}
				if s := e.GetActivityTaskScheduledEventAttributes(); s != nil && batch != nil && s.GetActivityType().GetName() == "DeliverBatch" {
					var act activities.DeliverBatchInput
					decode(t, s.GetInput(), &act)
					if !reflect.DeepEqual(act, batch.DeliverBatchInput) {
						t.Fatalf("recorded activity input %+v, the workflow now passes %+v", act, batch.DeliverBatchInput)
					}
					activityInputs++
				}
			}
		})
	}
	if inputs == 0 || activityInputs == 0 {
		t.Fatalf("%d DeliveryBatch inputs and %d of their activity inputs in the saved histories", inputs, activityInputs)
	}
}
