package webhook

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/fanout/fanout"
)

func TestClassify(t *testing.T) {
	now := time.Now()
	cases := []struct {
		code       int
		retryAfter string
		wantErr    bool
		permanent  bool
		after      time.Duration
	}{
		{200, "", false, false, 0},
		{204, "", false, false, 0},
		{400, "", true, true, 0},
		{404, "", true, true, 0},
		{408, "", true, false, 0},
		{429, "7", true, false, 7 * time.Second},
		{429, now.Add(90 * time.Second).UTC().Format(http.TimeFormat), true, false, 89 * time.Second},
		{500, "", true, false, 0},
		{503, "2", true, false, 2 * time.Second},
	}
	for _, c := range cases {
		resp := &http.Response{StatusCode: c.code, Header: http.Header{}}
		if c.retryAfter != "" {
			resp.Header.Set("Retry-After", c.retryAfter)
		}
		err := Classify(resp)
		if (err != nil) != c.wantErr {
			t.Fatalf("%d: err = %v, want error %v", c.code, err, c.wantErr)
		}
		if fanout.IsPermanent(err) != c.permanent {
			t.Fatalf("%d: permanent = %v, want %v", c.code, fanout.IsPermanent(err), c.permanent)
		}
		d, ok := fanout.RetryAfterOf(err)
		if ok != (c.after > 0) || d < c.after || d > c.after+2*time.Second {
			t.Fatalf("%d: retry after %v %v, want about %v", c.code, d, ok, c.after)
		}
	}
}

// TestIdempotencyKeyIncludesTheType: two event types may use the same event
// id and recipient id; a destination that deduplicates on Idempotency-Key
// must not take one type's delivery for the other's.
func TestIdempotencyKeyIncludesTheType(t *testing.T) {
	keys := make(chan string, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		keys <- r.Header.Get(HeaderIdempotency)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	h := &Handler{Client: NewClient(5*time.Second, 4, Loopback...)}
	msg := fanout.Message{Body: []byte(`{}`), ContentType: "application/json"}
	for _, typ := range []string{"orders", "invoices"} {
		if err := h.Deliver(context.Background(), fanout.Event{ID: "e1", Type: typ}, fanout.Recipient{ID: "r1", Address: srv.URL}, msg); err != nil {
			t.Fatal(err)
		}
	}
	if a, b := <-keys, <-keys; a == b || a == "" {
		t.Fatalf("Idempotency-Key of two types with the same event and recipient: %q and %q, want different", a, b)
	}
}
