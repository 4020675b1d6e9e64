// Package webhook is the stock event type of the fanout worker binary:
// recipients come from an HTTP endpoint, the message from the event payload,
// and delivery is an HTTP POST to each recipient's address.
//
// Recipients endpoint contract: POST <recipients url> with the JSON body
// {"event": <event>, "cursor": "...", "limit": n}; the answer is a
// fanout.Page as JSON ({"recipients": [{"id": "...", "address": "https://..."}], "next_cursor": "..."}).
//
// Payload: {"message": <any JSON>, "content_type": "...", "recipients_url": "..."};
// every field is optional. Without "message" the whole payload is the message.
package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/propagation"

	"github.com/fanout/fanout"
)

// EventType is the name the worker binary registers this handler under.
const EventType = "webhook"

// Delivery request headers.
const (
	HeaderEventID     = "X-Fanout-Event-Id"
	HeaderEventType   = "X-Fanout-Event-Type"
	HeaderRecipientID = "X-Fanout-Recipient-Id"
	HeaderIdempotency = "Idempotency-Key"
)

// Handler implements fanout.Handler over HTTP.
type Handler struct {
	// RecipientsURL is used when the payload names none.
	RecipientsURL string
	Client        *http.Client
}

// NewClient returns an HTTP client tuned for many deliveries to few hosts:
// keep-alive with a large idle pool, and a per-request timeout. Its
// requests are traced (OpenTelemetry's otelhttp transport with the global
// tracer and meter providers): each is a client span, a child of the span in
// the request's context (the DeliverBatch or RecipientsPage activity's), and
// carries the W3C traceparent/tracestate headers, so the recipient sees the
// event's trace. Without a tracer provider the incoming trace context is
// still passed on.
func NewClient(timeout time.Duration, maxConnsPerHost int) *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = maxConnsPerHost * 4
	t.MaxIdleConnsPerHost = maxConnsPerHost
	t.DialContext = (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	return &http.Client{Timeout: timeout, Transport: otelhttp.NewTransport(t,
		otelhttp.WithPropagators(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})),
		otelhttp.WithSpanNameFormatter(spanName))}
}

// spanName names a request's span: "webhook deliver" or "webhook recipients".
func spanName(_ string, r *http.Request) string {
	if r.Header.Get(HeaderRecipientID) != "" {
		return "webhook deliver"
	}
	return "webhook recipients"
}

type payload struct {
	Message       json.RawMessage `json:"message,omitempty"`
	ContentType   string          `json:"content_type,omitempty"`
	RecipientsURL string          `json:"recipients_url,omitempty"`
}

func parsePayload(ev fanout.Event) (payload, error) {
	var p payload
	if len(ev.Payload) == 0 {
		return p, nil
	}
	if err := json.Unmarshal(ev.Payload, &p); err != nil {
		return p, fanout.Permanent(fmt.Errorf("webhook payload: %w", err))
	}
	return p, nil
}

// RecipientsRequest is the body POSTed to the recipients endpoint.
type RecipientsRequest struct {
	Event  fanout.Event `json:"event"`
	Cursor string       `json:"cursor"`
	Limit  int          `json:"limit"`
}

func (h *Handler) client() *http.Client {
	if h.Client != nil {
		return h.Client
	}
	return http.DefaultClient
}

// GetRecipients asks the recipients endpoint for one page.
func (h *Handler) GetRecipients(ctx context.Context, ev fanout.Event, cursor string, limit int) (fanout.Page, error) {
	p, err := parsePayload(ev)
	if err != nil {
		return fanout.Page{}, err
	}
	url := p.RecipientsURL
	if url == "" {
		url = h.RecipientsURL
	}
	if url == "" {
		return fanout.Page{}, fanout.Permanent(errors.New("no recipients url: set FANOUT_RECIPIENTS_URL or the payload's recipients_url"))
	}
	body, err := json.Marshal(RecipientsRequest{Event: ev, Cursor: cursor, Limit: limit})
	if err != nil {
		return fanout.Page{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return fanout.Page{}, fanout.Permanent(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := h.client().Do(req)
	if err != nil {
		return fanout.Page{}, err
	}
	defer resp.Body.Close()
	if err := Classify(resp); err != nil {
		return fanout.Page{}, fmt.Errorf("recipients %s: %w", url, err)
	}
	var page fanout.Page
	if err := json.NewDecoder(resp.Body).Decode(&page); err != nil {
		return fanout.Page{}, fmt.Errorf("recipients %s: decode page: %w", url, err)
	}
	return page, nil
}

// GenerateMessage takes the payload's message (or the whole payload).
func (h *Handler) GenerateMessage(_ context.Context, ev fanout.Event) (fanout.Message, error) {
	p, err := parsePayload(ev)
	if err != nil {
		return fanout.Message{}, err
	}
	m := fanout.Message{ContentType: p.ContentType, Body: p.Message}
	if len(m.Body) == 0 {
		m.Body = ev.Payload
	}
	if m.ContentType == "" {
		m.ContentType = "application/json"
	}
	return m, nil
}

// Deliver POSTs the message to the recipient's address.
func (h *Handler) Deliver(ctx context.Context, ev fanout.Event, r fanout.Recipient, m fanout.Message) error {
	if r.Address == "" {
		return fanout.Permanent(fmt.Errorf("recipient %q has no address", r.ID))
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.Address, bytes.NewReader(m.Body))
	if err != nil {
		return fanout.Permanent(err)
	}
	req.Header.Set("Content-Type", m.ContentType)
	req.Header.Set(HeaderEventID, ev.ID)
	req.Header.Set(HeaderEventType, ev.Type)
	req.Header.Set(HeaderRecipientID, r.ID)
	req.Header.Set(HeaderIdempotency, ev.ID+":"+r.ID)
	resp, err := h.client().Do(req)
	if err != nil {
		return err
	}
	// Drain so the connection is reused.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	return Classify(resp)
}

// Classify maps an HTTP answer to fanout's error kinds: 2xx is success; 408,
// 429 and 5xx are transient (with Retry-After honoured); other 4xx are
// permanent.
func Classify(resp *http.Response) error {
	code := resp.StatusCode
	if code >= 200 && code < 300 {
		return nil
	}
	err := fmt.Errorf("HTTP %d", code)
	switch {
	case code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable || code == http.StatusRequestTimeout || code >= 500:
		if d, ok := parseRetryAfter(resp.Header.Get("Retry-After"), time.Now()); ok {
			return fanout.RetryAfter(d, err)
		}
		return err
	case code >= 400:
		return fanout.Permanent(err)
	default:
		return err
	}
}

func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	if v == "" {
		return 0, false
	}
	if s, err := strconv.Atoi(v); err == nil && s >= 0 {
		return time.Duration(s) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return d, true
		}
		return 0, true
	}
	return 0, false
}
