package webhook

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fanout/fanout"
)

// redirector answers /a/<code> with that redirect to /b and records what
// reaches /b.
type redirector struct {
	*httptest.Server
	mu     sync.Mutex
	landed []string // "<method> <body>" of each request to /b
}

func newRedirector(t *testing.T) *redirector {
	r := &redirector{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if code, ok := strings.CutPrefix(req.URL.Path, "/a/"); ok {
			n, _ := strconv.Atoi(code)
			http.Redirect(w, req, "/b", n)
			return
		}
		b, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.landed = append(r.landed, req.Method+" "+string(b))
		r.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *redirector) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	l := r.landed
	r.landed = nil
	return l
}

// TestRedirects: a POST answered 301, 302 or 303 is never turned into a
// body-less GET: the delivery fails permanently, reason redirected, and the
// target gets nothing; 307 and 308 are followed with the body; at most
// once no redirect is followed (redirected); the recipients endpoint's
// POST is not turned into a GET either.
func TestRedirects(t *testing.T) {
	srv := newRedirector(t)
	h := &Handler{Client: NewClient(5*time.Second, 4, Loopback...)}
	ev := fanout.Event{ID: "e1", Type: EventType}
	msg := fanout.Message{Body: []byte(`{"n":1}`), ContentType: "application/json"}
	deliver := func(ctx context.Context, code int) error {
		return h.Deliver(ctx, ev, fanout.Recipient{ID: "r", Address: srv.URL + "/a/" + strconv.Itoa(code)}, msg)
	}
	for _, code := range []int{301, 302, 303} {
		err := deliver(context.Background(), code)
		if err == nil || !fanout.IsPermanent(err) || !strings.Contains(err.Error(), "redirected") {
			t.Errorf("POST answered %d: %v, want a permanent redirected", code, err)
		}
		if l := srv.take(); len(l) != 0 {
			t.Errorf("POST answered %d: the target got %q", code, l)
		}
	}
	for _, code := range []int{307, 308} {
		if err := deliver(context.Background(), code); err != nil {
			t.Errorf("POST answered %d: %v, want it followed", code, err)
		}
		if l := srv.take(); len(l) != 1 || l[0] != `POST {"n":1}` {
			t.Errorf("POST answered %d: the target got %q, want the POST with its body", code, l)
		}
	}
	amo := fanout.WithSemantics(context.Background(), fanout.AtMostOnce)
	for _, code := range []int{302, 307, 308} {
		if err := deliver(amo, code); err == nil || !strings.Contains(err.Error(), "redirected") {
			t.Errorf("at most once, POST answered %d: %v, want redirected", code, err)
		}
		if l := srv.take(); len(l) != 0 {
			t.Errorf("at most once, POST answered %d: the target got %q", code, l)
		}
	}
	rh := &Handler{RecipientsURL: srv.URL + "/a/302", Client: h.Client}
	if _, err := rh.GetRecipients(context.Background(), ev, "", 10); err == nil || !strings.Contains(err.Error(), "redirected") {
		t.Errorf("recipients endpoint answered 302: %v, want redirected", err)
	}
	if l := srv.take(); len(l) != 0 {
		t.Errorf("recipients endpoint answered 302: the target got %q", l)
	}
}

// TestRecipientsRedirectStaysOnItsOrigin: the recipients endpoint is
// trusted for its own origin only (a payload's is allowed for it alone): a
// 307 to another origin is not followed (redirected), one on the same
// origin is.
func TestRecipientsRedirectStaysOnItsOrigin(t *testing.T) {
	page := func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`{"recipients":[{"id":"r1","address":"http://x"}]}`))
	}
	elsewhere := newServer(t, "127.0.0.1:0", page)
	endpoint := newServer(t, "127.0.0.1:0", func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/away":
			http.Redirect(w, r, elsewhere.URL+"/r", http.StatusTemporaryRedirect)
		case "/moved":
			http.Redirect(w, r, "/r", http.StatusPermanentRedirect)
		default:
			page(w, r)
		}
	})
	h := &Handler{RecipientsURL: endpoint.URL + "/away", Client: NewClient(5*time.Second, 4, Loopback...)}
	ev := fanout.Event{ID: "e1", Type: EventType}
	if _, err := h.GetRecipients(context.Background(), ev, "", 10); err == nil || !strings.Contains(err.Error(), ReasonRedirected) {
		t.Errorf("recipients endpoint redirected to another origin: %v, want redirected", err)
	}
	if n := elsewhere.hits.Load(); n != 0 {
		t.Errorf("the other origin got %d requests", n)
	}
	h.RecipientsURL = endpoint.URL + "/moved"
	if p, err := h.GetRecipients(context.Background(), ev, "", 10); err != nil || len(p.Recipients) != 1 {
		t.Errorf("recipients endpoint redirected on its origin: %+v %v, want the page", p, err)
	}
}
