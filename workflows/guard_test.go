package workflows

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/workflows/vocab"
)

// errTransient makes Open fail for a reason the workflow retries, so that
// it takes the steps one by one.
var errTransient = errors.New("transient")

// everyOther fails the recipients of even index: half of any batch.
func everyOther(r fanout.Recipient) outcome {
	if n := r.ID[len(r.ID)-1]; (n-'0')%2 == 0 {
		return failed
	}
	return delivered
}

// TestCanaryFailsPausesResumes: a canary of 100 (one batch of 100) on a
// destination failing half its recipients pauses the event after that
// batch, with the verdict as the reason, in the progress, the status and
// the details; nothing else starts until the resume, which continues the
// event to completion without judging again.
func TestCanaryFailsPausesResumes(t *testing.T) {
	ev := testEvent("ev-canary")
	ev.Canary = &fanout.Canary{Recipients: 100, MaxFailureRatio: 0.2}
	fx := fixture{Event: ev, Audience: 1000, Outcome: everyOther, DeliverDelay: 10 * time.Second,
		Options: fanout.TypeOptions{BatchSize: 100, PageSize: 1000, Window: 5}}
	rec := newRecorder()
	env := newEnv(t, fx, rec)
	var mid Progress
	var midBatches int
	var resume *updateCB
	env.RegisterDelayedCallback(func() {
		mid = queryProgress(t, env)
		rec.mu.Lock()
		midBatches = len(rec.attempts)
		rec.mu.Unlock()
	}, 5*time.Minute)
	env.RegisterDelayedCallback(func() { resume = update(env, t, vocab.ResumeUpdate) }, 6*time.Minute)
	res := runToResult(t, env, FanoutInput{Event: fx.Event})

	const reason = "canary: 50 of 100 failed (50% > 20%)"
	if !mid.Paused || mid.PauseReason != reason || mid.BatchesStarted != 1 || mid.Delivered != 50 || mid.Failed != 50 || midBatches != 1 {
		t.Errorf("while paused: %+v (%d batches delivered); want paused after the one canary batch with %q", mid, midBatches, reason)
	}
	if mid.Canary != "failed: 50 of 100 failed (50% > 20%)" {
		t.Errorf("canary verdict %q", mid.Canary)
	}
	if !slices.Contains(rec.statuses, vocab.StatusPaused) {
		t.Errorf("statuses %v: never paused", rec.statuses)
	}
	if resume == nil || resume.rejected != nil || resume.err != nil {
		t.Fatalf("resume: %+v", resume)
	}
	if res.Delivered != 500 || res.Failed != 500 || res.Paused || res.PauseReason != "" || res.BatchesCompleted != 10 {
		t.Errorf("result %+v, want every batch delivered after the resume", res.Progress)
	}
	if rec.status != vocab.StatusCompletedWithFailures {
		t.Errorf("final status %q", rec.status)
	}
	if n := strings.Count(strings.Join(rec.statuses, ","), vocab.StatusPaused); n != 1 {
		t.Errorf("statuses %v: paused %d times, want once (judged once)", rec.statuses, n)
	}
}

// TestCanaryPasses: a canary whose failures are within its ratio lets the
// event go on without a pause; the verdict is kept. The type's options
// give the canary here (the event has none), with the default ratio.
func TestCanaryPasses(t *testing.T) {
	fx := fixture{Event: testEvent("ev-canary-ok"), Audience: 1000, DeliverDelay: 10 * time.Second,
		Outcome: func(r fanout.Recipient) outcome {
			if strings.HasSuffix(r.ID, "00") { // r00000, r00100, ...: 1 of 100
				return failed
			}
			return delivered
		},
		Options: fanout.TypeOptions{BatchSize: 100, PageSize: 1000, Window: 5, CanaryRecipients: 150}}
	rec := newRecorder()
	env := newEnv(t, fx, rec)
	res := runToResult(t, env, FanoutInput{Event: fx.Event})
	if res.Paused || res.Delivered != 990 || res.Failed != 10 {
		t.Errorf("result %+v", res.Progress)
	}
	// 150 recipients: the first two batches.
	if res.Canary != "passed: 2 of 200 failed (1% ≤ 10%)" {
		t.Errorf("canary verdict %q", res.Canary)
	}
	if slices.Contains(rec.statuses, vocab.StatusPaused) || rec.status != vocab.StatusCompletedWithFailures {
		t.Errorf("statuses %v", rec.statuses)
	}
}

// TestCanaryOffForTheEvent: an event's canary of 0 turns the type's off.
func TestCanaryOffForTheEvent(t *testing.T) {
	ev := testEvent("ev-canary-off")
	ev.Canary = &fanout.Canary{}
	fx := fixture{Event: ev, Audience: 500, Outcome: everyOther,
		Options: fanout.TypeOptions{BatchSize: 100, PageSize: 1000, Window: 5, CanaryRecipients: 100}}
	rec := newRecorder()
	env := newEnv(t, fx, rec)
	res := runToResult(t, env, FanoutInput{Event: fx.Event})
	if res.Paused || res.Canary != "" || res.Delivered != 250 {
		t.Errorf("result %+v, want no canary", res.Progress)
	}
}

// TestExpiry: batches that would start after the event's expiry are not
// started, their recipients counted expired with those a batch running at
// the expiry left (DeliverBatchResult.Expired); nothing is dead-lettered,
// the batches carry the expiry, and the event ends expired with
// FanoutExpired. Batches of 100 take a minute, two at a time: batches 0-1
// run 0-60 s, 2-3 60-120 s; the expiry at 90 s stops batches 4-9.
func TestExpiry(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 4, 0, 0, 0, time.UTC)
	for _, byTTL := range []bool{false, true} {
		name := "expires_at"
		if byTTL {
			name = "TTL"
		}
		t.Run(name, func(t *testing.T) {
			ev := testEvent("ev-expiry")
			opts := fanout.TypeOptions{BatchSize: 100, PageSize: 1000, Window: 2}
			if byTTL {
				opts.TTL = 90 * time.Second
			} else {
				ev.ExpiresAt = t0.Add(90 * time.Second)
			}
			fx := fixture{Event: ev, Audience: 1000, DeliverDelay: time.Minute, Options: opts,
				Outcome: func(r fanout.Recipient) outcome {
					if r.ID >= recipientID(300) && r.ID < recipientID(400) {
						return expiredOut // batch 3 ran past the expiry and left these
					}
					return delivered
				}}
			rec := newRecorder()
			env := newEnv(t, fx, rec)
			env.SetStartTime(t0)
			res := runToResult(t, env, FanoutInput{Event: fx.Event})
			if res.Delivered != 300 || res.Expired != 700 || res.Failed != 0 || res.DeadLettered != 0 || res.BatchesStarted != 4 {
				t.Errorf("result %+v, want 300 delivered and 700 expired of 4 batches", res.Progress)
			}
			if !res.ExpiresAt.Equal(t0.Add(90 * time.Second)) {
				t.Errorf("ExpiresAt %v", res.ExpiresAt)
			}
			if len(rec.deadLettered) != 0 {
				t.Errorf("dead-lettered %v", rec.deadLettered)
			}
			if rec.status != vocab.StatusExpired || rec.expired == nil || *rec.expired != 700 {
				t.Errorf("status %q, FanoutExpired %v", rec.status, rec.expired)
			}
			for _, at := range rec.expiresAts {
				if !at.Equal(t0.Add(90 * time.Second)) {
					t.Errorf("a batch carries the expiry %v", at)
				}
			}
		})
	}
}

// TestExpiryWhilePaused: an event paused past its expiry ends then, without
// a resume, counting the recipients it had not started.
func TestExpiryWhilePaused(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 4, 0, 0, 0, time.UTC)
	ev := testEvent("ev-expiry-paused")
	ev.ExpiresAt = t0.Add(10 * time.Minute)
	fx := fixture{Event: ev, Audience: 1000, DeliverDelay: time.Minute,
		Options: fanout.TypeOptions{BatchSize: 100, PageSize: 1000, Window: 2}}
	rec := newRecorder()
	env := newEnv(t, fx, rec)
	env.SetStartTime(t0)
	env.RegisterDelayedCallback(func() { update(env, t, vocab.PauseUpdate, "sink maintenance") }, 30*time.Second)
	res := runToResult(t, env, FanoutInput{Event: fx.Event})
	if res.Delivered != 200 || res.Expired != 800 || rec.status != vocab.StatusExpired {
		t.Errorf("result %+v, status %q", res.Progress, rec.status)
	}
	if d := env.Now().Sub(t0); d < 10*time.Minute || d > 11*time.Minute {
		t.Errorf("ended %v after the start, want at the expiry (10m)", d)
	}
}

// TestExpiredBeforeOpen: an event whose expiry passed before it opened (it
// waited for its deliver_at past it) is neither paged nor delivered.
func TestExpiredBeforeOpen(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 4, 0, 0, 0, time.UTC)
	ev := testEvent("ev-expired-early")
	ev.DeliverAt = t0.Add(time.Hour)
	ev.ExpiresAt = t0.Add(30 * time.Minute)
	fx := fixture{Event: ev, Audience: 10, Options: fanout.TypeOptions{}}
	rec := newRecorder()
	env := newEnv(t, fx, rec)
	env.SetStartTime(t0)
	res := runToResult(t, env, FanoutInput{Event: fx.Event})
	if rec.prepares != 0 || rec.pages != 0 || len(rec.delivers) != 0 || res.Found != 0 {
		t.Errorf("an expired event was opened: %d prepares, %d pages, %d delivers, %+v", rec.prepares, rec.pages, len(rec.delivers), res.Progress)
	}
	if rec.status != vocab.StatusExpired {
		t.Errorf("status %q", rec.status)
	}
}

// TestExpiryOneBatch: an event of one batch whose expiry passed before its
// batch was handed to the delivery queue counts it expired.
func TestExpiryOneBatch(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 4, 0, 0, 0, time.UTC)
	ev := testEvent("ev-expiry-one")
	ev.ExpiresAt = t0.Add(time.Second)
	// Above LocalDeliveryMax, so not delivered in Open; the page takes 2 s.
	fx := fixture{Event: ev, Audience: 300, PageDelay: 2 * time.Second, OpenErr: errTransient,
		Options: fanout.TypeOptions{BatchSize: 1000}}
	rec := newRecorder()
	env := newEnv(t, fx, rec)
	env.SetStartTime(t0)
	res := runToResult(t, env, FanoutInput{Event: fx.Event})
	if res.Expired != 300 || res.Delivered != 0 || len(rec.delivers) != 0 || rec.status != vocab.StatusExpired {
		t.Errorf("result %+v, %d delivers, status %q", res.Progress, len(rec.delivers), rec.status)
	}
}
