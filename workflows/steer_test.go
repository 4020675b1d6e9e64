package workflows

import (
	"errors"
	"slices"
	"testing"
	"time"

	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/activities"
	"github.com/fanout/fanout/workflows/vocab"
)

// updateCB records an update's outcome.
type updateCB struct {
	t        *testing.T
	rejected error
	err      error
	done     bool
}

func (u *updateCB) Accept()          {}
func (u *updateCB) Reject(err error) { u.rejected, u.done = err, true }
func (u *updateCB) Complete(_ any, err error) {
	u.err, u.done = err, true
}

func update(env *testsuite.TestWorkflowEnvironment, t *testing.T, name string, args ...any) *updateCB {
	cb := &updateCB{t: t}
	env.UpdateWorkflow(name, "", cb, args...)
	return cb
}

func TestFanoutPauseResume(t *testing.T) {
	// Batches of 100 take a minute, two at a time, 10 batches. Paused at
	// 30s, nothing new starts until the resume at 10 min; the two open
	// batches finish meanwhile and are counted.
	fx := fixture{Event: testEvent("ev-pause"), Audience: 1000,
		Options: fanout.TypeOptions{BatchSize: 100, PageSize: 200, Window: 2}, DeliverDelay: time.Minute}
	rec := newRecorder()
	env := newEnv(t, fx, rec)
	var early, pause, again, during, resume *updateCB
	var mid Progress
	env.RegisterDelayedCallback(func() { early = update(env, t, vocab.ResumeUpdate) }, 10*time.Second)
	env.RegisterDelayedCallback(func() { pause = update(env, t, vocab.PauseUpdate, "sink maintenance") }, 30*time.Second)
	env.RegisterDelayedCallback(func() { again = update(env, t, vocab.PauseUpdate, "twice") }, 40*time.Second)
	env.RegisterDelayedCallback(func() { mid = queryProgress(t, env) }, 5*time.Minute)
	env.RegisterDelayedCallback(func() { during = update(env, t, vocab.SetRateUpdate, -1.0) }, 6*time.Minute)
	env.RegisterDelayedCallback(func() { resume = update(env, t, vocab.ResumeUpdate) }, 10*time.Minute)
	res := runToResult(t, env, FanoutInput{Event: fx.Event})

	if early == nil || early.rejected == nil {
		t.Errorf("resume while running was not rejected: %+v", early)
	}
	if pause == nil || pause.rejected != nil || pause.err != nil || !pause.done {
		t.Fatalf("pause: %+v", pause)
	}
	if again == nil || again.rejected == nil {
		t.Errorf("a second pause was not rejected: %+v", again)
	}
	if during == nil || during.rejected == nil {
		t.Errorf("a negative rate was not rejected: %+v", during)
	}
	if !mid.Paused || mid.BatchesStarted != 2 || mid.BatchesCompleted != 2 || mid.Delivered != 200 || mid.PendingBatches != 0 {
		t.Errorf("while paused: %+v, want 2 batches done, none open, paused", mid)
	}
	if resume == nil || resume.rejected != nil || resume.err != nil {
		t.Fatalf("resume: %+v", resume)
	}
	if res.Delivered != 1000 || res.Paused {
		t.Errorf("result %+v", res.Progress)
	}
	if rec.status != vocab.StatusCompleted {
		t.Errorf("final status %q", rec.status)
	}
}

// TestFanoutRateCapLanes: under a cap, batches pace their own deliveries
// at a share of it (DeliverBatchInput.Rate) and the workflow keeps the
// shares of its open batches within the cap. DeliverConcurrency 5 makes a
// lane 50/s (rateLaneCalls), so a cap of 200 runs 4 batches at once, 300
// runs 6, 100 runs 2; the mocked DeliverBatch takes 2 s, what a batch of
// 100 paced at 50/s takes. The batches started before the cap (uncapped)
// finish before the first capped one starts; a lane's next batch starts
// its schedule where the previous one's ended, so a lane idle during a
// page fetch makes up the gap (at most MaxPaceCatchUp).
func TestFanoutRateCapLanes(t *testing.T) {
	fx := fixture{Event: testEvent("ev-rate"), Audience: 6000,
		Options:   fanout.TypeOptions{BatchSize: 100, PageSize: 500, Window: 10, DeliverConcurrency: 5, LargeBatchSize: -1},
		PageDelay: time.Second, DeliverDelay: 2 * time.Second}
	rec := newRecorder()
	env := newEnv(t, fx, rec)
	t0 := env.Now()
	caps := []struct {
		at   time.Duration
		rate float64
	}{{500 * time.Millisecond, 200}, {10 * time.Second, 300}, {20 * time.Second, 100}}
	sets := make([]*updateCB, len(caps))
	for i, c := range caps {
		env.RegisterDelayedCallback(func() { sets[i] = update(env, t, vocab.SetRateUpdate, c.rate) }, c.at)
	}
	capAt := func(tm time.Time) float64 {
		r := 0.0
		for _, c := range caps {
			if !tm.Before(t0.Add(c.at)) {
				r = c.rate
			}
		}
		return r
	}
	res := runToResult(t, env, FanoutInput{Event: fx.Event})
	for i, u := range sets {
		if u == nil || u.rejected != nil || u.err != nil {
			t.Fatalf("set-rate %v: %+v", caps[i].rate, u)
		}
	}
	if res.Delivered != 6000 || res.Rate != 100 {
		t.Fatalf("result %+v, want 6000 delivered at a cap of 100", res.Progress)
	}

	type span struct {
		start, end time.Time
		rate       float64
		from       time.Time
	}
	var spans []span
	lastUncapped := t0
	for _, c := range rec.paced {
		sp := span{start: c.end.Add(-fx.DeliverDelay), end: c.end, rate: c.rate, from: c.from}
		spans = append(spans, sp)
		if c.rate == 0 {
			if sp.start.After(t0.Add(caps[0].at)) {
				t.Errorf("%s started uncapped at +%v, after the cap", c.attempts, sp.start.Sub(t0))
			}
			lastUncapped = maxTime(lastUncapped, sp.end)
		}
	}
	peak := map[float64]int{}
	caughtUp := 0
	for _, sp := range spans {
		if sp.rate == 0 {
			continue
		}
		if sp.rate != 50 {
			t.Errorf("a batch paced at %v/s, want lanes of 50/s", sp.rate)
		}
		if sp.start.Before(lastUncapped) {
			t.Errorf("a capped batch started at +%v while uncapped ones ran until +%v", sp.start.Sub(t0), lastUncapped.Sub(t0))
		}
		if sp.from.After(sp.start) || sp.from.Before(sp.start.Add(-activities.MaxPaceCatchUp)) {
			t.Errorf("a batch started at +%v paced from +%v, want within %v before", sp.start.Sub(t0), sp.from.Sub(t0), activities.MaxPaceCatchUp)
		}
		if sp.from.Before(sp.start) {
			caughtUp++
		}
		open := 0.0
		n := 0
		for _, o := range spans {
			if !o.start.After(sp.start) && o.end.After(sp.start) {
				open += o.rate
				n++
			}
		}
		c := capAt(sp.start)
		if open > c+1e-9 {
			t.Errorf("at +%v the open batches' shares add up to %v/s, over the cap of %v", sp.start.Sub(t0), open, c)
		}
		peak[c] = max(peak[c], n)
	}
	if peak[200] != 4 || peak[300] != 6 || peak[100] != 2 {
		t.Errorf("batches open at once per cap %v, want 4 at 200/s, 6 at 300/s, 2 at 100/s", peak)
	}
	if caughtUp == 0 {
		t.Error("no batch made up its lane's gap (a page fetch)")
	}
}

// TestFanoutRateCapCarriedAcrossContinueAsNew: the run hands the cap and
// its lanes' schedule ends to the next one, which starts its first capped
// batches from them (the activity bounds the catch-up).
func TestFanoutRateCapCarriedAcrossContinueAsNew(t *testing.T) {
	fx := fixture{Event: testEvent("ev-rate-can"), Audience: 3000,
		Options:   fanout.TypeOptions{BatchSize: 100, PageSize: 500, Window: 10, DeliverConcurrency: 5, LargeBatchSize: -1},
		PageDelay: time.Second, DeliverDelay: 2 * time.Second, MaxHistoryLength: 20, HistoryPerPage: 10}
	rec := newRecorder()
	env := newEnv(t, fx, rec)
	var set *updateCB
	env.RegisterDelayedCallback(func() { set = update(env, t, vocab.SetRateUpdate, 200.0) }, 500*time.Millisecond)
	env.ExecuteWorkflow(Fanout, FanoutInput{Event: fx.Event, MaxHistoryLength: fx.MaxHistoryLength})
	if set == nil || set.rejected != nil || set.err != nil {
		t.Fatalf("set-rate: %+v", set)
	}
	var can *workflow.ContinueAsNewError
	if err := env.GetWorkflowError(); !errors.As(err, &can) {
		t.Fatalf("want a continue-as-new, got %v", err)
	}
	var next FanoutInput
	if err := converter.GetDefaultDataConverter().FromPayloads(can.Input, &next); err != nil {
		t.Fatal(err)
	}
	st := next.State
	if st == nil || st.Rate != 200 || st.LaneShare != 50 || len(st.LaneEnds) != 4 {
		t.Fatalf("continue-as-new state %+v, want the cap of 200 and 4 lane ends at 50/s", st)
	}
	last := st.LaneEnds[0]
	for _, e := range st.LaneEnds {
		last = maxTime(last, e)
	}

	rec2 := newRecorder()
	env2 := newEnv(t, fx, rec2)
	// The next run's clock starts where the last lane ended.
	env2.SetStartTime(last)
	next.MaxHistoryLength = 0 // the mocked history length runs on: finish here
	res := runToResult(t, env2, next)
	if res.Rate != 200 || res.Delivered != 3000 {
		t.Fatalf("result %+v", res.Progress)
	}
	carried := 0
	for _, c := range rec2.paced {
		if c.rate != 50 {
			t.Errorf("%s paced at %v in the next run, want 50", c.attempts, c.rate)
		}
		if slices.ContainsFunc(st.LaneEnds, func(e time.Time) bool { return c.from.Equal(e) }) {
			carried++
		}
	}
	if carried == 0 {
		t.Errorf("no batch of the next run started from a carried lane end (%v)", st.LaneEnds)
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func TestFanoutCancelCountsWhatWasNotDelivered(t *testing.T) {
	fx := fixture{Event: testEvent("ev-cancel"), Audience: 1000,
		Options: fanout.TypeOptions{BatchSize: 100, PageSize: 200, Window: 2}, DeliverDelay: time.Minute}
	rec := newRecorder()
	env := newEnv(t, fx, rec)
	env.RegisterDelayedCallback(env.CancelWorkflow, 90*time.Second)
	env.ExecuteWorkflow(Fanout, FanoutInput{Event: fx.Event})
	if !env.IsWorkflowCompleted() {
		t.Fatal("not completed")
	}
	p := queryProgress(t, env)
	// Batches 0 and 1 finished at 60s; 2 and 3 were open at the cancel.
	if p.Delivered != 200 || p.Canceled != 200 || p.Failed != 0 || p.PagingDone || p.BatchesStarted != 4 {
		t.Errorf("after cancel: %+v, want 200 delivered, 200 canceled, paging not done, 4 batches", p)
	}
	if rec.status != vocab.StatusCanceled {
		t.Errorf("status %q, want %q", rec.status, vocab.StatusCanceled)
	}
}
