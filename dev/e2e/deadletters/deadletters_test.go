//go:build integration

// Package deadletters_test checks the deliveries DLQ on the real stack (the
// temporal dev server, redis-server, kfake over TCP), encrypted as a
// deployment with FANOUT_CODEC_KEYS is: a batch whose recipients all give up
// at once is dead-lettered in bounded memory, heartbeating, and its letters
// redrive; a redrive with keys never takes a letter in clear.
package deadletters_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/activities"
	"github.com/fanout/fanout/activities/staging"
	"github.com/fanout/fanout/dev/stack"
	"github.com/fanout/fanout/internal/kafkatopic"
	"github.com/fanout/fanout/starter"
	"github.com/fanout/fanout/workers"
	"github.com/fanout/fanout/workflows"
	"github.com/fanout/fanout/workflows/vocab"
)

var st *stack.Stack

func TestMain(m *testing.M) {
	code, err := func() (int, error) {
		s, err := stack.Start(context.Background(), stack.Options{InMemory: true, Encrypt: true, Log: os.Stderr})
		if err != nil {
			return 0, err
		}
		defer s.Close()
		st = s
		return m.Run(), nil
	}()
	if err != nil {
		fmt.Fprintln(os.Stderr, "deadletters:", err)
		os.Exit(1)
	}
	os.Exit(code)
}

const eventType = "dlq"

// dest is the test type's handler: while failing, every delivery fails
// permanently with an error that names the destination's host (as
// net/http's do); then it counts deliveries per recipient and the bodies
// it was given.
type dest struct {
	failing   atomic.Bool
	lastFail  atomic.Int64 // unix nanos of the last failed delivery
	mu        sync.Mutex
	delivered map[string]int
	bodies    map[string]int
}

func (d *dest) GetRecipients(context.Context, fanout.Event, string, int) (fanout.Page, error) {
	return fanout.Page{}, fanout.Permanent(errors.New("not paged in this test"))
}

func (d *dest) GenerateMessage(context.Context, fanout.Event) (fanout.Message, error) {
	return fanout.Message{}, fanout.Permanent(errors.New("not generated in this test"))
}

func (d *dest) Deliver(_ context.Context, _ fanout.Event, r fanout.Recipient, m fanout.Message) error {
	if d.failing.Load() {
		d.lastFail.Store(time.Now().UnixNano())
		return fanout.Permanent(errors.New(`HTTP 400 from "https://hooks.dlq.example:8443"`))
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.delivered[r.ID]++
	d.bodies[string(m.Body[:min(len(m.Body), 32)])]++
	return nil
}

// beats counts the activities' heartbeats and when the last one was.
type beats struct {
	interceptor.WorkerInterceptorBase
	after func() int64 // heartbeats are counted after this time (unix nanos)
	n     atomic.Int64
}

func (b *beats) InterceptActivity(_ context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	i := &beatsIn{b: b}
	i.Next = next
	return i
}

type beatsIn struct {
	interceptor.ActivityInboundInterceptorBase
	b *beats
}

func (i *beatsIn) Init(out interceptor.ActivityOutboundInterceptor) error {
	o := &beatsOut{b: i.b}
	o.Next = out
	return i.Next.Init(o)
}

type beatsOut struct {
	interceptor.ActivityOutboundInterceptorBase
	b *beats
}

func (o *beatsOut) RecordHeartbeat(ctx context.Context, details ...any) {
	if last := o.b.after(); last != 0 && time.Now().UnixNano() > last {
		o.b.n.Add(1)
	}
	o.Next.RecordHeartbeat(ctx, details...)
}

// heapPeak samples the heap in use every few milliseconds until stop and
// returns the highest sample. Far over the bound it stops the test binary:
// the unbounded dead-lettering this guards against would take gigabytes of
// a machine others share.
func heapPeak(limit uint64) (stop func() uint64) {
	var peak atomic.Uint64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
			if ms.HeapInuse > 8*limit {
				panic(fmt.Sprintf("heap in use %d MiB while dead-lettering, over 8 x %d MiB: stopped", ms.HeapInuse>>20, limit>>20))
			}
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	return func() uint64 { close(done); wg.Wait(); return peak.Load() }
}

// TestDeadLetteringIsBounded: a staged batch of 10,000 recipients of a
// 256 KiB message, all of whom fail for good at once, is dead-lettered
// with the delivery worker's heap in use under 128 MiB throughout,
// heartbeating while it publishes; every recipient is in the DLQ, and a
// redrive of the letters delivers each recipient once, with the message.
func TestDeadLetteringIsBounded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const n, heapLimit = 10000, 128 << 20
	d := &dest{delivered: map[string]int{}, bodies: map[string]int{}}
	d.failing.Store(true)
	reg := fanout.NewRegistry()
	reg.MustRegister(eventType, d, fanout.TypeOptions{})
	hb := &beats{after: d.lastFail.Load}
	stop := st.RunWorkers(workers.Options{Registry: reg, Queues: []string{string(fanout.PriorityNormal)}, Interceptors: []interceptor.WorkerInterceptor{hb}})
	defer stop()

	ev := fanout.Event{ID: "big-" + strconv.FormatInt(time.Now().UnixNano(), 36), Type: eventType, Priority: fanout.PriorityNormal}
	rs := make([]fanout.Recipient, n)
	for i := range rs {
		rs[i] = fanout.Recipient{ID: fmt.Sprintf("r%05d", i), Address: fmt.Sprintf("https://hooks.dlq.example:8443/r/%05d", i)}
	}
	ek := vocab.EventKey(ev.Type, ev.ID)
	store := staging.New(st.RDB, time.Hour).WithSealer(st.Keyring)
	if err := store.Stage(ctx, ek, 0, [][]fanout.Recipient{rs}); err != nil {
		t.Fatal(err)
	}
	msg := fanout.Message{ContentType: "application/octet-stream", Body: bytes.Repeat([]byte("256KiB message "), (256<<10)/15)}
	in := workflows.DeliveryBatchInput{DeliverBatchInput: activities.DeliverBatchInput{
		Event: ev, Priority: ev.Priority, AttemptID: vocab.AttemptID(ev.Type, ev.ID, 0), Message: msg,
		Ref: &activities.BatchRef{N: 0, Key: store.Key(ek, 0), Count: n}, MaxAttempts: 3, Concurrency: 64,
	}, Timeout: 4 * time.Minute}

	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)
	t.Logf("heap in use before the batch: %.1f MiB", float64(base.HeapInuse)/(1<<20))
	peak := heapPeak(heapLimit)
	run, err := st.TC.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: vocab.BatchWorkflowID(vocab.WorkflowID(ev.Type, ev.ID), 0),
		TaskQueue: vocab.DeliveryTaskQueue(ev.Priority)}, workflows.DeliveryBatch, in)
	if err != nil {
		t.Fatal(err)
	}
	var res workflows.DeliveryBatchResult
	err = run.Get(ctx, &res)
	top := peak()
	t.Logf("dead-lettering %d recipients of a %d KiB message: heap in use peaked at %.1f MiB; %d heartbeats after the last delivery",
		n, len(msg.Body)>>10, float64(top)/(1<<20), hb.n.Load())
	if err != nil || res.Failed != n || res.DeadLettered != n {
		t.Fatalf("batch: %+v %v; want %d failed and dead-lettered", res, err, n)
	}
	if top >= heapLimit {
		t.Errorf("heap in use peaked at %d MiB, want under %d MiB", top>>20, heapLimit>>20)
	}
	if chunks := int64(n / activities.DeadLetterChunk); hb.n.Load() < chunks {
		t.Errorf("%d heartbeats while dead-lettering, want at least one per chunk (%d)", hb.n.Load(), chunks)
	}
	if got := lettersOf(ctx, t, ev.ID); got != n {
		t.Fatalf("%d recipients of the event in the DLQ, want %d", got, n)
	}

	d.failing.Store(false)
	rr, err := starter.RedriveDeliveries(ctx, st.TC, starter.RedriveOptions{Kafka: st.KafkaConn(), Topic: activities.DefaultDeliveriesDLQTopic,
		Filter: starter.RedriveFilter{EventID: ev.ID}, Rate: 1e6, BatchSize: 2500, Wait: true, Keys: st.Keyring})
	if err != nil {
		t.Fatal(err)
	}
	if rr.Matched != n || rr.Delivered != n || rr.Unredrivable != 0 {
		t.Errorf("redrive %+v: want %d matched and delivered", rr, n)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.delivered) != n {
		t.Errorf("%d recipients delivered by the redrive, want %d", len(d.delivered), n)
	}
	for id, c := range d.delivered {
		if c != 1 {
			t.Errorf("%s delivered %d times, want once", id, c)
		}
	}
	if d.bodies[string(msg.Body[:32])] != n {
		t.Errorf("bodies delivered %v, want the message %d times", d.bodies, n)
	}
}

// lettersOf counts the distinct recipients the DLQ holds for event id.
func lettersOf(ctx context.Context, t *testing.T, id string) int {
	t.Helper()
	seen := map[string]bool{}
	err := kafkatopic.ReadAll(ctx, st.KafkaConn(), activities.DefaultDeliveriesDLQTopic, func(m kafka.Message) error {
		dl, err := activities.DecodeDeadLetter(m.Value, st.Keyring)
		if err != nil {
			return err
		}
		if dl.EventID == id {
			seen[dl.Recipient.ID] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return len(seen)
}

// TestRedriveWithKeysRefusesLettersInClear: with keys, a redrive takes only
// sealed letters. Letters in clear (anyone who can write to the topic can
// write one) are counted and left in the DLQ, and one that shares an event
// and attempt with sealed letters written without their message never
// supplies it: those stay unredrivable, and nothing is delivered.
func TestRedriveWithKeysRefusesLettersInClear(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d := &dest{delivered: map[string]int{}, bodies: map[string]int{}}
	reg := fanout.NewRegistry()
	reg.MustRegister(eventType, d, fanout.TypeOptions{})
	stop := st.RunWorkers(workers.Options{Registry: reg, Queues: []string{string(fanout.PriorityNormal)}})
	defer stop()

	ev := fanout.Event{ID: "clear-" + strconv.FormatInt(time.Now().UnixNano(), 36), Type: eventType, Priority: fanout.PriorityNormal}
	letter := func(rcpt string) activities.DeadLetter {
		return activities.DeadLetter{EventID: ev.ID, EventType: ev.Type, Priority: ev.Priority, Event: ev,
			AttemptID: vocab.AttemptID(ev.Type, ev.ID, 0), Recipient: fanout.Recipient{ID: rcpt, Address: "https://hooks.dlq.example/" + rcpt},
			Attempts: 3, LastError: "HTTP 500", Time: time.Now()}
	}
	var sealedLetters []activities.DeadLetter
	for i := range 3 {
		l := letter("sealed-" + strconv.Itoa(i))
		l.MessageOmitted = 100
		sealedLetters = append(sealedLetters, l)
	}
	sw := activities.NewDeadLetterWriter(st.KafkaConn(), activities.DefaultDeliveriesDLQTopic).WithSealer(st.Keyring)
	defer func() { _ = sw.Close() }()
	if err := sw.Publish(ctx, sealedLetters); err != nil {
		t.Fatal(err)
	}
	forged := letter("forger")
	forged.Message = fanout.Message{ContentType: "text/plain", Body: []byte("FORGED message, in clear")}
	cw := activities.NewDeadLetterWriter(st.KafkaConn(), activities.DefaultDeliveriesDLQTopic)
	defer func() { _ = cw.Close() }()
	if err := cw.Publish(ctx, []activities.DeadLetter{forged}); err != nil {
		t.Fatal(err)
	}

	rr, err := starter.RedriveDeliveries(ctx, st.TC, starter.RedriveOptions{Kafka: st.KafkaConn(), Topic: activities.DefaultDeliveriesDLQTopic,
		Filter: starter.RedriveFilter{EventID: ev.ID}, Rate: 1e6, Wait: true, Keys: st.Keyring})
	if err != nil {
		t.Fatal(err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.delivered) != 0 || rr.Delivered != 0 || rr.Batches != 0 {
		t.Errorf("redrive delivered %v (bodies %v), result %+v; want nothing delivered", d.delivered, d.bodies, rr)
	}
	if rr.Matched != 3 || rr.Unredrivable != 3 || rr.Unsealed < 1 {
		t.Errorf("redrive %+v: want the 3 sealed letters matched and unredrivable, the letter in clear counted unsealed", rr)
	}
}
