//go:build integration

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/segmentio/kafka-go"
	"go.temporal.io/api/enums/v1"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/dev/demo"
	"github.com/fanout/fanout/dev/stack"
	"github.com/fanout/fanout/starter"
	"github.com/fanout/fanout/workers/webhook"
	"github.com/fanout/fanout/workflows/vocab"
)

// runID keeps event ids unique across tests of one run.
var runID = time.Now().UTC().Format("150405")

// (a) Events with 1 to 5,000 recipients published to Kafka are all
// delivered, every recipient exactly once on this fault-free path.
func TestEventsAreDeliveredToEveryRecipientOnce(t *testing.T) {
	sizes := []int{1, 5000, 2, 17, 199, 200, 201, 999, 1000, 1234, 3000, 4999, 50, 7, 600, 401, 2500, 10, 333, 4000}
	var evs []stack.Event
	ids := make([]string, len(sizes))
	for i, n := range sizes {
		ids[i] = fmt.Sprintf("a-%s-%d", runID, i)
		evs = append(evs, stack.Event{ID: ids[i], Audience: n})
	}
	st.publish(t, evs...)
	for i, n := range sizes {
		res := st.waitResult(t, ids[i], 3*time.Minute)
		if res.Found != int64(n) || res.Delivered != int64(n) || res.Duplicates != 0 || res.Failed != 0 {
			t.Errorf("event %s (%d recipients): result %+v", ids[i], n, res.Progress)
		}
		got := st.Sink.Event(ids[i])
		if got.Unique != n || got.Deliveries != n || got.Duplicated != 0 {
			t.Errorf("event %s: sink saw %d unique recipients in %d deliveries (%d duplicated), want %d once each",
				ids[i], got.Unique, got.Deliveries, got.Duplicated, n)
		}
		for _, r := range []int{0, n / 2, n - 1} {
			if c := st.Sink.Count(ids[i], demo.RecipientID(r)); c != 1 {
				t.Errorf("event %s recipient %d: %d deliveries", ids[i], r, c)
			}
		}
		// A single batch over LocalDeliveryMax runs as one DeliverBatch
		// activity on its priority's delivery queue, without a child.
		if n > fanout.DefaultLocalDeliveryMax && n <= stackOptions.BatchSize {
			h := historyShape(t, vocab.WorkflowID(webhook.EventType, ids[i]))
			if want := vocab.DeliveryTaskQueue(fanout.PriorityNormal); len(h.deliverQueues) != 1 || h.deliverQueues[0] != want {
				t.Errorf("event %s (%d recipients): DeliverBatch activities on %v, want one on %s", ids[i], n, h.deliverQueues, want)
			}
		}
	}
}

// (b) The same event published twice starts one fan-out, also when the
// second copy arrives after the first completed.
func TestSameEventTwiceStartsOneFanout(t *testing.T) {
	id := "b-dup-" + runID
	st.publish(t, stack.Event{ID: id, Audience: 300}, stack.Event{ID: id, Audience: 300})
	first := st.waitResult(t, id, time.Minute)
	if first.Delivered != 300 {
		t.Fatalf("first fan-out delivered %d, want 300", first.Delivered)
	}
	// A third copy after completion: REJECT_DUPLICATE turns it away.
	before := st.bridge.Stats.Duplicates.Load()
	st.publish(t, stack.Event{ID: id, Audience: 300})
	deadline := time.Now().Add(30 * time.Second)
	for st.bridge.Stats.Duplicates.Load() == before && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if st.bridge.Stats.Duplicates.Load() == before {
		t.Fatal("the bridge never saw the late copy as a duplicate")
	}
	if n := st.runs(t, vocab.WorkflowID(webhook.EventType, id)); n != 1 {
		t.Fatalf("%d fan-outs of one event, want 1", n)
	}
	if got := st.Sink.Event(id); got.Deliveries != 300 || got.Unique != 300 {
		t.Fatalf("sink: %+v, want 300 deliveries to 300 recipients", got)
	}
}

// (b) A bridge restarted mid-stream starts one fan-out per event: nothing is
// lost and nothing is started twice.
func TestBridgeRestartMidStream(t *testing.T) {
	const n = 40
	var evs []stack.Event
	ids := make([]string, n)
	for i := range n {
		ids[i] = fmt.Sprintf("b-restart-%s-%d", runID, i)
		evs = append(evs, stack.Event{ID: ids[i], Audience: 5 + i})
	}
	started := st.bridge.Stats.Started.Load()
	// Publish in small slices from another goroutine, so the restart
	// lands mid-stream.
	pubDone := make(chan struct{})
	go func() {
		defer close(pubDone)
		for i := 0; i < len(evs); i += 4 {
			if err := st.Publish(context.Background(), evs[i:min(i+4, len(evs))]...); err != nil {
				t.Errorf("publish: %v", err)
				return
			}
		}
	}()
	// Stop the bridge once part of the stream is in.
	deadline := time.Now().Add(30 * time.Second)
	for st.bridge.Stats.Started.Load()-started < 5 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	st.stopBridge()
	mid := st.bridge.Stats.Started.Load() - started
	st.startBridge()
	t.Logf("bridge restarted after %d of %d starts", mid, n)
	<-pubDone
	if mid >= n {
		t.Logf("note: the whole stream was in before the restart")
	}
	for i, id := range ids {
		res := st.waitResult(t, id, 2*time.Minute)
		if res.Delivered != int64(5+i) {
			t.Errorf("event %s delivered %d, want %d", id, res.Delivered, 5+i)
		}
		if runs := st.runs(t, vocab.WorkflowID(webhook.EventType, id)); runs != 1 {
			t.Errorf("event %s: %d fan-outs, want 1", id, runs)
		}
		if got := st.Sink.Event(id); got.Duplicated != 0 || got.Unique != 5+i {
			t.Errorf("event %s: sink %+v", id, got)
		}
	}
}

// (c) Each kind of bad record lands in the events DLQ with its reason, and
// the good records after them are still processed.
func TestBadRecordsGoToTheDLQ(t *testing.T) {
	good := "c-good-" + runID
	bad := []struct {
		reason string
		value  string
	}{
		{starter.ReasonInvalidJSON, `{"id": "c1", "type": `},
		{starter.ReasonMissingID, `{"type": "webhook", "payload": {}}`},
		{starter.ReasonMissingType, `{"id": "c-notype-` + runID + `", "payload": {}}`},
		{starter.ReasonUnknownType, `{"id": "c-badtype-` + runID + `", "type": "carrier-pigeon"}`},
		{starter.ReasonUnknownPriority, `{"id": "c-badprio-` + runID + `", "type": "webhook", "priority": "urgent"}`},
		{starter.ReasonPayloadTooLarge, `{"id": "c-big-` + runID + `", "type": "webhook", "payload": {"x": "` + strings.Repeat("x", 5000) + `"}}`},
		// Issue 10: an id equal to another event's batch id, and headers
		// past their bounds.
		{starter.ReasonInvalidID, `{"id": "v2/batch/3", "type": "webhook"}`},
		{starter.ReasonInvalidHeaders, `{"id": "c-hdr-` + runID + `", "type": "webhook", "headers": {"k": "` + strings.Repeat("v", 2000) + `"}}`},
		// Issue 14: schedules.
		{starter.ReasonInvalidDeliverAt, `{"id": "c-at-` + runID + `", "type": "webhook", "deliver_at": "next tuesday"}`},
		{starter.ReasonInvalidDelay, `{"id": "c-delay-` + runID + `", "type": "webhook", "delay": "-5m"}`},
		{starter.ReasonDeliverAtAndDelay, `{"id": "c-both-` + runID + `", "type": "webhook", "deliver_at": "2026-01-01T00:00:00Z", "delay": "1m"}`},
		{starter.ReasonBeyondHorizon, `{"id": "c-far-` + runID + `", "type": "webhook", "delay": "8760h"}`},
	}
	var msgs []kafka.Message
	for i, b := range bad {
		// All on one key, so they share a partition with the good event
		// that follows them.
		msgs = append(msgs, kafka.Message{Key: []byte("c-" + runID), Value: []byte(b.value), Headers: []kafka.Header{{Key: "case", Value: []byte(fmt.Sprint(i))}}})
	}
	goodMsg := stack.Event{ID: good, Audience: 25}.Record()
	goodMsg.Key = []byte("c-" + runID)
	msgs = append(msgs, goodMsg)
	if err := st.Publisher.PublishRecords(context.Background(), msgs...); err != nil {
		t.Fatal(err)
	}

	if res := st.waitResult(t, good, time.Minute); res.Delivered != 25 {
		t.Fatalf("good event after bad ones: delivered %d, want 25", res.Delivered)
	}
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{st.KafkaAddr}, Topic: starter.DefaultEventsDLQTopic, Partition: 0, MinBytes: 1, MaxBytes: 1 << 20, MaxWait: 100 * time.Millisecond})
	defer func() { _ = r.Close() }()
	got := map[string]string{} // value -> reason
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for len(got) < len(bad) {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			t.Fatalf("read DLQ after %d records: %v", len(got), err)
		}
		h := map[string]string{}
		for _, x := range m.Headers {
			h[x.Key] = string(x.Value)
		}
		if h["case"] == "" {
			continue // from another test
		}
		if h[starter.HeaderError] == "" || h[starter.HeaderSourceOffset] == "" {
			t.Errorf("DLQ record without error or source offset: %v", h)
		}
		got[string(m.Value)] = h[starter.HeaderReason]
	}
	for _, b := range bad {
		if got[b.value] != b.reason {
			t.Errorf("record %.40q: DLQ reason %q, want %q", b.value, got[b.value], b.reason)
		}
	}
}

// (d) An event published with Debian's kcat, a third-party Kafka client,
// fans out like any other, with its traceparent header carried along.
func TestKcatPublishedEvent(t *testing.T) {
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		t.Fatal("kcat not found: install Debian's kcat (apt-get install -y kcat); .ci/run does")
	}
	id := "d-kcat-" + runID
	value := fmt.Sprintf(`{"id":%q,"type":"webhook","priority":"high","payload":{"audience":42}}`, id)
	eager0, denied0 := serverCounter(t, "workflow_eager_execution"), serverCounter(t, "workflow_eager_execution_denied")
	cmd := exec.Command(kcat, "-P", "-b", st.KafkaAddr, "-t", eventsTopic, "-k", id,
		"-H", "traceparent=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	cmd.Stdin = strings.NewReader(value + "\n")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("kcat: %v: %s", err, out.String())
	}
	res := st.waitResult(t, id, time.Minute)
	if res.Delivered != 42 {
		t.Fatalf("kcat event delivered %d, want 42", res.Delivered)
	}
	desc, err := st.TC.DescribeWorkflow(context.Background(), vocab.WorkflowID(webhook.EventType, id), "")
	if err != nil {
		t.Fatal(err)
	}
	if tq := desc.RawResponse.GetWorkflowExecutionInfo().GetTaskQueue(); tq != vocab.EventsTaskQueue {
		t.Errorf("event workflow on task queue %q, want %q", tq, vocab.EventsTaskQueue)
	}
	// The bridge shares its client with the events worker: the start was
	// eager (the first workflow task came back in the start's response).
	// The server reports its counters about once a second.
	var eager, denied float64
	for end := time.Now().Add(10 * time.Second); eager < 1 && time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		eager, denied = serverCounter(t, "workflow_eager_execution")-eager0, serverCounter(t, "workflow_eager_execution_denied")-denied0
	}
	if eager < 1 || denied != 0 {
		t.Errorf("eager starts requested %v, denied %v; want at least 1 and none denied", eager, denied)
	}
	// 42 recipients is under LocalDeliveryMax: the fast path, one workflow
	// task and no activity task.
	h := historyShape(t, vocab.WorkflowID(webhook.EventType, id))
	if h.workflowTasks != 1 || len(h.deliverQueues) != 0 || h.markers != 1 {
		t.Errorf("history: %d workflow tasks, DeliverBatch activities on %v, %d local activities; want 1, none, 1 (Open: prepare, page, delivery)",
			h.workflowTasks, h.deliverQueues, h.markers)
	}
}

// serverCounter sums the series of a counter of the dev server's metrics.
func serverCounter(t *testing.T, name string) float64 {
	t.Helper()
	resp, err := http.Get(st.TemporalMetricsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("server metrics: %v", err)
	}
	var sum float64
	for _, m := range fams[name].GetMetric() {
		sum += m.GetCounter().GetValue()
	}
	return sum
}

// shape counts what a workflow's history holds.
type shape struct {
	workflowTasks int      // completed workflow tasks
	markers       int      // local activities
	deliverQueues []string // task queue of each scheduled DeliverBatch activity
}

func historyShape(t *testing.T, wid string) shape {
	t.Helper()
	iter := st.TC.GetWorkflowHistory(context.Background(), wid, "", false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	var h shape
	for iter.HasNext() {
		e, err := iter.Next()
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case e.GetWorkflowTaskCompletedEventAttributes() != nil:
			h.workflowTasks++
		case e.GetMarkerRecordedEventAttributes() != nil:
			h.markers++
		case e.GetActivityTaskScheduledEventAttributes().GetActivityType().GetName() == "DeliverBatch":
			h.deliverQueues = append(h.deliverQueues, e.GetActivityTaskScheduledEventAttributes().GetTaskQueue().GetName())
		}
	}
	return h
}
