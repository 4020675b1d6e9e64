//go:build integration

package starter_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fanout/fanout/dev/stack"
	"github.com/fanout/fanout/starter"
)

// TestEventRecordOnRedisCluster: on a Redis Cluster of three masters the
// bridge's event record answers as on one server (unseen, recorded once,
// seen, a second record reports it existed) with its TTL, and the records
// of many events spread over every master.
func TestEventRecordOnRedisCluster(t *testing.T) {
	rdb, _ := stack.TestRedisCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	rec := starter.NewEventRecord(rdb, 2*time.Hour)
	const events = 90
	for i := range events {
		wid := fmt.Sprintf("fanout/webhook/cluster-%d", i)
		if seen, err := rec.Seen(ctx, wid); err != nil || seen {
			t.Fatalf("Seen(%s) before recording: %v, %v", wid, seen, err)
		}
		if existed, err := rec.Record(ctx, wid, "run-1"); err != nil || existed {
			t.Fatalf("first Record(%s): existed %v, %v", wid, existed, err)
		}
		if existed, err := rec.Record(ctx, wid, "run-2"); err != nil || !existed {
			t.Fatalf("second Record(%s): existed %v, %v", wid, existed, err)
		}
		if seen, err := rec.Seen(ctx, wid); err != nil || !seen {
			t.Fatalf("Seen(%s) after recording: %v, %v", wid, seen, err)
		}
	}
	key := "fanout:e:fanout/webhook/cluster-7"
	if v, err := rdb.Get(ctx, key).Result(); err != nil || v != "run-1" {
		t.Errorf("%s = %q, %v; want the first record kept", key, v, err)
	}
	if ttl, err := rdb.TTL(ctx, key).Result(); err != nil || ttl <= time.Hour || ttl > 2*time.Hour {
		t.Errorf("TTL of %s: %v %v; want about 2h", key, ttl, err)
	}
	counts, err := stack.MasterKeyCounts(ctx, rdb)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for addr, c := range counts {
		if c == 0 {
			t.Errorf("master %s holds none of the %d records; want them spread", addr, events)
		}
		total += c
	}
	if len(counts) != 3 || total != events {
		t.Errorf("records per master %v; want %d over 3 masters", counts, events)
	}
}
