//go:build integration

// Package stepcrash checks that an event's step whose worker dies mid-step
// is tried again soon on another worker, on the real stack: the events
// worker is SIGKILLed while a RecipientsPage activity waits on the
// recipients endpoint.
package stepcrash

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"go.temporal.io/api/enums/v1"

	"github.com/fanout/fanout/dev/stack"
	"github.com/fanout/fanout/workers/webhook"
)

const (
	audience = 30
	pageSize = 10
)

// TestPageOfAKilledWorkerIsRetriedAfterItsHeartbeat publishes an event of
// three pages; the endpoint holds the second page's request, the events
// worker is SIGKILLed meanwhile and started again. The page's activity,
// whose worker is gone, is tried again once its heartbeat times out (not
// after its start-to-close timeout of minutes), and the event delivers to
// every recipient. Read from the event's history: the page's attempt timed
// out on its heartbeat.
func TestPageOfAKilledWorkerIsRetriedAfterItsHeartbeat(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	s, err := stack.Start(ctx, stack.Options{InMemory: true, Log: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	hung, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	// The endpoint: the demo source, except that the first request for a
	// page after the first waits until the test releases it.
	endpoint := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req webhook.RecipientsRequest
		if err := json.Unmarshal(body, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if req.Cursor != "" {
			held := false
			once.Do(func() { held = true })
			if held {
				close(hung)
				select {
				case <-release:
				case <-r.Context().Done():
				}
				http.Error(w, "the worker that asked is gone", http.StatusServiceUnavailable)
				return
			}
		}
		resp, err := http.Post(s.DemoURL+"/recipients", "application/json", bytes.NewReader(body))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer func() { _ = resp.Body.Close() }()
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
	})
	url := s.Route(endpoint) + "/recipients"
	env := []string{"FANOUT_PAGE_SIZE=" + fmt.Sprint(pageSize), "FANOUT_BATCH_SIZE=" + fmt.Sprint(pageSize), "FANOUT_LOCAL_DELIVERY_MAX=-1"}
	if err := s.StartWorker("events", "events", append(env, "FANOUT_BRIDGE=true")...); err != nil {
		t.Fatal(err)
	}
	if err := s.StartWorker("delivery", "high,normal,low", env...); err != nil {
		t.Fatal(err)
	}
	id := "stepcrash-" + time.Now().UTC().Format("150405")
	if err := s.Publish(ctx, stack.Event{ID: id, Audience: audience, RecipientsURL: url}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-hung:
	case <-ctx.Done():
		t.Fatal("the second page was never asked for")
	}
	s.Kill("events")
	close(release)
	if err := s.Restart("events"); err != nil {
		t.Fatal(err)
	}
	// Well within the heartbeat timeout plus a retry, well before the
	// start-to-close timeout (minutes) that bounded the lost attempt before.
	wctx, wcancel := context.WithTimeout(ctx, 2*time.Minute)
	defer wcancel()
	res, err := s.Wait(wctx, id)
	if err != nil {
		t.Fatalf("event %s not done within 2 minutes of the kill (a lost page attempt waits for its timeout): %v", id, err)
	}
	if res.Delivered != audience {
		t.Errorf("delivered %d, want %d", res.Delivered, audience)
	}
	it := s.TC.GetWorkflowHistory(ctx, stack.WorkflowID(id), "", false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	// A retried attempt leaves no event of its own: the started event of
	// the attempt that completed carries its number and the last failure.
	var retried []string
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		if a := e.GetActivityTaskStartedEventAttributes(); a != nil && a.GetAttempt() > 1 {
			retried = append(retried, fmt.Sprintf("attempt %d after %v", a.GetAttempt(), a.GetLastFailure().GetTimeoutFailureInfo().GetTimeoutType()))
		}
	}
	if want := fmt.Sprintf("attempt 2 after %v", enums.TIMEOUT_TYPE_HEARTBEAT); len(retried) != 1 || retried[0] != want {
		t.Errorf("retried steps %q, want the page's once: %q", retried, want)
	}
}
