package workflows

import (
	"testing"
	"time"

	"go.temporal.io/sdk/testsuite"

	"github.com/fanout/fanout"
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

func TestFanoutRateCap(t *testing.T) {
	// 10 batches of 100; the first page's 2 start at once, then the cap of
	// 50 recipients/s (set at 500ms) paces the other 8 two seconds apart.
	fx := fixture{Event: testEvent("ev-rate"), Audience: 1000,
		Options: fanout.TypeOptions{BatchSize: 100, PageSize: 200, Window: 10}, PageDelay: time.Second, DeliverDelay: time.Millisecond}
	rec := newRecorder()
	env := newEnv(t, fx, rec)
	var set *updateCB
	env.RegisterDelayedCallback(func() { set = update(env, t, vocab.SetRateUpdate, 50.0) }, 500*time.Millisecond)
	t0 := env.Now()
	res := runToResult(t, env, FanoutInput{Event: fx.Event})
	if set == nil || set.rejected != nil || set.err != nil {
		t.Fatalf("set-rate: %+v", set)
	}
	if res.Delivered != 1000 || res.Rate != 50 {
		t.Errorf("result %+v", res.Progress)
	}
	if took := env.Now().Sub(t0); took < 16*time.Second || took > time.Minute {
		t.Errorf("1000 recipients capped at 50/s took %v of workflow time, want 16s..1m", took)
	}
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
