//go:build integration

package gate_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fanout/fanout/activities/gate"
	"github.com/fanout/fanout/dev/stack"
)

// redisAddr is the address of the real redis-server started in TestMain.
var redisAddr string

func TestMain(m *testing.M) { os.Exit(runWithRedis(m)) }

func runWithRedis(m *testing.M) int {
	dir, err := os.MkdirTemp("", "gate-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "gate test: temp dir:", err)
		return 1
	}
	defer func() { _ = os.RemoveAll(dir) }()
	port, err := stack.FreePort()
	if err != nil {
		fmt.Fprintln(os.Stderr, "gate test: free port:", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, addr, err := stack.StartRedis(ctx, port, "", filepath.Join(dir, "redis.log"), os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gate test: start redis-server:", err)
		return 1
	}
	defer p.Stop(5 * time.Second)
	redisAddr = addr
	return m.Run()
}

// newGate returns a gate on the test redis-server and its client; every test
// uses its own event ids, so tests do not see each other's keys.
func newGate(t *testing.T, ttl time.Duration) (*gate.Gate, *redis.Client) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	t.Cleanup(func() { _ = rdb.Close() })
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("ping redis-server at %s: %v", redisAddr, err)
	}
	return gate.New(rdb, ttl), rdb
}

func eventID(t *testing.T) string {
	return fmt.Sprintf("%s-%d", t.Name(), time.Now().UnixNano())
}

func acquireOne(t *testing.T, g *gate.Gate, ev, attempt, recipient string) gate.Verdict {
	t.Helper()
	v, err := g.Acquire(context.Background(), ev, attempt, []string{recipient}, false)
	if err != nil {
		t.Fatalf("Acquire(%s, %s, %s): %v", ev, attempt, recipient, err)
	}
	if len(v) != 1 {
		t.Fatalf("Acquire(%s, %s, %s) returned %d verdicts, want 1", ev, attempt, recipient, len(v))
	}
	return v[0]
}

func verdictName(v gate.Verdict) string {
	switch v {
	case gate.Deliver:
		return "Deliver"
	case gate.Redeliver:
		return "Redeliver"
	case gate.DeliveredByUs:
		return "DeliveredByUs"
	case gate.Duplicate:
		return "Duplicate"
	case gate.DeadLetteredByUs:
		return "DeadLetteredByUs"
	case gate.Unconfirmed:
		return "Unconfirmed"
	case gate.UnconfirmedByUs:
		return "UnconfirmedByUs"
	}
	return fmt.Sprintf("Verdict(%d)", uint8(v))
}

// TestAcquireVerdicts walks design §3: each step is an Acquire (or a
// MarkDelivered) on one recipient, in order, with the verdict expected.
func TestAcquireVerdicts(t *testing.T) {
	type step struct {
		attempt string
		mark    bool // MarkDelivered by attempt instead of Acquire
		want    gate.Verdict
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{"nothing there delivers", []step{
			{attempt: "e#0", want: gate.Deliver},
		}},
		{"same attempt again redelivers", []step{
			{attempt: "e#0", want: gate.Deliver},
			{attempt: "e#0", want: gate.Redeliver},
			{attempt: "e#0", want: gate.Redeliver},
		}},
		{"another attempt is a duplicate", []step{
			{attempt: "e#0", want: gate.Deliver},
			{attempt: "e#1", want: gate.Duplicate},
			// the holder is unchanged by the other attempt's try
			{attempt: "e#0", want: gate.Redeliver},
		}},
		{"delivered by us", []step{
			{attempt: "e#0", want: gate.Deliver},
			{attempt: "e#0", mark: true},
			{attempt: "e#0", want: gate.DeliveredByUs},
			{attempt: "e#1", want: gate.Duplicate},
			{attempt: "e#0", want: gate.DeliveredByUs},
		}},
		{"marked without acquire", []step{
			{attempt: "e#3", mark: true},
			{attempt: "e#3", want: gate.DeliveredByUs},
			{attempt: "e#4", want: gate.Duplicate},
		}},
		{"attempt id that prefixes another is still another", []step{
			{attempt: "e#1", want: gate.Deliver},
			{attempt: "e#10", want: gate.Duplicate},
			{attempt: "e#1", mark: true},
			{attempt: "e#10", want: gate.Duplicate},
			{attempt: "e#1", want: gate.DeliveredByUs},
		}},
	}
	g, _ := newGate(t, time.Hour)
	ctx := context.Background()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ev := eventID(t)
			for i, s := range c.steps {
				if s.mark {
					if err := g.MarkDelivered(ctx, ev, s.attempt, "r1"); err != nil {
						t.Fatalf("step %d: MarkDelivered(%s): %v", i, s.attempt, err)
					}
					continue
				}
				if got := acquireOne(t, g, ev, s.attempt, "r1"); got != s.want {
					t.Fatalf("step %d: Acquire by %s = %s, want %s", i, s.attempt, verdictName(got), verdictName(s.want))
				}
			}
		})
	}
}

func TestVerdictShouldDeliver(t *testing.T) {
	cases := []struct {
		v    gate.Verdict
		want bool
	}{
		{gate.Deliver, true},
		{gate.Redeliver, true},
		{gate.DeliveredByUs, false},
		{gate.Duplicate, false},
		{gate.DeadLetteredByUs, false},
		{gate.Unconfirmed, false},
		{gate.UnconfirmedByUs, false},
	}
	for _, c := range cases {
		if got := c.v.ShouldDeliver(); got != c.want {
			t.Errorf("%s.ShouldDeliver() = %v, want %v", verdictName(c.v), got, c.want)
		}
	}
}

func TestKeysAreScopedByEventAndRecipient(t *testing.T) {
	g, _ := newGate(t, time.Hour)
	ev := eventID(t)
	if got := acquireOne(t, g, ev, "a#0", "r1"); got != gate.Deliver {
		t.Fatalf("first Acquire = %s, want Deliver", verdictName(got))
	}
	cases := []struct {
		name, ev, recipient string
	}{
		{"other recipient of the same event", ev, "r2"},
		{"same recipient of another event", ev + "-other", "r1"},
	}
	for _, c := range cases {
		if got := acquireOne(t, g, c.ev, "b#0", c.recipient); got != gate.Deliver {
			t.Errorf("%s: Acquire = %s, want Deliver", c.name, verdictName(got))
		}
	}
	if got, want := g.Key("ev", "r"), "fanout:r:ev:r"; got != want {
		t.Errorf("Key = %q, want %q", got, want)
	}
}

func TestKeysCarryTTL(t *testing.T) {
	cases := []struct {
		name    string
		ttl     time.Duration
		wantTTL time.Duration
	}{
		{"configured", 2 * time.Hour, 2 * time.Hour},
		{"zero means DefaultTTL", 0, gate.DefaultTTL},
		{"negative means DefaultTTL", -time.Second, gate.DefaultTTL},
	}
	ctx := context.Background()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g, rdb := newGate(t, c.ttl)
			ev := eventID(t)
			check := func(what, recipient string) {
				t.Helper()
				d, err := rdb.TTL(ctx, g.Key(ev, recipient)).Result()
				if err != nil {
					t.Fatalf("%s: TTL: %v", what, err)
				}
				// TTL answers -1 for no expiry and -2 for a missing key.
				if d <= 0 || d > c.wantTTL {
					t.Fatalf("%s: TTL of %s = %v, want in (0, %v]", what, recipient, d, c.wantTTL)
				}
				if d < c.wantTTL-time.Minute {
					t.Fatalf("%s: TTL of %s = %v, want about %v", what, recipient, d, c.wantTTL)
				}
			}
			if _, err := g.Acquire(ctx, ev, "a#0", []string{"r1", "r2"}, false); err != nil {
				t.Fatal(err)
			}
			check("after Acquire", "r1")
			check("after Acquire", "r2")
			if err := g.MarkDelivered(ctx, ev, "a#0", "r1"); err != nil {
				t.Fatal(err)
			}
			check("after MarkDelivered", "r1")
		})
	}
}

func TestAcquireBatchInOrder(t *testing.T) {
	const n = 1234 // over two pipelines of pipelineMax, the last one partial
	g, _ := newGate(t, time.Hour)
	ctx := context.Background()
	ev := eventID(t)

	recipients := make([]string, n)
	for i := range recipients {
		recipients[i] = fmt.Sprintf("r%04d", i)
	}
	// Prepare a pattern: every 3rd held by us (Redeliver), every 5th held
	// by another attempt (Duplicate), every 7th delivered by us
	// (DeliveredByUs), every 11th delivered by another (Duplicate); later
	// rules win. The rest are fresh (Deliver).
	want := make([]gate.Verdict, n)
	var ours, other, oursDelivered, otherDelivered []string
	for i, r := range recipients {
		switch {
		case i%11 == 0:
			otherDelivered = append(otherDelivered, r)
			want[i] = gate.Duplicate
		case i%7 == 0:
			oursDelivered = append(oursDelivered, r)
			want[i] = gate.DeliveredByUs
		case i%5 == 0:
			other = append(other, r)
			want[i] = gate.Duplicate
		case i%3 == 0:
			ours = append(ours, r)
			want[i] = gate.Redeliver
		default:
			want[i] = gate.Deliver
		}
	}
	prep := []struct {
		attempt    string
		recipients []string
		deliver    bool
	}{
		{"ev#0", ours, false},
		{"ev#1", other, false},
		{"ev#0", oursDelivered, true},
		{"ev#1", otherDelivered, true},
	}
	for _, p := range prep {
		if p.deliver {
			if err := g.MarkDelivered(ctx, ev, p.attempt, p.recipients...); err != nil {
				t.Fatal(err)
			}
			continue
		}
		v, err := g.Acquire(ctx, ev, p.attempt, p.recipients, false)
		if err != nil {
			t.Fatal(err)
		}
		for i, x := range v {
			if x != gate.Deliver {
				t.Fatalf("prep %s: %s = %s, want Deliver", p.attempt, p.recipients[i], verdictName(x))
			}
		}
	}

	got, err := g.Acquire(ctx, ev, "ev#0", recipients, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != n {
		t.Fatalf("Acquire returned %d verdicts, want %d", len(got), n)
	}
	counts := map[gate.Verdict]int{}
	for i := range got {
		counts[got[i]]++
		if got[i] != want[i] {
			t.Fatalf("verdict %d (%s) = %s, want %s", i, recipients[i], verdictName(got[i]), verdictName(want[i]))
		}
	}
	for _, v := range []gate.Verdict{gate.Deliver, gate.Redeliver, gate.DeliveredByUs, gate.Duplicate} {
		if counts[v] == 0 {
			t.Errorf("pattern produced no %s verdict", verdictName(v))
		}
	}

	// The whole batch again: the fresh ones are now ours.
	again, err := g.Acquire(ctx, ev, "ev#0", recipients, false)
	if err != nil {
		t.Fatal(err)
	}
	for i := range again {
		w := want[i]
		if w == gate.Deliver {
			w = gate.Redeliver
		}
		if again[i] != w {
			t.Fatalf("second Acquire: verdict %d (%s) = %s, want %s", i, recipients[i], verdictName(again[i]), verdictName(w))
		}
	}
}

func TestAcquireEmpty(t *testing.T) {
	g, _ := newGate(t, time.Hour)
	for _, rs := range [][]string{nil, {}} {
		v, err := g.Acquire(context.Background(), eventID(t), "a#0", rs, false)
		if err != nil || len(v) != 0 {
			t.Errorf("Acquire(%v) = %v, %v; want no verdicts and no error", rs, v, err)
		}
	}
	if err := g.MarkDelivered(context.Background(), eventID(t), "a#0"); err != nil {
		t.Errorf("MarkDelivered with no recipients: %v", err)
	}
}

func TestHolder(t *testing.T) {
	g, _ := newGate(t, time.Hour)
	ctx := context.Background()
	ev := eventID(t)
	if _, err := g.Acquire(ctx, ev, "ev#0", []string{"held", "delivered"}, false); err != nil {
		t.Fatal(err)
	}
	if err := g.MarkDelivered(ctx, ev, "ev#0", "delivered"); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Acquire(ctx, ev, "ev#2", []string{"other"}, false); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		recipient     string
		wantAttempt   string
		wantDelivered bool
		wantOK        bool
	}{
		{"missing", "", false, false},
		{"held", "ev#0", false, true},
		{"delivered", "ev#0", true, true},
		{"other", "ev#2", false, true},
	}
	for _, c := range cases {
		a, d, ok, err := g.Holder(ctx, ev, c.recipient)
		if err != nil {
			t.Fatalf("Holder(%s): %v", c.recipient, err)
		}
		if a != c.wantAttempt || d != c.wantDelivered || ok != c.wantOK {
			t.Errorf("Holder(%s) = (%q, %v, %v), want (%q, %v, %v)",
				c.recipient, a, d, ok, c.wantAttempt, c.wantDelivered, c.wantOK)
		}
	}
}

// TestAcquireErrors: when Redis cannot answer, Acquire returns an error and
// never a verdict (least of all Deliver).
func TestAcquireErrors(t *testing.T) {
	closedPort, release, err := stack.RefusedPort()
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	unreachable := redis.NewClient(&redis.Options{
		Addr:        fmt.Sprintf("127.0.0.1:%d", closedPort),
		DialTimeout: 500 * time.Millisecond,
		MaxRetries:  -1,
	})
	t.Cleanup(func() { _ = unreachable.Close() })

	g, rdb := newGate(t, time.Hour)
	ctx := context.Background()
	ev := eventID(t)
	// A key of the wrong type makes its SET fail with WRONGTYPE while the
	// first recipient's SET succeeds with a nil reply.
	if err := rdb.RPush(ctx, g.Key(ev, "list"), "x").Err(); err != nil {
		t.Fatal(err)
	}
	canceled, cancel := context.WithCancel(context.Background())
	cancel()

	cases := []struct {
		name       string
		gate       *gate.Gate
		ctx        context.Context
		recipients []string
	}{
		{"unreachable redis, one recipient", gate.New(unreachable, time.Hour), ctx, []string{"r1"}},
		{"unreachable redis, batch", gate.New(unreachable, time.Hour), ctx, []string{"r1", "r2", "r3"}},
		{"canceled context", g, canceled, []string{"r1"}},
		{"one command fails in the pipeline", g, ctx, []string{"fresh", "list"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v, err := c.gate.Acquire(c.ctx, ev, "a#0", c.recipients, false)
			if err == nil {
				t.Fatalf("Acquire = %v, nil; want an error", v)
			}
			if v != nil {
				t.Fatalf("Acquire returned verdicts %v with error %v; want none", v, err)
			}
		})
	}

	t.Run("unreachable redis, MarkDelivered and Holder", func(t *testing.T) {
		ug := gate.New(unreachable, time.Hour)
		if err := ug.MarkDelivered(ctx, ev, "a#0", "r1"); err == nil {
			t.Error("MarkDelivered on unreachable redis: nil error")
		}
		if _, _, ok, err := ug.Holder(ctx, ev, "r1"); err == nil || ok {
			t.Errorf("Holder on unreachable redis: ok=%v err=%v; want an error", ok, err)
		}
	})
}
