package validate

import (
	"os"
	"strings"
	"testing"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	"sigs.k8s.io/yaml"
)

// TestRunbookKEDASnippet: the runbook's example of a pool's KEDA triggers
// decodes strictly into KEDA's own type and is what the chart, as shipped,
// renders for the normal-priority delivery pool: one temporal trigger per
// task queue it serves, with the same metadata (the endpoint included: the
// snippet uses the chart's default address).
func TestRunbookKEDASnippet(t *testing.T) {
	b, err := os.ReadFile(runbookFile)
	if err != nil {
		t.Fatal(err)
	}
	var snippet string
	for _, block := range strings.Split(string(b), "```yaml\n")[1:] {
		body, _, _ := strings.Cut(block, "```")
		if strings.HasPrefix(body, "triggers:") {
			snippet = body
			break
		}
	}
	if snippet == "" {
		t.Fatalf("%s: no ```yaml block starting with triggers:", runbookFile)
	}
	var doc struct {
		Triggers []kedav1alpha1.ScaleTriggers `json:"triggers"`
	}
	if err := yaml.UnmarshalStrict([]byte(snippet), &doc); err != nil {
		t.Fatalf("the runbook's triggers do not decode strictly as KEDA's: %v", err)
	}
	const pool = "fanout-worker-delivery-normal"
	var rendered []kedav1alpha1.ScaleTriggers
	for _, o := range renderObjects(t, valueSets(t)["defaults"]) {
		if so, ok := o.Obj.(*kedav1alpha1.ScaledObject); ok && so.Name == pool {
			rendered = so.Spec.Triggers
		}
	}
	if len(rendered) == 0 {
		t.Fatalf("the chart's defaults render no ScaledObject %s with triggers", pool)
	}
	if len(doc.Triggers) != len(rendered) {
		t.Fatalf("the runbook shows %d triggers, the chart renders %d for %s", len(doc.Triggers), len(rendered), pool)
	}
	for i, want := range rendered {
		got := doc.Triggers[i]
		if got.Type != want.Type {
			t.Errorf("trigger %d: type %q in the runbook, %q in the chart", i, got.Type, want.Type)
		}
		for k, v := range want.Metadata {
			if got.Metadata[k] != v {
				t.Errorf("trigger %d: %s %q in the runbook, %q in the chart", i, k, got.Metadata[k], v)
			}
		}
		for k := range got.Metadata {
			if _, ok := want.Metadata[k]; !ok {
				t.Errorf("trigger %d: the runbook sets %s, which the chart does not", i, k)
			}
		}
	}
}
