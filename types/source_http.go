package types

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
	"golang.org/x/net/http/httpguts"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/workers/webhook"
)

// The http source: an operator's recipients endpoint, asked for one page
// per request.
//
//	recipients:
//	  http:
//	    url: https://users.internal/followers      # http or https; trusted for its own host and port
//	    method: POST                               # or GET (no body; cursor and limit in the query)
//	    headers:
//	      X-Client: fanout                         # a plain value
//	      Authorization: {value_from: {file: secrets/token}}   # or {env: USERS_TOKEN}
//	    body: '{"user": {{json .Event.Payload.author}}, "after": {{json .Cursor}}, "n": {{.Limit}}}'
//	    content_type: application/json           # of the body
//	    cursor: {in: body, name: cursor}           # in: body or query
//	    limit: {in: body, name: limit}
//	    answer: {recipients: /recipients, id: /id, address: /address, next_cursor: /next_cursor}
//
// Without body, the request's body is today's recipients request
// (webhook.RecipientsRequest: {"event": ..., "cursor": ..., "limit": ...},
// the cursor and limit under their names when they are in the body). A
// body is a template over .Event (.ID, .Type, .Priority, .Tenant,
// .Payload), .Cursor and .Limit, which places the cursor and limit itself
// when they are in the body. The answer's fields are JSON pointers; the
// defaults are fanout.Page's JSON, today's protocol. An id may be a string
// or a number; a next cursor that is absent, null or "" ends the audience.
//
// Header values are read at load (a file's, trimmed; an environment
// variable's): an event cannot change them, nor the URL, whose host alone
// the source's client trusts (webhook.NewTrustedClient); the request
// follows no redirect off that origin. An answer is read up to
// fanout.MaxPageBytes; a larger or malformed one fails the event
// (page_too_large, invalid_page) with its reason.
func init() { RegisterSource("http", loadHTTPSource) }

// Request bounds of the http source.
const (
	// MaxRequestBodyBytes bounds a body template's output.
	MaxRequestBodyBytes = 1 << 20
	// sourceIdleConns is the source client's idle pool: a page per
	// request, events in flight at once.
	sourceIdleConns = 16
)

// DefaultRequestContentType is the content type of an http source's body.
const DefaultRequestContentType = "application/json"

// placement is where a request carries the cursor or the limit.
type placement struct {
	query bool
	name  string
}

type httpSource struct {
	url         *url.URL
	rawURL      string
	method      string
	headers     http.Header
	body        *Template // nil: the default body
	contentType string
	cursor      placement
	limit       placement
	answer      answerShape
}

type answerShape struct {
	recipients, id, address, next Pointer
}

func (a answerShape) isDefault() bool {
	return slices.Equal(a.recipients, DefaultRecipientsPointer) && slices.Equal(a.id, DefaultIDPointer) &&
		slices.Equal(a.address, DefaultAddressPointer) && slices.Equal(a.next, DefaultNextCursorPointer)
}

// refusedHeaders are set by the source or by net/http.
var refusedHeaders = []string{"Host", "Content-Length", "Content-Type", "Transfer-Encoding", "Connection", "Te", "Trailer", "Upgrade", "Keep-Alive", "Proxy-Connection"}

func loadHTTPSource(n Node) SourceConfig {
	f, ok := n.Fields("url", "method", "headers", "body", "content_type", "cursor", "limit", "answer")
	if !ok {
		return nil
	}
	before := len(n.l.errs)
	s := &httpSource{method: http.MethodPost, headers: http.Header{}}
	if un, ok := f.Need("url"); ok {
		s.url, s.rawURL = loadEndpoint(un)
	}
	if mn, ok := f.Get("method"); ok {
		if m, ok := mn.String(); ok {
			switch m {
			case http.MethodPost, http.MethodGet:
				s.method = m
			default:
				mn.Errorf("%.16q: want POST or GET", m)
			}
		}
	}
	if hn, ok := f.Get("headers"); ok {
		loadHeaders(hn, s.headers)
	}
	defIn := "body"
	if s.method == http.MethodGet {
		defIn = "query"
	}
	s.cursor = loadPlacement(f, "cursor", defIn, s.method)
	s.limit = loadPlacement(f, "limit", defIn, s.method)
	if bn, ok := f.Get("body"); ok {
		if s.method == http.MethodGet {
			bn.Errorf("a GET request has no body")
		} else if text, ok := bn.String(); ok {
			t, err := ParseTemplate(n.typ+".recipients.http.body", text, MaxRequestBodyBytes)
			if err != nil {
				bn.Errorf("the template does not parse: %v", err)
			}
			s.body = t
		}
	}
	var ok2 bool
	if s.contentType, ok2 = contentType(f, DefaultRequestContentType); ok2 && s.method == http.MethodGet && f.Has("content_type") {
		cn, _ := f.Get("content_type")
		cn.Errorf("a GET request has no body")
	}
	s.answer = answerShape{recipients: DefaultRecipientsPointer, id: DefaultIDPointer, address: DefaultAddressPointer, next: DefaultNextCursorPointer}
	if an, ok := f.Get("answer"); ok {
		if af, ok := an.Fields("recipients", "id", "address", "next_cursor"); ok {
			_ = readPointer(af, "recipients", &s.answer.recipients) && readPointer(af, "id", &s.answer.id) &&
				readPointer(af, "address", &s.answer.address) && readPointer(af, "next_cursor", &s.answer.next)
		}
	}
	if len(n.l.errs) > before {
		return nil
	}
	return s
}

// loadEndpoint reads the source's URL: http or https, a host, no user
// information (credentials go in a header from a file) and no fragment.
// Errors do not show the URL, whose path or query may be secret.
func loadEndpoint(n Node) (*url.URL, string) {
	raw, ok := n.String()
	if !ok {
		return nil, ""
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		n.Errorf("not a valid URL")
	case u.Scheme != "http" && u.Scheme != "https":
		n.Errorf("want an http or https URL, got scheme %.16q", u.Scheme)
	case u.Host == "" || u.Hostname() == "":
		n.Errorf("no host in the URL")
	case u.User != nil:
		n.Errorf("user information in the URL: put credentials in a header from a file")
	case u.Fragment != "":
		n.Errorf("a fragment in the URL")
	default:
		if _, err := webhook.NewTrustedClient(0, 1, []string{raw}); err != nil {
			n.Errorf("%v", err)
			return nil, ""
		}
		return u, raw
	}
	return nil, ""
}

func loadHeaders(n Node, h http.Header) {
	if n.y.Kind != yaml.MappingNode {
		n.Errorf("want a mapping of header names to values, got %s", kindName(n.y))
		return
	}
	for i := 0; i+1 < len(n.y.Content); i += 2 {
		name := n.y.Content[i].Value
		vn := n.child(name, n.y.Content[i+1])
		kn := Node{y: n.y.Content[i], l: n.l, typ: n.typ, path: vn.path}
		switch canon := http.CanonicalHeaderKey(name); {
		case !httpguts.ValidHeaderFieldName(name):
			kn.Errorf("not a header name")
			continue
		case slices.Contains(refusedHeaders, canon):
			kn.Errorf("set by the source (content_type) or by HTTP itself; not allowed here")
			continue
		case h.Get(canon) != "":
			kn.Errorf("given twice")
			continue
		}
		v, ok := headerValue(vn)
		if !ok {
			continue
		}
		if !httpguts.ValidHeaderFieldValue(v) {
			vn.Errorf("the value is not a valid header value (a control byte or a line break)")
			continue
		}
		h.Set(name, v)
	}
}

// headerValue is a plain string, or {value_from: {env: NAME}} or
// {value_from: {file: PATH}}, read now.
func headerValue(n Node) (string, bool) {
	if n.y.Kind != yaml.MappingNode {
		v, ok := n.String()
		if ok && v == "" {
			n.Errorf("empty")
			return "", false
		}
		return v, ok
	}
	f, ok := n.Fields("value_from")
	if !ok {
		return "", false
	}
	vf, ok := f.Need("value_from")
	if !ok {
		return "", false
	}
	kind, src, ok := vf.OneOf("value source", []string{"env", "file"})
	if !ok {
		return "", false
	}
	if kind == "file" {
		return src.SecretFile()
	}
	name, ok := src.String()
	if !ok {
		return "", false
	}
	v, set := os.LookupEnv(name)
	if v = strings.TrimSpace(v); !set || v == "" {
		src.Errorf("the environment variable %.64q is not set or empty", name)
		return "", false
	}
	return v, true
}

// loadPlacement reads the cursor's or the limit's placement.
func loadPlacement(f Fields, k, defIn, method string) placement {
	p := placement{query: defIn == "query", name: k}
	pn, ok := f.Get(k)
	if !ok {
		return p
	}
	pf, ok := pn.Fields("in", "name")
	if !ok {
		return p
	}
	if in, ok := pf.Get("in"); ok {
		if v, ok := in.String(); ok {
			switch v {
			case "body":
				if method == http.MethodGet {
					in.Errorf("a GET request has no body: want query")
				}
				p.query = false
			case "query":
				p.query = true
			default:
				in.Errorf("%.16q: want body or query", v)
			}
		}
	}
	if nn, ok := pf.Get("name"); ok {
		if v, ok := nn.String(); ok {
			if v == "" {
				nn.Errorf("empty")
			}
			p.name = v
		}
	}
	return p
}

// Open makes the source's client: trusted for the URL's host and port, any
// other host under the guard, and no redirect off the URL's origin.
func (s *httpSource) Open(t *Type, deps Deps) (Source, error) {
	timeout := cmp.Or(t.Options.CallTimeout, fanout.DefaultCallTimeout)
	c, err := webhook.NewTrustedClient(timeout, sourceIdleConns, []string{s.rawURL}, deps.OutboundAllow...)
	if err != nil {
		return nil, err
	}
	follow := c.CheckRedirect
	c.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if webhook.Origin(req.URL) != webhook.Origin(via[0].URL) {
			return http.ErrUseLastResponse // trusted for its own origin only
		}
		return follow(req, via)
	}
	return &httpSourceClient{httpSource: s, client: c}, nil
}

type httpSourceClient struct {
	*httpSource
	client *http.Client
}

// requestData is what a body template sees.
type requestData struct {
	Event  eventData
	Cursor string
	Limit  int
}

func (s *httpSourceClient) Page(ctx context.Context, ev fanout.Event, cursor string, limit int) (fanout.Page, error) {
	u := *s.url
	if s.cursor.query || s.limit.query {
		q := u.Query()
		if s.cursor.query && cursor != "" {
			q.Set(s.cursor.name, cursor)
		}
		if s.limit.query {
			q.Set(s.limit.name, strconv.Itoa(limit))
		}
		u.RawQuery = q.Encode()
	}
	var body io.Reader
	if s.method != http.MethodGet {
		b, err := s.requestBody(ctx, ev, cursor, limit)
		if err != nil {
			return fanout.Page{}, err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, s.method, u.String(), body)
	if err != nil {
		return fanout.Page{}, fanout.Permanent(errors.New("recipients endpoint: the request does not build"))
	}
	req.Header = s.headers.Clone()
	req.Header.Set("User-Agent", webhook.UserAgent)
	if body != nil {
		req.Header.Set("Content-Type", s.contentType)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = &url.Error{Op: ue.Op, URL: webhook.Origin(&u), Err: ue.Err} // not the path or query
		}
		return fanout.Page{}, fmt.Errorf("recipients endpoint: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	if err := webhook.Classify(resp); err != nil {
		return fanout.Page{}, fmt.Errorf("recipients endpoint: %w", err)
	}
	if s.answer.isDefault() {
		return webhook.DecodePage(resp.Body)
	}
	return s.decode(resp.Body)
}

// requestBody is the request's body: the template's, or today's
// recipients request with the cursor and limit under their names.
func (s *httpSourceClient) requestBody(ctx context.Context, ev fanout.Event, cursor string, limit int) ([]byte, error) {
	if s.body != nil {
		payload, err := decodeJSON(ev.Payload)
		if err != nil {
			return nil, fanout.Permanent(fmt.Errorf("recipients endpoint: the payload is not JSON: %w", err))
		}
		b, err := s.body.Execute(ctx, requestData{Event: eventData{ID: ev.ID, Type: ev.Type, Priority: string(ev.Priority), Tenant: ev.Tenant, Payload: payload}, Cursor: cursor, Limit: limit})
		if err != nil {
			return nil, fanout.Permanent(fmt.Errorf("recipients endpoint: the body template: %w", err))
		}
		return b, nil
	}
	ev = webhook.WithoutBaggage(ev)
	if !s.cursor.query && !s.limit.query && s.cursor.name == "cursor" && s.limit.name == "limit" {
		return json.Marshal(webhook.RecipientsRequest{Event: ev, Cursor: cursor, Limit: limit})
	}
	evJSON, err := json.Marshal(ev)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.WriteString(`{"event":`)
	b.Write(evJSON)
	for _, f := range []struct {
		p placement
		v any
	}{{s.cursor, cursor}, {s.limit, limit}} {
		if f.p.query {
			continue
		}
		k, _ := json.Marshal(f.p.name)
		v, _ := json.Marshal(f.v)
		b.WriteByte(',')
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// decode reads an answer of the configured shape, at most
// fanout.MaxPageBytes; a larger or malformed one is permanent (asking again
// gets the same answer).
func (s *httpSourceClient) decode(r io.Reader) (fanout.Page, error) {
	b, err := io.ReadAll(io.LimitReader(r, fanout.MaxPageBytes+1))
	if err != nil {
		return fanout.Page{}, fmt.Errorf("recipients endpoint: read page: %w", err)
	}
	if len(b) > fanout.MaxPageBytes {
		return fanout.Page{}, fanout.Permanent(fmt.Errorf("page_too_large: the recipients page is over %d bytes", fanout.MaxPageBytes))
	}
	if !json.Valid(b) {
		return fanout.Page{}, fanout.Permanent(errors.New("invalid_page: the answer is not JSON"))
	}
	list, err := s.answer.recipients.Find(b)
	if err != nil {
		return fanout.Page{}, fanout.Permanent(fmt.Errorf("invalid_page: no recipients at %q", s.answer.recipients.String()))
	}
	var items []json.RawMessage
	if !isNull(list) {
		if err := json.Unmarshal(list, &items); err != nil {
			return fanout.Page{}, fanout.Permanent(fmt.Errorf("invalid_page: the recipients at %q are not a list", s.answer.recipients.String()))
		}
	}
	page := fanout.Page{Recipients: make([]fanout.Recipient, 0, len(items))}
	for i, it := range items {
		r, err := item(it, s.answer.id, s.answer.address)
		if err != nil {
			return fanout.Page{}, fanout.Permanent(fmt.Errorf("invalid_page: recipient %d: %w", i, err))
		}
		page.Recipients = append(page.Recipients, r)
	}
	next, err := s.answer.next.Find(b)
	switch {
	case errors.Is(err, errNotFound) || err == nil && isNull(next):
	case err != nil:
		return fanout.Page{}, fanout.Permanent(fmt.Errorf("invalid_page: %w", err))
	default:
		c, ok := scalarText(next)
		if !ok {
			return fanout.Page{}, fanout.Permanent(fmt.Errorf("invalid_page: the next cursor at %q is not a string or number", s.answer.next.String()))
		}
		page.NextCursor = c
	}
	return page, nil
}
