package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/activities"
	"github.com/fanout/fanout/dev/demo"
	"github.com/fanout/fanout/dev/stack"
	"github.com/fanout/fanout/starter"
	"github.com/fanout/fanout/workers/webhook"
	"github.com/fanout/fanout/workflows/vocab"
)

// held counts the event's gate keys held without a delivered mark, retrying
// briefly (the first command after a Redis restart may meet a dead
// connection).
func (u *run) held(ctx context.Context, eventID string) (int, error) {
	var err error
	for range 50 {
		var n int
		if n, err = u.s.HeldNotDelivered(ctx, eventID); err == nil {
			return n, nil
		}
		if ctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	return 0, fmt.Errorf("held keys of %s: %w", eventID, err)
}

// KillDeliveryWorker (scenario 1) SIGKILLs the delivery worker process three
// times during one event's fan-out (at 20%, 45% and 70% delivered),
// restarting it each time. Only the delivery worker dies: the Fanout
// workflow runs in a separate events worker. Duplicates are allowed up to
// the gate keys held without a delivered mark right after each kill.
func KillDeliveryWorker(ctx context.Context, o Options, size int) (Report, error) {
	return scenario(ctx, o, 1, nil, func(ctx context.Context, u *run) error {
		u.slowSink(SinkLatency)
		if err := u.startProcs(); err != nil {
			return err
		}
		ev := stack.Event{ID: "chaos-kill-worker", Audience: size}
		if err := u.publish(ctx, ev); err != nil {
			return err
		}
		var at []string
		for k, frac := range []float64{0.2, 0.45, 0.7} {
			landed, err := u.waitFault(ctx, int(frac*float64(size)))
			if err != nil {
				return err
			}
			if !landed {
				at = append(at, fmt.Sprintf("kill %d skipped: the fan-out finished first", k+1))
				break
			}
			sinkBusy := u.s.Sink.InFlight()
			u.s.Kill("delivery")
			uniq, _ := u.tally()
			h, err := u.held(ctx, ev.ID)
			if err != nil {
				return err
			}
			u.r.InFlightAtKills += h
			u.logf("kill %d: SIGKILLed the delivery worker at %d/%d delivered, ~%d deliveries in the sink; %d gate keys held without a delivered mark",
				k+1, uniq, size, sinkBusy, h)
			at = append(at, fmt.Sprintf("%d (%d held, ~%d at the sink)", uniq, h, sinkBusy))
			if err := u.s.Restart("delivery"); err != nil {
				return err
			}
		}
		t, err := u.waitTotals(ctx, ev.ID)
		if err != nil {
			return err
		}
		u.note("kills at delivered = %s", strings.Join(at, ", "))
		u.note("workflow: delivered %d, gate duplicates %d, failed %d", t.Delivered, t.Duplicates, t.Failed)
		return nil
	})
}

// waitWorkflows waits until the Fanout workflows of the events exist.
func (u *run) waitWorkflows(ctx context.Context, ids []string) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for _, id := range ids {
		for {
			_, err := u.s.TC.DescribeWorkflow(ctx, stack.WorkflowID(id), "")
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return fmt.Errorf("workflow of event %s not started: %w", id, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
}

// countFanouts counts Fanout workflow executions (every run) in Temporal's
// visibility store, waiting for it to show at least want.
func (u *run) countFanouts(ctx context.Context, want int64) (int64, error) {
	return u.countWorkflows(ctx, "WorkflowType = '"+vocab.FanoutWorkflow+"'", want)
}

// countWorkflows counts the executions matching a visibility query, waiting
// (up to 20 s) for the count to reach want.
func (u *run) countWorkflows(ctx context.Context, query string, want int64) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	var n int64
	for {
		resp, err := u.s.TC.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{
			Namespace: "default", Query: query,
		})
		if err == nil {
			n = resp.GetCount()
			if n >= want {
				return n, nil
			}
		}
		if ctx.Err() != nil {
			if err != nil {
				return n, err
			}
			return n, nil
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func eventIDs(evs []stack.Event) []string {
	ids := make([]string, len(evs))
	for i, e := range evs {
		ids[i] = e.ID
	}
	return ids
}

// KillBridge (scenario 2) SIGKILLs the bridge after the workflows of the
// events it consumed have started and before it committed their offsets
// (FANOUT_COMMIT_INTERVAL=30s), then restarts it: it consumes the records
// again, and every event is still fanned out once.
func KillBridge(ctx context.Context, o Options, size int) (Report, error) {
	const nEvents = 20
	return scenario(ctx, o, 2, nil, func(ctx context.Context, u *run) error {
		if err := u.startProcs("FANOUT_COMMIT_INTERVAL=30s", "FANOUT_LOG_LEVEL=info"); err != nil {
			return err
		}
		evs := make([]stack.Event, nEvents)
		for i := range evs {
			evs[i] = stack.Event{ID: fmt.Sprintf("chaos-bridge-%02d", i), Audience: size}
		}
		if err := u.publish(ctx, evs...); err != nil {
			return err
		}
		ids := eventIDs(evs)
		if err := u.waitWorkflows(ctx, ids); err != nil {
			return err
		}
		unc, end, err := groupLag(ctx, u.s.KafkaAddr, starter.DefaultConsumerGroup)
		if err != nil {
			return err
		}
		u.s.Kill("bridge")
		u.logf("SIGKILLed the bridge: %d workflows started, %d of %d records uncommitted", len(ids), unc, end)
		u.note("bridge killed after %d starts with %d/%d records uncommitted", len(ids), unc, end)
		// Restarted with the default commit interval, so the check below
		// that it consumed the records again does not wait for a 30 s tick.
		if err := u.s.StartBridge("bridge", "FANOUT_LOG_LEVEL=info"); err != nil {
			return err
		}
		res, err := u.waitAll(ctx, ids...)
		if err != nil {
			return err
		}
		// The restarted bridge must consume the records again and commit them
		// (once the dead member's session has expired: up to 30 s).
		cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		err = waitCommitted(cctx, u.s.KafkaAddr, starter.DefaultConsumerGroup)
		cancel()
		if err != nil {
			return fmt.Errorf("restarted bridge did not commit the redelivered records: %w", err)
		}
		u.logf("the restarted bridge consumed and committed all %d records", end)
		u.s.Proc("bridge").Stop(20 * time.Second)
		if st, dup, ok := bridgeStats(u.s.LogPath("bridge")); ok {
			u.note("restarted bridge: %d records found their workflow running, %d already done", st, dup)
		}
		n, err := u.countFanouts(ctx, nEvents)
		if err != nil {
			return err
		}
		u.note("%d Fanout executions for %d events", n, nEvents)
		if n != nEvents {
			return fmt.Errorf("%d Fanout executions for %d events: an event was fanned out twice", n, nEvents)
		}
		t := sumResults(res)
		u.r.DeadLettered = int(t.DeadLettered)
		return nil
	})
}

// ReplayTopic (scenario 3) fans events out, deletes their closed Fanout
// workflows from Temporal (as retention would), then replays the events
// topic from the first offset with a bridge in a new consumer group: the
// Redis event record recognises every event, nothing is fanned out again.
func ReplayTopic(ctx context.Context, o Options, size int) (Report, error) {
	const nEvents = 10
	return scenario(ctx, o, 3, nil, func(ctx context.Context, u *run) error {
		if err := u.startProcs(); err != nil {
			return err
		}
		evs := make([]stack.Event, nEvents)
		for i := range evs {
			evs[i] = stack.Event{ID: fmt.Sprintf("chaos-replay-%02d", i), Audience: size}
		}
		if err := u.publish(ctx, evs...); err != nil {
			return err
		}
		ids := eventIDs(evs)
		if _, err := u.waitAll(ctx, ids...); err != nil {
			return err
		}
		_, before := u.tally()
		// The server deletes a closed workflow only once its close task is
		// acknowledged, and acknowledgements are saved every 30 s
		// (history.transferProcessorUpdateAckInterval): deletes take up to
		// ~35 s on the dev server.
		u.logf("all %d events completed (%d deliveries); deleting their Fanout workflows from Temporal", nEvents, before)
		for _, id := range ids {
			_, err := u.s.TC.WorkflowService().DeleteWorkflowExecution(ctx, &workflowservice.DeleteWorkflowExecutionRequest{
				Namespace:         "default",
				WorkflowExecution: &commonpb.WorkflowExecution{WorkflowId: stack.WorkflowID(id)},
			})
			if err != nil {
				return fmt.Errorf("delete workflow of %s: %w", id, err)
			}
		}
		t0 := time.Now()
		dctx, cancel := context.WithTimeout(ctx, 90*time.Second)
		defer cancel()
		for _, id := range ids {
			for {
				_, err := u.s.TC.DescribeWorkflow(dctx, stack.WorkflowID(id), "")
				var nf *serviceerror.NotFound
				if errors.As(err, &nf) {
					break
				}
				if dctx.Err() != nil {
					return fmt.Errorf("workflow of %s still exists after delete: %v", id, err)
				}
				time.Sleep(200 * time.Millisecond)
			}
		}
		group := fmt.Sprintf("replay-%d", time.Now().UnixNano())
		u.logf("Fanout workflows gone after %.1fs; replaying the events topic with consumer group %s", time.Since(t0).Seconds(), group)
		if err := u.s.StartBridge("bridge-replay", "FANOUT_CONSUMER_GROUP="+group, "FANOUT_LOG_LEVEL=info"); err != nil {
			return err
		}
		cctx, ccancel := context.WithTimeout(ctx, 90*time.Second)
		err := waitCommitted(cctx, u.s.KafkaAddr, group)
		ccancel()
		if err != nil {
			return fmt.Errorf("replay bridge: %w", err)
		}
		u.s.Proc("bridge-replay").Stop(20 * time.Second)
		started, dups, ok := bridgeStats(u.s.LogPath("bridge-replay"))
		// Whatever the replay started would exist now.
		again := 0
		for _, id := range ids {
			_, err := u.s.TC.DescribeWorkflow(ctx, stack.WorkflowID(id), "")
			if err == nil {
				again++
			}
		}
		u.settle(ctx)
		_, after := u.tally()
		if ok {
			u.note("replay of %d records: %d recognised as done, %d started", nEvents, dups, started)
		}
		u.note("deliveries %d before replay, %d after", before, after)
		if again > 0 || (ok && started > 0) {
			return fmt.Errorf("the replay fanned %d events out again (bridge started %d)", again, started)
		}
		if after != before {
			return fmt.Errorf("deliveries changed across the replay: %d -> %d", before, after)
		}
		return nil
	})
}

// RestartRedis (scenario 4) stops redis-server (SIGTERM) at 30% delivered,
// keeps it down 3 s and starts it again on its append-only file.
func RestartRedis(ctx context.Context, o Options, size int) (Report, error) {
	return restartMidway(ctx, o, 4, size, nil, "redis", "stopping redis-server for 3s", func(ctx context.Context, u *run) error {
		return u.s.RestartRedis(ctx, 3*time.Second)
	})
}

// RestartTemporal (scenario 5) SIGKILLs the Temporal dev server at 30%
// delivered and starts it again 2 s later on the same database file.
func RestartTemporal(ctx context.Context, o Options, size int) (Report, error) {
	return restartMidway(ctx, o, 5, size, nil, "temporal", "SIGKILLing the Temporal dev server", func(ctx context.Context, u *run) error {
		return u.s.RestartTemporal(ctx, 2*time.Second)
	})
}

// restartMidway restarts a component (restart) once 30% of one event's
// audience is delivered, and reports the gate keys held without a delivered
// mark before and after as the deliveries in flight. env is added to every
// process.
func restartMidway(ctx context.Context, o Options, num, size int, env []string, what, doing string, restart func(context.Context, *run) error) (Report, error) {
	return scenario(ctx, o, num, env, func(ctx context.Context, u *run) error {
		u.slowSink(SinkLatency)
		if err := u.startProcs(); err != nil {
			return err
		}
		ev := stack.Event{ID: "chaos-" + what, Audience: size}
		if err := u.publish(ctx, ev); err != nil {
			return err
		}
		landed, err := u.waitFault(ctx, size*3/10)
		if err != nil {
			return err
		}
		if !landed {
			u.note("no restart: the fan-out finished first")
			_, err := u.waitAll(ctx, ev.ID)
			return err
		}
		uniq, _ := u.tally()
		h1, err := u.held(ctx, ev.ID)
		if err != nil {
			return err
		}
		u.logf("%s at %d/%d delivered (%d keys held without a delivered mark)", doing, uniq, size, h1)
		t0 := time.Now()
		if err := restart(ctx, u); err != nil {
			return fmt.Errorf("restart %s: %w", what, err)
		}
		h2, err := u.held(ctx, ev.ID)
		if err != nil {
			return err
		}
		down := time.Since(t0).Seconds()
		u.logf("%s back after %.1fs; %d keys held without a delivered mark", what, down, h2)
		u.r.InFlightAtKills = max(h1, h2)
		if isAtMostOnce(env) {
			// The calls the outage interrupted: marked sending, unconfirmed.
			if u.r.InFlightAtKills, err = u.sending(ctx, ev.ID); err != nil {
				return err
			}
		}
		u.note("%s down %.1fs at %d delivered; held keys %d before, %d after", what, down, uniq, h1, h2)
		t, err := u.waitTotals(ctx, ev.ID)
		if err != nil {
			return err
		}
		u.note("workflow: delivered %d, gate duplicates %d, failed %d", t.Delivered, t.Duplicates, t.Failed)
		if isAtMostOnce(env) {
			return u.atMostOnceFigures(ctx, ev.ID, 1)
		}
		return nil
	})
}

// SinkErrors (scenario 6) makes the sink answer 30% of calls with HTTP 500
// for the first 5 s of deliveries, then recover.
func SinkErrors(ctx context.Context, o Options, size int) (Report, error) {
	return scenario(ctx, o, 6, nil, func(ctx context.Context, u *run) error {
		const window, share = 5 * time.Second, 0.3
		var first atomic.Int64
		u.s.Sink.Fail = func(_, _ string) (int, time.Duration) {
			now := time.Now().UnixNano()
			first.CompareAndSwap(0, now)
			if time.Duration(now-first.Load()) < window && rand.Float64() < share {
				return http.StatusInternalServerError, 0
			}
			return 0, 0
		}
		if err := u.startProcs(); err != nil {
			return err
		}
		ev := stack.Event{ID: "chaos-500", Audience: size}
		if err := u.publish(ctx, ev); err != nil {
			return err
		}
		if _, err := u.waitTotals(ctx, ev.ID); err != nil {
			return err
		}
		u.note("%d calls answered 500 in the first %v", u.s.Sink.Rejected(), window)
		return nil
	})
}

// recipientNumber parses a demo recipient id ("r42" -> 42).
func recipientNumber(id string) int {
	n, err := strconv.Atoi(strings.TrimPrefix(id, "r"))
	if err != nil {
		return -1
	}
	return n
}

// PermanentFailuresRedrive (scenario 7) makes the sink reject 1% of the
// recipients (number % 100 == 0) with HTTP 400: they are dead-lettered at
// once to the deliveries DLQ. Then the sink recovers and a redrive delivers
// them through the same gate.
func PermanentFailuresRedrive(ctx context.Context, o Options, size int) (Report, error) {
	return scenario(ctx, o, 7, nil, func(ctx context.Context, u *run) error {
		var rejecting atomic.Bool
		rejecting.Store(true)
		u.s.Sink.Fail = func(_, rc string) (int, time.Duration) {
			if rejecting.Load() && recipientNumber(rc)%100 == 0 {
				return http.StatusBadRequest, 0
			}
			return 0, 0
		}
		if err := u.startProcs(); err != nil {
			return err
		}
		ev := stack.Event{ID: "chaos-400", Audience: size}
		if err := u.publish(ctx, ev); err != nil {
			return err
		}
		res, err := u.waitAll(ctx, ev.ID)
		if err != nil {
			return err
		}
		t := sumResults(res)
		want := (size + 99) / 100
		dl, records, err := deadLetters(ctx, u.s.KafkaAddr, ev.ID)
		if err != nil {
			return fmt.Errorf("read deliveries DLQ: %w", err)
		}
		u.r.DeadLettered = len(dl)
		uniq, _ := u.tally()
		u.logf("fan-out done: %d/%d delivered; %d recipients in the deliveries DLQ (%d records), workflow dead-lettered %d",
			uniq, size, len(dl), records, t.DeadLettered)
		u.note("rejected with 400: %d; in the DLQ: %d (%d records); workflow: dead-lettered %d", want, len(dl), records, t.DeadLettered)
		if len(dl) != want {
			return fmt.Errorf("deliveries DLQ holds %d recipients of the event, want %d", len(dl), want)
		}
		rejecting.Store(false)
		u.logf("sink recovered; redriving the deliveries DLQ")
		rctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		defer cancel()
		rr, err := starter.RedriveDeliveries(rctx, u.s.TC, starter.RedriveOptions{
			Kafka: u.s.KafkaConn(), Topic: activities.DefaultDeliveriesDLQTopic,
			Filter: starter.RedriveFilter{EventID: ev.ID}, Rate: 100000, Wait: true,
		})
		if err != nil {
			return fmt.Errorf("redrive: %w", err)
		}
		u.settle(ctx)
		u.r.Redriven = rr.Delivered
		u.logf("redrive: matched %d in %d batches; delivered %d, skipped %d, failed %d", rr.Matched, rr.Batches, rr.Delivered, rr.Skipped, rr.Failed)
		u.note("redrive: matched %d, delivered %d, skipped %d, failed %d", rr.Matched, rr.Delivered, rr.Skipped, rr.Failed)
		return nil
	})
}

// RateLimited (scenario 8) makes the sink answer 20% of calls with 429 and
// Retry-After: 2 during the first 6 s of deliveries, and measures how long
// each rejected recipient waited before its next call.
func RateLimited(ctx context.Context, o Options, size int) (Report, error) {
	return scenario(ctx, o, 8, nil, func(ctx context.Context, u *run) error {
		const window, share, after = 6 * time.Second, 0.2, 2 * time.Second
		var (
			mu       sync.Mutex
			first    time.Time
			rejected = map[string]time.Time{}
			gaps     []time.Duration
		)
		u.s.Sink.Fail = func(_, rc string) (int, time.Duration) {
			now := time.Now()
			mu.Lock()
			defer mu.Unlock()
			if first.IsZero() {
				first = now
			}
			if t, ok := rejected[rc]; ok {
				gaps = append(gaps, now.Sub(t))
				delete(rejected, rc)
			}
			if now.Sub(first) < window && rand.Float64() < share {
				rejected[rc] = now
				return http.StatusTooManyRequests, after
			}
			return 0, 0
		}
		if err := u.startProcs(); err != nil {
			return err
		}
		ev := stack.Event{ID: "chaos-429", Audience: size}
		if err := u.publish(ctx, ev); err != nil {
			return err
		}
		if _, err := u.waitTotals(ctx, ev.ID); err != nil {
			return err
		}
		mu.Lock()
		g := slices.Clone(gaps)
		mu.Unlock()
		slices.Sort(g)
		if len(g) > 0 {
			early := 0
			for _, d := range g {
				if d < after-50*time.Millisecond {
					early++
				}
			}
			u.note("%d calls answered 429 (Retry-After %v); the rejected recipient's next call came after min %.2fs, median %.2fs; %d of %d earlier than Retry-After",
				u.s.Sink.Rejected(), after, g[0].Seconds(), g[len(g)/2].Seconds(), early, len(g))
		} else {
			u.note("%d calls answered 429 (Retry-After %v)", u.s.Sink.Rejected(), after)
		}
		return nil
	})
}

// sourceRepeats pages the demo source as the Fanout workflow does (limit =
// the webhook type's page size) and counts the repeated entries.
func sourceRepeats(ctx context.Context, baseURL string, ev stack.Event) (entries, unique int, err error) {
	payload, err := json.Marshal(demo.Payload{Audience: ev.Audience, DuplicateEvery: ev.DuplicateEvery})
	if err != nil {
		return 0, 0, err
	}
	limit := fanout.TypeOptions{}.WithDefaults().PageSize
	seen := map[string]bool{}
	cursor := ""
	for {
		body, _ := json.Marshal(webhook.RecipientsRequest{Event: fanout.Event{ID: ev.ID, Type: webhook.EventType, Payload: payload}, Cursor: cursor, Limit: limit})
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, baseURL+"/recipients", bytes.NewReader(body))
		if err != nil {
			return 0, 0, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, 0, err
		}
		var p fanout.Page
		err = json.NewDecoder(resp.Body).Decode(&p)
		_ = resp.Body.Close()
		if err != nil {
			return 0, 0, err
		}
		for _, r := range p.Recipients {
			entries++
			seen[r.ID] = true
		}
		if p.NextCursor == "" {
			return entries, len(seen), nil
		}
		cursor = p.NextCursor
	}
}

// DuplicateRecipients (scenario 9) publishes an event whose pages repeat
// every 10th recipient of an earlier page: each unique recipient is
// delivered once, and the workflow counts every repeat as a duplicate.
func DuplicateRecipients(ctx context.Context, o Options, size int) (Report, error) {
	return scenario(ctx, o, 9, nil, func(ctx context.Context, u *run) error {
		if err := u.startProcs(); err != nil {
			return err
		}
		ev := stack.Event{ID: "chaos-dups", Audience: size, DuplicateEvery: 10}
		entries, unique, err := sourceRepeats(ctx, u.s.DemoURL, ev)
		if err != nil {
			return fmt.Errorf("page the demo source: %w", err)
		}
		if unique != size {
			return fmt.Errorf("demo source serves %d unique recipients, want %d", unique, size)
		}
		repeats := entries - unique
		if err := u.publish(ctx, ev); err != nil {
			return err
		}
		t, err := u.waitTotals(ctx, ev.ID)
		if err != nil {
			return err
		}
		u.note("source: %d entries, %d repeated; workflow: found %d, gate duplicates %d", entries, repeats, t.Found, t.Duplicates)
		if t.Duplicates != int64(repeats) || t.Found != int64(entries) {
			return fmt.Errorf("workflow counted %d duplicates of %d found, want %d of %d", t.Duplicates, t.Found, repeats, entries)
		}
		return nil
	})
}

// KillEventsWorker (scenario 10) runs the bridge inside the events worker
// (FANOUT_BRIDGE=true: eager starts) and fans out small events, which that
// process delivers itself by local activities (the fast path). It SIGKILLs
// the process twice mid-stream (at 30% and 60% delivered) and restarts it:
// the interrupted workflow tasks time out and run again, the records not yet
// committed are consumed again, and every recipient is delivered, with
// duplicates up to the gate keys held without a delivered mark at the kills.
func KillEventsWorker(ctx context.Context, o Options, size int) (Report, error) {
	const nEvents = 400
	return scenario(ctx, o, 10, nil, func(ctx context.Context, u *run) error {
		u.slowSink(SinkLatency)
		if err := u.s.StartWorker("events", "events", "FANOUT_BRIDGE=true"); err != nil {
			return err
		}
		if err := u.s.StartWorker("delivery", "high,normal,low"); err != nil {
			return err
		}
		evs := make([]stack.Event, nEvents)
		for i := range evs {
			evs[i] = stack.Event{ID: fmt.Sprintf("chaos-events-%03d", i), Audience: size}
		}
		if err := u.publish(ctx, evs...); err != nil {
			return err
		}
		ids := eventIDs(evs)
		total := size * nEvents
		var at []string
		for k, frac := range []float64{0.3, 0.6} {
			landed, err := u.waitFault(ctx, int(frac*float64(total)))
			if err != nil {
				return err
			}
			if !landed {
				at = append(at, fmt.Sprintf("kill %d skipped: the events finished first", k+1))
				break
			}
			sinkBusy := u.s.Sink.InFlight()
			u.s.Kill("events")
			uniq, _ := u.tally()
			held := 0
			for _, id := range ids {
				h, err := u.held(ctx, id)
				if err != nil {
					return err
				}
				held += h
			}
			u.r.InFlightAtKills += held
			u.logf("kill %d: SIGKILLed the events worker (and its bridge) at %d/%d delivered, ~%d deliveries in the sink; %d gate keys held without a delivered mark",
				k+1, uniq, total, sinkBusy, held)
			at = append(at, fmt.Sprintf("%d (%d held, ~%d at the sink)", uniq, held, sinkBusy))
			if err := u.s.Restart("events"); err != nil {
				return err
			}
		}
		t, err := u.waitTotals(ctx, ids...)
		if err != nil {
			return err
		}
		n, err := u.countFanouts(ctx, nEvents)
		if err != nil {
			return err
		}
		u.note("kills at delivered = %s", strings.Join(at, ", "))
		u.note("workflows: %d Fanout executions for %d events; delivered %d, gate duplicates %d, failed %d", n, nEvents, t.Delivered, t.Duplicates, t.Failed)
		if n != nEvents {
			return fmt.Errorf("%d Fanout executions for %d events: an event was fanned out twice", n, nEvents)
		}
		return nil
	})
}
