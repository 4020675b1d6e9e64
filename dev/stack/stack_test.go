//go:build integration

package stack

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/workers/webhook"
	"github.com/fanout/fanout/workflows/vocab"
)

// The sink process serves deliveries and its counts like the in-process
// sink, the source sends recipients to it, and the dev server switches to
// stock flags and back with its search attributes registered (what the
// bench's heavy-stock relies on).
func TestSinkProcessAndStockTemporal(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	st, err := Start(ctx, Options{SinkProcess: true, Log: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if st.Sink != nil || st.Proc("sink") == nil || st.SinkURL == st.DemoURL {
		t.Fatalf("SinkProcess: in-process sink %v, sink process %v, sink %s, demo %s", st.Sink, st.Proc("sink"), st.SinkURL, st.DemoURL)
	}
	t.Run("source points at the sink process", func(t *testing.T) {
		page := recipientsPage(t, st.DemoURL)
		if len(page.Recipients) != 2 || page.Recipients[0].Address != st.SinkURL+"/deliver" {
			t.Fatalf("page %+v, want 2 recipients at %s/deliver", page, st.SinkURL)
		}
	})
	t.Run("deliveries are counted", func(t *testing.T) {
		for _, rc := range []string{"r0", "r1", "r0"} {
			deliver(t, st.SinkURL, "ev", rc)
		}
		got, err := st.SinkClient.Event(ctx, "ev")
		if err != nil || got.Unique != 2 || got.Deliveries != 3 || got.Duplicated != 1 {
			t.Fatalf("Event(ev) = %+v, %v; want 2 unique, 3 deliveries, 1 duplicated", got, err)
		}
	})
	for _, stock := range []bool{true, false} {
		t.Run(fmt.Sprintf("stock=%v", stock), func(t *testing.T) {
			if err := st.SwitchTemporal(ctx, stock); err != nil {
				t.Fatal(err)
			}
			args := cmdline(t, st.Proc("temporal").Pid())
			if tuned := strings.Contains(args, "journal_mode=wal") && strings.Contains(args, "numTaskqueueReadPartitions=1"); tuned == stock {
				t.Fatalf("stock=%v but the server runs with %q", stock, args)
			}
			out, err := vocab.Ensure(ctx, st.TC.OperatorService(), "default", vocab.SearchAttributes())
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range out {
				if o.Added {
					t.Fatalf("search attribute %s was missing after the start", o.Name)
				}
			}
		})
	}
}

func recipientsPage(t *testing.T, demoURL string) fanout.Page {
	t.Helper()
	payload, _ := json.Marshal(map[string]int{"audience": 2})
	body, _ := json.Marshal(webhook.RecipientsRequest{Event: fanout.Event{ID: "ev", Type: webhook.EventType, Payload: payload}, Limit: 10})
	resp, err := http.Post(demoURL+"/recipients", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	var page fanout.Page
	if err := json.NewDecoder(resp.Body).Decode(&page); err != nil {
		t.Fatal(err)
	}
	return page
}

func deliver(t *testing.T, sinkURL, ev, rc string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, sinkURL+"/deliver", strings.NewReader(`{}`))
	req.Header.Set(webhook.HeaderEventID, ev)
	req.Header.Set(webhook.HeaderRecipientID, rc)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("deliver: HTTP %d", resp.StatusCode)
	}
}

func cmdline(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		t.Fatal(err)
	}
	return strings.ReplaceAll(string(b), "\x00", " ")
}
