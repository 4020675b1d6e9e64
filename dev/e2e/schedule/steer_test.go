//go:build integration

package schedule

import (
	"context"
	"os"
	"testing"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/dev/stack"
	"github.com/fanout/fanout/starter"
	"github.com/fanout/fanout/workflows"
	"github.com/fanout/fanout/workflows/vocab"
)

// TestSteeredWhileScheduled: small events (20 recipients: the fast path)
// published with a delay on Kafka, through the bridge, as a producer does,
// and steered while they wait for their time (issue 23, item 6):
//
//   - paused: nothing reaches the sink after its time until the resume,
//     then every recipient once;
//   - set-rate 4/s: delivered at that rate (20 recipients take at least
//     (20 - 4, the one-second burst) / 4 s from the first to the last);
//
// and a single-batch event too big for the fast path (150 recipients: one
// DeliverBatch activity on the delivery queue, no child) has its activity
// scheduled with a schedule-to-close bound (item 8): without one it could
// retry for ever.
func TestSteeredWhileScheduled(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s, err := stack.Start(ctx, stack.Options{Log: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for name, queues := range map[string]string{"events": "events", "delivery": "high,normal,low"} {
		if err := s.StartWorker(name, queues); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.StartBridge("bridge"); err != nil {
		t.Fatal(err)
	}

	run := time.Now().UTC().Format("150405")
	paused, rated, inline := "steer-paused-"+run, "steer-rated-"+run, "steer-inline-"+run
	const small, rate = 20, 4.0
	var envs []starter.Envelope
	for _, id := range []string{paused, rated} {
		env := stack.Event{ID: id, Audience: small}.Envelope()
		env.Delay = "15s"
		envs = append(envs, env)
	}
	envs = append(envs, stack.Event{ID: inline, Audience: 150}.Envelope())
	if err := s.Publisher.Publish(ctx, envs...); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{paused, rated} {
		waitStarted(ctx, t, s, stack.WorkflowID(id))
	}
	if p := steer(ctx, t, s, paused, vocab.PauseUpdate, "hold it"); !p.Paused {
		t.Fatalf("pause answered %+v, want Paused", p)
	}
	if p := steer(ctx, t, s, rated, vocab.SetRateUpdate, rate); p.Rate != rate {
		t.Fatalf("set-rate answered %+v, want Rate %v", p, rate)
	}
	at := progress(ctx, t, s, stack.WorkflowID(paused)).ScheduledFor
	if time.Until(at) < 2*time.Second {
		t.Fatalf("the set-up took too long: the paused event's time (%v) came before the checks", at)
	}

	// The one batch of the inline event is bounded end to end.
	if res, err := s.Wait(ctx, inline); err != nil || res.Delivered != 150 {
		t.Fatalf("inline: %+v, %v", res.Progress, err)
	}
	bounded := 0
	it := s.TC.GetWorkflowHistory(ctx, stack.WorkflowID(inline), "", false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		a := ev.GetActivityTaskScheduledEventAttributes()
		if a.GetActivityType().GetName() != "DeliverBatch" {
			continue
		}
		d := a.GetScheduleToCloseTimeout().AsDuration()
		t.Logf("inline: DeliverBatch scheduled with schedule-to-close %v, start-to-close %v", d, a.GetStartToCloseTimeout().AsDuration())
		if d <= 0 || d > 24*time.Hour {
			t.Errorf("inline: DeliverBatch's schedule-to-close is %v, want a bound of at most 24h", d)
		}
		bounded++
	}
	if bounded != 1 {
		t.Errorf("inline: %d DeliverBatch activities in the history, want 1 (%d recipients, over the fast path's %d)", bounded, 150, fanout.DefaultLocalDeliveryMax)
	}

	// The rate-capped one delivers at its time, at the rate.
	res, err := s.Wait(ctx, rated)
	if err != nil {
		t.Fatal(err)
	}
	got := s.Sink.Event(rated)
	t.Logf("rated: first delivery %s, last %s", got.First.Format("15:04:05.000"), got.Last.Format("15:04:05.000"))
	if got.Unique != small || got.Duplicated != 0 || res.Delivered != small || res.Rate != rate {
		t.Errorf("rated: sink %+v, result %+v; want %d recipients once each at %v/s", got, res.Progress, small, rate)
	}
	if spread := got.Last.Sub(got.First); spread < time.Duration((small-rate)/rate*float64(time.Second)) {
		t.Errorf("rated: %d deliveries within %v; a cap of %v/s spreads them over at least %v", small, spread, rate, time.Duration((small-rate)/rate*float64(time.Second)))
	}

	// The paused one delivers nothing after its time, until resumed.
	time.Sleep(time.Until(at.Add(8 * time.Second)))
	if got := s.Sink.Event(paused); got.Deliveries != 0 {
		t.Errorf("paused: %d deliveries %v after its time, before the resume", got.Deliveries, time.Since(at).Round(time.Second))
	}
	if p := progress(ctx, t, s, stack.WorkflowID(paused)); !p.Paused || p.Delivered != 0 {
		t.Errorf("paused, after its time: %+v", p)
	}
	resumed := time.Now()
	steer(ctx, t, s, paused, vocab.ResumeUpdate)
	res, err = s.Wait(ctx, paused)
	if err != nil {
		t.Fatal(err)
	}
	got = s.Sink.Event(paused)
	if got.Unique != small || got.Duplicated != 0 || res.Delivered != small || got.First.Before(resumed) {
		t.Errorf("paused: sink %+v, result %+v; want %d recipients once each, after the resume at %v", got, res.Progress, small, resumed)
	}
}

// steer sends an operator's update to event id and returns its answer.
func steer(ctx context.Context, t *testing.T, s *stack.Stack, id, name string, args ...any) workflows.Progress {
	t.Helper()
	h, err := s.TC.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID: stack.WorkflowID(id), UpdateName: name, Args: args, WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	var p workflows.Progress
	if err == nil {
		err = h.Get(ctx, &p)
	}
	if err != nil {
		t.Fatalf("%s %s: %v", name, id, err)
	}
	return p
}
