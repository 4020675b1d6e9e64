package workflows

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	sdkpb "go.temporal.io/api/sdk/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/workflows/vocab"
)

// Scheduled events on the test environment's mock clock: the wait is a
// timer, so an hour passes at once. (The test environment ignores start
// search attributes, so the bridge-marked start, status scheduled at start,
// is covered by dev/e2e/schedule.)

// scheduledFixture is a 250-recipient event (3 batches: children) to be
// delivered at at.
func scheduledFixture(id string, at time.Time) fixture {
	ev := testEvent(id)
	ev.DeliverAt = at
	return fixture{Event: ev, Audience: 250, Options: fanout.TypeOptions{BatchSize: 100, PageSize: 100, Window: 2}}
}

// start is the mock clock's time when the workflow starts.
func start(env *testsuite.TestWorkflowEnvironment) time.Time { return env.Now() }

func TestScheduledEventWaitsForItsTime(t *testing.T) {
	rec := newRecorder()
	var env *testsuite.TestWorkflowEnvironment
	fx := scheduledFixture("ev-sched", time.Time{})
	env = newEnv(t, fx, rec)
	t0 := start(env)
	at := t0.Add(time.Hour).Truncate(time.Second)
	fx.Event.DeliverAt = at
	var mid Progress
	var details string
	env.RegisterDelayedCallback(func() {
		mid = queryProgress(t, env)
		v, err := env.QueryWorkflow("__temporal_workflow_metadata")
		if err != nil {
			t.Errorf("metadata query: %v", err)
			return
		}
		var md sdkpb.WorkflowMetadata
		if err := v.Get(&md); err != nil {
			t.Errorf("metadata: %v", err)
		}
		details = md.GetCurrentDetails()
	}, 30*time.Minute)
	res := runToResult(t, env, FanoutInput{Event: fx.Event})

	if res.Delivered != 250 || !res.ScheduledFor.Equal(at) {
		t.Errorf("result %+v, want 250 delivered, ScheduledFor %v", res.Progress, at)
	}
	if mid.Found != 0 || mid.Delivered != 0 || !mid.ScheduledFor.Equal(at) {
		t.Errorf("while scheduled: %+v", mid)
	}
	// Written when the wait began (the UI shows it as is).
	if want := "**scheduled** for " + at.UTC().Format("2006-01-02 15:04:05 MST") + " (in "; !strings.HasPrefix(details, want) {
		t.Errorf("details while scheduled: %q, want prefix %q", details, want)
	}
	// Nothing ran before the time: Prepare (the first thing after the
	// wait) was called at it.
	if rec.prepareAt.Before(at) || rec.prepareAt.After(at.Add(time.Second)) {
		t.Errorf("Prepare at %v, want at %v", rec.prepareAt, at)
	}
	// Started without the bridge's attributes, it marked itself scheduled.
	if want := []string{vocab.StatusScheduled, vocab.StatusRunning, vocab.StatusCompleted}; !slices.Equal(rec.statuses, want) {
		t.Errorf("statuses %v, want %v", rec.statuses, want)
	}
	if !rec.scheduledFor.Equal(at) {
		t.Errorf("FanoutScheduledFor %v, want %v", rec.scheduledFor, at)
	}
	checkDelivery(t, rec, fx.Event, 250, 3, false)
}

func TestReschedule(t *testing.T) {
	cases := []struct {
		name string
		when func(t0 time.Time) string // the update's argument, sent at 10 min
		want func(t0 time.Time) time.Time
	}{
		{"earlier, as a duration", func(time.Time) string { return "5m" }, func(t0 time.Time) time.Time { return t0.Add(15 * time.Minute) }},
		{"later, as a time", func(t0 time.Time) string { return t0.Add(3 * time.Hour).Format(time.RFC3339) }, func(t0 time.Time) time.Time { return t0.Add(3 * time.Hour) }},
		{"to a past time: now", func(t0 time.Time) string { return t0.Add(-time.Hour).Format(time.RFC3339) }, func(t0 time.Time) time.Time { return t0.Add(10 * time.Minute) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec := newRecorder()
			fx := scheduledFixture("ev-resched", time.Time{})
			env := newEnv(t, fx, rec)
			t0 := start(env).Truncate(time.Second)
			fx.Event.DeliverAt = t0.Add(time.Hour)
			var cb *updateCB
			env.RegisterDelayedCallback(func() { cb = update(env, t, vocab.RescheduleUpdate, c.when(t0)) }, 10*time.Minute)
			res := runToResult(t, env, FanoutInput{Event: fx.Event})
			if cb == nil || cb.rejected != nil || cb.err != nil || !cb.done {
				t.Fatalf("reschedule: %+v", cb)
			}
			want := c.want(t0)
			if rec.prepareAt.Before(want) || rec.prepareAt.After(want.Add(2*time.Second)) {
				t.Errorf("Prepare at %v, want at %v", rec.prepareAt, want)
			}
			if res.Delivered != 250 {
				t.Errorf("result %+v", res.Progress)
			}
			if d := rec.scheduledFor.Sub(want); c.name != "to a past time: now" && (d < 0 || d > time.Second) {
				t.Errorf("FanoutScheduledFor %v, want %v", rec.scheduledFor, want)
			}
		})
	}
}

func TestRescheduleRejected(t *testing.T) {
	rec := newRecorder()
	fx := scheduledFixture("ev-reject", time.Time{})
	fx.DeliverDelay = time.Hour // still running after its time
	env := newEnv(t, fx, rec)
	t0 := start(env).Truncate(time.Second)
	fx.Event.DeliverAt = t0.Add(time.Hour)
	args := map[string]string{
		"garbage":              "soon",
		"negative delay":       "-5m",
		"beyond the horizon":   "3h",
		"time beyond horizon":  t0.Add(5 * time.Hour).Format(time.RFC3339),
		"time without a zone":  "2026-12-24T09:00:00",
		"a date only":          "2026-12-24",
		"empty":                "",
		"days are not a unit":  "1d",
		"overflowing duration": "9999999999h",
	}
	got := map[string]*updateCB{}
	env.RegisterDelayedCallback(func() {
		for name, arg := range args {
			got[name] = update(env, t, vocab.RescheduleUpdate, arg)
		}
	}, 10*time.Minute)
	var fired *updateCB
	env.RegisterDelayedCallback(func() { fired = update(env, t, vocab.RescheduleUpdate, "1m") }, 90*time.Minute)
	res := runToResult(t, env, FanoutInput{Event: fx.Event, ScheduleHorizon: 2 * time.Hour})
	for name, cb := range got {
		if cb.rejected == nil {
			t.Errorf("%s (%q): not rejected: %+v", name, args[name], cb)
		}
	}
	if fired == nil || fired.rejected == nil {
		t.Errorf("reschedule after the time came: not rejected: %+v", fired)
	}
	if rec.prepareAt.Before(fx.Event.DeliverAt) || rec.prepareAt.After(fx.Event.DeliverAt.Add(time.Second)) {
		t.Errorf("Prepare at %v, want at %v (the rejected updates changed nothing)", rec.prepareAt, fx.Event.DeliverAt)
	}
	if res.Delivered != 250 {
		t.Errorf("result %+v", res.Progress)
	}
}

// TestRescheduleUnscheduledRejected: an event without deliver_at has
// nothing to reschedule.
func TestRescheduleUnscheduledRejected(t *testing.T) {
	rec := newRecorder()
	fx := fixture{Event: testEvent("ev-now"), Audience: 250, Options: fanout.TypeOptions{BatchSize: 100, PageSize: 100, Window: 2}, DeliverDelay: time.Minute}
	env := newEnv(t, fx, rec)
	var cb *updateCB
	env.RegisterDelayedCallback(func() { cb = update(env, t, vocab.RescheduleUpdate, "1h") }, 30*time.Second)
	runToResult(t, env, FanoutInput{Event: fx.Event})
	if cb == nil || cb.rejected == nil {
		t.Errorf("reschedule of an unscheduled event: %+v", cb)
	}
}

func TestCancelWhileScheduled(t *testing.T) {
	rec := newRecorder()
	fx := scheduledFixture("ev-cancel-sched", time.Time{})
	env := newEnv(t, fx, rec)
	fx.Event.DeliverAt = start(env).Add(time.Hour)
	env.RegisterDelayedCallback(env.CancelWorkflow, 10*time.Minute)
	env.ExecuteWorkflow(Fanout, FanoutInput{Event: fx.Event})
	if !env.IsWorkflowCompleted() {
		t.Fatal("not completed")
	}
	var canceled *temporal.CanceledError
	if err := env.GetWorkflowError(); !errors.As(err, &canceled) {
		t.Errorf("workflow error %v, want canceled", err)
	}
	if rec.prepares != 0 || len(rec.attempts) != 0 {
		t.Errorf("prepared %d times, delivered %d batches; want nothing", rec.prepares, len(rec.attempts))
	}
	if rec.status != vocab.StatusCanceled {
		t.Errorf("status %q, want %q", rec.status, vocab.StatusCanceled)
	}
	p := queryProgress(t, env)
	if p.Delivered != 0 || p.Found != 0 || p.Canceled != 0 {
		t.Errorf("progress %+v, want nothing found or delivered", p)
	}
}

// TestPastTimeDeliversNow: a deliver_at already past delivers at once and,
// as an unscheduled event, upserts no status on the way (no new command).
func TestPastTimeDeliversNow(t *testing.T) {
	rec := newRecorder()
	fx := scheduledFixture("ev-past", time.Time{})
	env := newEnv(t, fx, rec)
	t0 := start(env)
	fx.Event.DeliverAt = t0.Add(-time.Hour)
	res := runToResult(t, env, FanoutInput{Event: fx.Event})
	if res.Delivered != 250 {
		t.Errorf("result %+v", res.Progress)
	}
	if rec.prepareAt.After(t0.Add(time.Second)) {
		t.Errorf("Prepare at %v, want at once (%v)", rec.prepareAt, t0)
	}
	if want := []string{vocab.StatusCompleted}; !slices.Equal(rec.statuses, want) {
		t.Errorf("statuses %v, want %v", rec.statuses, want)
	}
}

// TestPauseWhileScheduled: a pause while scheduled holds the event after
// its time until the resume; a resume before the time returns it to
// scheduled.
func TestPauseWhileScheduled(t *testing.T) {
	rec := newRecorder()
	fx := scheduledFixture("ev-pause-sched", time.Time{})
	env := newEnv(t, fx, rec)
	t0 := start(env)
	fx.Event.DeliverAt = t0.Add(time.Hour)
	var pause1, resume1, pause2, resume2 *updateCB
	var held Progress
	env.RegisterDelayedCallback(func() { pause1 = update(env, t, vocab.PauseUpdate, "check") }, 10*time.Minute)
	env.RegisterDelayedCallback(func() { resume1 = update(env, t, vocab.ResumeUpdate) }, 20*time.Minute)
	env.RegisterDelayedCallback(func() { pause2 = update(env, t, vocab.PauseUpdate, "hold") }, 30*time.Minute)
	env.RegisterDelayedCallback(func() { held = queryProgress(t, env) }, 2*time.Hour)
	env.RegisterDelayedCallback(func() { resume2 = update(env, t, vocab.ResumeUpdate) }, 3*time.Hour)
	res := runToResult(t, env, FanoutInput{Event: fx.Event})
	for name, cb := range map[string]*updateCB{"pause": pause1, "resume": resume1, "second pause": pause2, "second resume": resume2} {
		if cb == nil || cb.rejected != nil || cb.err != nil {
			t.Errorf("%s: %+v", name, cb)
		}
	}
	if held.Delivered != 0 || !held.Paused {
		t.Errorf("paused after its time: %+v, want paused, nothing delivered", held)
	}
	if res.Delivered != 250 {
		t.Errorf("result %+v", res.Progress)
	}
	want := []string{vocab.StatusScheduled, vocab.StatusPaused, vocab.StatusScheduled, vocab.StatusPaused, vocab.StatusRunning, vocab.StatusCompleted}
	if !slices.Equal(rec.statuses, want) {
		t.Errorf("statuses %v, want %v", rec.statuses, want)
	}
}

// FuzzResolveWhen: whatever an operator sends to reschedule, the answer is
// an error or a UTC time no further than the horizon ahead, not before now
// when given as a duration; errors stay short.
func FuzzResolveWhen(f *testing.F) {
	for _, s := range []string{"5m", "0s", "-1m", "2026-12-01T05:00:00Z", "2026-12-01T06:30:00.5+01:00", "2020-01-01T00:00:00Z",
		"9999-12-31T23:59:59Z", "2562047h", "1d", "", " 90s ", "tomorrow", "2026-12-01T05:00:00"} {
		f.Add(s)
	}
	now := time.Date(2026, 12, 1, 4, 0, 0, 0, time.UTC)
	const horizon = 24 * time.Hour
	f.Fuzz(func(t *testing.T, when string) {
		at, err := resolveWhen(when, now, horizon)
		if err != nil {
			if len(err.Error()) > 300 {
				t.Fatalf("error of %d bytes", len(err.Error()))
			}
			return
		}
		if at.Location() != time.UTC || at.Sub(now) > horizon {
			t.Fatalf("%q resolved to %v", when, at)
		}
		if _, perr := time.ParseDuration(strings.TrimSpace(when)); perr == nil && at.Before(now) {
			t.Fatalf("duration %q resolved to %v, before now", when, at)
		}
	})
}

// TestDelayNotResolvedByTheBridge: an event started with a delay of its
// own (a Temporal Schedule's input) waits from the workflow's start; a bad
// one fails the event at once with the reason.
func TestDelayNotResolvedByTheBridge(t *testing.T) {
	rec := newRecorder()
	fx := scheduledFixture("ev-own-delay", time.Time{})
	fx.Event.Delay = "20m"
	env := newEnv(t, fx, rec)
	t0 := start(env)
	res := runToResult(t, env, FanoutInput{Event: fx.Event})
	if want := t0.Add(20 * time.Minute); rec.prepareAt.Before(want) || res.Delivered != 250 {
		t.Errorf("Prepare at %v, want from %v; result %+v", rec.prepareAt, want, res.Progress)
	}

	for _, bad := range []string{"soon", "-1m", "800h"} {
		rec := newRecorder()
		fx := scheduledFixture("ev-bad-delay", time.Time{})
		fx.Event.Delay = bad
		env := newEnv(t, fx, rec)
		env.ExecuteWorkflow(Fanout, FanoutInput{Event: fx.Event})
		err := env.GetWorkflowError()
		if err == nil || !strings.Contains(err.Error(), "invalid_delay") || rec.prepares != 0 {
			t.Errorf("delay %q: error %v, %d prepares; want invalid_delay and nothing run", bad, err, rec.prepares)
		}
		if rec.status != vocab.StatusFailed {
			t.Errorf("delay %q: status %q", bad, rec.status)
		}
	}
}

// TestSteeredWhileScheduledFastPath: a small event (the fast path: Open
// delivers in the first workflow task after the wait) honours a pause and
// a set-rate sent while it waits for its time, as a big one does: paused,
// nothing is delivered after its time until the resume; capped, every
// delivery runs at the rate.
func TestSteeredWhileScheduledFastPath(t *testing.T) {
	t.Run("pause", func(t *testing.T) {
		rec := newRecorder()
		fx := fixture{Event: testEvent("ev-pause-small"), Audience: 20, Options: fanout.TypeOptions{LocalDeliveryMax: 100}}
		env := newEnv(t, fx, rec)
		fx.Event.DeliverAt = start(env).Add(time.Hour)
		var pause, resume *updateCB
		var held Progress
		heldCalls := -1
		env.RegisterDelayedCallback(func() { pause = update(env, t, vocab.PauseUpdate, "hold") }, 10*time.Minute)
		env.RegisterDelayedCallback(func() {
			held = queryProgress(t, env)
			rec.mu.Lock()
			heldCalls = len(rec.delivers)
			rec.mu.Unlock()
		}, 2*time.Hour)
		env.RegisterDelayedCallback(func() { resume = update(env, t, vocab.ResumeUpdate) }, 3*time.Hour)
		res := runToResult(t, env, FanoutInput{Event: fx.Event})
		if heldCalls != 0 || held.Delivered != 0 || !held.Paused {
			t.Errorf("an hour after its time, paused: %d DeliverBatch calls (-1: the event had completed), progress %+v; want none, paused", heldCalls, held)
		}
		if pause == nil || pause.rejected != nil || pause.err != nil || resume == nil || resume.rejected != nil || resume.err != nil {
			t.Fatalf("pause %+v, resume %+v (nil: not sent, the event had completed)", pause, resume)
		}
		if res.Delivered != 20 || res.Failed != 0 {
			t.Errorf("result %+v, want 20 delivered after the resume", res.Progress)
		}
	})
	t.Run("set-rate", func(t *testing.T) {
		rec := newRecorder()
		fx := fixture{Event: testEvent("ev-rate-small"), Audience: 20, Options: fanout.TypeOptions{LocalDeliveryMax: 100}}
		env := newEnv(t, fx, rec)
		fx.Event.DeliverAt = start(env).Add(time.Hour)
		var setRate *updateCB
		env.RegisterDelayedCallback(func() { setRate = update(env, t, vocab.SetRateUpdate, 4.0) }, 10*time.Minute)
		res := runToResult(t, env, FanoutInput{Event: fx.Event})
		if setRate == nil || setRate.rejected != nil || setRate.err != nil {
			t.Fatalf("set-rate %+v", setRate)
		}
		if res.Delivered != 20 || res.Rate != 4 {
			t.Errorf("result %+v, want 20 delivered at rate 4", res.Progress)
		}
		if len(rec.paced) == 0 {
			t.Fatal("no DeliverBatch call")
		}
		for _, p := range rec.paced {
			if p.rate != 4 || p.from.IsZero() {
				t.Errorf("DeliverBatch paced at %v/s from %v, want 4/s from the delivery's start", p.rate, p.from)
			}
		}
	})
}
