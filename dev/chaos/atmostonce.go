package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/activities"
	"github.com/fanout/fanout/activities/gate"
	"github.com/fanout/fanout/dev/demo"
	"github.com/fanout/fanout/dev/stack"
	"github.com/fanout/fanout/internal/kafkatopic"
)

// The at-most-once scenarios run the webhook type with
// FANOUT_SEMANTICS=at-most-once and explicit batch slots and concurrency, so
// that the in-flight capacity a fault can interrupt is known:
// amoSlots × amoConcurrency calls per fault (the event's batches all run on
// the normal queue's slots).
const (
	amoSlots       = 8
	amoConcurrency = 64
)

// atMostOnceEnv is the environment of the at-most-once scenarios' processes.
var atMostOnceEnv = []string{
	"FANOUT_SEMANTICS=" + string(fanout.AtMostOnce),
	fmt.Sprintf("FANOUT_BATCH_SLOTS=%d", amoSlots),
	fmt.Sprintf("FANOUT_DELIVER_CONCURRENCY=%d", amoConcurrency),
}

func isAtMostOnce(env []string) bool { return slices.Contains(env, atMostOnceEnv[0]) }

// AtMostOnceKillDeliveryWorker (scenario 11) is scenario 1 for an
// at-most-once type: it SIGKILLs the delivery worker twice during one
// event's fan-out (at 25% and 60% delivered) and restarts it. The calls
// in flight at each kill are left marked sending; the retries do not call
// them again but dead-letter them as unconfirmed.
func AtMostOnceKillDeliveryWorker(ctx context.Context, o Options, size int) (Report, error) {
	return scenario(ctx, o, 11, atMostOnceEnv, func(ctx context.Context, u *run) error {
		u.slowSink(SinkLatency)
		if err := u.startProcs(); err != nil {
			return err
		}
		ev := stack.Event{ID: "chaos-amo-kill-worker", Audience: size}
		if err := u.publish(ctx, ev); err != nil {
			return err
		}
		var at []string
		kills := 0
		seen := map[string]bool{} // marked sending at an earlier kill
		for k, frac := range []float64{0.25, 0.6} {
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
			kills++
			uniq, _ := u.tally()
			states, err := u.gateStates(ctx, ev.ID)
			if err != nil {
				return err
			}
			// A killed batch waits for its heartbeat timeout: its recipients
			// may still be marked sending at the next kill, counted once.
			sending := 0
			for id, st := range states {
				if st == gate.StateSending && !seen[id] {
					seen[id] = true
					sending++
				}
			}
			u.r.InFlightAtKills += sending
			u.logf("kill %d: SIGKILLed the delivery worker at %d/%d delivered, ~%d deliveries in the sink; %d more recipients marked sending",
				k+1, uniq, size, sinkBusy, sending)
			at = append(at, fmt.Sprintf("%d (%d sending, ~%d at the sink)", uniq, sending, sinkBusy))
			if err := u.s.Restart("delivery"); err != nil {
				return err
			}
		}
		t, err := u.waitTotals(ctx, ev.ID)
		if err != nil {
			return err
		}
		u.note("kills at delivered = %s", strings.Join(at, ", "))
		u.note("workflow: delivered %d, gate duplicates %d, failed %d, unconfirmed %d", t.Delivered, t.Duplicates, t.Failed, t.Unconfirmed)
		return u.atMostOnceFigures(ctx, ev.ID, kills)
	})
}

// AtMostOnceRestartRedis (scenario 12) is scenario 4 for an at-most-once
// type: redis-server stops (SIGTERM) at 30% delivered, stays down 3 s and
// starts again on its append-only file. Marks that fail while it is down
// stop the batches: a recipient whose sending mark failed was not called
// (delivered after the restart), one whose call was in flight is left
// unconfirmed.
func AtMostOnceRestartRedis(ctx context.Context, o Options, size int) (Report, error) {
	return restartMidway(ctx, o, 12, size, atMostOnceEnv, "amo-redis", "stopping redis-server for 3s", func(ctx context.Context, u *run) error {
		return u.s.RestartRedis(ctx, 3*time.Second)
	})
}

// sending counts the event's recipients marked sending, retrying briefly
// like held.
func (u *run) sending(ctx context.Context, eventID string) (int, error) {
	states, err := u.gateStates(ctx, eventID)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, st := range states {
		if st == gate.StateSending {
			n++
		}
	}
	return n, nil
}

func (u *run) gateStates(ctx context.Context, eventID string) (map[string]gate.State, error) {
	var err error
	for range 50 {
		var m map[string]gate.State
		if m, err = u.s.GateStates(ctx, eventID); err == nil {
			return m, nil
		}
		if ctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil, fmt.Errorf("gate states of %s: %w", eventID, err)
}

// atMostOnceFigures fills the at-most-once figures of the report once the
// event is done: the recipients the gate marks unconfirmed, those of them
// in the deliveries DLQ with ReasonUnconfirmedAtMostOnce, the missing
// recipients that are not among them, the most calls one recipient got, and
// the in-flight capacity of the faults.
func (u *run) atMostOnceFigures(ctx context.Context, eventID string, faults int) error {
	u.settle(ctx)
	states, err := u.gateStates(ctx, eventID)
	if err != nil {
		return err
	}
	unconfirmed := map[string]bool{}
	for id, st := range states {
		if st == gate.StateUnconfirmed {
			unconfirmed[id] = true
		}
	}
	dlq, err := unconfirmedDeadLetters(ctx, u.s.KafkaAddr, eventID)
	if err != nil {
		return fmt.Errorf("read deliveries DLQ: %w", err)
	}
	missing, outside, maxCalls := 0, 0, 0
	for i := range u.r.Expected {
		id := demo.RecipientID(i)
		n := u.s.Sink.Count(eventID, id)
		maxCalls = max(maxCalls, n)
		if n == 0 {
			missing++
			if !unconfirmed[id] || !dlq[id] {
				outside++
			}
		}
	}
	u.r.Unconfirmed = len(unconfirmed)
	u.r.MissingOutsideInFlight = outside
	u.r.InFlightCapacity = faults * amoSlots * amoConcurrency
	u.r.MaxCalls = maxCalls
	u.note("at-most-once: %d unconfirmed (%d in the DLQ as %s), %d missing, %d of them not unconfirmed; capacity %d (%d faults × %d slots × %d); most calls to one recipient %d",
		len(unconfirmed), len(dlq), activities.ReasonUnconfirmedAtMostOnce, missing, outside, u.r.InFlightCapacity, faults, amoSlots, amoConcurrency, maxCalls)
	return nil
}

// unconfirmedDeadLetters reads the recipients of the event that are in the
// deliveries DLQ as unconfirmed at most once.
func unconfirmedDeadLetters(ctx context.Context, addr, eventID string) (map[string]bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	out := map[string]bool{}
	err := kafkatopic.ReadAll(ctx, kafkatopic.Conn{Brokers: []string{addr}}, activities.DefaultDeliveriesDLQTopic, func(m kafka.Message) error {
		var d activities.DeadLetter
		if json.Unmarshal(m.Value, &d) == nil && d.EventID == eventID && strings.HasPrefix(d.LastError, activities.ReasonUnconfirmedAtMostOnce) {
			out[d.Recipient.ID] = true
		}
		return nil
	})
	return out, err
}

// atMostOnceProblems lists what makes an at-most-once report a failure: a
// duplicate (a recipient called twice), a missing recipient that was not in
// flight at a fault (not unconfirmed and dead-lettered as such), or more
// missing or unconfirmed than the faults' in-flight capacity.
func atMostOnceProblems(r Report) []string {
	var out []string
	if r.Expected == 0 {
		out = append(out, "nothing expected: the scenario did not run")
	}
	if r.Duplicated != 0 || r.MaxCalls > 1 {
		out = append(out, fmt.Sprintf("duplicated %d (a recipient called %d times); at-most-once allows none", r.Duplicated, r.MaxCalls))
	}
	if r.MissingOutsideInFlight != 0 {
		out = append(out, fmt.Sprintf("%d missing recipients were not in flight at a fault (not unconfirmed in the gate and the DLQ)", r.MissingOutsideInFlight))
	}
	if r.Missing > r.InFlightCapacity || r.Unconfirmed > r.InFlightCapacity {
		out = append(out, fmt.Sprintf("missing %d, unconfirmed %d: over the in-flight capacity %d", r.Missing, r.Unconfirmed, r.InFlightCapacity))
	}
	if r.Missing > r.Unconfirmed {
		out = append(out, fmt.Sprintf("missing %d > unconfirmed %d", r.Missing, r.Unconfirmed))
	}
	return out
}
