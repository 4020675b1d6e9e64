//go:build integration

// Package typesfile_test runs event types defined in a types file (package
// types) on the real stack: the temporal dev server, redis-server, kfake
// over TCP and the bridge. TestTypesFile runs the workers in this process,
// their registry built from the file (to count the template's renders);
// TestPostgresTypesFile runs the stock worker binary with
// FANOUT_TYPES_FILE against a real PostgreSQL.
package typesfile_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	neturl "net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/dev/demo"
	"github.com/fanout/fanout/dev/stack"
	"github.com/fanout/fanout/starter"
	"github.com/fanout/fanout/types"
	"github.com/fanout/fanout/workers"
	"github.com/fanout/fanout/workers/webhook"
	"github.com/fanout/fanout/workflows/vocab"
)

const token = "Bearer e2e-token-5b1f"

// shapeEndpoint is the demo recipients source under another protocol: it
// takes {"event_id", "audience", "tag", "after", "n"} (the file's body
// template) and answers {"items": [{"uid", "url"}], "paging": {"next"}}.
// It records the Authorization header and the Host of every request, the
// headers that are not the source's, and each event's tag.
type shapeEndpoint struct {
	src      *demo.Source
	bad      []fanout.Recipient // the answer to events "badrcpt-..."
	requests atomic.Int64
	mu       sync.Mutex
	auth     map[string]int
	hosts    map[string]int
	extra    map[string]int    // header names other than the source's
	tags     map[string]string // event id -> its tag, as the body had it
}

// sourceHeaders are the headers the file's http source sends.
var sourceHeaders = []string{"Authorization", "Content-Type", "Content-Length", "User-Agent", "Accept-Encoding", "Traceparent", "Tracestate"}

func (e *shapeEndpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var in struct {
		EventID  string  `json:"event_id"`
		Audience int     `json:"audience"`
		Tag      *string `json:"tag"`
		After    string  `json:"after"`
		N        int     `json:"n"`
	}
	err := json.NewDecoder(r.Body).Decode(&in)
	e.mu.Lock()
	e.requests.Add(1)
	e.auth[r.Header.Get("Authorization")]++
	e.hosts[r.Host]++
	for name := range r.Header {
		if !slices.Contains(sourceHeaders, name) {
			e.extra[name]++
		}
	}
	if in.Tag != nil {
		e.tags[in.EventID] = *in.Tag
	}
	e.mu.Unlock()
	if err != nil || r.URL.Path != "/followers" {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	if strings.HasPrefix(in.EventID, "malformed-") {
		_, _ = io.WriteString(w, `{"items": {"uid": "x"}}`)
		return
	}
	if strings.HasPrefix(in.EventID, "badrcpt-") {
		out := map[string]any{"items": []map[string]string{}}
		for _, r := range e.bad {
			out["items"] = append(out["items"].([]map[string]string), map[string]string{"uid": r.ID, "url": r.Address})
		}
		_ = json.NewEncoder(w).Encode(out)
		return
	}
	// The demo source's page, from today's protocol.
	payload, _ := json.Marshal(demo.Payload{Audience: in.Audience})
	body, _ := json.Marshal(webhook.RecipientsRequest{Event: fanout.Event{ID: in.EventID, Payload: payload}, Cursor: in.After, Limit: in.N})
	rec := httptest.NewRecorder()
	e.src.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/recipients", bytes.NewReader(body)))
	var page fanout.Page
	if err := json.Unmarshal(rec.Body.Bytes(), &page); err != nil {
		http.Error(w, "source: "+rec.Body.String(), http.StatusInternalServerError)
		return
	}
	type item struct {
		UID string `json:"uid"`
		URL string `json:"url"`
	}
	out := struct {
		Items  []item `json:"items"`
		Paging struct {
			Next string `json:"next,omitempty"`
		} `json:"paging"`
	}{Items: make([]item, 0, len(page.Recipients))}
	for _, r := range page.Recipients {
		out.Items = append(out.Items, item{r.ID, r.Address})
	}
	out.Paging.Next = page.NextCursor
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

// renderCounter counts a handler's GenerateMessage calls (the template's
// renders) per event.
type renderCounter struct {
	fanout.Handler
	mu sync.Mutex
	n  map[string]int
}

func (c *renderCounter) GenerateMessage(ctx context.Context, ev fanout.Event) (fanout.Message, error) {
	c.mu.Lock()
	c.n[ev.ID]++
	c.mu.Unlock()
	return c.Handler.GenerateMessage(ctx, ev)
}

func (c *renderCounter) DestinationKey(r fanout.Recipient) string {
	return c.Handler.(fanout.DestinationKeyer).DestinationKey(r)
}

func TestTypesFile(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	s, err := stack.Start(ctx, stack.Options{InMemory: true, Log: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	deliver := s.SinkURL + "/deliver"
	endpoint := &shapeEndpoint{src: &demo.Source{DeliverURL: deliver}, auth: map[string]int{}, hosts: map[string]int{}, extra: map[string]int{}, tags: map[string]string{},
		// Recipients the workers check as they check any source's: five
		// good ones, one of them twice; an id outside fanout's grammar;
		// an address over fanout.MaxAddressLen; a private address the
		// outbound guard refuses (only loopback is allowed).
		bad: []fanout.Recipient{{ID: "g1", Address: deliver}, {ID: "g2", Address: deliver}, {ID: "g3", Address: deliver}, {ID: "g4", Address: deliver},
			{ID: "g5", Address: deliver}, {ID: "g1", Address: deliver}, {ID: "bad id/with a slash", Address: deliver},
			{ID: "too-long", Address: deliver + "?pad=" + strings.Repeat("a", fanout.MaxAddressLen)}, {ID: "private", Address: "http://10.255.255.1/hook"}}}
	url := s.Route(endpoint) + "/followers"
	u, _ := neturl.Parse(url)
	// Another host a payload names: the source never asks it.
	var otherHits atomic.Int64
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { otherHits.Add(1) }))
	defer other.Close()
	// A receiver of one note's deliveries that keeps their bodies.
	var noteMu sync.Mutex
	var noteBodies [][]byte
	noteHook := s.Route(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		noteMu.Lock()
		noteBodies = append(noteBodies, b)
		noteMu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	dir := t.TempDir()
	for name, content := range map[string]string{
		"users-token":   token + "\n",
		"posts-signing": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n",
		"notes-signing": "whsec_c2lnbmluZy1zZWNyZXQtb2YtdGhlLW5vdGVzLXR5cGU=\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	file := filepath.Join(dir, "types.yaml")
	text := `types:
  posts:
    batch_size: 1000
    page_size: 5000
    recipients:
      http:
        url: ` + url + `
        headers:
          Authorization: {value_from: {file: users-token}}
        body: '{"event_id": {{json .Event.ID}}, "audience": {{json .Event.Payload.audience}}, "tag": {{json .Event.Payload.tag}}, "after": {{json .Cursor}}, "n": {{.Limit}}}'
        answer: {recipients: /items, id: /uid, address: /url, next_cursor: /paging/next}
    message:
      passthrough: {pointer: /post}
    channel:
      webhook: {signing_secret_file: posts-signing}
  notes:
    recipients:
      inline: {pointer: /to}
    message:
      template:
        text: '{"note": {{json .Payload.text}}, "for": {{len .Payload.to}}}'
        content_type: application/json
    channel:
      webhook: {signing_secret_file: notes-signing}
`
	if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := types.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	// The registry as types.Build makes it, with the template type's
	// renders counted.
	reg := fanout.NewRegistry()
	renders := &renderCounter{n: map[string]int{}}
	deps := types.Deps{OutboundAllow: webhook.Loopback}
	for _, ty := range f.Types {
		h, err := ty.Handler(deps)
		if err != nil {
			t.Fatal(err)
		}
		if ty.Name == "notes" {
			renders.Handler = h
			h = renders
		}
		reg.MustRegister(ty.Name, h, ty.Options)
	}
	stopWorkers := s.RunWorkers(workers.Options{Registry: reg})
	defer stopWorkers()
	_, stopBridge := s.RunBridge(starter.Config{Validator: starter.Validator{Types: reg.Types(), MaxPayloadBytes: 64 << 10}, Eager: true})
	defer stopBridge()

	stamp := time.Now().UTC().Format("150405.000")
	const audience = 25_000
	postID := "post-" + stamp
	post, _ := json.Marshal(map[string]any{"audience": audience, "tag": "plain", "post": map[string]string{"title": "hello"}})
	// An answer the file's shape does not fit fails its event, with the
	// reason.
	malformedID := "malformed-" + stamp
	// A payload that tries to add headers, change the Host and name
	// another endpoint: its tag is data in the body, nothing more.
	hostileTag := "x\r\nX-Injected: yes\r\nHost: evil.example.com\r\n\r\nGET /admin HTTP/1.1"
	crlfID := "crlf-" + stamp
	crlf, _ := json.Marshal(map[string]any{"audience": 50, "tag": hostileTag, "recipients_url": other.URL + "/followers", "url": other.URL,
		"post": map[string]string{"title": "hi"}})
	badID := "badrcpt-" + stamp
	envs := []starter.Envelope{{ID: postID, Type: "posts", Payload: post}, {ID: malformedID, Type: "posts", Payload: post},
		{ID: crlfID, Type: "posts", Payload: crlf}, {ID: badID, Type: "posts", Payload: post}}
	var noteIDs []string
	for i := range 3 {
		id := "note-" + stamp + "-" + strconv.Itoa(i)
		to := make([]map[string]string, 30)
		for j := range to {
			to[j] = map[string]string{"id": "n" + strconv.Itoa(j), "address": s.SinkURL + "/deliver"}
		}
		p, _ := json.Marshal(map[string]any{"text": "note " + strconv.Itoa(i), "to": to})
		envs = append(envs, starter.Envelope{ID: id, Type: "notes", Payload: p})
		noteIDs = append(noteIDs, id)
	}
	// A payload that holds template actions: they are text the template
	// puts in the message, never run (and no template can call
	// readFile or env: such a file is refused at load).
	dataID := "note-data-" + stamp
	dataText := `{{readFile "/etc/passwd"}} {{env "HOME"}} {{template "x"}}`
	dataPayload, _ := json.Marshal(map[string]any{"text": dataText, "to": []map[string]string{{"id": "d1", "address": noteHook + "/d1"}, {"id": "d2", "address": noteHook + "/d2"}}})
	envs = append(envs, starter.Envelope{ID: dataID, Type: "notes", Payload: dataPayload})
	if err := s.Publisher.Publish(ctx, envs...); err != nil {
		t.Fatal(err)
	}

	res, err := s.WaitWorkflow(ctx, vocab.WorkflowID("posts", postID), postID)
	if err != nil {
		t.Fatal(err)
	}
	st := s.Sink.Event(postID)
	if res.Delivered != audience || st.Unique != audience || st.Duplicated != 0 {
		t.Errorf("posts: %d delivered, the sink saw %d recipients (%d duplicated), want %d each once", res.Delivered, st.Unique, st.Duplicated, audience)
	}
	endpoint.mu.Lock()
	if n := endpoint.requests.Load(); n < audience/5000+1 || endpoint.auth[token] != int(n) {
		t.Errorf("the recipients endpoint got %d requests with Authorization %v, want at least %d, each with the file's token", n, endpoint.auth, audience/5000)
	}
	endpoint.mu.Unlock()

	_, err = s.WaitWorkflow(ctx, vocab.WorkflowID("posts", malformedID), malformedID)
	want := `invalid_page: the recipients at "/items" are not a list`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("event %s with a malformed answer: %v, want it failed with %q", malformedID, err, want)
	}
	// As Temporal shows it (the UI reads the same): failed, with the reason.
	status, msg, err := failure(ctx, s.TC, vocab.WorkflowID("posts", malformedID))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("posts %s: %v: %s", malformedID, status, msg)
	if status != enumspb.WORKFLOW_EXECUTION_STATUS_FAILED || !strings.Contains(msg, want) {
		t.Errorf("event %s in Temporal: %v with %q, want failed with %q", malformedID, status, msg, want)
	}

	// The hostile payload: paged and delivered like any, its tag data in
	// the body, every request to the file's host with the file's headers.
	res, err = s.WaitWorkflow(ctx, vocab.WorkflowID("posts", crlfID), crlfID)
	if st := s.Sink.Event(crlfID); err != nil || res.Delivered != 50 || st.Unique != 50 {
		t.Errorf("posts %s: %+v, %v; the sink saw %d, want 50", crlfID, res.Progress, err, st.Unique)
	}
	endpoint.mu.Lock()
	if got := endpoint.tags[crlfID]; got != hostileTag {
		t.Errorf("the hostile tag arrived as %q, want the payload's value %q as data", got, hostileTag)
	}
	if len(endpoint.hosts) != 1 || endpoint.hosts[u.Host] == 0 || len(endpoint.extra) != 0 {
		t.Errorf("the endpoint got requests for hosts %v (want only %s) with other headers %v (want none)", endpoint.hosts, u.Host, endpoint.extra)
	}
	endpoint.mu.Unlock()
	if n := otherHits.Load(); n != 0 {
		t.Errorf("the host the payload named got %d requests, want none", n)
	}

	// Recipients from the file's source are checked like any: the five
	// good ones delivered once, the repeat a duplicate, the bad id, the
	// long address and the private address failed and dead-lettered.
	res, err = s.WaitWorkflow(ctx, vocab.WorkflowID("posts", badID), badID)
	if st := s.Sink.Event(badID); err != nil || res.Delivered != 5 || res.Duplicates != 1 || res.Failed != 3 || res.DeadLettered != 3 || st.Unique != 5 || st.Duplicated != 0 {
		t.Errorf("posts %s: %+v, %v; the sink saw %d (%d duplicated); want 5 delivered once, 1 duplicate, 3 failed and dead-lettered", badID, res.Progress, err, st.Unique, st.Duplicated)
	}

	res, err = s.WaitWorkflow(ctx, vocab.WorkflowID("notes", dataID), dataID)
	if err != nil || res.Delivered != 2 {
		t.Errorf("notes %s: %+v, %v; want 2 delivered", dataID, res.Progress, err)
	}
	quoted, _ := json.Marshal(dataText)
	wantBody := `{"note": ` + string(quoted) + `, "for": 2}`
	noteMu.Lock()
	if len(noteBodies) != 2 || string(noteBodies[0]) != wantBody || string(noteBodies[1]) != wantBody {
		t.Errorf("notes %s: bodies %q, want the payload's text as data: %s", dataID, noteBodies, wantBody)
	}
	noteMu.Unlock()
	noteIDs = append(noteIDs, dataID)

	for _, id := range noteIDs[:3] {
		res, err := s.WaitWorkflow(ctx, vocab.WorkflowID("notes", id), id)
		if err != nil {
			t.Fatal(err)
		}
		if st := s.Sink.Event(id); res.Delivered != 30 || st.Unique != 30 || st.Duplicated != 0 {
			t.Errorf("notes %s: %d delivered, the sink saw %d (%d duplicated), want 30 each once", id, res.Delivered, st.Unique, st.Duplicated)
		}
	}
	renders.mu.Lock()
	defer renders.mu.Unlock()
	for _, id := range noteIDs {
		if renders.n[id] != 1 {
			t.Errorf("notes %s: rendered %d times, want once", id, renders.n[id])
		}
	}
	if len(renders.n) != len(noteIDs) {
		t.Errorf("renders of %d events, want %d: %v", len(renders.n), len(noteIDs), renders.n)
	}
	fmt.Fprintf(os.Stderr, "posts: %d recipients in %d recipients requests\n", audience, endpoint.requests.Load())
}
