//go:build integration

package typesfile_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"

	"github.com/fanout/fanout/workers/webhook"
)

// receiver is a webhook destination that checks every delivery the way a
// receiver of one event type does, with the Standard Webhooks library (not
// fanout's own signing code): the signature must verify with the secret of
// the delivery's type, and must not verify with the secret of any other
// type, so that a receiver of one type cannot forge another's. It counts
// the verified deliveries by webhook-id (type/event/recipient).
type receiver struct {
	*httptest.Server
	hooks map[string]*standardwebhooks.Webhook // type -> its secret

	mu  sync.Mutex
	got map[string]int // webhook-id -> verified deliveries
	bad []string       // deliveries that failed a check
}

// startReceiver listens on addr ("127.0.0.1:0") and verifies with secrets
// (type -> whsec_ secret).
func startReceiver(t *testing.T, addr string, secrets map[string]string) *receiver {
	t.Helper()
	rc := &receiver{hooks: map[string]*standardwebhooks.Webhook{}, got: map[string]int{}}
	for typ, sec := range secrets {
		wh, err := standardwebhooks.NewWebhook(sec)
		if err != nil {
			t.Fatal(err)
		}
		rc.hooks[typ] = wh
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	rc.Server = &httptest.Server{Listener: ln, Config: &http.Server{Handler: http.HandlerFunc(rc.serve)}}
	rc.Start()
	t.Cleanup(rc.Close)
	return rc
}

func (rc *receiver) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		http.Error(w, "read", http.StatusBadRequest)
		return
	}
	typ, id := r.Header.Get(webhook.HeaderEventType), r.Header.Get(webhook.HeaderWebhookID)
	fail := func(format string, a ...any) {
		rc.mu.Lock()
		rc.bad = append(rc.bad, fmt.Sprintf("%s: ", id)+fmt.Sprintf(format, a...))
		rc.mu.Unlock()
		http.Error(w, "refused", http.StatusUnauthorized)
	}
	own, ok := rc.hooks[typ]
	if !ok {
		fail("type %q has no secret here", typ)
		return
	}
	if err := own.Verify(body, r.Header); err != nil {
		fail("does not verify with the secret of its type %q: %v", typ, err)
		return
	}
	for other, wh := range rc.hooks {
		if other != typ && wh.Verify(body, r.Header) == nil {
			fail("a delivery of type %q verifies with the secret of type %q", typ, other)
			return
		}
	}
	parts := strings.Split(id, "/")
	if len(parts) != 3 || parts[0] != typ || parts[1] != r.Header.Get(webhook.HeaderEventID) || parts[2] != r.Header.Get(webhook.HeaderRecipientID) {
		fail("webhook-id %q does not name the type, event and recipient of the delivery's headers", id)
		return
	}
	rc.mu.Lock()
	rc.got[id]++
	rc.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// event returns how many recipients of typ/eventID got a verified delivery,
// and how many of them got more than one.
func (rc *receiver) event(typ, eventID string) (unique, repeated int) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	prefix := typ + "/" + eventID + "/"
	for id, n := range rc.got {
		if strings.HasPrefix(id, prefix) {
			unique++
			if n > 1 {
				repeated++
			}
		}
	}
	return unique, repeated
}

func (rc *receiver) refused() []string {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]string(nil), rc.bad...)
}

// writeFiles writes name -> content into dir (mode 0600).
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// history is every event of every run of workflow wid, from its first run
// through its continue-as-news, as the Temporal UI shows them.
func history(ctx context.Context, tc client.Client, wid string) ([]*historypb.HistoryEvent, error) {
	d, err := tc.DescribeWorkflow(ctx, wid, "")
	if err != nil {
		return nil, err
	}
	info := d.RawResponse.GetWorkflowExecutionInfo()
	run := info.GetFirstRunId()
	if run == "" {
		run = info.GetExecution().GetRunId()
	}
	var all []*historypb.HistoryEvent
	for run != "" {
		it := tc.GetWorkflowHistory(ctx, wid, run, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		next := ""
		for it.HasNext() {
			ev, err := it.Next()
			if err != nil {
				return nil, err
			}
			all = append(all, ev)
			if can := ev.GetWorkflowExecutionContinuedAsNewEventAttributes(); can != nil {
				next = can.GetNewExecutionRunId()
			}
		}
		run = next
	}
	return all, nil
}

// failure is how Temporal shows the failed event wid: its status (from
// DescribeWorkflowExecution) and the message of the WorkflowExecutionFailed
// event of its history with every cause's, joined by " <- ".
func failure(ctx context.Context, tc client.Client, wid string) (enumspb.WorkflowExecutionStatus, string, error) {
	d, err := tc.DescribeWorkflow(ctx, wid, "")
	if err != nil {
		return 0, "", err
	}
	status := d.RawResponse.GetWorkflowExecutionInfo().GetStatus()
	it := tc.GetWorkflowHistory(ctx, wid, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_CLOSE_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			return status, "", err
		}
		if a := ev.GetWorkflowExecutionFailedEventAttributes(); a != nil {
			var msgs []string
			for f := a.GetFailure(); f != nil; f = f.GetCause() {
				msgs = append(msgs, f.GetMessage())
			}
			return status, strings.Join(msgs, " <- "), nil
		}
	}
	return status, "", nil
}

// pageAttempt is one RecipientsPage activity of an event's history: the
// attempt it succeeded (or last ran) on, and the failure before it.
type pageAttempt struct {
	attempt     int32
	lastFailure string
}

// pageAttempts reads the RecipientsPage activities of wid's history.
func pageAttempts(ctx context.Context, tc client.Client, wid string) ([]pageAttempt, error) {
	evs, err := history(ctx, tc, wid)
	if err != nil {
		return nil, err
	}
	pages := map[int64]bool{} // scheduled event ids of RecipientsPage
	var out []pageAttempt
	for _, ev := range evs {
		if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil && a.GetActivityType().GetName() == "RecipientsPage" {
			pages[ev.GetEventId()] = true
		}
		if a := ev.GetActivityTaskStartedEventAttributes(); a != nil && pages[a.GetScheduledEventId()] {
			out = append(out, pageAttempt{attempt: a.GetAttempt(), lastFailure: a.GetLastFailure().GetMessage()})
		}
	}
	return out, nil
}

// waitFor polls cond every 20 ms until it holds, failing the test after d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ok, err := cond()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
