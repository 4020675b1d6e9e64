//go:build integration

package activities_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/testsuite"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/activities"
	"github.com/fanout/fanout/activities/gate"
	"github.com/fanout/fanout/activities/staging"
	"github.com/fanout/fanout/internal/codec"
)

// secretAddress is the address of recipient i of the staging tests: text
// that must never be found in Redis in clear.
func secretAddress(i int) string {
	return fmt.Sprintf("https://hooks-%d.secret.example/t0ken-%d", i, i)
}

// TestStagedBatchesAreSealed: with keys, RecipientsPage stages each batch
// sealed (the raw Redis value holds no address nor recipient id and opens
// with the keys to the batch), DeliverBatch delivers every recipient from
// it, also after a rotation (old key among the new keys); a worker without
// the old key, or without keys, or a tampered value, finds the batch
// unreadable and fetches it again from get_recipients instead of failing.
func TestStagedBatchesAreSealed(t *testing.T) {
	const n = 30
	var mu sync.Mutex
	delivered, pages := map[string]string{}, 0
	h := fanout.HandlerFuncs{
		GetRecipientsFunc: func(_ context.Context, _ fanout.Event, cursor string, limit int) (fanout.Page, error) {
			mu.Lock()
			pages++
			mu.Unlock()
			var p fanout.Page
			for i := range min(limit, n) {
				p.Recipients = append(p.Recipients, fanout.Recipient{ID: "rcpt-" + strconv.Itoa(i), Address: secretAddress(i)})
			}
			return p, nil
		},
		GenerateMessageFunc: func(context.Context, fanout.Event) (fanout.Message, error) {
			return fanout.Message{Body: []byte("m")}, nil
		},
		DeliverFunc: func(_ context.Context, _ fanout.Event, r fanout.Recipient, _ fanout.Message) error {
			mu.Lock()
			defer mu.Unlock()
			delivered[r.ID] = r.Address
			return nil
		},
	}
	reg := fanout.NewRegistry()
	reg.MustRegister("sealed", h, fanout.TypeOptions{})
	keyA, keyB := codec.NewKey("a"), codec.NewKey("b")
	ringA, _ := codec.New(keyA)
	ringBA, _ := codec.New(keyB, keyA)
	ringB, _ := codec.New(keyB)
	worker := func(sealer activities.Sealer) (*activities.Activities, *testsuite.TestActivityEnvironment) {
		acts := &activities.Activities{Registry: reg, Gate: gate.New(rdb, time.Hour), Staging: staging.New(rdb, time.Hour).WithSealer(sealer)}
		var s testsuite.WorkflowTestSuite
		env := s.NewTestActivityEnvironment()
		env.RegisterActivity(acts)
		return acts, env
	}
	id := "sealed-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	ev := fanout.Event{ID: id, Type: "sealed"}
	acts, env := worker(ringA)
	v, err := env.ExecuteActivity(acts.RecipientsPage, activities.RecipientsPageInput{Event: ev, Limit: 100, BatchSize: 10})
	if err != nil {
		t.Fatal(err)
	}
	var page activities.PageResult
	if err := v.Get(&page); err != nil || len(page.Batches) != 3 || len(page.Recipients) != 0 {
		t.Fatalf("page: %+v %v; want 3 staged batches", page, err)
	}
	for _, ref := range page.Batches {
		raw, err := rdb.Get(context.Background(), ref.Key).Bytes()
		if err != nil {
			t.Fatal(err)
		}
		if !codec.IsSealed(raw) {
			t.Fatalf("batch %d staged in clear: %.80q", ref.N, raw)
		}
		for _, clear := range []string{"secret.example", "t0ken", "rcpt-", "address"} {
			if strings.Contains(string(raw), clear) {
				t.Errorf("batch %d: %q in clear in Redis", ref.N, clear)
			}
		}
		pt, err := ringA.Open(raw)
		if err != nil || !strings.Contains(string(pt), secretAddress(ref.Offset)) {
			t.Errorf("batch %d opens to %.80q, %v", ref.N, pt, err)
		}
	}
	deliver := func(env *testsuite.TestActivityEnvironment, acts *activities.Activities, ref activities.BatchRef) activities.DeliverBatchResult {
		t.Helper()
		v, err := env.ExecuteActivity(acts.DeliverBatch, activities.DeliverBatchInput{
			Event: ev, AttemptID: "sealed/" + id + "#" + strconv.Itoa(ref.N), Ref: &ref, MaxAttempts: 1, Concurrency: 4})
		if err != nil {
			t.Fatalf("batch %d: %v", ref.N, err)
		}
		var res activities.DeliverBatchResult
		if err := v.Get(&res); err != nil {
			t.Fatal(err)
		}
		return res
	}
	// Batch 0 by a worker of key a; batch 1 after the rotation, by a
	// worker of keys b (active) and a: both from Redis, no page fetched.
	pagesBefore := pages
	if res := deliver(env, acts, page.Batches[0]); res.Delivered != 10 {
		t.Fatalf("batch 0: %+v", res)
	}
	actsBA, envBA := worker(ringBA)
	if res := deliver(envBA, actsBA, page.Batches[1]); res.Delivered != 10 {
		t.Fatalf("batch 1 after the rotation: %+v", res)
	}
	if pages != pagesBefore {
		t.Errorf("%d pages fetched again; the staged batches should have been read", pages-pagesBefore)
	}
	// A worker without key a: the batch is unreadable, fetched again.
	actsB, envB := worker(ringB)
	if _, _, err := actsB.Staging.Load(context.Background(), page.Batches[2].Key); !errors.Is(err, staging.ErrUnreadable) || !strings.Contains(err.Error(), `"a"`) {
		t.Fatalf("load without key a: %v; want ErrUnreadable naming key a", err)
	}
	if res := deliver(envB, actsB, page.Batches[2]); res.Delivered != 10 || pages != pagesBefore+1 {
		t.Fatalf("batch 2 without key a: %+v, %d pages fetched again; want 10 delivered from 1 page", res, pages-pagesBefore)
	}
	for i := range n {
		if delivered["rcpt-"+strconv.Itoa(i)] != secretAddress(i) {
			t.Errorf("recipient %d delivered to %q", i, delivered["rcpt-"+strconv.Itoa(i)])
		}
	}
	// Without keys, and with a tampered value: unreadable too.
	ctx := context.Background()
	st := staging.New(rdb, time.Hour).WithSealer(ringA)
	if err := st.Stage(ctx, "sealed/x-"+id, 0, [][]fanout.Recipient{{{ID: "r", Address: secretAddress(0)}}}); err != nil {
		t.Fatal(err)
	}
	key := st.Key("sealed/x-"+id, 0)
	if _, _, err := staging.New(rdb, time.Hour).Load(ctx, key); !errors.Is(err, staging.ErrUnreadable) {
		t.Errorf("sealed batch read without keys: %v", err)
	}
	raw, _ := rdb.Get(ctx, key).Bytes()
	raw[len(raw)-1] ^= 1
	rdb.Set(ctx, key, raw, time.Hour)
	if _, _, err := st.Load(ctx, key); !errors.Is(err, staging.ErrUnreadable) || !errors.Is(err, codec.ErrDecrypt) {
		t.Errorf("tampered batch: %v", err)
	}
	// A batch staged in clear (before the keys) is not trusted by a store
	// that seals: fetched again.
	if err := staging.New(rdb, time.Hour).Stage(ctx, "sealed/y-"+id, 0, [][]fanout.Recipient{{{ID: "r"}}}); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := st.Load(ctx, st.Key("sealed/y-"+id, 0)); ok || !errors.Is(err, staging.ErrUnreadable) {
		t.Errorf("clear batch read by a sealing store: ok %v, %v", ok, err)
	}
}
