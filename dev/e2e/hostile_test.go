//go:build integration

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/activities"
	"github.com/fanout/fanout/dev/stack"
	"github.com/fanout/fanout/internal/kafkatopic"
	"github.com/fanout/fanout/starter"
	"github.com/fanout/fanout/workers"
	"github.com/fanout/fanout/workers/webhook"
	"github.com/fanout/fanout/workflows/vocab"
	"github.com/segmentio/kafka-go"
)

// countingServer is a loopback HTTP server on addr that counts its requests
// and answers with h.
type countingServer struct {
	*httptest.Server
	hits atomic.Int64
}

func startCounting(t *testing.T, addr string, h http.HandlerFunc) *countingServer {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen %s: %v", addr, err)
	}
	s := &countingServer{}
	s.Server = &httptest.Server{Listener: ln, Config: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		if h != nil {
			h(w, r)
		}
	})}}
	s.Start()
	t.Cleanup(s.Close)
	return s
}

// internalService stands for a service the workers must never reach (another
// pod, a loopback admin port): it listens on 127.0.0.2, outside the workers'
// allow-list (127.0.0.1 only), and answers like a recipients endpoint whose
// recipients are itself.
func internalService(t *testing.T) *countingServer {
	var s *countingServer
	s = startCounting(t, "127.0.0.2:0", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(fanout.Page{Recipients: []fanout.Recipient{{ID: "victim", Address: s.URL + "/admin"}}})
	})
	return s
}

// A record whose payload names an internal service as its recipients_url:
// the event fails with the reason, and the service gets no request.
func TestHostilePayloadRecipientsURL(t *testing.T) {
	internal := internalService(t)
	id := "hostile-url-" + runID
	st.publish(t, stack.Event{ID: id, RecipientsURL: internal.URL + "/recipients"})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, err := st.Wait(ctx, id)
	if err == nil || !strings.Contains(err.Error(), "recipients_url_not_allowed") {
		t.Fatalf("event with an internal recipients_url: %v, want it failed with recipients_url_not_allowed", err)
	}
	if n := internal.hits.Load(); n != 0 {
		t.Errorf("the internal service got %d requests", n)
	}
}

// A recipients endpoint that names internal addresses (the metadata
// address, a loopback service, a file URL) beside a real destination: only
// the real one is delivered; the others are refused permanently, dead-
// lettered, and never reached.
func TestHostileRecipientAddresses(t *testing.T) {
	internal := internalService(t)
	good := startCounting(t, "127.0.0.1:0", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	page := fanout.Page{Recipients: []fanout.Recipient{
		{ID: "metadata", Address: "http://169.254.169.254/latest/meta-data/"},
		{ID: "loopback-service", Address: internal.URL + "/admin"},
		{ID: "mapped", Address: "http://[::ffff:127.0.0.2]:" + internal.URL[strings.LastIndex(internal.URL, ":")+1:] + "/admin"},
		{ID: "file", Address: "file:///etc/passwd"},
		{ID: "real", Address: good.URL + "/hook"},
	}}
	endpoint := startCounting(t, "127.0.0.1:0", func(w http.ResponseWriter, _ *http.Request) { _ = json.NewEncoder(w).Encode(page) })
	id := "hostile-addr-" + runID
	st.publish(t, stack.Event{ID: id, RecipientsURL: st.Route(endpoint.Config.Handler) + "/recipients"})
	res := st.waitResult(t, id, 60*time.Second)
	if res.Delivered != 1 || res.Failed != 4 || res.DeadLettered != 4 {
		t.Errorf("progress %+v; want 1 delivered, 4 failed and dead-lettered", res.Progress)
	}
	if good.hits.Load() != 1 {
		t.Errorf("the real destination got %d requests, want 1", good.hits.Load())
	}
	if n := internal.hits.Load(); n != 0 {
		t.Errorf("the internal service got %d requests", n)
	}
}

// The poison record of issue 10, with Debian's kcat: a 600 KB record whose
// unknown type the error used to echo whole, so its dead letter was over
// Kafka's 1 MiB and the partition stopped committing. Now its dead letter is
// cut (and says so), and a valid event behind it on the same key is started.
func TestHostilePoisonRecord(t *testing.T) {
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		t.Fatal("kcat not found: install Debian's kcat (apt-get install -y kcat); .ci/run does")
	}
	key := "poison-" + runID
	poison := `{"id":"` + key + `","type":"` + strings.Repeat("t", 600_000) + `"}`
	good := "poison-next-" + runID
	for _, value := range []string{poison, string(stack.Event{ID: good, Audience: 10}.Record().Value)} {
		cmd := exec.Command(kcat, "-P", "-b", st.KafkaAddr, "-t", eventsTopic, "-k", key)
		cmd.Stdin = strings.NewReader(value + "\n")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("kcat: %v: %s", err, out)
		}
	}
	if res := st.waitResult(t, good, time.Minute); res.Delivered != 10 {
		t.Fatalf("the event behind the poison record delivered %d, want 10", res.Delivered)
	}
	found, h := eventsDeadLetter(t, key)
	if h[starter.HeaderReason] != starter.ReasonUnknownType || h[starter.HeaderTruncated] != strconv.Itoa(len(poison)) ||
		len(found.Value) > 600_000 || len(h[starter.HeaderError]) > 2048 || h[starter.HeaderSourceOffset] == "" {
		t.Errorf("dead letter: reason %q, truncated %q, value %d bytes, error %d bytes, offset %q",
			h[starter.HeaderReason], h[starter.HeaderTruncated], len(found.Value), len(h[starter.HeaderError]), h[starter.HeaderSourceOffset])
	}

	// A redrive re-publishes the whole original, read back from the events
	// topic, not the cut copy (to a scratch topic here: it would only be
	// dead-lettered again).
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	scratch := "redriven-" + runID
	if _, err := (&kafka.Client{Addr: kafka.TCP(st.KafkaAddr)}).CreateTopics(ctx, &kafka.CreateTopicsRequest{
		Topics: []kafka.TopicConfig{{Topic: scratch, NumPartitions: 1, ReplicationFactor: 1}}}); err != nil {
		t.Fatal(err)
	}
	// A forged cut dead letter pointing at another topic (the deliveries
	// DLQ) is not followed: the redrive copies nothing from there.
	w := kafkatopic.NewWriter(st.KafkaConn(), starter.DefaultEventsDLQTopic)
	defer func() { _ = w.Close() }()
	forged := starter.DeadLetterRecord(kafka.Message{Topic: activities.DefaultDeliveriesDLQTopic, Key: []byte("forged-" + key), Value: []byte(strings.Repeat("v", 600_000))},
		starter.ReasonUnknownType, "forged", time.Now())
	if err := w.WriteMessages(ctx, forged); err != nil {
		t.Fatal(err)
	}
	rr, err := starter.RedriveEvents(ctx, starter.RedriveEventsOptions{Kafka: st.KafkaConn(), DLQTopic: starter.DefaultEventsDLQTopic,
		EventsTopic: scratch, SourceTopic: eventsTopic, Reason: starter.ReasonUnknownType})
	if err != nil || rr.FromSource < 1 || rr.Lost != 1 {
		t.Fatalf("redrive-events: %+v %v", rr, err)
	}
	var whole []byte
	err = kafkatopic.ReadAll(ctx, st.KafkaConn(), scratch, func(m kafka.Message) error {
		if string(m.Key) == key {
			whole = m.Value
		}
		return nil
	})
	if err != nil || string(whole) != poison+"\n" && string(whole) != poison {
		t.Errorf("the redriven poison record: %d bytes (%v), want the original %d", len(whole), err, len(poison))
	}
}

// A batch that ends in error is not only counted: terminate one DeliveryBatch
// child of a running event with the temporal CLI, and its recipients land in
// the deliveries DLQ (batch_failed, with the batch's attempt id); a redrive
// then reaches every one of them, skipping what the batch had delivered
// before it was stopped.
func TestTerminatedBatchIsDeadLettered(t *testing.T) {
	id := "bt-dlq-" + runID
	wid := vocab.WorkflowID(webhook.EventType, id)
	sink := newOwnSink(t, 2*time.Second) // batch 0 runs for seconds
	startEvents(t, sink, 1000, 0, id)
	running := fmt.Sprintf("WorkflowType = '%s' AND ExecutionStatus = 'Running' AND WorkflowId STARTS_WITH '%s/batch/'", vocab.DeliveryBatchWorkflow, wid)
	eventually(t, 30*time.Second, "no batch of the event is running", func() bool { return cliCount(t, running) > 0 })
	bwid := vocab.BatchWorkflowID(wid, 0)
	temporalCLI(t, "workflow", "terminate", "--workflow-id", bwid, "--reason", "batch termination test")
	sink.setDelay(0)
	res := st.waitResult(t, id, 2*time.Minute)
	batch := int64(stackOptions.BatchSize)
	if res.BatchErrors != 1 || res.Failed < batch || res.DeadLettered < batch || res.Delivered+res.Failed != 1000 {
		t.Fatalf("progress %+v; want batch 0 failed and its %d recipients dead-lettered", res.Progress, batch)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n := 0
	err := kafkatopic.ReadAll(ctx, st.KafkaConn(), activities.DefaultDeliveriesDLQTopic, func(m kafka.Message) error {
		var d activities.DeadLetter
		if json.Unmarshal(m.Value, &d) == nil && d.EventID == id {
			n++
			if d.AttemptID != vocab.AttemptID(webhook.EventType, id, 0) || !strings.Contains(d.LastError, "batch_failed") {
				t.Errorf("dead letter %s: attempt %s, error %q", d.Recipient.ID, d.AttemptID, d.LastError)
			}
		}
		return nil
	})
	if err != nil || n != int(batch) {
		t.Fatalf("%d dead letters of the event in the DLQ (%v), want %d", n, err, batch)
	}
	rr, err := starter.RedriveDeliveries(ctx, st.TC, starter.RedriveOptions{Kafka: st.KafkaConn(), Topic: activities.DefaultDeliveriesDLQTopic,
		Filter: starter.RedriveFilter{EventID: id}, Round: "bt-" + runID, Wait: true})
	if err != nil || rr.Matched != int(batch) || rr.Delivered+rr.Skipped != int(batch) || rr.Failed != 0 {
		t.Fatalf("redrive: %+v %v; want all %d delivered or skipped", rr, err, batch)
	}
	// Only deliveries in flight when the batch was stopped may be repeated:
	// at most its recipients, and at most the worker's budget of calls (a
	// batch alone uses the calls no other batch waits for).
	inFlight := min(int(batch), workers.DefaultBatchSlots*fanout.DefaultDeliverConcurrency)
	if s := sink.Event(id); s.Unique != 1000 || s.Duplicated > inFlight {
		t.Errorf("after the redrive the sink has %d of 1000 recipients, %d duplicated", s.Unique, s.Duplicated)
	}
}

// A recipients endpoint that answers with a page far over the 8 MiB bound
// (one recipient with a 200 MiB address, which allocated ~700 MiB in the
// events worker before): the page is not read whole (this process, which
// runs the workers, allocates a fraction of it), the event fails with
// page_too_large, and the activity is not retried.
func TestHostileHugePage(t *testing.T) {
	const pageMiB = 200
	endpoint := startCounting(t, "127.0.0.1:0", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`{"recipients":[{"id":"r1","address":"http://127.0.0.1:1/`))
		chunk := []byte(strings.Repeat("a", 1<<20))
		for range pageMiB {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
		_, _ = w.Write([]byte(`"}]}`))
	})
	id := "hostile-page-" + runID
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	st.publish(t, stack.Event{ID: id, RecipientsURL: st.Route(endpoint.Config.Handler) + "/recipients"})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := st.Wait(ctx, id)
	runtime.ReadMemStats(&after)
	if err == nil || !strings.Contains(err.Error(), "page_too_large") {
		t.Fatalf("event with a %d MiB page: %v, want it failed with page_too_large", pageMiB, err)
	}
	// The read stops at 8 MiB; the rest is this process's other work.
	alloc := (after.TotalAlloc - before.TotalAlloc) >> 20
	t.Logf("allocated %d MiB while the workers refused a %d MiB page", alloc, pageMiB)
	if alloc > pageMiB/4 {
		t.Errorf("allocated %d MiB while the workers refused a %d MiB page", alloc, pageMiB)
	}
	if n := endpoint.hits.Load(); n != 1 {
		t.Errorf("the endpoint was asked %d times, want once (a page too large is not retried)", n)
	}
}

// eventsDeadLetter finds the events-DLQ record of the bad record keyed key
// and returns it with its headers by name.
func eventsDeadLetter(t *testing.T, key string) (kafka.Message, map[string]string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var found kafka.Message
	err := kafkatopic.ReadAll(ctx, st.KafkaConn(), starter.DefaultEventsDLQTopic, func(m kafka.Message) error {
		if string(m.Key) == key {
			found = m
			return kafkatopic.ErrStop
		}
		return nil
	})
	if err != nil || found.Key == nil {
		t.Fatalf("the dead letter of record %.32s...: %v (found %v)", key, err, found.Key != nil)
	}
	h := map[string]string{}
	for _, x := range found.Headers {
		h[x.Key] = string(x.Value)
	}
	return found, h
}
