package workflows

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/workflows/vocab"
)

// DefaultScheduleHorizon is how far ahead an event may be scheduled when
// FanoutInput.ScheduleHorizon is not set (FANOUT_SCHEDULE_HORIZON's
// default).
const DefaultScheduleHorizon = 30 * 24 * time.Hour

// schedule is a scheduled event's wait for its delivery time.
type schedule struct {
	// at is when the event is to be delivered (the event's DeliverAt, or
	// where a reschedule moved it), in UTC.
	at time.Time
	// waiting is true while the event waits for at.
	waiting bool
	// moved wakes the wait after a reschedule.
	moved bool
}

// horizon is how far ahead the event may be rescheduled.
func (in FanoutInput) horizon() time.Duration {
	if in.ScheduleHorizon > 0 {
		return in.ScheduleHorizon
	}
	return DefaultScheduleHorizon
}

// awaitSchedule holds a scheduled event (Event.DeliverAt in the future)
// until its time, on a durable timer: no worker slot is held, and the wait
// survives restarts of the workers and of the server. Meanwhile the status
// search attribute reads scheduled, FanoutScheduledFor the time, and the
// UI's details "scheduled for ..."; the reschedule update moves the time,
// a cancel ends the wait (a canceled error, nothing delivered). When the
// time comes the status turns running (or stays paused, if the event was
// paused meanwhile). An event without DeliverAt, or with one already past,
// goes on at once and, unless the bridge marked it scheduled, issues no
// command here: an unscheduled event pays nothing for the feature.
func (r *fanoutRun) awaitSchedule() error {
	if err := r.occurrence(); err != nil {
		return err
	}
	at := r.in.Event.DeliverAt
	if d := r.in.Event.Delay; d != "" && at.IsZero() {
		// Not resolved by the bridge (a Temporal Schedule's input, a start
		// of one's own): from the workflow's start.
		var err error
		if at, err = resolveDelay(d, workflow.GetInfo(r.ctx).WorkflowStartTime, r.in.horizon()); err != nil {
			return temporal.NewNonRetryableApplicationError("invalid_delay: "+err.Error(), ErrInvalidDelay, nil)
		}
	}
	if at.IsZero() {
		return nil
	}
	ctx := r.ctx
	r.sched.at = at.UTC()
	r.prog.ScheduledFor = r.sched.at
	marked, _ := workflow.GetTypedSearchAttributes(ctx).GetKeyword(vocab.StatusKey)
	if r.sched.at.After(workflow.Now(ctx)) {
		r.sched.waiting = true
		if marked != vocab.StatusScheduled {
			// Started by other means than the bridge (a Temporal Schedule,
			// the CLI): mark it here.
			if err := workflow.UpsertTypedSearchAttributes(ctx, vocab.StatusKey.ValueSet(vocab.StatusScheduled),
				vocab.ScheduledForKey.ValueSet(r.sched.at)); err != nil {
				return err
			}
			marked = vocab.StatusScheduled
		}
		for {
			wait := r.sched.at.Sub(workflow.Now(ctx))
			if wait <= 0 {
				break
			}
			r.sched.moved = false
			r.setDetails()
			if _, err := workflow.AwaitWithOptions(ctx, workflow.AwaitOptions{
				Timeout:      wait,
				TimerOptions: workflow.TimerOptions{Summary: "deliver_at " + r.sched.at.Format(time.RFC3339)},
			}, func() bool { return r.sched.moved }); err != nil {
				return err // canceled: sched.waiting stays set for the details
			}
		}
		r.sched.waiting = false
		workflow.GetLogger(ctx).Info("scheduled time reached", "deliver_at", r.sched.at)
	}
	if marked == vocab.StatusScheduled && !r.prog.Paused {
		return workflow.UpsertTypedSearchAttributes(ctx, vocab.StatusKey.ValueSet(vocab.StatusRunning))
	}
	return nil
}

// status is the FanoutStatus of a run that is not paused: scheduled while
// it waits for its time, else running.
func (r *fanoutRun) status() string {
	if r.sched.waiting {
		return vocab.StatusScheduled
	}
	return vocab.StatusRunning
}

// registerReschedule registers the reschedule update: its argument is the
// new time, RFC 3339 ("2026-12-24T09:00:00Z") or a Go duration from now
// ("10m"); a time already past delivers now. Accepted only while the event
// waits for its time, and no further ahead than the horizon. It answers the
// progress, whose ScheduledFor is the new time.
func (r *fanoutRun) registerReschedule() error {
	return workflow.SetUpdateHandlerWithOptions(r.ctx, vocab.RescheduleUpdate, func(ctx workflow.Context, when string) (Progress, error) {
		at, err := r.parseWhen(when)
		if err != nil {
			return r.prog, err
		}
		if !r.sched.waiting {
			return r.prog, errors.New("the scheduled time has already come")
		}
		workflow.GetLogger(ctx).Info("rescheduled", "from", r.sched.at, "to", at)
		r.sched.at, r.sched.moved = at, true
		r.prog.ScheduledFor = at
		r.setDetails()
		return r.prog, workflow.UpsertTypedSearchAttributes(ctx, vocab.ScheduledForKey.ValueSet(at))
	}, workflow.UpdateHandlerOptions{Validator: func(when string) error {
		if !r.sched.waiting || r.ctx.Err() != nil {
			return errors.New("the event is not scheduled (no deliver_at ahead, or its time has come)")
		}
		_, err := r.parseWhen(when)
		return err
	}})
}

// parseWhen parses a reschedule's argument against the workflow's clock.
func (r *fanoutRun) parseWhen(when string) (time.Time, error) {
	return resolveWhen(when, workflow.Now(r.ctx), r.in.horizon())
}

// resolveWhen is the time a reschedule's argument names: an RFC 3339 time,
// or a non-negative Go duration from now; no more than horizon after now.
func resolveWhen(when string, now time.Time, horizon time.Duration) (time.Time, error) {
	when = strings.TrimSpace(when)
	at, err := time.Parse(time.RFC3339, when)
	if err != nil {
		d, derr := time.ParseDuration(when)
		if derr != nil {
			return time.Time{}, fmt.Errorf("%s is neither an RFC 3339 time (2026-12-24T09:00:00Z) nor a Go duration (90s, 2h)", clipArg(strconv.Quote(when)))
		}
		if d < 0 {
			return time.Time{}, fmt.Errorf("negative delay %v", d)
		}
		if d > horizon {
			return time.Time{}, fmt.Errorf("delay %v is more than the horizon %v", d, horizon)
		}
		at = now.Add(d)
	}
	if at.Sub(now) > horizon {
		return time.Time{}, fmt.Errorf("%s is more than the horizon %v ahead", at.UTC().Format(time.RFC3339), horizon)
	}
	return at.UTC(), nil
}

// resolveDelay is the time an event's delay names, from start.
func resolveDelay(delay string, start time.Time, horizon time.Duration) (time.Time, error) {
	if _, err := time.ParseDuration(strings.TrimSpace(delay)); err != nil {
		return time.Time{}, fmt.Errorf("delay %s is not a Go duration (90s, 2h)", clipArg(strconv.Quote(delay)))
	}
	return resolveWhen(delay, start, horizon)
}

// clipArg cuts an operator's argument to a length fit for an error (at a
// rune boundary).
func clipArg(s string) string {
	if len(s) <= 64 {
		return s
	}
	i := 64
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "..."
}

// scheduleDetails is the UI's details line of an event waiting for its
// time (or canceled while it waited).
func (r *fanoutRun) scheduleDetails() string {
	at := r.sched.at.Format("2006-01-02 15:04:05 MST")
	if r.ctx.Err() != nil {
		return fmt.Sprintf("**canceled** while scheduled for %s · nothing delivered", at)
	}
	now := workflow.Now(r.ctx)
	line := fmt.Sprintf("**scheduled** for %s (in %v, as of %s) · reschedule with the %s update, cancel to drop it",
		at, r.sched.at.Sub(now).Round(time.Second), now.UTC().Format("15:04:05 MST"), vocab.RescheduleUpdate)
	if r.prog.Paused {
		line += " · **paused**: held after its time until resumed"
	}
	if r.prog.Rate > 0 {
		line += fmt.Sprintf(" · rate cap %.0f/s", r.prog.Rate)
	}
	return line
}

// Search attributes a Temporal Schedule sets on every workflow it starts.
const (
	searchAttrScheduledByID      = "TemporalScheduledById"
	searchAttrScheduledStartTime = "TemporalScheduledStartTime"
)

// occurrence makes an event started by a Temporal Schedule (a recurring
// broadcast: the schedule's action starts Fanout with the same input every
// time) one occurrence of it: its id becomes vocab.OccurrenceID of the
// action's nominal time, so that each occurrence delivers to every
// recipient. The input did not pass the bridge: its id and type are
// checked here. Events the bridge started are left alone (no command).
func (r *fanoutRun) occurrence() error {
	// The Schedule's own attributes, as the server wrote them (no type
	// metadata the typed view needs).
	fields := workflow.GetInfo(r.ctx).SearchAttributes.GetIndexedFields() //nolint:staticcheck // SA1019: see above
	by, nominalPayload := fields[searchAttrScheduledByID], fields[searchAttrScheduledStartTime]
	if by == nil || nominalPayload == nil {
		return nil
	}
	var nominal time.Time
	if err := converter.GetDefaultDataConverter().FromPayload(nominalPayload, &nominal); err != nil {
		return temporal.NewNonRetryableApplicationError("invalid_event: the schedule's start time: "+err.Error(), ErrInvalidEvent, nil)
	}
	ev := &r.in.Event
	id := vocab.OccurrenceID(ev.ID, nominal)
	if err := fanout.ValidateType(ev.Type); err != nil {
		return temporal.NewNonRetryableApplicationError("invalid_event: the schedule's event: "+err.Error(), ErrInvalidEvent, nil)
	}
	if err := fanout.ValidateID(id); err != nil {
		return temporal.NewNonRetryableApplicationError("invalid_event: the schedule's event id with its time: "+err.Error(), ErrInvalidEvent, nil)
	}
	workflow.GetLogger(r.ctx).Info("occurrence of a recurring broadcast", "event", id, "nominal", nominal)
	ev.ID = id
	return nil
}
