package demo

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fanout/fanout/workers/webhook"
)

func deliver(t *testing.T, url, ev, rc string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+"/deliver", strings.NewReader(`{"text":"hi"}`))
	req.Header.Set(webhook.HeaderEventID, ev)
	req.Header.Set(webhook.HeaderRecipientID, rc)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

// The counters the bench and `task dev` read over HTTP agree with the
// in-process ones, duplicates included.
func TestSinkClient(t *testing.T) {
	sink := NewSink()
	srv := httptest.NewServer(Mux(&Source{}, sink))
	defer srv.Close()
	for _, rc := range []string{"r0", "r1", "r1", "r2", "r1"} {
		if code := deliver(t, srv.URL, "e1", rc); code != http.StatusNoContent {
			t.Fatalf("deliver: HTTP %d", code)
		}
	}
	deliver(t, srv.URL, "e2", "r0")
	if code := deliver(t, srv.URL, "", "r0"); code != http.StatusBadRequest {
		t.Fatalf("no event header: HTTP %d, want 400", code)
	}
	c := NewSinkClient(srv.URL)
	ctx := context.Background()
	st, err := c.Event(ctx, "e1")
	if err != nil {
		t.Fatal(err)
	}
	want := sink.Event("e1")
	if st.Unique != 3 || st.Deliveries != 5 || st.Duplicated != 1 || !st.Last.Equal(want.Last) {
		t.Fatalf("e1 over HTTP %+v, in process %+v", st, want)
	}
	if n := sink.Count("e1", "r1"); n != 3 {
		t.Fatalf("Count(e1, r1) = %d, want 3", n)
	}
	all, err := c.Events(ctx, []string{"e1", "e2", "none"})
	if err != nil {
		t.Fatal(err)
	}
	if all["e1"].Unique != 3 || all["e2"].Unique != 1 || all["none"].Deliveries != 0 || len(all) != 3 {
		t.Fatalf("Events = %+v", all)
	}
	tot, err := c.Totals(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if tot.Deliveries != 6 || tot.Duplicates != 2 {
		t.Fatalf("Totals = %+v, want 6 deliveries, 2 duplicates", tot)
	}
	if err := c.SetDelay(ctx, 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	deliver(t, srv.URL, "e3", "r0")
	if d := time.Since(t0); d < 50*time.Millisecond {
		t.Fatalf("delivery took %v with a 50ms delay", d)
	}
	if err := c.SetDelay(ctx, 2*time.Minute); err == nil {
		t.Fatal("a 2-minute delay was accepted")
	}
}

// PerSecond counts an event's deliveries by the second they arrived in,
// in process and over HTTP.
func TestSinkPerSecond(t *testing.T) {
	sink := NewSink()
	base := time.Unix(1_700_000_000, 0)
	for i, at := range []time.Duration{0, 300 * time.Millisecond, 999 * time.Millisecond, time.Second, 3500 * time.Millisecond} {
		sink.record("e1", "r"+string(rune('a'+i)), false, base.Add(at))
	}
	sink.record("e2", "r0", false, base)
	want := map[int64]int{base.Unix(): 3, base.Unix() + 1: 1, base.Unix() + 3: 1}
	check := func(how string, got map[int64]int) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%s: %v, want %v", how, got, want)
		}
		for sec, n := range want {
			if got[sec] != n {
				t.Fatalf("%s: %v, want %v", how, got, want)
			}
		}
	}
	check("in process", sink.PerSecond("e1"))
	srv := httptest.NewServer(Mux(&Source{}, sink))
	defer srv.Close()
	got, err := NewSinkClient(srv.URL).PerSecond(context.Background(), "e1")
	if err != nil {
		t.Fatal(err)
	}
	check("over HTTP", got)
	if n := len(sink.PerSecond("none")); n != 0 {
		t.Fatalf("an unknown event has %d seconds", n)
	}
}

// A sink told a type's secret takes that type's deliveries signed with it
// (checked with the Standard Webhooks reference library), refuses them
// signed with another type's secret or unsigned, and leaves other types
// unchecked.
func TestSinkVerify(t *testing.T) {
	const newPost, digest = "whsec_bmV3LXBvc3Qtc2VjcmV0LW9mLTMyLWJ5dGVzLSE=", "whsec_ZGlnZXN0LXNlY3JldC1vZi0zMi1ieXRlcy1sb25nIQ=="
	sink := NewSink()
	if err := sink.Verify("new_post", newPost); err != nil {
		t.Fatal(err)
	}
	if err := sink.Verify("x", "not-a-secret"); err == nil {
		t.Fatal("a bad secret was taken")
	}
	srv := httptest.NewServer(Mux(&Source{}, sink))
	defer srv.Close()
	send := func(typ, secret, rc string) int {
		t.Helper()
		body := []byte(`{"kind":"new_post"}`)
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/deliver", bytes.NewReader(body))
		req.Header.Set(webhook.HeaderEventID, "e1")
		req.Header.Set(webhook.HeaderRecipientID, rc)
		req.Header.Set(webhook.HeaderEventType, typ)
		if secret != "" {
			s, err := webhook.NewSigner(secret)
			if err != nil {
				t.Fatal(err)
			}
			id, ts := "new_post/e1/"+rc, time.Now().Unix()
			req.Header.Set(webhook.HeaderWebhookID, id)
			req.Header.Set(webhook.HeaderWebhookTimestamp, strconv.FormatInt(ts, 10))
			req.Header.Set(webhook.HeaderWebhookSignature, s.Sign(id, ts, body))
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	for _, c := range []struct {
		typ, secret, rc string
		want            int
	}{
		{"new_post", newPost, "r1", http.StatusNoContent},
		{"new_post", digest, "r2", http.StatusUnauthorized},
		{"new_post", "", "r3", http.StatusUnauthorized},
		{"digest", "", "r4", http.StatusNoContent},
	} {
		if got := send(c.typ, c.secret, c.rc); got != c.want {
			t.Errorf("%s signed with %.12q: HTTP %d, want %d", c.typ, c.secret, got, c.want)
		}
	}
	st, tot := sink.Event("e1"), sink.Totals()
	if st.Unique != 2 || st.Verified != 1 || tot.BadSignatures != 2 || tot.Rejected != 2 {
		t.Fatalf("stats %+v, totals %+v; want 2 recipients, 1 verified, 2 bad signatures", st, tot)
	}
}
