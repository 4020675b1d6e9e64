package activities

import (
	"context"
	"errors"
	"math"
	"time"

	"golang.org/x/time/rate"
)

// MaxPaceCatchUp bounds how far a paced batch makes up for time its lane
// lost (the gap between the previous batch of the lane and this one, a
// stall of the destination): at most this long's worth of its rate is
// delivered at once. It is also the most a paced batch exceeds its rate by
// over any span (a 10-second window sees at most 10 % over the cap, and
// only right after its lane stalled a full second).
const MaxPaceCatchUp = time.Second

// paceYieldMargin is the time a paced attempt keeps before its deadline to
// finish the deliveries in flight and return: a delivery due later is left
// to the next attempt.
const paceYieldMargin = 5 * time.Second

// errPaceDeadline stops a paced batch whose next delivery is due after its
// attempt's deadline (less paceYieldMargin). The error returned is a
// *paceDeadline, which says when (paceDue): the batch's retry waits until
// then, however slow the rate, rather than come back to yield again.
var errPaceDeadline = errors.New("the rate cap outlasts the attempt's timeout")

// paceDeadline is errPaceDeadline with when the next delivery is due.
type paceDeadline struct{ due time.Time }

func (e *paceDeadline) Error() string        { return errPaceDeadline.Error() }
func (e *paceDeadline) Is(target error) bool { return target == errPaceDeadline }

// paceDue returns when the delivery a yield (errPaceDeadline) left is due.
func paceDue(err error) (time.Time, bool) {
	var p *paceDeadline
	if errors.As(err, &p) {
		return p.due, true
	}
	return time.Time{}, false
}

// resumeFrom is the PaceFrom of a retry that goes on from an attempt that
// yielded with its next delivery due at due: one interval before it, so the
// retry, which starts when it is due, is owed that delivery at once.
func resumeFrom(due time.Time, perSecond float64) time.Time {
	return due.Add(-time.Duration(float64(time.Second) / perSecond))
}

// pacer releases a batch's deliveries at its Rate: a token bucket
// (golang.org/x/time/rate) of MaxPaceCatchUp's worth of tokens, holding at
// the start what the batch's lane is owed since PaceFrom (the end of the
// previous batch's schedule in the lane, or when the batch was started), so
// the gap between two batches of a lane is made up and a lane delivers its
// share of the cap over time, not its share less the gaps.
type pacer struct {
	lim *rate.Limiter
	// beat is called while a wait lasts over a second (heartbeats).
	beat func()
}

// newPacer returns the pacer of a batch paced at perSecond from from (nil
// without a rate). now is the attempt's start; a retry (attempt > 1) starts
// with an empty bucket: its first attempt used the lane's due.
func newPacer(perSecond float64, from, now time.Time, attempt int32, beat func()) *pacer {
	if perSecond <= 0 || math.IsInf(perSecond, 0) || math.IsNaN(perSecond) {
		return nil
	}
	burst := max(1, int(math.Ceil(perSecond*MaxPaceCatchUp.Seconds())))
	lim := rate.NewLimiter(rate.Limit(perSecond), burst)
	owed := 0
	if from.IsZero() || attempt > 1 || from.After(now) {
		from = now
	}
	if lag := now.Sub(from); lag > 0 {
		owed = min(burst, int(lag.Seconds()*perSecond))
	}
	// A new limiter is full: spend what the lane is not owed.
	if drain := burst - owed; drain > 0 {
		lim.ReserveN(now, drain)
	}
	return &pacer{lim: lim, beat: beat}
}

// wait blocks until the next delivery is due. It returns errPaceDeadline,
// without taking the token, when that is after ctx's deadline less
// paceYieldMargin, and ctx's error when ctx ends first.
func (p *pacer) wait(ctx context.Context) error {
	now := time.Now()
	res := p.lim.ReserveN(now, 1)
	delay := res.DelayFrom(now)
	if dl, ok := ctx.Deadline(); ok && now.Add(delay).After(dl.Add(-paceYieldMargin)) {
		res.CancelAt(now)
		return &paceDeadline{due: now.Add(delay)}
	}
	for delay > 0 {
		step := min(delay, time.Second)
		t := time.NewTimer(step)
		select {
		case <-ctx.Done():
			t.Stop()
			res.Cancel()
			return ctx.Err()
		case <-t.C:
		}
		delay -= step
		if delay > 0 && p.beat != nil {
			p.beat()
		}
	}
	return nil
}
