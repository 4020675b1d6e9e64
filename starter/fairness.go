package starter

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	taskqueuepb "go.temporal.io/api/taskqueue/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
)

// FairnessProbeWorkflow is the type of the probe's workflows: no worker
// registers it; they are terminated as soon as their tasks are read.
const FairnessProbeWorkflow = "fanout-fairness-probe"

// ProbeFairness reports whether the namespace's task queues dispatch by
// fairness key (Temporal's task-queue fairness: dynamic config
// matching.enableFairness on a self-hosted server, a namespace setting on
// Cloud), which no API reports. It queues four workflows on a task queue of
// its own that no worker polls, three with fairness key "a" then one with
// "b", and reads their first workflow tasks with PollWorkflowTaskQueue: a
// server with fairness hands out b's second (round robin between the
// keys), one without it last (first in, first out). The workflows are
// terminated before it returns.
func ProbeFairness(ctx context.Context, c client.Client, namespace string) (bool, error) {
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	tq := "fanout-fairness-probe-" + hex.EncodeToString(rnd[:])
	keys := []string{"a", "a", "a", "b"}
	var ids []string
	defer func() {
		tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		for _, id := range ids {
			_ = c.TerminateWorkflow(tctx, id, "", "fanout setup: fairness probe done")
		}
	}()
	for i, k := range keys {
		id := fmt.Sprintf("%s-%d", tq, i)
		_, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
			ID: id, TaskQueue: tq, WorkflowExecutionTimeout: time.Minute,
			Priority: temporal.Priority{FairnessKey: k},
		}, FairnessProbeWorkflow)
		if err != nil {
			return false, fmt.Errorf("fairness probe: start: %w", err)
		}
		ids = append(ids, id)
	}
	var order []string
	for range keys {
		pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		resp, err := c.WorkflowService().PollWorkflowTaskQueue(pctx, &workflowservice.PollWorkflowTaskQueueRequest{
			Namespace: namespace,
			TaskQueue: &taskqueuepb.TaskQueue{Name: tq, Kind: enumspb.TASK_QUEUE_KIND_NORMAL},
			Identity:  "fanout setup (fairness probe)",
		})
		cancel()
		if err != nil {
			return false, fmt.Errorf("fairness probe: poll: %w", err)
		}
		if len(resp.GetTaskToken()) == 0 {
			return false, fmt.Errorf("fairness probe: no task on %s after %d of %d", tq, len(order), len(keys))
		}
		order = append(order, resp.GetWorkflowExecution().GetWorkflowId())
	}
	b := slices.Index(order, ids[3])
	switch b {
	case 1:
		return true, nil
	case 3:
		return false, nil
	}
	return false, fmt.Errorf("fairness probe: tasks came in the order %v, neither round robin nor first in first out", order)
}
