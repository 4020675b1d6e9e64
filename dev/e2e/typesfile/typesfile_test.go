//go:build integration

// Package typesfile_test runs event types defined in a types file (package
// types) on the real stack: the temporal dev server, redis-server, kfake
// over TCP and the bridge, with the workers in this process, their
// registry built from the file (the worker binary does not load one yet).
package typesfile_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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
// takes {"event_id", "audience", "after", "n"} (the file's body template)
// and answers {"items": [{"uid", "url"}], "paging": {"next"}}. It records
// the Authorization header of every request.
type shapeEndpoint struct {
	src      *demo.Source
	requests atomic.Int64
	mu       sync.Mutex
	auth     map[string]int
}

func (e *shapeEndpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	e.requests.Add(1)
	e.mu.Lock()
	e.auth[r.Header.Get("Authorization")]++
	e.mu.Unlock()
	var in struct {
		EventID  string `json:"event_id"`
		Audience int    `json:"audience"`
		After    string `json:"after"`
		N        int    `json:"n"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || r.URL.Path != "/followers" {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	if strings.HasPrefix(in.EventID, "malformed-") {
		_, _ = io.WriteString(w, `{"items": {"uid": "x"}}`)
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

	endpoint := &shapeEndpoint{src: &demo.Source{DeliverURL: s.SinkURL + "/deliver"}, auth: map[string]int{}}
	url := s.Route(endpoint) + "/followers"
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
        body: '{"event_id": {{json .Event.ID}}, "audience": {{.Event.Payload.audience}}, "after": {{json .Cursor}}, "n": {{.Limit}}}'
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
	post, _ := json.Marshal(map[string]any{"audience": audience, "post": map[string]string{"title": "hello"}})
	// An answer the file's shape does not fit fails its event, with the
	// reason.
	malformedID := "malformed-" + stamp
	envs := []starter.Envelope{{ID: postID, Type: "posts", Payload: post}, {ID: malformedID, Type: "posts", Payload: post}}
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
	if want := `invalid_page: the recipients at "/items" are not a list`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("event %s with a malformed answer: %v, want it failed with %q", malformedID, err, want)
	}

	for _, id := range noteIDs {
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
