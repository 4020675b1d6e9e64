//go:build integration

package limits_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fanout/fanout/activities/limits"
	"github.com/fanout/fanout/dev/stack"
)

var rdb *redis.Client

func TestMain(m *testing.M) {
	os.Exit(func() int {
		port, err := stack.FreePort()
		if err != nil {
			panic(err)
		}
		dir, _ := os.MkdirTemp("", "limits-test-")
		defer func() { _ = os.RemoveAll(dir) }()
		p, addr, err := stack.StartRedis(context.Background(), port, "", filepath.Join(dir, "redis.log"), os.Stderr)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer p.Stop(5 * time.Second)
		rdb = redis.NewClient(&redis.Options{Addr: addr})
		defer func() { _ = rdb.Close() }()
		return m.Run()
	}())
}

// TestLimiterIsSharedAcrossCallers: eight callers (as many delivery
// workers' batches) taking from one destination at 100/s get about 100
// calls a second between them, each honouring the waits it is told; the
// same destination of another type, and another destination, have limits
// of their own.
func TestLimiterIsSharedAcrossCallers(t *testing.T) {
	lim := limits.NewLimiter(rdb)
	ctx := context.Background()
	const perSecond, span = 100.0, 2 * time.Second
	var got atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range 8 {
		wg.Go(func() {
			for time.Since(start) < span {
				wait, err := lim.Take(ctx, "t", "h.example:1", perSecond)
				if err != nil {
					t.Error(err)
					return
				}
				if wait == 0 {
					got.Add(1)
					continue
				}
				time.Sleep(wait)
			}
		})
	}
	wg.Wait()
	want := perSecond*span.Seconds() + perSecond/10 // the burst
	if n := float64(got.Load()); n > want+2 || n < want*0.85 {
		t.Fatalf("%v calls in %v at %v/s shared by 8 callers, want about %v", n, span, perSecond, want)
	}
	for _, k := range [][2]string{{"u", "h.example:1"}, {"t", "other"}} {
		if wait, err := lim.Take(ctx, k[0], k[1], perSecond); err != nil || wait != 0 {
			t.Errorf("%v: wait %v err %v: want a limit of its own", k, wait, err)
		}
	}
	if n, _ := rdb.Exists(ctx, "rate:"+limits.RateKey("t", "h.example:1")).Result(); n != 1 {
		t.Errorf("the limiter's key %q is not in Redis", "rate:"+limits.RateKey("t", "h.example:1"))
	}
}

// TestOverridesThroughTheCache: what Store sets reaches a Cache within
// RefreshEvery, not before (the workers' read is cached), and unset
// restores the type's own default.
func TestOverridesThroughTheCache(t *testing.T) {
	ctx := context.Background()
	st := limits.Store{RDB: rdb}
	c := &limits.Cache{Store: st}
	if err := st.Set(ctx, "cache", "Host.Example", 200); err != nil {
		t.Fatal(err)
	}
	o, err := c.Get(ctx, "cache")
	if err != nil || o.Rate("host.example", 7) != 200 || o.Rate("other", 7) != 7 {
		t.Fatalf("%+v %v", o, err)
	}
	if err := st.Set(ctx, "cache", "", 50); err != nil {
		t.Fatal(err)
	}
	if o, _ := c.Get(ctx, "cache"); o.Rate("other", 7) != 7 {
		t.Fatalf("the cache read again before RefreshEvery: %+v", o)
	}
	time.Sleep(limits.RefreshEvery + 100*time.Millisecond)
	if o, _ := c.Get(ctx, "cache"); o.Rate("other", 7) != 50 {
		t.Fatalf("the default override not in force after RefreshEvery: %+v", o)
	}
	if err := st.Unset(ctx, "cache", ""); err != nil {
		t.Fatal(err)
	}
	if o, err := st.Load(ctx, "cache"); err != nil || o.HasDefault || o.Rate("other", 7) != 7 || o.Rate("host.example", 7) != 200 {
		t.Fatalf("after unset: %+v %v", o, err)
	}
}
