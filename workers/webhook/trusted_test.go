package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/internal/netguard"
)

// only127002 is the allow-list of these tests: the sink's address, a
// stand-in for the public destinations of a deployment.
var only127002 = []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")}

// TestTrustedRecipientsEndpoint: with the recipients endpoint on loopback
// (127.0.0.1) and an allow-list that names only the sink (127.0.0.2), the
// configured handler (Config.Handler) pages the endpoint and delivers to
// the sink; a recipient whose address is the endpoint's own host and port
// is refused by the guard (permanently, no request made), and so is a
// payload's recipients_url on that host although FANOUT_RECIPIENTS_URL_ALLOW
// matches it: the event chose it, not the operator.
func TestTrustedRecipientsEndpoint(t *testing.T) {
	sink := newServer(t, "127.0.0.2:0", ok)
	endpoint := newServer(t, "127.0.0.1:0", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(fanout.Page{Recipients: []fanout.Recipient{{ID: "r1", Address: sink.URL + "/hook"}}})
	})
	c := Config{RecipientsURL: endpoint.URL + "/recipients", RecipientsURLAllow: []string{endpoint.URL}, Outbound: Outbound{OutboundAllow: "127.0.0.2/32"}, HTTPTimeout: 5 * time.Second}
	h := c.Handler(4)
	if h.TrustedClient == nil || h.TrustedClient == h.Client {
		t.Fatal("the configured handler has no trusted client of its own")
	}
	ctx := context.Background()
	ev := fanout.Event{ID: "e1", Type: EventType}
	page, err := h.GetRecipients(ctx, ev, "", 10)
	if err != nil || len(page.Recipients) != 1 {
		t.Fatalf("recipients endpoint on 127.0.0.1 without an allow-list entry: %+v %v, want its page", page, err)
	}
	m := fanout.Message{ContentType: "application/json", Body: []byte(`{}`)}
	if err := h.Deliver(ctx, ev, page.Recipients[0], m); err != nil || sink.hits.Load() != 1 {
		t.Errorf("delivery to the allowed sink: %v, %d requests", err, sink.hits.Load())
	}

	before := endpoint.hits.Load()
	for _, addr := range []string{endpoint.URL + "/deliver", strings.Replace(endpoint.URL, "127.0.0.1", "localhost", 1)} {
		err := h.Deliver(ctx, ev, fanout.Recipient{ID: "victim", Address: addr}, m)
		if !errors.Is(err, netguard.ErrDenied) || !fanout.IsPermanent(err) {
			t.Errorf("delivery to %s, the recipients endpoint's host: %v, want a permanent refusal by the guard", addr, err)
		}
	}
	payload := fanout.Event{ID: "e2", Type: EventType, Payload: json.RawMessage(`{"recipients_url":` + strconvQuote(endpoint.URL+"/recipients") + `}`)}
	if _, err := h.GetRecipients(ctx, payload, "", 10); !errors.Is(err, netguard.ErrDenied) || !fanout.IsPermanent(err) {
		t.Errorf("a payload's recipients_url on the endpoint's host: %v, want a permanent refusal by the guard", err)
	}
	if n := endpoint.hits.Load() - before; n != 0 {
		t.Errorf("the recipients endpoint's host got %d requests that were not the operator's", n)
	}

	// Without a trusted client the handler is what it was: the endpoint is
	// under the guard.
	h.TrustedClient = nil
	if _, err := h.GetRecipients(ctx, ev, "", 10); !errors.Is(err, netguard.ErrDenied) {
		t.Errorf("recipients endpoint through the guarded client: %v, want refused", err)
	}
}

// TestTrustedClientRedirects: the trusted client follows a 307 on its
// endpoint's host and port unguarded; one to another host (another port of
// the same address, a name of the same address) is dialled under the
// guard: refused, with no request, unless the allow-list names the
// address. (A Handler's recipients request follows none of those off its
// origin, see TestRecipientsRedirectStaysOnItsOrigin; this is the client,
// as a types file's sources will use it.)
func TestTrustedClientRedirects(t *testing.T) {
	elsewhere := newServer(t, "127.0.0.1:0", ok)
	allowed := newServer(t, "127.0.0.2:0", ok)
	endpoint := newServer(t, "127.0.0.1:0", nil)
	endpoint.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		endpoint.hits.Add(1)
		switch r.URL.Path {
		case "/same":
			http.Redirect(w, r, "/landed", http.StatusTemporaryRedirect)
		case "/elsewhere":
			http.Redirect(w, r, elsewhere.URL+"/x", http.StatusTemporaryRedirect)
		case "/localhost":
			http.Redirect(w, r, strings.Replace(endpoint.URL, "127.0.0.1", "localhost", 1)+"/landed", http.StatusTemporaryRedirect)
		case "/allowed":
			http.Redirect(w, r, allowed.URL+"/x", http.StatusPermanentRedirect)
		default:
			w.WriteHeader(http.StatusNoContent)
		}
	})
	c, err := NewTrustedClient(5*time.Second, 4, []string{endpoint.URL + "/recipients"}, only127002...)
	if err != nil {
		t.Fatal(err)
	}
	post := func(path string) (int, error) {
		resp, err := c.Post(endpoint.URL+path, "application/json", strings.NewReader(`{}`))
		if err != nil {
			return 0, err
		}
		_ = resp.Body.Close()
		return resp.StatusCode, nil
	}
	if code, err := post("/same"); err != nil || code != http.StatusNoContent || endpoint.hits.Load() != 2 {
		t.Errorf("307 on the endpoint's host: %d %v after %d requests, want it followed there", code, err, endpoint.hits.Load())
	}
	for _, path := range []string{"/elsewhere", "/localhost"} {
		before := endpoint.hits.Load()
		if _, err := post(path); !errors.Is(err, netguard.ErrDenied) {
			t.Errorf("307 from the endpoint to %s: %v, want the guard's refusal", path, err)
		}
		if n := endpoint.hits.Load() - before; n != 1 {
			t.Errorf("307 to %s: the endpoint got %d requests, want 1 (the redirect only)", path, n)
		}
	}
	if n := elsewhere.hits.Load(); n != 0 {
		t.Errorf("the other loopback port got %d requests", n)
	}
	if code, err := post("/allowed"); err != nil || code != http.StatusNoContent || allowed.hits.Load() != 1 {
		t.Errorf("308 to an allowed address: %d %v, %d requests there, want it followed", code, err, allowed.hits.Load())
	}
}

// TestTrustedClientRefusesWhatItCannotPin: an endpoint that is not an
// http(s) URL with a host is refused, naming its index and not its text
// (which may hold credentials).
func TestTrustedClientRefusesWhatItCannotPin(t *testing.T) {
	for _, bad := range []string{"ftp://user:s3cret@files.example/", "http:///recipients", "recipients.svc/recipients", "http://s3cret@[::1/", "http://-ü.example/"} {
		_, err := NewTrustedClient(time.Second, 1, []string{"https://ok.example/r", bad})
		if err == nil || !strings.Contains(err.Error(), "trusted endpoint 1") || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("NewTrustedClient(%q): %v, want it refused as endpoint 1 without its text", bad, err)
		}
	}
}
