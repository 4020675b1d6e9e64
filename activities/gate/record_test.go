//go:build integration

package gate_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fanout/fanout/activities/gate"
	"github.com/fanout/fanout/workflows/vocab"
)

// Marks written before times and tries were recorded ("delivered:<attempt
// id>", still in Redis after an upgrade) are read as before by the gate
// and by Read; new marks carry the time and tries.
func TestMarksOldAndNew(t *testing.T) {
	g, rdb := newGate(t, time.Hour)
	ctx := context.Background()
	id := eventID(t)
	ev := vocab.EventKey("webhook", id)
	a := vocab.AttemptID("webhook", id, 2)
	if err := rdb.Set(ctx, g.Key(ev, "old"), "delivered:"+a, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	at := time.Now().Truncate(time.Second)
	if err := g.MarkDeliveredAt(ctx, ev, a, at, func(id string) int { return map[string]int{"new3": 3}[id] }, "new1", "new3"); err != nil {
		t.Fatal(err)
	}
	vs, err := g.Acquire(ctx, ev, a, []string{"old", "new1", "new3"}, false)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range vs {
		if v != gate.DeliveredByUs {
			t.Errorf("verdict %d = %v, want DeliveredByUs", i, v)
		}
	}
	if vs, _ := g.Acquire(ctx, ev, vocab.AttemptID("webhook", id, 3), []string{"old", "new1"}, false); vs[0] != gate.Duplicate || vs[1] != gate.Duplicate {
		t.Errorf("another batch's verdicts = %v, want duplicates", vs)
	}
	recs, err := g.Read(ctx, "webhook", id, []string{"old", "new1", "new3", "never"})
	if err != nil {
		t.Fatal(err)
	}
	if r := recs[0]; !r.Found || r.State != gate.StateDelivered || r.Batch != 2 || !r.DeliveredAt.IsZero() || r.Tries != 0 || r.Unreadable != "" {
		t.Errorf("old mark read as %+v", r)
	}
	if r := recs[1]; r.State != gate.StateDelivered || !r.DeliveredAt.Equal(at) || r.Tries != 1 {
		t.Errorf("new mark read as %+v; want at %v, 1 try", r, at)
	}
	if r := recs[2]; r.Tries != 3 {
		t.Errorf("new mark after 2 failures read as %+v; want 3 tries", r)
	}
	if r := recs[3]; r.Found {
		t.Errorf("a recipient never gated read as %+v", r)
	}
}

// The failure path writes the last error (class, status, time) with the
// gate's TTL and counts the tries; Read returns both; a hostile value in
// any key reads as unreadable, with the reason.
func TestLastErrorAndHostileValues(t *testing.T) {
	g, rdb := newGate(t, time.Hour)
	ctx := context.Background()
	id := eventID(t)
	ev := vocab.EventKey("webhook", id)
	a := vocab.AttemptID("webhook", id, 0)
	if _, err := g.Acquire(ctx, ev, a, []string{"r1", "r2"}, false); err != nil {
		t.Fatal(err)
	}
	at := time.Now().Truncate(time.Second)
	for range 2 {
		if _, err := g.CountFailed(ctx, ev, a, "", []string{"r1"}, []gate.LastError{{Class: "http_error", HTTPStatus: 503, At: at}}); err != nil {
			t.Fatal(err)
		}
	}
	if ttl := rdb.TTL(ctx, g.LastErrorKey(ev, "r1")).Val(); ttl <= 0 || ttl > time.Hour {
		t.Errorf("last-error TTL = %v, want the gate's (1h)", ttl)
	}
	hostile := map[string]string{
		"h-value":  "delivered:" + a + ";garbage;1",
		"h-other":  "delivered:webhook/another#0",
		"h-long":   strings.Repeat("x", 100_000),
		"h-binary": "\x00\xff" + a,
	}
	for r, v := range hostile {
		rdb.Set(ctx, g.Key(ev, r), v, time.Hour)
	}
	rdb.Set(ctx, g.Key(ev, "h-le"), a, time.Hour)
	rdb.Set(ctx, g.LastErrorKey(ev, "h-le"), "http_error;503;"+strings.Repeat("9", 50), time.Hour)
	ids := []string{"r1", "r2", "h-value", "h-other", "h-long", "h-binary", "h-le"}
	recs, err := g.Read(ctx, "webhook", id, ids)
	if err != nil {
		t.Fatal(err)
	}
	if r := recs[0]; r.State != gate.StateHeld || r.Tries != 2 || r.LastError == nil || r.LastError.Class != "http_error" || r.LastError.HTTPStatus != 503 || !r.LastError.At.Equal(at) {
		t.Errorf("r1 read as %+v (last error %+v); want held, 2 tries, http_error 503", r, r.LastError)
	}
	if r := recs[1]; r.State != gate.StateHeld || r.Tries != 0 || r.LastError != nil {
		t.Errorf("r2 read as %+v; want held, no tries, no last error", r)
	}
	for i, r := range recs[2:] {
		if r.Unreadable == "" {
			t.Errorf("%s read as %+v; want unreadable", ids[i+2], r)
		}
	}
}

// A resend delivers again what another attempt delivered, and its retry
// skips what it delivered itself.
func TestAcquireResend(t *testing.T) {
	g, _ := newGate(t, time.Hour)
	ctx := context.Background()
	id := eventID(t)
	ev := vocab.EventKey("webhook", id)
	orig, rs := vocab.AttemptID("webhook", id, 0), vocab.ResendAttemptID("webhook", id, "r1")
	if _, err := g.Acquire(ctx, ev, orig, []string{"a", "b"}, false); err != nil {
		t.Fatal(err)
	}
	if err := g.MarkDelivered(ctx, ev, orig, "a"); err != nil {
		t.Fatal(err)
	}
	vs, err := g.AcquireResend(ctx, ev, rs, []string{"a", "b", "c"})
	if err != nil || len(vs) != 3 || vs[0] != gate.Deliver || vs[1] != gate.Deliver || vs[2] != gate.Deliver {
		t.Fatalf("AcquireResend = %v, %v; want deliver each", vs, err)
	}
	if err := g.MarkDelivered(ctx, ev, rs, "a"); err != nil {
		t.Fatal(err)
	}
	vs, err = g.AcquireResend(ctx, ev, rs, []string{"a", "b"})
	if err != nil || vs[0] != gate.DeliveredByUs || vs[1] != gate.Redeliver {
		t.Errorf("the resend's retry: %v, %v; want DeliveredByUs, Redeliver", vs, err)
	}
	recs, _ := g.Read(ctx, "webhook", id, []string{"a"})
	if recs[0].Batch != -1 || recs[0].Resend != "r1" || recs[0].State != gate.StateDelivered {
		t.Errorf("read after the resend: %+v", recs[0])
	}
	// The original batch, retried, now skips it.
	if v := acquireOne(t, g, ev, orig, "a"); v != gate.Duplicate {
		t.Errorf("the original batch after the resend: %v, want Duplicate", v)
	}
}

// BenchmarkMarkDelivered: a flush of 500 delivered marks, as the new mark
// (time and tries, first tries) and as the mark before ("delivered:<attempt
// id>", the same pipeline of SETs); per op, 500 recipients.
func BenchmarkMarkDelivered(b *testing.B) {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	b.Cleanup(func() { _ = rdb.Close() })
	g := gate.New(rdb, time.Hour)
	ctx := context.Background()
	ids := make([]string, 500)
	for i := range ids {
		ids[i] = fmt.Sprintf("r%06d", i)
	}
	ev, a := vocab.EventKey("webhook", "bench"), vocab.AttemptID("webhook", "bench", 7)
	b.Run("new", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if err := g.MarkDeliveredAt(ctx, ev, a, time.Now(), nil, ids...); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("before", func(b *testing.B) {
		b.ReportAllocs()
		v := "delivered:" + a
		for range b.N {
			pipe := rdb.Pipeline()
			for _, id := range ids {
				pipe.Set(ctx, g.Key(ev, id), v, time.Hour)
			}
			if _, err := pipe.Exec(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
}
