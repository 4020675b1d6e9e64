//go:build integration

// Package status_test checks `starter status` and `starter resend` on the
// real stack (the temporal dev server, redis-server, kfake over TCP, HTTP
// on loopback), running the built starter binary: its answer for every
// recipient agrees with what the destination itself counted, in every
// state, and a resend delivers exactly the listed recipients again with
// their original webhook-id, as a workflow that says who asked and why.
package status_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/converter"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/activities/gate"
	"github.com/fanout/fanout/dev/stack"
	"github.com/fanout/fanout/starter"
	"github.com/fanout/fanout/workers"
	"github.com/fanout/fanout/workers/webhook"
	"github.com/fanout/fanout/workflows/vocab"
)

var (
	st   *stack.Stack
	sink = &sinkLog{calls: map[string]int{}, ok: map[string]int{}, ids: map[string][]string{}}
)

func TestMain(m *testing.M) {
	code, err := func() (int, error) {
		s, err := stack.Start(context.Background(), stack.Options{InMemory: true, DemoHandler: sink.wrap, Log: os.Stderr})
		if err != nil {
			return 0, err
		}
		defer s.Close()
		st = s
		return m.Run(), nil
	}()
	if err != nil {
		fmt.Fprintln(os.Stderr, "status:", err)
		os.Exit(1)
	}
	os.Exit(code)
}

// sinkLog is the destination's own count, per (event, recipient): calls,
// successful answers, and the webhook-ids it was sent. hang makes it hold
// the calls of some recipients until the caller goes away.
type sinkLog struct {
	mu    sync.Mutex
	calls map[string]int
	ok    map[string]int
	ids   map[string][]string
	hang  map[string]bool // event/recipient
	hung  chan string
}

func (l *sinkLog) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ev, rc := r.Header.Get(webhook.HeaderEventID), r.Header.Get(webhook.HeaderRecipientID)
		if ev == "" || rc == "" {
			next.ServeHTTP(w, r)
			return
		}
		wid, k := r.Header.Get(webhook.HeaderWebhookID), ev+"/"+rc
		l.mu.Lock()
		l.calls[k]++
		l.ids[k] = append(l.ids[k], wid)
		hang, hung := l.hang[k], l.hung
		l.mu.Unlock()
		if hang {
			hung <- k
			<-r.Context().Done() // the worker was killed mid-call
			return
		}
		l.mu.Lock()
		l.ok[k]++
		l.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})
}

func (l *sinkLog) count(ev, r string) (calls, ok int, ids []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := ev + "/" + r
	return l.calls[k], l.ok[k], append([]string(nil), l.ids[k]...)
}

func deref(p *int) string {
	if p == nil {
		return "null"
	}
	return fmt.Sprint(*p)
}

// secret signs the stock workers' deliveries, so they carry a webhook-id.
const secret = "FANOUT_WEBHOOK_SECRETS=whsec_QUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUE="

// demoEvent is a webhook event of the demo source's n recipients.
func demoEvent(id string, n int) fanout.Event {
	env := stack.Event{ID: id, Audience: n}.Envelope()
	return fanout.Event{ID: id, Type: env.Type, Payload: env.Payload}
}

// runStarter runs the built starter binary with the stack's environment.
func runStarter(ctx context.Context, t *testing.T, stdin string, args ...string) (string, int) {
	t.Helper()
	if err := st.Build(ctx); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, filepath.Join(st.Bin, "starter"), args...)
	cmd.Env = append(st.Env(), "FANOUT_UI_URL=http://ui.example:8233")
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	code := 0
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	if code != 0 && code != 3 {
		t.Logf("starter %s: exit %d, stderr %s", strings.Join(args, " "), code, errb.String())
	}
	return out.String(), code
}

// status runs `starter status -json` for ids (on stdin) and returns the
// answers by recipient and the exit status.
func status(ctx context.Context, t *testing.T, typ, ev string, ids []string) (map[string]starter.RecipientStatus, int) {
	t.Helper()
	out, code := runStarter(ctx, t, strings.Join(ids, "\n")+"\n", "status", "-json", "-type", typ, "-event-id", ev)
	got := map[string]starter.RecipientStatus{}
	sc := bufio.NewScanner(strings.NewReader(out))
	n := 0
	for sc.Scan() {
		var s starter.RecipientStatus
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			t.Fatalf("status line %q: %v", sc.Text(), err)
		}
		got[s.Recipient] = s
		n++
	}
	if n != len(ids) {
		t.Fatalf("status printed %d objects for %d recipients:\n%s", n, len(ids), out)
	}
	return got, code
}

// flaky is the in-process test type: its recipients come in pages of 10,
// the second page held until released; two recipients fail for good
// (HTTP 410), two fail twice (HTTP 503) and are held on their third call
// until released, then succeed.
type flaky struct {
	mu        sync.Mutex
	calls, ok map[string]int
	paged     chan struct{} // closed when the held page is asked for
	pageOnce  sync.Once
	release   chan struct{}
	third     chan string
}

const audience = 40

func rid(i int) string { return fmt.Sprintf("s%02d", i) }

var (
	permanent = map[string]bool{"s01": true, "s02": true}
	twice     = map[string]bool{"s03": true, "s04": true}
)

func (f *flaky) GetRecipients(ctx context.Context, _ fanout.Event, cursor string, limit int) (fanout.Page, error) {
	from := 0
	if cursor != "" {
		_, _ = fmt.Sscan(cursor, &from)
	}
	if from == 10 {
		f.pageOnce.Do(func() { close(f.paged) })
		select {
		case <-f.release:
		case <-ctx.Done():
			return fanout.Page{}, ctx.Err()
		}
	}
	var p fanout.Page
	for i := from; i < min(from+10, audience); i++ {
		p.Recipients = append(p.Recipients, fanout.Recipient{ID: rid(i), Address: "mem://" + rid(i)})
	}
	if from+10 < audience {
		p.NextCursor = fmt.Sprint(from + 10)
	}
	return p, nil
}

func (f *flaky) GenerateMessage(context.Context, fanout.Event) (fanout.Message, error) {
	return fanout.Message{ContentType: "text/plain", Body: []byte("hi")}, nil
}

func (f *flaky) Deliver(ctx context.Context, _ fanout.Event, r fanout.Recipient, _ fanout.Message) error {
	f.mu.Lock()
	f.calls[r.ID]++
	n := f.calls[r.ID]
	f.mu.Unlock()
	switch {
	case permanent[r.ID]:
		return fanout.Permanent(errors.New("HTTP 410"))
	case twice[r.ID] && n <= 2:
		return errors.New("HTTP 503")
	case twice[r.ID]:
		f.third <- r.ID
		select {
		case <-f.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	f.mu.Lock()
	f.ok[r.ID]++
	f.mu.Unlock()
	return nil
}

// TestStatusAgreesWithTheDestination: while the event runs (its second
// page held, two recipients on their third call after two failures), then
// once it completed, `starter status -json` over every recipient, one never
// listed and one whose record is garbled, says what the destination's own
// counts say: delivered (with the tries), retrying, dead_lettered,
// not_reached, unknown; exit 0 while all are found, 3 with unknowns.
func TestStatusAgreesWithTheDestination(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const typ = "st"
	f := &flaky{calls: map[string]int{}, ok: map[string]int{}, paged: make(chan struct{}), release: make(chan struct{}), third: make(chan string, 4)}
	reg := fanout.NewRegistry()
	// Calls held for minutes do not time out.
	reg.MustRegister(typ, f, fanout.TypeOptions{PageSize: 10, BatchSize: 10, LocalDeliveryMax: -1, MaxAttempts: 5,
		CallTimeout: 2 * time.Minute, DeliverTimeout: 5 * time.Minute})
	if err := st.Build(ctx); err != nil { // before the event: its calls are held meanwhile
		t.Fatal(err)
	}
	stop := st.RunWorkers(workers.Options{Registry: reg})
	defer stop()
	id := "status-" + time.Now().UTC().Format("150405.000")
	id = strings.ReplaceAll(id, ".", "-")
	if _, err := starter.StartEvent(ctx, st.TC, fanout.Event{ID: id, Type: typ}, false, 0); err != nil {
		t.Fatal(err)
	}
	ids := []string{}
	for i := range audience {
		ids = append(ids, rid(i))
	}
	ids = append(ids, "never-listed")
	// Running: the second page held, s03 and s04 on their third call.
	for range 2 {
		select {
		case <-f.third:
		case <-ctx.Done():
			t.Fatal("the flaky recipients never reached their third call")
		}
	}
	select {
	case <-f.paged:
	case <-ctx.Done():
		t.Fatal("the second page was never asked for")
	}
	got, code := status(ctx, t, typ, id, ids)
	if code != 0 {
		t.Errorf("status while running: exit %d, want 0 (no recipient unknown)", code)
	}
	for _, r := range ids {
		s := got[r]
		f.mu.Lock()
		calls, ok := f.calls[r], f.ok[r]
		f.mu.Unlock()
		want := ""
		switch {
		case r == "never-listed" || (r >= "s10" && r <= "s39"):
			want = starter.StateNotReached
		case permanent[r]:
			want = starter.StateDeadLettered
		case twice[r]:
			want = starter.StateRetrying
		default:
			want = starter.StateDelivered
		}
		if s.State != want {
			t.Errorf("while running, %s: %s, want %s (destination: %d calls, %d ok)", r, s.State, want, calls, ok)
		}
		if want == starter.StateDelivered && ok != 1 || want != starter.StateDelivered && ok != 0 {
			t.Errorf("while running, %s is %s but the destination counted %d successful calls", r, s.State, ok)
		}
		if want == starter.StateRetrying && (s.Attempts == nil || *s.Attempts != 2 || s.LastError == nil || s.LastError.HTTPStatus != 503) {
			t.Errorf("while running, %s: attempts %s, last error %+v; want 2 and HTTP 503", r, deref(s.Attempts), s.LastError)
		}
	}
	close(f.release)
	if _, err := st.WaitWorkflow(ctx, vocab.WorkflowID(typ, id), id); err != nil {
		t.Fatal(err)
	}
	// A garbled record: unknown, with the reason.
	g := gate.New(st.RDB, 0)
	if err := st.RDB.Set(ctx, g.Key(vocab.EventKey(typ, id), "garbled"), "delivered:"+vocab.AttemptID(typ, id, 0)+";x;\x00", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	ids = append(ids, "garbled")
	got, code = status(ctx, t, typ, id, ids)
	if code != 3 {
		t.Errorf("status after the event: exit %d, want 3 (unknown recipients)", code)
	}
	for _, r := range ids {
		s := got[r]
		f.mu.Lock()
		ok := f.ok[r]
		f.mu.Unlock()
		switch {
		case r == "never-listed":
			if s.State != starter.StateUnknown {
				t.Errorf("%s: %s, want unknown", r, s.State)
			}
		case r == "garbled":
			if s.State != starter.StateUnknown || s.LastError == nil || s.LastError.Class != starter.ClassUnreadable || s.LastError.Detail == "" {
				t.Errorf("%s: %+v, want unknown with the reason", r, s)
			}
		case permanent[r]:
			if s.State != starter.StateDeadLettered || ok != 0 || s.LastError == nil || s.LastError.Class != "permanent" || s.LastError.HTTPStatus != 410 {
				t.Errorf("%s: %s, last error %+v, destination ok %d; want dead_lettered, permanent 410, 0", r, s.State, s.LastError, ok)
			}
		default:
			wantTries := 1
			if twice[r] {
				wantTries = 3
			}
			if s.State != starter.StateDelivered || ok != 1 || s.Attempts == nil || *s.Attempts != wantTries || s.DeliveredAt == nil {
				t.Errorf("%s: %s, attempts %s, at %v, destination ok %d; want delivered after %d tries, once", r, s.State, deref(s.Attempts), s.DeliveredAt, ok, wantTries)
			}
			if s.Batch == nil || s.BatchWorkflowID == nil || s.UIURL == nil ||
				*s.BatchWorkflowID != vocab.BatchWorkflowID(vocab.WorkflowID(typ, id), *s.Batch) ||
				!strings.HasPrefix(*s.UIURL, "http://ui.example:8233/namespaces/default/workflows/") {
				t.Errorf("%s: batch %v, workflow %v, ui %v", r, s.Batch, s.BatchWorkflowID, s.UIURL)
			}
		}
	}
}

// TestStatusAtMostOnceKilledMidBatch: an at-most-once event whose delivery
// worker is SIGKILLed while two calls hang at the destination: the retry
// does not call them again, and status says unconfirmed for them (called
// once, never answered), delivered for those the destination answered and
// fanout marked, and unconfirmed for any other in flight at the kill
// (marked sending; called and answered before its mark was written, or not
// called yet): never a second call.
func TestStatusAtMostOnceKilledMidBatch(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	id := strings.ReplaceAll("amo-"+time.Now().UTC().Format("150405.000"), ".", "-")
	hang := []string{"r3", "r14"}
	sink.mu.Lock()
	sink.hang, sink.hung = map[string]bool{id + "/r3": true, id + "/r14": true}, make(chan string, 8)
	sink.mu.Unlock()
	env := []string{"FANOUT_SEMANTICS=at-most-once", "FANOUT_LOCAL_DELIVERY_MAX=-1", "FANOUT_BATCH_SIZE=10", "FANOUT_PAGE_SIZE=10", "FANOUT_HTTP_TIMEOUT=30s", secret}
	if err := st.StartWorker("amo-events", "events", env...); err != nil {
		t.Fatal(err)
	}
	defer st.Stop("amo-events")
	if err := st.StartWorker("amo-delivery", "high,normal,low", env...); err != nil {
		t.Fatal(err)
	}
	defer st.Stop("amo-delivery")
	if _, err := starter.StartEvent(ctx, st.TC, demoEvent(id, 20), false, 0); err != nil {
		t.Fatal(err)
	}
	for range hang {
		select {
		case <-sink.hung:
		case <-ctx.Done():
			t.Fatal("the calls to hang never came")
		}
	}
	st.Kill("amo-delivery")
	if err := st.Restart("amo-delivery"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Wait(ctx, id); err != nil {
		t.Fatal(err)
	}
	ids := make([]string, 20)
	for i := range ids {
		ids[i] = fmt.Sprintf("r%d", i)
	}
	got, code := status(ctx, t, webhook.EventType, id, ids)
	if code != 0 {
		t.Errorf("exit %d, want 0", code)
	}
	for _, r := range ids {
		calls, ok, _ := sink.count(id, r)
		s := got[r]
		switch {
		case r == "r3" || r == "r14":
			if s.State != starter.StateUnconfirmed || calls != 1 || ok != 0 {
				t.Errorf("%s: %s; destination %d calls, %d ok; want unconfirmed after 1 call, no answer", r, s.State, calls, ok)
			}
		case s.State == starter.StateUnconfirmed:
			// In flight at the kill: marked sending, then either called
			// and answered before its delivered mark was written (marks
			// are written in groups) or not called yet. fanout cannot
			// know which, and does not call it again.
			if calls > 1 {
				t.Errorf("%s: unconfirmed; destination %d calls; want at most 1", r, calls)
			}
		default:
			if s.State != starter.StateDelivered || ok != 1 || calls != 1 {
				t.Errorf("%s: %s; destination %d calls, %d ok; want delivered once", r, s.State, calls, ok)
			}
		}
	}
}

// TestResend: `starter resend` of 10 recipients of a completed event of
// 1,000 delivers exactly those 10 again (the destination counts), with the
// original webhook-id, as a DeliveryBatch workflow whose memo says who
// asked and why; status then links the resend.
func TestResend(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	if err := st.StartWorker("rs-events", "events", secret); err != nil {
		t.Fatal(err)
	}
	defer st.Stop("rs-events")
	if err := st.StartWorker("rs-delivery", "high,normal,low", secret); err != nil {
		t.Fatal(err)
	}
	defer st.Stop("rs-delivery")
	id := strings.ReplaceAll("resend-"+time.Now().UTC().Format("150405.000"), ".", "-")
	const n = 1000
	if _, err := starter.StartEvent(ctx, st.TC, demoEvent(id, n), false, 0); err != nil {
		t.Fatal(err)
	}
	if res, err := st.Wait(ctx, id); err != nil || res.Delivered != n {
		t.Fatalf("event: %+v, %v; want %d delivered", res.Progress, err, n)
	}
	var chosen []string
	args := []string{"resend", "-type", webhook.EventType, "-event-id", id, "-reason", "ticket 42: the customer lost it", "-by", "support-tester", "-name", "t42"}
	for i := 500; i < 510; i++ {
		chosen = append(chosen, fmt.Sprintf("r%d", i))
		args = append(args, "-recipient", fmt.Sprintf("r%d", i))
	}
	// Unknown recipients are refused, and nothing starts.
	if out, code := runStarter(ctx, t, "", "resend", "-type", webhook.EventType, "-event-id", id, "-reason", "x", "-recipient", "nobody", "-name", "refused"); code != 1 {
		t.Errorf("resend of an unknown recipient: exit %d, out %s; want 1", code, out)
	}
	if out, code := runStarter(ctx, t, "", args...); code != 0 || !strings.Contains(out, "delivered 10") {
		t.Fatalf("resend: exit %d, output %s", code, out)
	}
	wid := vocab.ResendWorkflowID(vocab.WorkflowID(webhook.EventType, id), "t42")
	d, err := st.TC.DescribeWorkflow(ctx, wid, "")
	if err != nil {
		t.Fatalf("the resend workflow %s: %v", wid, err)
	}
	if d.WorkflowType.Name != vocab.DeliveryBatchWorkflow {
		t.Errorf("resend workflow type %s", d.WorkflowType.Name)
	}
	var reason, by string
	memo := d.RawResponse.GetWorkflowExecutionInfo().GetMemo().GetFields()
	_ = converter.GetDefaultDataConverter().FromPayload(memo[starter.MemoResendReason], &reason)
	_ = converter.GetDefaultDataConverter().FromPayload(memo[starter.MemoResendBy], &by)
	if reason != "ticket 42: the customer lost it" || by != "support-tester" {
		t.Errorf("memo: reason %q, by %q", reason, by)
	}
	total := 0
	isChosen := map[string]bool{}
	for _, r := range chosen {
		isChosen[r] = true
	}
	for i := range n {
		r := fmt.Sprintf("r%d", i)
		calls, ok, wids := sink.count(id, r)
		total += ok
		want := 1
		if isChosen[r] {
			want = 2
		}
		if ok != want || calls != want {
			t.Errorf("%s: %d calls, %d ok; want %d", r, calls, ok, want)
		}
		if isChosen[r] && len(wids) == 2 && wids[0] != wids[1] {
			t.Errorf("%s: webhook-ids %q, want the original again", r, wids)
		}
	}
	if total != n+10 {
		t.Errorf("destination counted %d deliveries, want %d", total, n+10)
	}
	got, _ := status(ctx, t, webhook.EventType, id, chosen[:1])
	if s := got[chosen[0]]; s.State != starter.StateDelivered || s.BatchWorkflowID == nil || *s.BatchWorkflowID != wid || s.Batch != nil {
		t.Errorf("status after the resend: %+v, want delivered by %s", s, wid)
	}
}
