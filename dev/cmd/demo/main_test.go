package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/dev/demo"
	"github.com/fanout/fanout/workers/webhook"
)

// The two modes over real loopback HTTP: the recipients endpoint pages the
// payload's audience, every recipient addressed to the sink, and the sink
// counts what is delivered there.
func TestRecipientsAndSink(t *testing.T) {
	sh, err := handler("sink", "")
	if err != nil {
		t.Fatal(err)
	}
	sink := httptest.NewServer(sh)
	defer sink.Close()
	rh, err := handler("recipients", sink.URL+"/deliver")
	if err != nil {
		t.Fatal(err)
	}
	recipients := httptest.NewServer(rh)
	defer recipients.Close()

	body, _ := json.Marshal(webhook.RecipientsRequest{Event: fanout.Event{ID: "e1", Payload: []byte(`{"audience":3}`)}, Limit: 2})
	resp, err := http.Post(recipients.URL+"/recipients", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var page fanout.Page
	err = json.NewDecoder(resp.Body).Decode(&page)
	_ = resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Recipients) != 2 || page.NextCursor == "" || page.Recipients[0].Address != sink.URL+"/deliver" {
		t.Fatalf("first page of 3 by 2 = %+v, want 2 recipients at %s/deliver and a cursor", page, sink.URL)
	}

	req, _ := http.NewRequest(http.MethodPost, page.Recipients[0].Address, bytes.NewReader([]byte(`{}`)))
	req.Header.Set(webhook.HeaderEventID, "e1")
	req.Header.Set(webhook.HeaderRecipientID, page.Recipients[0].ID)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("delivery: %s, want 204", resp.Status)
	}
	got, err := demo.NewSinkClient(sink.URL).Event(t.Context(), "e1")
	if err != nil {
		t.Fatal(err)
	}
	if got.Unique != 1 || got.Deliveries != 1 {
		t.Fatalf("sink stats for e1 = %+v, want 1 recipient delivered once", got)
	}
}

func TestBadArguments(t *testing.T) {
	for _, args := range [][]string{nil, {"nope"}, {"recipients", "-addr", "127.0.0.1:0"}, {"recipients", "-addr", "127.0.0.1:0", "-deliver-url", "sink:8091"}} {
		if err := run(args, nil); err == nil {
			t.Errorf("demo %q: no error", args)
		}
	}
}
