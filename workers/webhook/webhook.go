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
// A payload's recipients_url is honoured only when an entry of the handler's
// RecipientsURLAllow matches it (see URLPrefix: scheme, host and port equal,
// the path under the entry's, no user information).
//
// Every recipient address and a payload's recipients_url come from untrusted
// input (the event, the recipients endpoint), so the client of NewClient
// only connects where the address guard allows (public addresses, plus the
// ranges given to NewClient; checked on the IP dialled, after DNS), speaks
// only http and https, follows at most 3 redirects (each checked again), and
// the handler reads at most MaxPageBytes of a recipients page. The
// recipients endpoint the operator configures (RecipientsURL) is trusted
// for its own host and port only: NewTrustedClient reaches it wherever it
// resolves (an in-cluster Service, host.docker.internal, loopback) without
// an allow-list entry, which would open that range to deliveries too, and
// dials any other host under the guard.
package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/activities/limits"
	"github.com/fanout/fanout/internal/netguard"
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
	// RecipientsURLAllow are where a payload's recipients_url may point
	// (ParseURLPrefix: "https://host[:port][/path/]"; an entry it refuses
	// matches nothing); empty refuses every payload URL.
	RecipientsURLAllow []string
	// Client makes the requests to untrusted addresses: deliveries and a
	// payload's recipients_url; use NewClient (nil: a NewClient with
	// fanout's defaults, public addresses only).
	Client *http.Client
	// TrustedClient makes the requests to RecipientsURL, which the operator
	// configured: use NewTrustedClient with RecipientsURL among its
	// endpoints (nil: Client, under the guard).
	TrustedClient *http.Client
	// Signer, when set, signs every delivery the Standard Webhooks way
	// (webhook-id, webhook-timestamp, webhook-signature).
	Signer *Signer
}

// Bounds of what a destination may send back.
const (
	// MaxPageBytes is the largest recipients page read.
	MaxPageBytes = fanout.MaxPageBytes
	// maxRedirects is how many redirects a request follows.
	maxRedirects = 3
	// maxRetryAfter caps a Retry-After (a bigger one overflowed before).
	maxRetryAfter = 24 * time.Hour
)

// ReasonRedirected starts the error of a request answered with a redirect
// the client does not follow: a 301, 302 or 303 (which would turn the POST
// into a GET without its body), any redirect at most once, or one past
// maxRedirects.
const ReasonRedirected = "redirected"

// UserAgent identifies fanout's requests to recipients endpoints and
// destinations.
const UserAgent = "fanout-webhook/1"

// Loopback is the allow-list of development and tests, where the recipients
// endpoint and the sink run on this machine.
var Loopback = netguard.Loopback().Allow

// ParseAllow reads an allow-list of CIDR prefixes or addresses
// ("10.20.0.0/16,::1"), as FANOUT_OUTBOUND_ALLOW gives it.
func ParseAllow(list string) ([]netip.Prefix, error) {
	p, err := netguard.Parse(list)
	return p.Allow, err
}

// NewClient returns an HTTP client tuned for many deliveries to few hosts:
// keep-alive with an idle pool of idlePerHost connections per host, and a
// per-request timeout. Size idlePerHost to the deliveries the process runs
// at once (batch slots x concurrency): a smaller pool closes a connection
// after most requests and opens a new one for the next (connection churn,
// TIME_WAIT sockets, a handshake per delivery on both sides).
//
// It connects only to addresses the guard allows: public ones, and those in
// allow (Loopback in development; a private range the destinations really
// live on).
//
// The Handler traces the requests it makes with this client (see do); the
// client itself is a plain net/http one, so a request's headers and its
// small body leave in one write.
func NewClient(timeout time.Duration, idlePerHost int, allow ...netip.Prefix) *http.Client {
	return newClient(timeout, idlePerHost, netguard.Policy{Allow: allow}.Dial(dialer))
}

// NewTrustedClient returns the client of endpoints the operator configured
// (FANOUT_RECIPIENTS_URL; the sources of a types file): tuned as NewClient,
// but a request to the host and port of one of endpoints connects wherever
// that host resolves, private and loopback addresses included, with no
// allow-list entry (which would open the range to deliveries too). The
// trust is the host and port as the URL names them (netguard.DialAddr),
// compared with the address each connection dials: a request anywhere else
// (a 307 or 308 to another host) is dialled under the guard of allow, as
// NewClient's are. A Handler's recipients request follows no redirect off
// its endpoint's origin anyway (checkRedirect). An endpoint that is not an
// http(s) URL with a host is refused (its index is named, not the URL,
// which may hold credentials).
func NewTrustedClient(timeout time.Duration, idlePerHost int, endpoints []string, allow ...netip.Prefix) (*http.Client, error) {
	hosts := make([]string, len(endpoints))
	for i, e := range endpoints {
		var err error
		if hosts[i], err = endpointAddr(e); err != nil {
			return nil, fmt.Errorf("trusted endpoint %d: %w", i, err)
		}
	}
	return newClient(timeout, idlePerHost, netguard.Policy{Allow: allow}.Pin(dialer, hosts...)), nil
}

// endpointAddr is the host:port an operator's endpoint URL is trusted for.
func endpointAddr(rawURL string) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // not the URL: it may hold credentials
		}
		return "", fmt.Errorf("not a valid URL: %w", err)
	}
	if err := checkURL(u); err != nil {
		return "", err
	}
	return netguard.DialAddr(u)
}

// dialer connects fanout's outbound requests: 5 s to connect, TCP
// keep-alive every 30 s.
var dialer = net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}

// newClient is a client of NewClient's pool and redirects, dialling with
// dial.
func newClient(timeout time.Duration, idlePerHost int, dial func(ctx context.Context, network, addr string) (net.Conn, error)) *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil // a proxy would dial for us, past the guard and the pin
	t.MaxIdleConns = idlePerHost * 4
	t.MaxIdleConnsPerHost = idlePerHost
	t.DialContext = dial
	return &http.Client{Timeout: timeout, CheckRedirect: checkRedirect, Transport: t}
}

// checkRedirect follows at most maxRedirects redirects, to http and https
// only (the dial of each is guarded like the first), and only a 307 or 308,
// which net/http follows with the method and body; none for an at-most-once
// delivery (see Deliver). A 301, 302 or 303 would be followed as a GET
// without the body, so the POST is not delivered while the GET succeeds: it
// is not followed, and Classify fails it as redirected. A recipients
// request (ownOriginKey) follows none off its own origin.
func checkRedirect(req *http.Request, via []*http.Request) error {
	if fanout.SemanticsOf(req.Context()) == fanout.AtMostOnce {
		return http.ErrUseLastResponse
	}
	if req.Response != nil && req.Response.StatusCode != http.StatusTemporaryRedirect && req.Response.StatusCode != http.StatusPermanentRedirect {
		return http.ErrUseLastResponse
	}
	if req.Context().Value(ownOriginKey{}) != nil && Origin(req.URL) != Origin(via[0].URL) {
		return http.ErrUseLastResponse // a recipients endpoint is trusted for its own origin only
	}
	if len(via) > maxRedirects {
		return fanout.Permanent(fmt.Errorf("%s: stopped after %d redirects", ReasonRedirected, maxRedirects))
	}
	return checkURL(req.URL)
}

// ownOriginKey marks the context of a request that follows redirects on
// its own origin only (the recipients endpoint's).
type ownOriginKey struct{}

// checkURL refuses what is not an absolute http or https URL.
func checkURL(u *url.URL) error {
	if u.Scheme != "http" && u.Scheme != "https" {
		return fanout.Permanent(fmt.Errorf("scheme %.16q not allowed (http, https)", u.Scheme))
	}
	if u.Host == "" {
		return fanout.Permanent(errors.New("no host in the address"))
	}
	return nil
}

// defaultClient is the client of a Handler without one.
var defaultClient = NewClient(10*time.Second, 64)

// newRequest builds a POST to rawURL after checking it.
func newRequest(ctx context.Context, rawURL string, body []byte) (*http.Request, error) {
	// One parse, by NewRequest; the URL is checked before anything is sent.
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, rawURL, bytes.NewReader(body))
	if err != nil {
		// Not the URL itself: it may carry credentials or a secret path.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fanout.Permanent(fmt.Errorf("address: not a valid URL: %w", err))
	}
	if err := checkURL(req.URL); err != nil {
		return nil, err
	}
	req.Header = make(http.Header, 8) // room for every header set here
	req.Header["User-Agent"] = []string{UserAgent}
	return req, nil
}

// Span names of the handler's requests.
const (
	spanDeliver    = "webhook deliver"
	spanRecipients = "webhook recipients"
)

// tracerName names the tracer of the handler's client spans, taken from the
// global tracer provider at each request (a no-op one unless telemetry
// installs a real one).
const tracerName = "github.com/fanout/fanout/workers/webhook"

// do sends req in a client span named name, a child of the span in req's
// context (the DeliverBatch or RecipientsPage activity's), and passes the
// trace to the destination in the W3C traceparent/tracestate headers (not
// baggage: it may hold what a third party must not see). Without a tracer
// provider the incoming trace context is still passed on. The span keeps
// the scheme, host and port, not the whole URL (a path or query may hold a
// secret). A refusal by the guard is permanent: no retry reaches a
// destination it does not allow.
//
// It is done here rather than by otelhttp's transport, which wraps the
// request body: net/http then writes the headers and the body in two
// segments, which cost both ends a wakeup per delivery (issue 11).
func do(c *http.Client, req *http.Request, name string) (*http.Response, error) {
	ctx, span := otel.Tracer(tracerName).Start(req.Context(), name, trace.WithSpanKind(trace.SpanKindClient))
	defer span.End()
	if span.SpanContext().IsValid() {
		propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(req.Header))
	}
	recording := span.IsRecording()
	if recording {
		span.SetAttributes(attribute.String("http.request.method", req.Method), attribute.String("url.scheme", req.URL.Scheme),
			attribute.String("server.address", req.URL.Hostname()), attribute.String("server.port", req.URL.Port()))
	}
	resp, err := c.Do(req)
	if err != nil {
		err = redactURLError(err, req.URL)
		if recording {
			span.RecordError(err)
			span.SetStatus(codes.Error, "request failed")
		}
		if errors.Is(err, netguard.ErrDenied) || fanout.IsPermanent(err) {
			return nil, fanout.Permanent(err)
		}
		return nil, err
	}
	if recording {
		span.SetAttributes(attribute.Int("http.response.status_code", resp.StatusCode))
		if resp.StatusCode >= 400 {
			span.SetStatus(codes.Error, resp.Status)
		}
	}
	return resp, nil
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
	return defaultClient
}

// trustedClient makes the requests to the operator's RecipientsURL.
func (h *Handler) trustedClient() *http.Client {
	if h.TrustedClient != nil {
		return h.TrustedClient
	}
	return h.client()
}

// recipientsRequest builds the POST of body to an event's recipients
// endpoint, and picks its client: the payload's recipients_url when an
// entry of RecipientsURLAllow matches it (as parsed for the request, see
// URLPrefix), under the guard (the event chose it; the allow-list says
// where a payload may point, not which addresses may be dialled), else the
// handler's RecipientsURL, with the trusted client.
func (h *Handler) recipientsRequest(ctx context.Context, p payload, body []byte) (*http.Request, *http.Client, error) {
	if p.RecipientsURL == "" {
		if h.RecipientsURL == "" {
			return nil, nil, fanout.Permanent(errors.New("no recipients url: set FANOUT_RECIPIENTS_URL or the payload's recipients_url"))
		}
		req, err := newRequest(ctx, h.RecipientsURL, body)
		return req, h.trustedClient(), err
	}
	req, err := newRequest(ctx, p.RecipientsURL, body)
	if err != nil {
		return nil, nil, fmt.Errorf("recipients_url_not_allowed: the payload's recipients_url: %w", err)
	}
	for _, entry := range h.RecipientsURLAllow {
		// An entry config would refuse matches nothing.
		if prefix, err := ParseURLPrefix(entry); err == nil && prefix.Match(req.URL) {
			return req, h.client(), nil
		}
	}
	return nil, nil, fanout.Permanent(fmt.Errorf("recipients_url_not_allowed: the payload's recipients_url (%.64q...) matches no FANOUT_RECIPIENTS_URL_ALLOW entry", Origin(req.URL)))
}

// Origin is u's scheme, host and port: what errors, logs and spans may show
// of an address. Its user information, path and query may be credentials
// (a receiver's secret webhook path, a token parameter) and are never shown.
func Origin(u *url.URL) string {
	return u.Scheme + "://" + u.Host
}

// redactURLError replaces the URL of the *url.Error net/http returns (which
// keeps the path and query; only a password is stripped) with its origin.
func redactURLError(err error, u *url.URL) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return &url.Error{Op: ue.Op, URL: Origin(u), Err: ue.Err}
	}
	return err
}

// GetRecipients asks the recipients endpoint for one page.
func (h *Handler) GetRecipients(ctx context.Context, ev fanout.Event, cursor string, limit int) (fanout.Page, error) {
	p, err := parsePayload(ev)
	if err != nil {
		return fanout.Page{}, err
	}
	body, err := json.Marshal(RecipientsRequest{Event: WithoutBaggage(ev), Cursor: cursor, Limit: limit})
	if err != nil {
		return fanout.Page{}, err
	}
	req, client, err := h.recipientsRequest(context.WithValue(ctx, ownOriginKey{}, true), p, body)
	if err != nil {
		return fanout.Page{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := do(client, req, spanRecipients)
	if err != nil {
		return fanout.Page{}, err
	}
	defer func() { _ = resp.Body.Close() }()
	if err := Classify(resp); err != nil {
		return fanout.Page{}, fmt.Errorf("recipients endpoint: %w", err)
	}
	return DecodePage(resp.Body)
}

// WithoutBaggage is ev without the W3C baggage header of its record: a
// recipients endpoint gets the trace context, not what the producer's
// baggage may hold (a third party must not see it).
func WithoutBaggage(ev fanout.Event) fanout.Event {
	h := make(map[string]string, len(ev.Headers))
	for k, v := range ev.Headers {
		if !strings.EqualFold(k, "baggage") {
			h[k] = v
		}
	}
	if len(h) != len(ev.Headers) {
		ev.Headers = h
	}
	return ev
}

// DecodePage reads one recipients page of at most MaxPageBytes; a larger or
// malformed page is a permanent error (asking again gets the same page).
func DecodePage(r io.Reader) (fanout.Page, error) {
	b, err := io.ReadAll(io.LimitReader(r, MaxPageBytes+1))
	if err != nil {
		return fanout.Page{}, fmt.Errorf("recipients endpoint: read page: %w", err)
	}
	if len(b) > MaxPageBytes {
		return fanout.Page{}, fanout.Permanent(fmt.Errorf("page_too_large: the recipients page is over %d bytes", MaxPageBytes))
	}
	var page fanout.Page
	if err := json.Unmarshal(b, &page); err != nil {
		return fanout.Page{}, fanout.Permanent(fmt.Errorf("invalid_page: %w", err))
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
	if _, _, err := mime.ParseMediaType(m.ContentType); err != nil || strings.ContainsAny(m.ContentType, "\r\n") {
		return fanout.Message{}, fanout.Permanent(fmt.Errorf("content_type %.64q is not a media type", m.ContentType))
	}
	return m, nil
}

// DestinationKey is the recipient's destination for the per-destination
// limits and breakers (fanout.DestinationKeyer): the address's host and
// port, canonical (limits.HostKey: lower-case, no trailing dot, no default
// port: "hooks.example.com", "127.0.0.1:8080"), or "invalid" for an address
// that does not parse (its delivery fails permanently anyway). fanout
// cleans and bounds it (activities/limits).
//
// It is called for every recipient: a plain http(s) address
// (plainHost) is read without url.Parse and without allocating; any
// other goes through url.Parse, with the same result (FuzzDestinationKey).
func (h *Handler) DestinationKey(r fanout.Recipient) string {
	if host, ok := plainHost(r.Address); ok {
		scheme := "http"
		if r.Address[4] == 's' || r.Address[4] == 'S' {
			scheme = "https"
		}
		return limits.HostKey(scheme, host)
	}
	return parsedHost(r.Address)
}

// parsedHost is the key of the host of addr as url.Parse reads it, or
// "invalid".
func parsedHost(addr string) string {
	u, err := url.Parse(addr)
	if err != nil || u.Host == "" {
		return "invalid"
	}
	return limits.HostKey(u.Scheme, u.Host)
}

// plainHost returns the host (and port) of an address that is plainly
// "http://" or "https://" (any case), a host of letters, digits and
// ".-_~", an optional ":" and digits, then anything but control bytes,
// spaces, non-ASCII bytes and "%": the host url.Parse reads from it. ok is
// false for any other address (parsedHost decides).
func plainHost(addr string) (host string, ok bool) {
	var rest string
	switch {
	case len(addr) > 7 && strings.EqualFold(addr[:7], "http://"):
		rest = addr[7:]
	case len(addr) > 8 && strings.EqualFold(addr[:8], "https://"):
		rest = addr[8:]
	default:
		return "", false
	}
	end, colon := len(rest), -1
	for i := 0; i < len(rest); i++ {
		c := rest[i]
		if c == '/' || c == '?' || c == '#' {
			end = i
			break
		}
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '-', c == '_', c == '~':
			if colon >= 0 && (c < '0' || c > '9') {
				return "", false // a port of digits only
			}
		case c == ':' && colon < 0:
			colon = i
		default:
			return "", false
		}
	}
	if end == 0 || colon == 0 {
		return "", false
	}
	for i := end; i < len(rest); i++ {
		if c := rest[i]; c <= ' ' || c >= 0x7f || c == '%' {
			return "", false
		}
	}
	return rest[:end], true
}

// Deliver POSTs the message to the recipient's address.
func (h *Handler) Deliver(ctx context.Context, ev fanout.Event, r fanout.Recipient, m fanout.Message) error {
	if r.Address == "" {
		return fanout.Permanent(fmt.Errorf("recipient %q has no address", r.ID))
	}
	req, err := newRequest(ctx, r.Address, m.Body)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", m.ContentType)
	req.Header.Set(HeaderEventID, ev.ID)
	req.Header.Set(HeaderEventType, ev.Type)
	req.Header.Set(HeaderRecipientID, r.ID)
	req.Header.Set(HeaderIdempotency, WebhookID(ev, r)) // type, event and recipient
	if h.Signer != nil {
		// A fresh timestamp and signature per attempt, the same id.
		id, ts := WebhookID(ev, r), time.Now().Unix()
		req.Header[HeaderWebhookID] = []string{id}
		req.Header[HeaderWebhookTimestamp] = []string{strconv.FormatInt(ts, 10)}
		req.Header[HeaderWebhookSignature] = []string{h.Signer.Sign(id, ts, m.Body)}
	}
	if fanout.SemanticsOf(ctx) == fanout.AtMostOnce {
		// One request per call: without GetBody the transport never replays
		// the POST on another connection (it would, as the Idempotency-Key
		// header makes it replayable, after a reused connection failed
		// mid-request), and the client follows no redirect (checkRedirect):
		// the destination may have acted on the first request. A 3xx is
		// then a failure (redirected), given up at once.
		req.GetBody = nil
		if len(m.Body) == 0 {
			// net/http replays a request without a body (http.NoBody) as
			// if it had GetBody; an empty body it cannot rewind is sent
			// as an empty chunked body instead, and never replayed.
			req.Body = io.NopCloser(strings.NewReader(""))
		}
	}
	resp, err := do(h.client(), req, spanDeliver)
	if err != nil {
		return err
	}
	// Drain so the connection is reused.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	return Classify(resp)
}

// Classify maps an HTTP answer to fanout's error kinds: 2xx is success; 408,
// 429 and 5xx are transient (with Retry-After honoured); other 4xx are
// permanent, and so is a 3xx the client did not follow (ReasonRedirected:
// the address has moved; asking again gets the same answer).
func Classify(resp *http.Response) error {
	code := resp.StatusCode
	if code >= 200 && code < 300 {
		return nil
	}
	err := fmt.Errorf("HTTP %d", code)
	switch {
	case code >= 300 && code < 400:
		return fanout.Permanent(fmt.Errorf("%s: %w", ReasonRedirected, err))
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
	if s, err := strconv.ParseInt(v, 10, 64); err == nil && s >= 0 {
		if s > int64(maxRetryAfter/time.Second) {
			return maxRetryAfter, true
		}
		return time.Duration(s) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return min(d, maxRetryAfter), true
		}
		return 0, true
	}
	return 0, false
}
