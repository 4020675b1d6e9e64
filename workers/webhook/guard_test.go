package webhook

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fanout/fanout"
)

// server is a loopback HTTP server on addr ("127.0.0.1:0", "127.0.0.2:0")
// counting the requests it got.
type server struct {
	*httptest.Server
	hits atomic.Int64
}

func newServer(t *testing.T, addr string, h http.HandlerFunc) *server {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen %s: %v", addr, err)
	}
	s := &server{}
	s.Server = &httptest.Server{Listener: ln, Config: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		h(w, r)
	})}}
	s.Start()
	t.Cleanup(s.Close)
	return s
}

func ok(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }

var only127001 = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}

// TestGuardRefusesInternalDestinations: with no allow-list the client
// reaches no loopback service, whatever the address says, and the refusal is
// permanent (never retried); a redirect from an allowed destination to a
// refused one is refused too, and the refused server gets nothing.
func TestGuardRefusesInternalDestinations(t *testing.T) {
	internal := newServer(t, "127.0.0.2:0", ok)
	ctx := context.Background()
	ev := fanout.Event{ID: "e", Type: EventType}
	m := fanout.Message{ContentType: "application/json", Body: []byte(`{}`)}

	public := &Handler{Client: NewClient(5*time.Second, 4)}
	_, port, _ := net.SplitHostPort(internal.Listener.Addr().String())
	for _, addr := range []string{internal.URL, "http://localhost:" + port, "http://[::ffff:127.0.0.2]:" + port} {
		err := public.Deliver(ctx, ev, fanout.Recipient{ID: "r", Address: addr}, m)
		if err == nil || !fanout.IsPermanent(err) || !strings.Contains(err.Error(), "not allowed") {
			t.Errorf("deliver to %s: %v, want a permanent refusal", addr, err)
		}
	}

	redirector := newServer(t, "127.0.0.1:0", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, internal.URL+"/steal", http.StatusTemporaryRedirect)
	})
	guarded := &Handler{Client: NewClient(5*time.Second, 4, only127001...)}
	err := guarded.Deliver(ctx, ev, fanout.Recipient{ID: "r", Address: redirector.URL}, m)
	if err == nil || !fanout.IsPermanent(err) {
		t.Errorf("redirect to a refused address: %v, want a permanent refusal", err)
	}
	if redirector.hits.Load() != 1 {
		t.Errorf("the allowed redirector got %d requests, want 1", redirector.hits.Load())
	}
	if n := internal.hits.Load(); n != 0 {
		t.Errorf("the internal server got %d requests, want 0", n)
	}

	loop := newServer(t, "127.0.0.1:0", nil)
	loop.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		loop.hits.Add(1)
		http.Redirect(w, r, loop.URL, http.StatusTemporaryRedirect)
	})
	if err := guarded.Deliver(ctx, ev, fanout.Recipient{ID: "r", Address: loop.URL}, m); err == nil || !fanout.IsPermanent(err) || loop.hits.Load() != maxRedirects+1 {
		t.Errorf("redirect loop: %v after %d requests, want a permanent error after %d", err, loop.hits.Load(), maxRedirects+1)
	}
}

func TestAddressesAndContentTypes(t *testing.T) {
	h := &Handler{Client: NewClient(5*time.Second, 4, Loopback...)}
	ev := fanout.Event{ID: "e", Type: EventType}
	m := fanout.Message{ContentType: "application/json", Body: []byte(`{}`)}
	for _, addr := range []string{"file:///etc/passwd", "gopher://127.0.0.1:70/", "ftp://example.com/", "//example.com/x", "http://", "not a url\x7f"} {
		err := h.Deliver(context.Background(), ev, fanout.Recipient{ID: "r", Address: addr}, m)
		if err == nil || !fanout.IsPermanent(err) {
			t.Errorf("deliver to %q: %v, want permanent", addr, err)
		}
	}
	for _, ct := range []string{"text/plain\r\nX-Injected: 1", "not a type", "a/b; c"} {
		_, err := h.GenerateMessage(context.Background(), fanout.Event{Payload: json.RawMessage(`{"message":"x","content_type":` + strconvQuote(ct) + `}`)})
		if err == nil || !fanout.IsPermanent(err) {
			t.Errorf("content type %q: %v, want permanent", ct, err)
		}
	}
}

func strconvQuote(s string) string { b, _ := json.Marshal(s); return string(b) }

// TestRecipientsEndpointIsBounded: a page over MaxPageBytes, or one that is
// not JSON, fails permanently; a payload's recipients_url is used only when
// an allowed prefix matches it.
func TestRecipientsEndpointIsBounded(t *testing.T) {
	huge := newServer(t, "127.0.0.1:0", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`{"recipients":[{"id":"r","address":"`))
		chunk := []byte(strings.Repeat("a", 1<<20))
		for range 9 {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
		_, _ = w.Write([]byte(`"}]}`))
	})
	garbage := newServer(t, "127.0.0.1:0", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(`<html>`)) })
	good := newServer(t, "127.0.0.1:0", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`{"recipients":[{"id":"r1","address":"http://x"}]}`))
	})
	ctx := context.Background()
	for name, url := range map[string]string{"page_too_large": huge.URL, "invalid_page": garbage.URL} {
		h := &Handler{RecipientsURL: url, Client: NewClient(5*time.Second, 4, Loopback...)}
		_, err := h.GetRecipients(ctx, fanout.Event{ID: "e", Type: EventType}, "", 10)
		if err == nil || !fanout.IsPermanent(err) || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: %v, want a permanent %s", url, err, name)
		}
	}

	h := &Handler{RecipientsURL: good.URL, RecipientsURLAllow: []string{good.URL + "/allowed/"}, Client: NewClient(5*time.Second, 4, Loopback...)}
	payload := func(u string) fanout.Event {
		return fanout.Event{ID: "e", Type: EventType, Payload: json.RawMessage(`{"recipients_url":` + strconvQuote(u) + `}`)}
	}
	before := good.hits.Load()
	if _, err := h.GetRecipients(ctx, payload(good.URL+"/elsewhere"), "", 10); err == nil || !fanout.IsPermanent(err) || !strings.Contains(err.Error(), "recipients_url_not_allowed") {
		t.Errorf("payload url outside the allow-list: %v", err)
	}
	if good.hits.Load() != before {
		t.Error("the refused payload url was requested")
	}
	if p, err := h.GetRecipients(ctx, payload(good.URL+"/allowed/x"), "", 10); err != nil || len(p.Recipients) != 1 {
		t.Errorf("payload url inside the allow-list: %+v %v", p, err)
	}
}

func TestRetryAfterIsCapped(t *testing.T) {
	for _, v := range []string{"9223372037", "9223372036854775807", "99999999999999999999"} {
		d, ok := parseRetryAfter(v, time.Now())
		if v == "99999999999999999999" {
			if ok {
				t.Errorf("Retry-After %s parsed as %v", v, d)
			}
			continue
		}
		if !ok || d != maxRetryAfter {
			t.Errorf("Retry-After %s = %v %v, want %v", v, d, ok, maxRetryAfter)
		}
	}
}

// FuzzDecodePage: any bytes give a page or an error, never a panic, and a
// page is never decoded from more than MaxPageBytes.
func FuzzDecodePage(f *testing.F) {
	for _, s := range []string{`{"recipients":[{"id":"r1","address":"http://x"}],"next_cursor":"c"}`, `{}`, `null`, `[`, `{"recipients":[{"id":1}]}`, "\x00\xff"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := DecodePage(strings.NewReader(string(b)))
		if err == nil && len(b) > MaxPageBytes {
			t.Fatalf("decoded a page of %d bytes", len(b))
		}
		if err != nil && !fanout.IsPermanent(err) {
			t.Fatalf("a bad page is not permanent: %v", err)
		}
		_ = p
	})
}

// FuzzRetryAfter: a Retry-After never yields a negative or uncapped delay.
func FuzzRetryAfter(f *testing.F) {
	for _, s := range []string{"7", "9223372037", "-1", "Wed, 21 Oct 2015 07:28:00 GMT", "Fri, 31 Dec 9999 23:59:59 GMT", "1e9", " 5"} {
		f.Add(s)
	}
	now := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, v string) {
		d, ok := parseRetryAfter(v, now)
		if ok && (d < 0 || d > maxRetryAfter) {
			t.Fatalf("Retry-After %q = %v", v, d)
		}
		resp := &http.Response{StatusCode: 429, Header: http.Header{"Retry-After": {v}}}
		if err := Classify(resp); err == nil || fanout.IsPermanent(err) {
			t.Fatalf("429 with Retry-After %q: %v", v, err)
		}
	})
}
