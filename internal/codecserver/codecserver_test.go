package codecserver

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
)

// testCodec is a stand-in for the real codec: it reverses the payload's
// bytes and marks the encoding, which is enough to tell encoded from
// decoded.
type testCodec struct{}

const testEncoding = "binary/test-reversed"

func (testCodec) Encode(ps []*commonpb.Payload) ([]*commonpb.Payload, error) {
	out := make([]*commonpb.Payload, len(ps))
	for i, p := range ps {
		b, _ := p.Marshal()
		slices.Reverse(b)
		out[i] = &commonpb.Payload{Metadata: map[string][]byte{converter.MetadataEncoding: []byte(testEncoding)}, Data: b}
	}
	return out, nil
}

func (testCodec) Decode(ps []*commonpb.Payload) ([]*commonpb.Payload, error) {
	out := make([]*commonpb.Payload, len(ps))
	for i, p := range ps {
		if string(p.Metadata[converter.MetadataEncoding]) != testEncoding {
			out[i] = p
			continue
		}
		b := slices.Clone(p.Data)
		slices.Reverse(b)
		out[i] = &commonpb.Payload{}
		if err := out[i].Unmarshal(b); err != nil {
			return nil, err
		}
	}
	return out, nil
}

const (
	token   = "tok-0123456789abcdef-secret"
	token2  = "tok-fedcba9876543210-newer"
	uiOrign = "http://localhost:8233"
)

func newServer(t *testing.T, o Options) *httptest.Server {
	t.Helper()
	if o.Codecs == nil {
		o.Codecs = []converter.PayloadCodec{testCodec{}}
	}
	if o.Tokens == nil && !o.InsecureNoAuth {
		o.Tokens = []string{token, token2}
	}
	if o.AllowedOrigins == nil {
		o.AllowedOrigins = []string{uiOrign}
	}
	h, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// encrypted is the marker payload as the workers store it in a history.
func encrypted(t *testing.T, marker string) *commonpb.Payload {
	t.Helper()
	p, err := converter.GetDefaultDataConverter().ToPayload(map[string]string{"text": marker})
	if err != nil {
		t.Fatal(err)
	}
	enc, err := testCodec{}.Encode([]*commonpb.Payload{p})
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(enc[0].Data, []byte(marker)) {
		t.Fatal("test codec left the marker in clear")
	}
	return enc[0]
}

func body(t *testing.T, ps ...*commonpb.Payload) []byte {
	t.Helper()
	b, err := json.Marshal(&commonpb.Payloads{Payloads: ps})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func do(t *testing.T, method, url string, b []byte, hdr map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = res.Body.Close() })
	return res
}

// TestAuthorisedCallerDecodes: the UI's request (POST <endpoint>/decode,
// X-Namespace, a bearer token) gets the payload back in clear; so does the
// CLI's client (the SDK's remote codec, with --codec-auth's header and a
// {namespace} path), and the second (rotated-in) token works the same.
func TestAuthorisedCallerDecodes(t *testing.T) {
	srv := newServer(t, Options{})
	const marker = "marker-7f3a-decoded"
	res := do(t, http.MethodPost, srv.URL+"/decode", body(t, encrypted(t, marker)), map[string]string{
		"Authorization": "Bearer " + token, "Content-Type": "application/json", "X-Namespace": "default", "Origin": uiOrign,
	})
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(res.Body)
		t.Fatalf("decode: %s: %s", res.Status, b)
	}
	if got := res.Header.Get("Access-Control-Allow-Origin"); got != uiOrign {
		t.Errorf("Access-Control-Allow-Origin = %q, want %q", got, uiOrign)
	}
	b, _ := io.ReadAll(res.Body)
	var out commonpb.Payloads
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("response %s: %v", b, err)
	}
	var v map[string]string
	if len(out.Payloads) != 1 {
		t.Fatalf("got %d payloads", len(out.Payloads))
	}
	if err := converter.GetDefaultDataConverter().FromPayload(out.Payloads[0], &v); err != nil || v["text"] != marker {
		t.Fatalf("decoded %v (%v), want text %q", v, err, marker)
	}

	for _, tok := range []string{token, token2} {
		remote := converter.NewRemotePayloadCodec(converter.RemotePayloadCodecOptions{
			Endpoint: srv.URL + "/default",
			ModifyRequest: func(r *http.Request) error {
				r.Header.Set("X-Namespace", "default")
				r.Header.Set("Authorization", "Bearer "+tok)
				return nil
			},
		})
		dec, err := remote.Decode([]*commonpb.Payload{encrypted(t, marker)})
		if err != nil {
			t.Fatalf("remote decode: %v", err)
		}
		if err := converter.GetDefaultDataConverter().FromPayload(dec[0], &v); err != nil || v["text"] != marker {
			t.Fatalf("remote decoded %v (%v)", v, err)
		}
		p, _ := converter.GetDefaultDataConverter().ToPayload("input")
		enc, err := remote.Encode([]*commonpb.Payload{p})
		if err != nil || string(enc[0].Metadata[converter.MetadataEncoding]) != testEncoding {
			t.Fatalf("remote encode: %v %v", enc, err)
		}
	}
}

// TestUnauthorised: no token, a wrong token, a token under another scheme
// and a prefix of the token all get 401, and the log of the refusals
// never holds what the caller sent.
func TestUnauthorised(t *testing.T) {
	var logs bytes.Buffer
	srv := newServer(t, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	wrong := "tok-wrong-but-long-enough-xyz"
	for name, auth := range map[string]string{
		"none":   "",
		"wrong":  "Bearer " + wrong,
		"basic":  "Basic " + token,
		"prefix": "Bearer " + token[:len(token)-1],
		"empty":  "Bearer ",
	} {
		res := do(t, http.MethodPost, srv.URL+"/decode", body(t, encrypted(t, "marker-abc")), map[string]string{"Authorization": auth, "Content-Type": "application/json"})
		if res.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s: %s, want 401", name, res.Status)
		}
		if !strings.HasPrefix(res.Header.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("%s: WWW-Authenticate %q", name, res.Header.Get("WWW-Authenticate"))
		}
		b, _ := io.ReadAll(res.Body)
		if bytes.Contains(b, []byte(`"payloads"`)) {
			t.Errorf("%s: refused response carries payloads: %s", name, b)
		}
	}
	if !strings.Contains(logs.String(), "refused") {
		t.Fatalf("refusals not logged: %q", logs.String())
	}
	for _, secret := range []string{wrong, token, token[:len(token)-1]} {
		if strings.Contains(logs.String(), secret) {
			t.Fatalf("log holds a token: %q", logs.String())
		}
	}
}

// TestCORS: the UI's origin gets its preflight answered and its responses
// labelled; any other origin gets no CORS header at all, on the preflight
// or on the request.
func TestCORS(t *testing.T) {
	srv := newServer(t, Options{})
	pre := func(origin string) *http.Response {
		return do(t, http.MethodOptions, srv.URL+"/decode", nil, map[string]string{
			"Origin": origin, "Access-Control-Request-Method": "POST",
			"Access-Control-Request-Headers": "authorization,content-type,x-namespace",
		})
	}
	res := pre(uiOrign)
	if res.StatusCode/100 != 2 {
		t.Fatalf("preflight from the UI: %s", res.Status)
	}
	if got := res.Header.Get("Access-Control-Allow-Origin"); got != uiOrign {
		t.Errorf("preflight Access-Control-Allow-Origin = %q", got)
	}
	if got := res.Header.Get("Access-Control-Allow-Methods"); !strings.Contains(got, "POST") {
		t.Errorf("preflight Access-Control-Allow-Methods = %q", got)
	}
	allowHeaders := strings.ToLower(res.Header.Get("Access-Control-Allow-Headers"))
	for _, h := range []string{"authorization", "content-type", "x-namespace"} {
		if !strings.Contains(allowHeaders, h) {
			t.Errorf("preflight Access-Control-Allow-Headers %q lacks %s", allowHeaders, h)
		}
	}

	for _, evil := range []string{"http://evil.example", "http://localhost:8234", "http://localhost:8233.evil.example", "null"} {
		res := pre(evil)
		if res.StatusCode/100 == 2 {
			t.Errorf("preflight from %s: %s", evil, res.Status)
		}
		for k := range res.Header {
			if strings.HasPrefix(k, "Access-Control-") {
				t.Errorf("preflight from %s got %s: %q", evil, k, res.Header.Get(k))
			}
		}
		res = do(t, http.MethodPost, srv.URL+"/decode", body(t, encrypted(t, "marker-abc")), map[string]string{
			"Origin": evil, "Authorization": "Bearer " + token, "Content-Type": "application/json",
		})
		if got := res.Header.Get("Access-Control-Allow-Origin"); got != "" {
			t.Errorf("POST from %s got Access-Control-Allow-Origin %q", evil, got)
		}
	}
	// A preflight for another method is refused too.
	res = do(t, http.MethodOptions, srv.URL+"/decode", nil, map[string]string{"Origin": uiOrign, "Access-Control-Request-Method": "DELETE"})
	if res.StatusCode/100 == 2 || res.Header.Get("Access-Control-Allow-Methods") != "" {
		t.Errorf("preflight for DELETE: %s %v", res.Status, res.Header)
	}
}

// TestOversizedBody: a body over the limit gets 413, declared or streamed.
func TestOversizedBody(t *testing.T) {
	srv := newServer(t, Options{MaxBodyBytes: 1024})
	big := body(t, &commonpb.Payload{Data: bytes.Repeat([]byte("x"), 2048)})
	res := do(t, http.MethodPost, srv.URL+"/decode", big, map[string]string{"Authorization": "Bearer " + token})
	if res.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("declared length: %s, want 413", res.Status)
	}
	// Chunked, with no Content-Length: the read is bounded all the same.
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/decode", io.MultiReader(bytes.NewReader(big)))
	req.Header.Set("Authorization", "Bearer "+token)
	req.ContentLength = -1
	res2, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = res2.Body.Close() }()
	if res2.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("chunked: %s, want 413", res2.Status)
	}
	// At the limit's side of it, a body passes.
	ok := do(t, http.MethodPost, srv.URL+"/decode", body(t, encrypted(t, "small")), map[string]string{"Authorization": "Bearer " + token})
	if ok.StatusCode != http.StatusOK {
		t.Fatalf("small body: %s", ok.Status)
	}
}

// TestMethodsAndPaths: only POST to /encode and /decode.
func TestMethodsAndPaths(t *testing.T) {
	srv := newServer(t, Options{})
	auth := map[string]string{"Authorization": "Bearer " + token}
	for _, m := range []string{http.MethodGet, http.MethodPut, http.MethodDelete} {
		res := do(t, m, srv.URL+"/decode", nil, auth)
		if res.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("%s /decode: %s, want 405", m, res.Status)
		}
		if !strings.Contains(res.Header.Get("Allow"), "POST") {
			t.Errorf("%s /decode: Allow %q", m, res.Header.Get("Allow"))
		}
	}
	for _, p := range []string{"/", "/metrics", "/decode/x", "/decoder"} {
		res := do(t, http.MethodPost, srv.URL+p, body(t), auth)
		if res.StatusCode != http.StatusNotFound {
			t.Errorf("POST %s: %s, want 404", p, res.Status)
		}
	}
}

// TestInsecureNoAuthOnlyOnLoopback: the opt-out serves without a token on
// loopback and is refused on any other address; without tokens and
// without the opt-out there is no server.
func TestInsecureNoAuthOnlyOnLoopback(t *testing.T) {
	codecs := []converter.PayloadCodec{testCodec{}}
	for _, addr := range []string{":0", "0.0.0.0:0", "[::]:0", "10.0.0.1:0", "example.com:0"} {
		if s, err := Listen(addr, Options{Codecs: codecs, InsecureNoAuth: true}); err == nil {
			_ = s.Close()
			t.Errorf("insecure no-auth accepted on %s", addr)
		}
	}
	if _, err := New(Options{Codecs: codecs}); err == nil {
		t.Error("no token and no opt-out accepted")
	}
	if _, err := New(Options{Codecs: codecs, Tokens: []string{token}, InsecureNoAuth: true}); err == nil {
		t.Error("tokens together with the opt-out accepted")
	}
	s, err := Listen("127.0.0.1:0", Options{Codecs: codecs, InsecureNoAuth: true})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.Serve() }()
	defer func() { _ = s.Close() }()
	res := do(t, http.MethodPost, s.URL()+"/decode", body(t, encrypted(t, "marker-abc")), nil)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("insecure loopback server: %s", res.Status)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestConfig(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "tokens")
	if err := os.WriteFile(file, []byte(token+"\n"+token2+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := Config{TokenFile: file, CORSOrigins: []string{" http://localhost:8233", "https://temporal.example.com"}}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	toks, _ := c.Tokens()
	if !slices.Equal(toks, []string{token, token2}) {
		t.Fatalf("tokens %d", len(toks))
	}
	if got := c.Origins(); !slices.Equal(got, []string{"http://localhost:8233", "https://temporal.example.com"}) {
		t.Fatalf("origins %q", got)
	}
	for name, bad := range map[string]Config{
		"both":        {Token: token, TokenFile: file},
		"short":       {Token: "short"},
		"missing":     {TokenFile: filepath.Join(dir, "nope")},
		"origin path": {Token: token, CORSOrigins: []string{"http://localhost:8233/"}},
		"origin star": {Token: token, CORSOrigins: []string{"*"}},
	} {
		err := bad.Validate()
		if err == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		if strings.Contains(err.Error(), token) {
			t.Errorf("%s: error holds the token: %v", name, err)
		}
		if !strings.Contains(err.Error(), "FANOUT_CODEC_") {
			t.Errorf("%s: error names no variable: %v", name, err)
		}
	}
	if err := (&Config{Token: "a-token-with a-space-in-it"}).Validate(); err == nil || strings.Contains(err.Error(), "a-space") {
		t.Errorf("white space: %v", err)
	}
}

// TestInsecureNoAuthChecksTheHost: without a token the server answers only
// requests whose Host is a loopback name or address, or a host the
// operator configured, so a page on a rebound DNS name (evil.example
// resolving to 127.0.0.1) cannot read decrypted payloads; with a token the
// Host is not checked (the rebound page has no token).
func TestInsecureNoAuthChecksTheHost(t *testing.T) {
	codecs := []converter.PayloadCodec{testCodec{}}
	s, err := Listen("127.0.0.1:0", Options{Codecs: codecs, InsecureNoAuth: true, AllowedHosts: []string{"codec.dev.internal"}})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.Serve() }()
	defer func() { _ = s.Close() }()
	_, port, _ := net.SplitHostPort(s.Addr().String())
	postTo := func(url, host, auth string) int {
		req, err := http.NewRequest(http.MethodPost, url+"/decode", bytes.NewReader(body(t, encrypted(t, "marker-abc"))))
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = res.Body.Close()
		return res.StatusCode
	}
	post := func(host string) int { return postTo(s.URL(), host, "") }
	for _, h := range []string{"127.0.0.1:" + port, "localhost:" + port, "LOCALHOST", "[::1]:" + port, "127.0.0.2", "codec.dev.internal:" + port} {
		if code := post(h); code != http.StatusOK {
			t.Errorf("Host %q: %d, want 200", h, code)
		}
	}
	for _, h := range []string{"evil.example:" + port, "evil.example", "localhost.evil.example", "10.0.0.1:" + port, "127.0.0.1.nip.io"} {
		if code := post(h); code != http.StatusForbidden {
			t.Errorf("Host %q: %d, want 403", h, code)
		}
	}
	srv := newServer(t, Options{})
	if code := postTo(srv.URL, "evil.example", "Bearer "+token); code != http.StatusOK {
		t.Errorf("with a token, Host evil.example: %d, want 200", code)
	}
	if err := (&Config{HostsAllowed: []string{"codec.example:8234"}}).Validate(); err == nil || !strings.Contains(err.Error(), "FANOUT_CODEC_HOSTS") {
		t.Errorf("a host with a port accepted: %v", err)
	}
}
