//go:build integration

package fairness

import (
	"context"
	"os"
	"testing"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/fanout/fanout/dev/stack"
	"github.com/fanout/fanout/starter"
)

// TestProbeTellsFairnessOnFromOff: `starter setup`'s probe reports fairness
// on for the dev stack's server (matching.enableFairness=true) and off for
// the same server with it turned off, and leaves no probe workflow running.
func TestProbeTellsFairnessOnFromOff(t *testing.T) {
	for _, on := range []bool{true, false} {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		o := stack.Options{InMemory: true, Log: os.Stderr}
		if !on {
			o.TemporalFlags = []string{"--dynamic-config-value", "matching.enableFairness=false"}
		}
		s, err := stack.Start(ctx, o)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		got, err := starter.ProbeFairness(ctx, s.TC, client.DefaultNamespace)
		if err != nil || got != on {
			t.Errorf("fairness on=%v: the probe said %v, %v", on, got, err)
		}
		// Visibility lags the terminations by up to a second.
		var running int64 = -1
		for deadline := time.Now().Add(15 * time.Second); running != 0 && time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			n, err := s.TC.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{
				Namespace: client.DefaultNamespace, Query: `WorkflowType = "` + starter.FairnessProbeWorkflow + `" AND ExecutionStatus = "Running"`})
			if err == nil {
				running = n.GetCount()
			}
		}
		if running != 0 {
			t.Errorf("fairness on=%v: %d probe workflows still running", on, running)
		}
		s.Close()
		cancel()
	}
}
