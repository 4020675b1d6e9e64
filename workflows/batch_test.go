package workflows_test

import (
	"encoding/json"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/activities"
	"github.com/fanout/fanout/workflows"
	"github.com/fanout/fanout/workflows/vocab"
)

// legacyDeliveryBatchInput is DeliveryBatchInput as it was declared before
// it embedded activities.DeliverBatchInput; the saved histories hold
// payloads of this shape.
type legacyDeliveryBatchInput struct {
	Event       fanout.Event
	Priority    fanout.Priority
	BatchNo     int
	AttemptID   string
	Recipients  []fanout.Recipient
	Ref         *activities.BatchRef `json:",omitempty"`
	Message     fanout.Message
	MaxAttempts int
	Concurrency int
	Timeout     time.Duration
	Redrive     bool   `json:",omitempty"`
	Round       string `json:",omitempty"`
}

func (l legacyDeliveryBatchInput) current() workflows.DeliveryBatchInput {
	return workflows.DeliveryBatchInput{
		DeliverBatchInput: activities.DeliverBatchInput{
			Event: l.Event, Priority: l.Priority, AttemptID: l.AttemptID, Recipients: l.Recipients, Ref: l.Ref,
			Message: l.Message, MaxAttempts: l.MaxAttempts, Concurrency: l.Concurrency, Redrive: l.Redrive, Round: l.Round,
		},
		BatchNo: l.BatchNo,
		Timeout: l.Timeout,
	}
}

// jsonFields decodes a JSON object into its fields, to compare payloads
// regardless of the order of their keys.
func jsonFields(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// The embedded activity input is flattened: DeliveryBatchInput encodes to
// the same JSON object as before, and each shape decodes the other's.
func TestDeliveryBatchInputJSONUnchanged(t *testing.T) {
	ref := &activities.BatchRef{N: 4, Key: "fanout:b:e:4", Count: 500, PageCursor: "2000", PageLimit: 2000, Offset: 0}
	for name, old := range map[string]legacyDeliveryBatchInput{
		"staged": {Event: fanout.Event{ID: "e", Type: "webhook", Payload: []byte(`{"n":1}`)}, Priority: fanout.PriorityNormal,
			BatchNo: 4, AttemptID: "e#4", Ref: ref, Message: fanout.Message{Body: []byte("hi")}, MaxAttempts: 3, Concurrency: 64, Timeout: 5 * time.Minute},
		"inline": {Event: fanout.Event{ID: "e", Type: "webhook"}, Priority: fanout.PriorityHigh, BatchNo: 2, AttemptID: "e#2",
			Recipients: []fanout.Recipient{{ID: "r1"}, {ID: "r2"}}, MaxAttempts: 3, Concurrency: 8},
		"redrive": {Event: fanout.Event{ID: "e", Type: "webhook"}, Priority: fanout.PriorityLow, AttemptID: "e#0",
			Recipients: []fanout.Recipient{{ID: "r1"}}, MaxAttempts: 5, Concurrency: 8, Redrive: true, Round: "r1"},
	} {
		t.Run(name, func(t *testing.T) {
			oldJSON, err := json.Marshal(old)
			if err != nil {
				t.Fatal(err)
			}
			newJSON, err := json.Marshal(old.current())
			if err != nil {
				t.Fatal(err)
			}
			if o, n := jsonFields(t, oldJSON), jsonFields(t, newJSON); !reflect.DeepEqual(o, n) {
				t.Fatalf("JSON changed:\nold %s\nnew %s", oldJSON, newJSON)
			}
			var decoded workflows.DeliveryBatchInput
			if err := json.Unmarshal(oldJSON, &decoded); err != nil || !reflect.DeepEqual(decoded, old.current()) {
				t.Fatalf("old payload decodes as %+v (%v), want %+v", decoded, err, old.current())
			}
			var back legacyDeliveryBatchInput
			if err := json.Unmarshal(newJSON, &back); err != nil || !reflect.DeepEqual(back, old) {
				t.Fatalf("new payload decodes in the old shape as %+v (%v), want %+v", back, err, old)
			}
		})
	}
}

// Every DeliveryBatch input in the saved histories (children started by
// Fanout, DeliveryBatch runs) decodes as it did in the old shape, and a
// DeliveryBatch run's activity input, recorded when the workflow copied it
// field by field, is the embedded DeliverBatchInput it now passes.
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
		var old legacyDeliveryBatchInput
		var in workflows.DeliveryBatchInput
		decode(t, ps, &old)
		decode(t, ps, &in)
		if !reflect.DeepEqual(in, old.current()) || in.Event.ID == "" || in.AttemptID == "" {
			t.Fatalf("decodes as %+v, in the old shape as %+v", in, old)
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
