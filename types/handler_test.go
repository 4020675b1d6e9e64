package types

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/workers/webhook"
)

// handlerOf loads text and returns the handler of its type name.
func handlerOf(t *testing.T, text, name string) fanout.Handler {
	t.Helper()
	f, err := Load(writeFile(t, text))
	if err != nil {
		t.Fatal(err)
	}
	reg := fanout.NewRegistry()
	if err := Build(f, reg, Deps{OutboundAllow: webhook.Loopback}); err != nil {
		t.Fatal(err)
	}
	h, _, ok := reg.Lookup(name)
	if !ok {
		t.Fatalf("no type %q", name)
	}
	return h
}

// The http source with a non-default answer shape, the cursor and limit in
// the query, and a token header from a file: the request carries them,
// the answer's fields are read where the file says.
func TestHTTPSourceCustomShape(t *testing.T) {
	var mu sync.Mutex
	var got []*http.Request
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Clone(context.Background()))
		mu.Unlock()
		q := r.URL.Query()
		if q.Get("after") == "" {
			_, _ = io.WriteString(w, `{"data": {"users": [{"user_id": 7, "hook": "http://127.0.0.1:1/a"}, {"user_id": "u8", "hook": "http://127.0.0.1:1/b"}]}, "meta": {"next": 2}}`)
			return
		}
		_, _ = io.WriteString(w, `{"data": {"users": [{"user_id": 9}]}, "meta": {"next": null}}`)
	}))
	defer srv.Close()
	h := handlerOf(t, `types:
  news:
    recipients:
      http:
        url: `+srv.URL+`/followers?list=main
        method: GET
        headers:
          Authorization: {value_from: {file: secrets/users-token}}
          X-Client: fanout
        cursor: {name: after}
        limit: {name: n}
        answer: {recipients: /data/users, id: /user_id, address: /hook, next_cursor: /meta/next}
    message: {passthrough: {}}
    channel: {webhook: {signing_secret_file: secrets/news-signing}}
`, "news")
	ev := fanout.Event{ID: "e1", Type: "news", Payload: json.RawMessage(`{}`)}
	p1, err := h.GetRecipients(context.Background(), ev, "", 2)
	if err != nil {
		t.Fatal(err)
	}
	want1 := fanout.Page{Recipients: []fanout.Recipient{{ID: "7", Address: "http://127.0.0.1:1/a"}, {ID: "u8", Address: "http://127.0.0.1:1/b"}}, NextCursor: "2"}
	if !pageEqual(p1, want1) {
		t.Errorf("page 1: %+v, want %+v", p1, want1)
	}
	p2, err := h.GetRecipients(context.Background(), ev, p1.NextCursor, 2)
	if err != nil {
		t.Fatal(err)
	}
	if !pageEqual(p2, fanout.Page{Recipients: []fanout.Recipient{{ID: "9"}}}) {
		t.Errorf("page 2: %+v", p2)
	}
	if len(got) != 2 {
		t.Fatalf("%d requests, want 2", len(got))
	}
	for i, r := range got {
		if r.Method != http.MethodGet || r.URL.Path != "/followers" || r.URL.Query().Get("list") != "main" || r.URL.Query().Get("n") != "2" {
			t.Errorf("request %d: %s %s", i, r.Method, r.URL)
		}
		if a := r.Header.Get("Authorization"); a != "Bearer test-token-123" || r.Header.Get("X-Client") != "fanout" {
			t.Errorf("request %d: Authorization %q, X-Client %q", i, a, r.Header.Get("X-Client"))
		}
	}
	if a := got[1].URL.Query().Get("after"); a != "2" {
		t.Errorf("second request's cursor %q, want 2", a)
	}
}

func pageEqual(a, b fanout.Page) bool {
	if a.NextCursor != b.NextCursor || len(a.Recipients) != len(b.Recipients) {
		return false
	}
	for i := range a.Recipients {
		if a.Recipients[i] != b.Recipients[i] {
			return false
		}
	}
	return true
}

// Without answer and body, the http source speaks today's protocol: the
// webhook type's recipients request, fanout.Page's JSON.
func TestHTTPSourceDefaultProtocol(t *testing.T) {
	var req webhook.RecipientsRequest
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" {
			http.Error(w, "bad", 400)
			return
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		_ = json.NewEncoder(w).Encode(fanout.Page{Recipients: []fanout.Recipient{{ID: "a", Address: "http://x/"}}, NextCursor: "n"})
	}))
	defer srv.Close()
	h := handlerOf(t, "types:\n  news:\n    recipients: {http: {url: '"+srv.URL+"/r'}}\n    message: {passthrough: {}}\n    channel: {webhook: {signing_secret_file: secrets/news-signing}}\n", "news")
	ev := fanout.Event{ID: "e2", Type: "news", Payload: json.RawMessage(`{"k":1}`), Headers: map[string]string{"baggage": "secret=1", "traceparent": "00-x"}}
	p, err := h.GetRecipients(context.Background(), ev, "c1", 50)
	if err != nil {
		t.Fatal(err)
	}
	if !pageEqual(p, fanout.Page{Recipients: []fanout.Recipient{{ID: "a", Address: "http://x/"}}, NextCursor: "n"}) {
		t.Errorf("page %+v", p)
	}
	if req.Event.ID != "e2" || req.Cursor != "c1" || req.Limit != 50 || string(req.Event.Payload) != `{"k":1}` {
		t.Errorf("request %+v", req)
	}
	if _, ok := req.Event.Headers["baggage"]; ok || req.Event.Headers["traceparent"] != "00-x" {
		t.Errorf("request headers %v: want the trace context without baggage", req.Event.Headers)
	}
}

// A body template and renamed body fields.
func TestHTTPSourceBodyTemplate(t *testing.T) {
	var bodies []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		bodies = append(bodies, r.Header.Get("Content-Type")+" "+string(b))
		_, _ = io.WriteString(w, `{"recipients": []}`)
	}))
	defer srv.Close()
	h := handlerOf(t, `types:
  news:
    recipients:
      http:
        url: `+srv.URL+`/r
        body: '{"author": {{json .Event.Payload.author}}, "after": {{json .Cursor}}, "n": {{.Limit}}}'
    message: {passthrough: {}}
    channel: {webhook: {signing_secret_file: secrets/news-signing}}
  sports:
    recipients:
      http:
        url: `+srv.URL+`/r
        cursor: {name: after}
        limit: {in: query, name: n}
    message: {passthrough: {}}
    channel: {webhook: {signing_secret_file: secrets/alerts-signing}}
`, "news")
	if _, err := h.GetRecipients(context.Background(), fanout.Event{ID: "e", Type: "news", Payload: json.RawMessage(`{"author": "ann"}`)}, "c", 3); err != nil {
		t.Fatal(err)
	}
	if want := `application/json {"author": "ann", "after": "c", "n": 3}`; len(bodies) != 1 || bodies[0] != want {
		t.Errorf("bodies %q, want %q", bodies, want)
	}
}

// Answers the source refuses, each permanently with its reason; a redirect
// off the endpoint's origin is not followed.
func TestHTTPSourceRefusals(t *testing.T) {
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("the redirect's target was requested")
	}))
	defer other.Close()
	answer := map[string]func(w http.ResponseWriter){
		"/big": func(w http.ResponseWriter) {
			_, _ = io.WriteString(w, `{"data": {"users": [`+strings.Repeat(`{"user_id": "x"},`, fanout.MaxPageBytes/16)+`{"user_id": "y"}]}}`)
		},
		"/notjson":  func(w http.ResponseWriter) { _, _ = io.WriteString(w, `{"data": `) },
		"/noid":     func(w http.ResponseWriter) { _, _ = io.WriteString(w, `{"data": {"users": [{"hook": "x"}]}}`) },
		"/notalist": func(w http.ResponseWriter) { _, _ = io.WriteString(w, `{"data": {"users": {"a": 1}}}`) },
		"/away": func(w http.ResponseWriter) {
			w.Header().Set("Location", other.URL+"/r")
			w.WriteHeader(http.StatusTemporaryRedirect)
		},
		"/gone": func(w http.ResponseWriter) { w.WriteHeader(http.StatusNotFound) },
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { answer[r.URL.Path](w) }))
	defer srv.Close()
	for path, reason := range map[string]string{"/big": "page_too_large", "/notjson": "invalid_page", "/noid": "invalid_page: recipient 0: no string or number id",
		"/notalist": "invalid_page: the recipients at \"/data/users\" are not a list", "/away": webhook.ReasonRedirected, "/gone": "HTTP 404"} {
		h := handlerOf(t, "types:\n  news:\n    recipients:\n      http:\n        url: '"+srv.URL+path+"'\n        answer: {recipients: /data/users, id: /user_id, address: /hook}\n    message: {passthrough: {}}\n    channel: {webhook: {signing_secret_file: secrets/news-signing}}\n", "news")
		_, err := h.GetRecipients(context.Background(), fanout.Event{ID: "e", Type: "news"}, "", 10)
		if err == nil || !strings.Contains(err.Error(), reason) || !fanout.IsPermanent(err) {
			t.Errorf("%s: %v, want a permanent %q", path, err, reason)
		}
	}
}

// The inline source pages the payload's list by offset.
func TestInlineSource(t *testing.T) {
	h := handlerOf(t, "types:\n  news:\n    recipients: {inline: {pointer: /to, id: /u/id}}\n    message: {passthrough: {}}\n    channel: {webhook: {signing_secret_file: secrets/news-signing}}\n", "news")
	ev := fanout.Event{ID: "e", Type: "news", Payload: json.RawMessage(`{"to": [{"u": {"id": 1}, "address": "http://a/"}, {"u": {"id": "2"}}, {"u": {"id": 3}, "address": "http://c/"}]}`)}
	var all []fanout.Recipient
	cursor, pages := "", 0
	for {
		p, err := h.GetRecipients(context.Background(), ev, cursor, 2)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, p.Recipients...)
		pages++
		if cursor = p.NextCursor; cursor == "" {
			break
		}
	}
	want := []fanout.Recipient{{ID: "1", Address: "http://a/"}, {ID: "2"}, {ID: "3", Address: "http://c/"}}
	if pages != 2 || !pageEqual(fanout.Page{Recipients: all}, fanout.Page{Recipients: want}) {
		t.Errorf("%d pages of %+v, want 2 of %+v", pages, all, want)
	}
	if _, err := h.GetRecipients(context.Background(), ev, "x", 2); err == nil || !fanout.IsPermanent(err) {
		t.Errorf("a cursor that is not an offset: %v", err)
	}
	if _, err := h.GetRecipients(context.Background(), fanout.Event{Payload: json.RawMessage(`{"too": []}`)}, "", 2); err == nil || !strings.Contains(err.Error(), `no recipients at "/to"`) {
		t.Errorf("no list: %v", err)
	}
}

func TestMessages(t *testing.T) {
	text := `types:
  tmpl:
    recipients: {inline: {}}
    message:
      template:
        text: '{{.Type}}/{{.ID}}: {{.Payload.title}} ({{len .Payload.tags}} tags, n={{.Payload.n}})'
    channel: {webhook: {signing_secret_file: secrets/news-signing}}
  pass:
    recipients: {inline: {}}
    message: {passthrough: {pointer: /msg}}
    channel: {webhook: {signing_secret_file: secrets/alerts-signing}}
`
	ev := fanout.Event{ID: "e1", Type: "tmpl", Payload: json.RawMessage(`{"title": "Hi", "tags": ["a", "b"], "n": 12345678901234567890, "msg": {"b": 1, "a": 2.50}}`)}
	m, err := handlerOf(t, text, "tmpl").GenerateMessage(context.Background(), ev)
	if err != nil {
		t.Fatal(err)
	}
	if want := "tmpl/e1: Hi (2 tags, n=12345678901234567890)"; string(m.Body) != want || m.ContentType != DefaultTemplateContentType {
		t.Errorf("template: %q %q, want %q", m.ContentType, m.Body, want)
	}
	m, err = handlerOf(t, text, "pass").GenerateMessage(context.Background(), ev)
	if err != nil {
		t.Fatal(err)
	}
	if string(m.Body) != `{"b": 1, "a": 2.50}` || m.ContentType != DefaultPassthroughContentType {
		t.Errorf("passthrough: %q %q: want the payload's bytes as they are", m.ContentType, m.Body)
	}
	// A missing field fails the event, permanently.
	_, err = handlerOf(t, text, "tmpl").GenerateMessage(context.Background(), fanout.Event{ID: "e2", Payload: json.RawMessage(`{}`)})
	if err == nil || !fanout.IsPermanent(err) || !strings.Contains(err.Error(), "invalid_message") {
		t.Errorf("missing field: %v", err)
	}
}

// A template that loops (nested ranges, a range over a huge number) or
// writes too much is cut off, permanently; it reads no file and no
// environment variable.
func TestTemplateBounds(t *testing.T) {
	arr := make([]int, 200)
	payload, _ := json.Marshal(map[string]any{"a": arr, "e": []int{}})
	for name, c := range map[string]struct{ text, err string }{
		"nested ranges":    {`{{range .Payload.a}}{{range $.Payload.a}}{{range $.Payload.a}}{{end}}{{end}}{{end}}`, "over 1000000 range iterations"},
		"range a number":   {`{{range 100000000000}}{{end}}`, "over 1000000 range iterations"},
		"too much output":  {`{{range 100000}}xxxxxxxxxx{{end}}`, "output too large"},
		"range in an else": {`{{range .Payload.e}}{{else}}{{range 2000000}}{{end}}{{end}}`, "over 1000000 range iterations"},
	} {
		tm, err := ParseTemplate(name, c.text, fanout.MaxMessageBytes)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		data, _ := decodeJSON(payload)
		start := time.Now()
		_, err = tm.Execute(context.Background(), eventData{Payload: data})
		// Cut off by its steps or, on a busy machine, by its time.
		if err == nil || !strings.Contains(err.Error(), c.err) && !strings.Contains(err.Error(), "ran over "+TemplateTimeout.String()) {
			t.Errorf("%s: %v, want %q", name, err, c.err)
		}
		if d := time.Since(start); d > TemplateTimeout+time.Second {
			t.Errorf("%s: took %v", name, d)
		}
	}
	t.Setenv("FANOUT_TEST_SECRET", "s")
	for _, text := range []string{`{{env "FANOUT_TEST_SECRET"}}`, `{{readFile "/etc/passwd"}}`, `{{template "x"}}`, `{{block "x" .}}{{end}}`} {
		if _, err := ParseTemplate("t", text, 100); err == nil {
			t.Errorf("%s: parsed", text)
		}
	}
}

// The webhook channel signs with the type's own secret: a receiver of one
// type verifies its deliveries with its secret and not with another's.
func TestWebhookChannelSignsPerType(t *testing.T) {
	type got struct {
		id, ts, sig string
		body        []byte
	}
	var mu sync.Mutex
	var deliveries []got
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		deliveries = append(deliveries, got{r.Header.Get(webhook.HeaderWebhookID), r.Header.Get(webhook.HeaderWebhookTimestamp), r.Header.Get(webhook.HeaderWebhookSignature), b})
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	text := "types:\n  news:" + good + "  alerts:" + good[:len(good)-len("secrets/news-signing}\n")] + "secrets/alerts-signing}\n"
	secret := func(name string) []string {
		b, _ := os.ReadFile("testdata/secrets/" + name)
		return []string{strings.TrimSpace(string(b))}
	}
	for _, typ := range []string{"news", "alerts"} {
		h := handlerOf(t, text, typ)
		ev := fanout.Event{ID: "e1", Type: typ}
		if err := h.Deliver(context.Background(), ev, fanout.Recipient{ID: "r1", Address: srv.URL + "/hook"}, fanout.Message{ContentType: "text/plain", Body: []byte("hello")}); err != nil {
			t.Fatal(err)
		}
		if k, ok := h.(fanout.DestinationKeyer); !ok || k.DestinationKey(fanout.Recipient{Address: srv.URL + "/x"}) != strings.TrimPrefix(srv.URL, "http://") {
			t.Errorf("%s: the handler names no destination by host", typ)
		}
	}
	if len(deliveries) != 2 {
		t.Fatalf("%d deliveries", len(deliveries))
	}
	for i, own := range [][]string{secret("news-signing"), secret("alerts-signing")} {
		d := deliveries[i]
		if err := webhook.Verify(own, d.id, d.ts, d.sig, d.body, time.Now(), time.Minute); err != nil {
			t.Errorf("delivery %d: own secret: %v", i, err)
		}
		otherSecret := secret([]string{"alerts-signing", "news-signing"}[i])
		if err := webhook.Verify(otherSecret, d.id, d.ts, d.sig, d.body, time.Now(), time.Minute); err == nil {
			t.Errorf("delivery %d verifies with the other type's secret", i)
		}
	}
}
