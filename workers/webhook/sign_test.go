package webhook

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/fanout/fanout"
)

const (
	vectorSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	otherSecret  = "whsec_dGhpcyBpcyBhbm90aGVyIHNlY3JldCBvZiAzMiBieXRlcw=="
)

// TestSignMatchesTheStandardWebhooksVector: the published test vector, so
// the receivers' Standard Webhooks libraries accept what fanout sends.
func TestSignMatchesTheStandardWebhooksVector(t *testing.T) {
	s, err := NewSigner(vectorSecret)
	if err != nil {
		t.Fatal(err)
	}
	got := s.Sign("msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, []byte(`{"test": 2432232314}`))
	if want := "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="; got != want {
		t.Fatalf("Sign = %q, want %q", got, want)
	}
}

func TestNewSignerRefusesBadSecrets(t *testing.T) {
	for _, bad := range [][]string{nil, {"MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}, {"whsec_!!!"}, {"whsec_c2hvcnQ="}, {vectorSecret, "whsec_"}} {
		if _, err := NewSigner(bad...); err == nil {
			t.Errorf("NewSigner(%q) accepted", bad)
		} else if len(bad) > 0 && strings.Contains(err.Error(), "MfKQ9r8") {
			t.Errorf("the error %q shows a secret", err)
		}
	}
}

// TestDeliverSigns: with a Signer, every delivery carries the three
// headers; the id is stable across attempts and differs by type, event and
// recipient; during a rotation a receiver that knows only one of the two
// secrets verifies the request; a changed body or an old timestamp fails.
func TestDeliverSigns(t *testing.T) {
	type got struct {
		h    http.Header
		body []byte
	}
	reqs := make(chan got, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		reqs <- got{r.Header.Clone(), b}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	signer, err := NewSigner(vectorSecret, otherSecret)
	if err != nil {
		t.Fatal(err)
	}
	h := &Handler{Client: NewClient(5*time.Second, 4, Loopback...), Signer: signer}
	msg := fanout.Message{ContentType: "application/json", Body: []byte(`{"text":"hi"}`)}
	deliver := func(ev fanout.Event, rid string) got {
		if err := h.Deliver(context.Background(), ev, fanout.Recipient{ID: rid, Address: srv.URL}, msg); err != nil {
			t.Fatal(err)
		}
		return <-reqs
	}
	a := fanout.Event{ID: "e1", Type: "webhook"}
	first, again := deliver(a, "r1"), deliver(a, "r1")
	ids := map[string]bool{}
	for _, g := range []got{first, deliver(fanout.Event{ID: "e1", Type: "other"}, "r1"), deliver(fanout.Event{ID: "e2", Type: "webhook"}, "r1"), deliver(a, "r2")} {
		ids[g.h.Get("webhook-id")] = true
	}
	if first.h.Get("webhook-id") != again.h.Get("webhook-id") || len(ids) != 4 {
		t.Errorf("webhook-ids: %q then %q for the same delivery; %d distinct of 4 deliveries", first.h.Get("webhook-id"), again.h.Get("webhook-id"), len(ids))
	}
	now := time.Now()
	// The reference library of Standard Webhooks accepts the delivery with
	// either secret, and refuses it with its body changed.
	for _, sec := range []string{vectorSecret, otherSecret} {
		wh, err := standardwebhooks.NewWebhook(sec)
		if err != nil {
			t.Fatal(err)
		}
		if err := wh.Verify(first.body, first.h); err != nil {
			t.Errorf("the reference library refused the delivery: %v", err)
		}
		if err := wh.Verify([]byte(`{"text":"HI"}`), first.h); err == nil {
			t.Error("the reference library accepted a changed body")
		}
	}
	for _, secrets := range [][]string{{vectorSecret}, {otherSecret}} {
		if err := Verify(secrets, first.h.Get("webhook-id"), first.h.Get("webhook-timestamp"), first.h.Get("webhook-signature"), first.body, now, 5*time.Minute); err != nil {
			t.Errorf("a receiver with %d secret(s): %v", len(secrets), err)
		}
	}
	if err := Verify([]string{vectorSecret}, first.h.Get("webhook-id"), first.h.Get("webhook-timestamp"), first.h.Get("webhook-signature"), []byte(`{"text":"HI"}`), now, 5*time.Minute); err == nil {
		t.Error("a changed body verified")
	}
	if err := Verify([]string{vectorSecret}, first.h.Get("webhook-id"), first.h.Get("webhook-timestamp"), first.h.Get("webhook-signature"), first.body, now.Add(time.Hour), 5*time.Minute); err == nil {
		t.Error("an hour-old timestamp verified")
	}
	if err := Verify([]string{"whsec_" + strings.Repeat("QUFB", 8)}, first.h.Get("webhook-id"), first.h.Get("webhook-timestamp"), first.h.Get("webhook-signature"), first.body, now, 5*time.Minute); err == nil {
		t.Error("a receiver with another secret verified")
	}
}
