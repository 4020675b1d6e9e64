//go:build integration

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/dev/stack"
)

// landing counts what reaches a redirect's target, by method and body.
type landing struct {
	mu  sync.Mutex
	got map[string]int // "<method> <body>"
}

func (l *landing) add(k string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.got[k]++
}

func (l *landing) snapshot() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]int, len(l.got))
	for k, v := range l.got {
		out[k] = v
	}
	return out
}

// Destinations on loopback that answer 302 (the field report: 50 of 50
// became body-less GETs and the event completed with 50 delivered) and
// 307, through the whole stack: the 302s fail permanently (redirected) and
// are dead-lettered, their target gets nothing; the 307s are followed with
// the POST and its body, and delivered.
func TestRedirectedDestinations(t *testing.T) {
	const n = 10 // per redirect code
	land := &landing{got: map[string]int{}}
	dest := startCounting(t, "127.0.0.1:0", func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasPrefix(r.URL.Path, "/302/"):
			http.Redirect(w, r, "/landed", http.StatusFound)
		case strings.HasPrefix(r.URL.Path, "/307/"):
			http.Redirect(w, r, "/landed", http.StatusTemporaryRedirect)
		default:
			b, _ := io.ReadAll(r.Body)
			land.add(r.Method + " " + string(b))
			w.WriteHeader(http.StatusNoContent)
		}
	})
	var page fanout.Page
	for i := range n {
		page.Recipients = append(page.Recipients,
			fanout.Recipient{ID: fmt.Sprintf("found-%d", i), Address: fmt.Sprintf("%s/302/%d", dest.URL, i)},
			fanout.Recipient{ID: fmt.Sprintf("temporary-%d", i), Address: fmt.Sprintf("%s/307/%d", dest.URL, i)})
	}
	endpoint := st.Route(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _ = json.NewEncoder(w).Encode(page) }))
	id := "redirects-" + runID
	ev := stack.Event{ID: id, Text: "redirect me", RecipientsURL: endpoint + "/recipients"}
	st.publish(t, ev)
	res := st.waitResult(t, id, 2*time.Minute)
	if res.Delivered != n || res.Failed != n || res.DeadLettered != n {
		t.Errorf("progress %+v; want %d delivered (307) and %d failed and dead-lettered (302)", res.Progress, n, n)
	}
	got := land.snapshot()
	for k, v := range got {
		if !strings.HasPrefix(k, "POST ") || !strings.Contains(k, "redirect me") {
			t.Errorf("the redirect target got %d requests %q, want only POSTs with the message", v, k)
		}
	}
	if total := func() (s int) {
		for _, v := range got {
			s += v
		}
		return
	}(); total != n {
		t.Errorf("the redirect target got %d requests (%v), want the %d of the 307s", total, got, n)
	}
}

// The field report of the recipients allow-list, through the stack: the
// workers allow payload recipients_urls on the demo server's origin
// (http://127.0.0.1:<port>); a payload naming
// http://127.0.0.1:<port>@127.0.0.1:<other>/recipients (user information,
// then another service the outbound guard allows) fails with
// recipients_url_not_allowed, and the other service gets no request.
func TestPayloadRecipientsURLWithUserInfo(t *testing.T) {
	other := startCounting(t, "127.0.0.1:0", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(fanout.Page{Recipients: []fanout.Recipient{{ID: "r", Address: st.SinkURL + "/deliver"}}})
	})
	allowed := st.RecipientsURLAllow()
	if !strings.HasPrefix(allowed, "http://127.0.0.1:") || strings.HasSuffix(allowed, "/") {
		t.Fatalf("the stack allows %q, want the demo server's origin", allowed)
	}
	id := "userinfo-url-" + runID
	st.publish(t, stack.Event{ID: id, RecipientsURL: allowed + "@" + strings.TrimPrefix(other.URL, "http://") + "/recipients"})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := st.Wait(ctx, id); err == nil || !strings.Contains(err.Error(), "recipients_url_not_allowed") {
		t.Errorf("event with a recipients_url behind user information: %v, want it failed with recipients_url_not_allowed", err)
	}
	if n := other.hits.Load(); n != 0 {
		t.Errorf("the service behind the user information got %d requests", n)
	}
}
