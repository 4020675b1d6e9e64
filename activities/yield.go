package activities

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/workflows/vocab"
)

// YieldKey is the Redis sorted set of the events that other events'
// batches yield to across workers (Yields): a member "<rank> <fairness
// key>" per event starting or delivering small batches, scored with the
// time (unix ms) until which it holds.
const YieldKey = "fanout:yield"

// YieldHold is how long an event holds the others back after its last
// signal: it covers the workflow tasks between an event's start and its
// first delivery, and between its last delivery and its end.
const YieldHold = 2 * time.Second

// yieldPoll is how often a worker reads YieldKey (in the background: no
// delivery waits for Redis).
const yieldPoll = 50 * time.Millisecond

// maxYielding bounds the members a worker reads from YieldKey: what Redis
// holds is not trusted to be small.
const maxYielding = 1000

// Yields carries, between workers, which events the others' batches yield
// to. A worker's Calls makes the batches behind an event's rank yield
// while that event holds or waits for calls on the same worker; but a
// small event spends much of its time elsewhere: its start, its Open on an
// events worker, its workflow tasks, its batches on another delivery
// worker. Each of those slows down when the big events' pages keep every
// core of the deployment busy (the Temporal server, Redis, the
// destinations). So an event signals when the bridge starts it (an event
// that names its priority and is not scheduled for later), when it opens
// and while its small batches deliver (Signal), and every worker's Calls
// reads the signals and makes the batches behind them yield as if the
// event were delivering there.
//
// A Redis error is logged (at most every 10 s) and reads as no signal: the
// batches then do not yield to other workers' events. nil: no signals.
type Yields struct {
	rdb redis.UniversalClient
	log *slog.Logger

	mu   sync.Mutex
	sent map[string]time.Time // member -> last written

	active  atomic.Pointer[yieldSet]
	warned  every
	changed atomic.Pointer[func()] // after a read that changed the set
}

// yieldSet is the members read last, by rank.
type yieldSet [2 * 3]map[string]bool

// NewYields returns the signals over rdb (nil without Redis); run reads
// them until ctx ends.
func NewYields(ctx context.Context, rdb redis.UniversalClient, log *slog.Logger) *Yields {
	y := NewYieldSignals(rdb, log)
	if y != nil {
		go y.run(ctx)
	}
	return y
}

// NewYieldSignals returns signals over rdb that are sent only, never read
// (nil without Redis): the bridge's, which signals each event as it starts
// it (starter.Config.Yields).
func NewYieldSignals(rdb redis.UniversalClient, log *slog.Logger) *Yields {
	if rdb == nil {
		return nil
	}
	if log == nil {
		log = slog.Default()
	}
	y := &Yields{rdb: rdb, log: log, sent: map[string]time.Time{}}
	y.active.Store(&yieldSet{})
	return y
}

// Signal says that an event of priority p with fairness key key is
// starting, opening or delivering small batches: it adds it to YieldKey for
// YieldHold, at most four times per YieldHold per event and worker, in the
// background (the caller does not wait for it).
func (y *Yields) Signal(p fanout.Priority, key string) {
	if y == nil {
		return
	}
	member := yieldMember(rankOf(p, share{}), key)
	now := time.Now()
	y.mu.Lock()
	if now.Sub(y.sent[member]) < YieldHold/4 {
		y.mu.Unlock()
		return
	}
	y.sent[member] = now
	if len(y.sent) > maxYielding {
		for m, at := range y.sent {
			if now.Sub(at) >= YieldHold {
				delete(y.sent, m)
			}
		}
	}
	y.mu.Unlock()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), YieldHold)
		defer cancel()
		until := now.Add(YieldHold).UnixMilli()
		_, err := y.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.ZAdd(ctx, YieldKey, redis.Z{Score: float64(until), Member: member})
			p.ZRemRangeByScore(ctx, YieldKey, "-inf", "("+strconv.FormatInt(now.UnixMilli(), 10))
			p.PExpire(ctx, YieldKey, 2*YieldHold)
			return nil
		})
		if err != nil {
			y.warn("yield signal: cannot set it", "err", err)
		}
	}()
}

// yieldMember is the YieldKey member of key at rank.
func yieldMember(rank int, key string) string { return fmt.Sprintf("%d %s", rank, key) }

// set is the members as of the last read (nil: no signals).
func (y *Yields) set() *yieldSet {
	if y == nil {
		return nil
	}
	return y.active.Load()
}

// run reads YieldKey every yieldPoll until ctx ends.
func (y *Yields) run(ctx context.Context) {
	t := time.NewTicker(yieldPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		set := y.read(ctx)
		if old := y.active.Swap(set); !set.equal(old) {
			if f := y.changed.Load(); f != nil {
				(*f)()
			}
		}
	}
}

// read returns the members that hold now (none on an error).
func (y *Yields) read(ctx context.Context) *yieldSet {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	members, err := y.rdb.ZRangeArgs(ctx, redis.ZRangeArgs{Key: YieldKey, ByScore: true,
		Start: strconv.FormatInt(time.Now().UnixMilli(), 10), Stop: "+inf", Count: maxYielding}).Result()
	set := &yieldSet{}
	if err != nil {
		if ctx.Err() == nil || err != context.Canceled {
			y.warn("yield signals: cannot read them; none assumed", "err", err)
		}
		return set
	}
	for _, m := range members {
		rs, key, ok := strings.Cut(m, " ")
		r, err := strconv.Atoi(rs)
		if !ok || err != nil || r < 0 || r >= len(set) || key == "" || len(key) > vocab.MaxFairnessKeyLen {
			continue // not ours: ignored
		}
		if set[r] == nil {
			set[r] = map[string]bool{}
		}
		set[r][key] = true
	}
	return set
}

// at is the keys signaled at rank r (nil set: none).
func (s *yieldSet) at(r int) map[string]bool {
	if s == nil {
		return nil
	}
	return s[r]
}

// equal: the same members.
func (s *yieldSet) equal(o *yieldSet) bool {
	if o == nil {
		return false
	}
	for r := range s {
		if len(s[r]) != len(o[r]) {
			return false
		}
		for k := range s[r] {
			if !o[r][k] {
				return false
			}
		}
	}
	return true
}

// warn logs a Redis failure at most once per redisWarnEvery.
func (y *Yields) warn(msg string, args ...any) {
	if y.warned.due(redisWarnEvery) {
		y.log.Warn(msg, args...)
	}
}
