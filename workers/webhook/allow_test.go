package webhook

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/url"
	pathpkg "path"
	"strings"
	"testing"
	"time"

	"github.com/fanout/fanout"
)

// TestRecipientsURLAllowMatchesTheParsedURL: a payload's recipients_url is
// matched on its parsed scheme, host, port and path, never as a string: user
// information, a longer host, another port, a path that only shares a
// string prefix or climbs out with a dot segment are refused before any
// request; the same host, port and path under the entry are used.
func TestRecipientsURLAllowMatchesTheParsedURL(t *testing.T) {
	page := func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`{"recipients":[{"id":"r1","address":"http://x"}]}`))
	}
	victim := newServer(t, "127.0.0.2:0", page)
	good := newServer(t, "127.0.0.1:0", page)
	origin := good.URL // http://127.0.0.1:port
	h := &Handler{RecipientsURLAllow: []string{origin, "https://a.example.com", origin + "/api/"},
		Client: NewClient(5*time.Second, 4, Loopback...)}
	ev := func(u string) fanout.Event {
		return fanout.Event{ID: "e", Type: EventType, Payload: json.RawMessage(`{"recipients_url":` + strconvQuote(u) + `}`)}
	}
	ctx := context.Background()
	victimHost := strings.TrimPrefix(victim.URL, "http://")
	for _, u := range []string{
		origin + "@" + victimHost + "/r",                              // the field report: userinfo, then the real host
		"http://user@" + strings.TrimPrefix(origin, "http://") + "/r", // userinfo on the allowed host
		"https://a.example.com.evil/",
		"https://a.example.com:8443/",
		"http://a.example.com/",
		origin + "0/r", // another port sharing the digits
	} {
		_, err := h.GetRecipients(ctx, ev(u), "", 10)
		if err == nil || !fanout.IsPermanent(err) || !strings.Contains(err.Error(), "recipients_url_not_allowed") {
			t.Errorf("recipients_url %s: %v, want recipients_url_not_allowed", u, err)
		}
	}
	if n := victim.hits.Load(); n != 0 {
		t.Errorf("the host behind the user information got %d requests", n)
	}

	narrow := &Handler{RecipientsURLAllow: []string{origin + "/api/"}, Client: h.Client}
	for _, u := range []string{origin + "/api/../admin", origin + "/api/%2e%2e/admin", origin + "/apix", origin + "/api", origin + "/admin"} {
		if _, err := narrow.GetRecipients(ctx, ev(u), "", 10); err == nil || !strings.Contains(err.Error(), "recipients_url_not_allowed") {
			t.Errorf("recipients_url %s under %s/api/: %v, want recipients_url_not_allowed", u, origin, err)
		}
	}
	// A bad entry (a string prefix ending after the port's colon) matches nothing.
	loose := &Handler{RecipientsURLAllow: []string{"http://127.0.0.1:"}, Client: h.Client}
	if _, err := loose.GetRecipients(ctx, ev(origin+"/r"), "", 10); err == nil || !strings.Contains(err.Error(), "recipients_url_not_allowed") {
		t.Errorf("an entry ending at a colon allowed %s: %v", origin, err)
	}
	before := good.hits.Load()
	for _, u := range []string{origin + "/r?token=1", origin, strings.Replace(origin, "http:", "HTTP:", 1) + "/x", origin + "/api/v1/r"} {
		if p, err := h.GetRecipients(ctx, ev(u), "", 10); err != nil || len(p.Recipients) != 1 {
			t.Errorf("recipients_url %s: %+v %v, want the page", u, p, err)
		}
	}
	if p, err := narrow.GetRecipients(ctx, ev(origin+"/api/v1"), "", 10); err != nil || len(p.Recipients) != 1 {
		t.Errorf("recipients_url under /api/: %+v %v", p, err)
	}
	if n := good.hits.Load() - before; n != 5 {
		t.Errorf("the allowed endpoint got %d requests, want 5", n)
	}
}

// FuzzURLPrefix checks URLPrefix against an oracle written without it:
// when an accepted entry matches a URL, the request net/http builds from
// that URL dials the entry's host and port (read from the entry's text by
// hand), carries no user information, and sends a path that is under the
// entry's both as sent and once a server resolves it; and every URL that is
// the entry plus a plain path (letters, digits, "-_/") matches.
func FuzzURLPrefix(f *testing.F) {
	for _, s := range [][2]string{
		{"http://127.0.0.1:9999", "http://127.0.0.1:9999@127.0.0.5:8099/r"},
		{"https://a.example.com", "https://a.example.com.evil/"},
		{"https://a.example.com/api/", "https://A.example.com:443/api/v1?x=1"},
		{"http://[::1]:8080/", "http://[::1]:8080/x/../y"},
		{"http://127.0.0.1:1/a/", "http://127.0.0.1:1/a/%2e%2e/b"},
		{"http://h", "http://h:/"},
		{"http://h:80/", "http://h\\@evil/"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, entry, raw string) {
		p, err := ParseURLPrefix(entry)
		if err != nil {
			return
		}
		host, port, path := splitEntry(t, entry)
		plain := strings.Map(func(r rune) rune {
			if r < 128 && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '/') {
				return r
			}
			return -1
		}, raw)
		under := strings.TrimSuffix(entry, "/") + "/" + plain
		if u, err := url.Parse(under); err != nil || !p.Match(u) {
			t.Fatalf("%q does not match its entry %q (%v)", under, entry, err)
		}
		req, err := http.NewRequest(http.MethodPost, raw, nil)
		if err != nil || !p.Match(req.URL) {
			return
		}
		if req.URL.User != nil {
			t.Fatalf("%q matched %q with user information", raw, entry)
		}
		dial := req.URL.Host
		if _, _, err := net.SplitHostPort(dial); err != nil || strings.HasSuffix(dial, ":") {
			dial = strings.TrimSuffix(dial, ":") + ":" + map[string]string{"http": "80", "https": "443"}[req.URL.Scheme]
		}
		dh, dp, err := net.SplitHostPort(dial)
		if err != nil || !strings.EqualFold(dh, host) || dp != port {
			t.Fatalf("%q matched %q but dials %q (%v), want %s port %s", raw, entry, dial, err, host, port)
		}
		sent, _, _ := strings.Cut(req.URL.RequestURI(), "?") // the request line's path
		resolved := pathpkg.Clean("/" + req.URL.Path)
		if strings.HasSuffix(req.URL.Path, "/") && resolved != "/" {
			resolved += "/"
		}
		if !strings.HasPrefix(sent, path) || !strings.HasPrefix(resolved+"/", path) {
			t.Fatalf("%q matched %q but sends path %q (resolved %q), not under %q", raw, entry, sent, resolved, path)
		}
	})
}

// splitEntry reads an accepted entry "scheme://host[:port][/path/]" by hand:
// its host, port (the scheme's default when it has none) and path.
func splitEntry(t *testing.T, entry string) (host, port, path string) {
	scheme, rest, ok := strings.Cut(entry, "://")
	if !ok {
		t.Fatalf("accepted entry %q has no ://", entry)
	}
	authority, path := rest, "/"
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		authority, path = rest[:i], rest[i:]
	}
	host, port = authority, map[string]string{"http": "80", "https": "443"}[strings.ToLower(scheme)]
	if i := strings.LastIndexByte(authority, ':'); i >= 0 && !strings.HasSuffix(authority, "]") {
		host, port = authority[:i], authority[i+1:]
	}
	return strings.Trim(host, "[]"), port, path
}
