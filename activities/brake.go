package activities

import (
	"context"
	"log/slog"
	"math"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"
)

// BrakeKey is the Redis key that holds the low-priority brake on: any
// worker delivering a batch of a higher priority sets it, with a TTL of
// BrakeHold, and the workers delivering low-priority batches read it. It is
// one key for the whole deployment, not an event's, since what it orders is
// the priorities themselves: a high-priority event of any type slows the
// low-priority events of every type.
const BrakeKey = "fanout:brake:low"

// BrakeHold is how long the brake stays on after the last higher-priority
// delivery was fed: low-priority events go back to full speed about this
// long after the other events stop.
const BrakeHold = time.Second

// brakePoll is how often a worker delivering low-priority batches reads
// BrakeKey (in the background: no delivery waits for Redis).
const brakePoll = 50 * time.Millisecond

// Brake slows this worker's low-priority deliveries to Rate per second
// while deliveries of a higher priority are being fed anywhere (BrakeKey).
//
// The low-priority queue already gets an eighth of a worker's batch slots
// and, in the bench, a nice'd process; but what its deliveries load beside
// the worker (the Temporal server, Redis, the destinations) is shared with
// every other event, so a 1,000,000-recipient low event still raised the
// small events' p99 two to four times. The brake takes that load off while
// small events flow, and gives it back within BrakeHold when they stop.
//
// A Redis error releases the brake (low-priority events then run at full
// speed) rather than stopping them. nil: no brake.
type Brake struct {
	rdb redis.UniversalClient
	lim *rate.Limiter
	// on is the last read of BrakeKey; checked spaces its reads, signaled
	// this worker's writes, warned its warnings.
	on                        atomic.Bool
	checked, signaled, warned every
	rate                      float64
	log                       *slog.Logger
}

// NewBrake returns the brake of a worker that delivers at most perSecond
// low-priority recipients per second while it is on; nil when perSecond
// is not positive (off) or there is no Redis. It logs when it goes on and
// off, and (at most every 10 s) when Redis fails (log nil: slog's default).
func NewBrake(rdb redis.UniversalClient, perSecond float64, log *slog.Logger) *Brake {
	if rdb == nil || perSecond <= 0 || math.IsInf(perSecond, 0) || math.IsNaN(perSecond) {
		return nil
	}
	if log == nil {
		log = slog.Default()
	}
	// A twentieth of a second's worth at once, so that the rate holds from
	// the moment the brake goes on.
	burst := max(1, int(perSecond/20))
	return &Brake{rdb: rdb, lim: rate.NewLimiter(rate.Limit(perSecond), burst), rate: perSecond, log: log}
}

// Signal says that a delivery of a higher priority is being fed: it sets
// BrakeKey for BrakeHold, at most four times per BrakeHold per worker, in
// the background (the delivery does not wait for it).
func (b *Brake) Signal() {
	if b == nil {
		return
	}
	if !b.signaled.due(BrakeHold / 4) {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), BrakeHold)
		defer cancel()
		if err := b.rdb.Set(ctx, BrakeKey, "1", BrakeHold).Err(); err != nil {
			b.warn("low-priority brake: cannot set it", "err", err)
		}
	}()
}

// warn logs a Redis failure at most once per redisWarnEvery.
func (b *Brake) warn(msg string, args ...any) {
	if b.warned.due(redisWarnEvery) {
		b.log.Warn(msg, args...)
	}
}

// redisWarnEvery spaces the warnings of a failing Redis (the brake's, the
// yields').
const redisWarnEvery = 10 * time.Second

// Engaged reports whether low-priority deliveries are braked, as of the
// last read of BrakeKey; when that is older than brakePoll it starts the
// next read in the background.
func (b *Brake) Engaged() bool {
	if b == nil {
		return false
	}
	if b.checked.due(brakePoll) {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			n, err := b.rdb.Exists(ctx, BrakeKey).Result()
			if err != nil {
				b.warn("low-priority brake: cannot read it; released", "err", err)
			}
			on := err == nil && n > 0
			if b.on.Swap(on) != on {
				if on {
					b.log.Info("low-priority brake on: other priorities are delivering", "low_priority_rate", b.rate)
				} else {
					b.log.Info("low-priority brake off")
				}
			}
		}()
	}
	return b.on.Load()
}

// wait blocks, while the brake is on, until this worker's next braked
// low-priority delivery is due (see pacer.wait for the deadline and
// beat); held reports that the brake was on and the delivery took its
// token.
func (b *Brake) wait(ctx context.Context, eventType string, beat func()) (held bool, _ error) {
	if !b.Engaged() {
		return false, nil
	}
	if err := (&pacer{lim: b.lim, beat: beat}).wait(ctx); err != nil {
		return false, err
	}
	observeBraked(eventType)
	return true, nil
}
