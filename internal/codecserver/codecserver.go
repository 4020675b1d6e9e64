// Package codecserver serves fanout's payload codec over HTTP for the
// Temporal UI and the temporal CLI, so that operators read events' payloads,
// recipients and messages in clear while the histories keep them encrypted.
//
// It wraps the SDK's converter.NewPayloadCodecHTTPHandler, which speaks the
// remote codec protocol (POST <endpoint>/encode and <endpoint>/decode, a
// JSON {"payloads": [...]} body both ways), with what a codec server that
// can decrypt everything needs in front of it:
//
//   - bearer-token auth: "Authorization: Bearer <token>", compared in
//     constant time against every configured token (several while
//     rotating); 401 without one or with a wrong one. The token is never
//     logged.
//   - CORS for the UI's origins only: a browser's preflight (OPTIONS) from an
//     allowed origin is answered with the allowed method and headers
//     (Authorization, Content-Type, X-Namespace); other origins get no CORS
//     header, so the browser refuses to let their pages read the answer.
//   - only POST to a path ending in /encode or /decode (the UI calls
//     <endpoint>/decode; the CLI replaces {namespace} in its endpoint, so
//     /default/decode works too); other methods get 405, other paths 404.
//   - a bounded request body (MaxBodyBytes, 4 MiB by default; 413 above).
//
// Running without a token is an explicit opt-out (InsecureNoAuth), which
// Listen accepts only on a loopback address: the dev server's UI has no
// login, so it has no access token to pass (see the README). Such a server
// answers only requests whose Host header is a loopback name or address or
// one of AllowedHosts (403 otherwise): a page whose DNS name an attacker
// rebinds to 127.0.0.1 is same-origin with it for the browser, but sends
// its own name as the Host.
package codecserver

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.temporal.io/sdk/converter"
)

// DefaultMaxBodyBytes bounds a request body: a 2 MB payload (Temporal's
// limit) in base64 and JSON fits with room to spare.
const DefaultMaxBodyBytes = 4 << 20

// AllowedHeaders are the request headers a preflight allows: the UI sends
// Content-Type and X-Namespace, and Authorization when it passes a token.
var AllowedHeaders = []string{"Authorization", "Content-Type", "X-Namespace"}

// Options configure the handler.
type Options struct {
	// Codecs encode and decode, in the order a client's data converter
	// applies them (the SDK's handler decodes in reverse).
	Codecs []converter.PayloadCodec
	// Tokens are the accepted bearer tokens; a request must present one of
	// them. Empty is refused unless InsecureNoAuth.
	Tokens []string
	// InsecureNoAuth serves every caller without a token. Listen accepts it
	// only on a loopback address, and the server then answers only requests
	// for a loopback host or one of AllowedHosts.
	InsecureNoAuth bool
	// AllowedHosts are host names (no port) an InsecureNoAuth server
	// answers for besides localhost, 127.0.0.0/8 and ::1.
	AllowedHosts []string
	// AllowedOrigins are the exact origins (scheme://host[:port], e.g.
	// http://localhost:8233) whose pages may call the server from a
	// browser: the Temporal UI's.
	AllowedOrigins []string
	// MaxBodyBytes bounds a request body (0: DefaultMaxBodyBytes).
	MaxBodyBytes int64
	// Logger receives refused requests (never their token); nil discards.
	Logger *slog.Logger
}

type handler struct {
	next    http.Handler
	hosts   []string
	tokens  [][sha256.Size]byte
	noAuth  bool
	origins []string
	max     int64
	log     *slog.Logger
}

// New returns the codec server's handler.
func New(o Options) (http.Handler, error) {
	if len(o.Codecs) == 0 {
		return nil, errors.New("codecserver: no codec")
	}
	if len(o.Tokens) == 0 && !o.InsecureNoAuth {
		return nil, errors.New("codecserver: no token configured (FANOUT_CODEC_TOKEN or FANOUT_CODEC_TOKEN_FILE); serving without one needs the explicit insecure opt-out, on loopback only")
	}
	if len(o.Tokens) > 0 && o.InsecureNoAuth {
		return nil, errors.New("codecserver: tokens configured together with the insecure no-auth opt-out; use one")
	}
	h := &handler{next: converter.NewPayloadCodecHTTPHandler(o.Codecs...), noAuth: o.InsecureNoAuth, max: o.MaxBodyBytes, log: o.Logger}
	for i, t := range o.Tokens {
		if t == "" || strings.ContainsAny(t, " \t\r\n") {
			return nil, fmt.Errorf("codecserver: token %d is empty or contains white space", i+1)
		}
		// Hashing first makes the comparison constant time in the
		// token's length too.
		h.tokens = append(h.tokens, sha256.Sum256([]byte(t)))
	}
	for _, host := range o.AllowedHosts {
		if err := ValidateHost(host); err != nil {
			return nil, err
		}
		h.hosts = append(h.hosts, host)
	}
	for _, origin := range o.AllowedOrigins {
		if err := ValidateOrigin(origin); err != nil {
			return nil, err
		}
		h.origins = append(h.origins, origin)
	}
	if h.max <= 0 {
		h.max = DefaultMaxBodyBytes
	}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	return h, nil
}

// ValidateOrigin checks that origin is an origin as browsers send it:
// http or https, a host, an optional port, nothing else.
func ValidateOrigin(origin string) error {
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
		u.Path != "" || u.RawQuery != "" || u.Fragment != "" || origin != u.Scheme+"://"+u.Host {
		return fmt.Errorf("codecserver: CORS origin %q is not an origin (scheme://host[:port], e.g. http://localhost:8233)", origin)
	}
	return nil
}

// hostName is a host name or address: labels of letters, digits and
// hyphens.
var hostName = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*$`)

// ValidateHost checks that host is a host name or an IP address, without
// a port or anything else.
func ValidateHost(host string) error {
	if _, err := netip.ParseAddr(host); err == nil || hostName.MatchString(host) {
		return nil
	}
	return fmt.Errorf("codecserver: %q is not a host name or address (no scheme, no port)", host)
}

// hostAllowed reports whether a request's Host (host[:port]) names this
// server as a loopback client would, or as configured.
func (h *handler) hostAllowed(hostport string) bool {
	host := hostport
	if hh, _, err := net.SplitHostPort(hostport); err == nil {
		host = hh
	}
	host = strings.TrimSuffix(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"), ".")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		return ip.Unmap().IsLoopback()
	}
	return slices.ContainsFunc(h.hosts, func(a string) bool { return strings.EqualFold(a, host) })
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h.noAuth && !h.hostAllowed(r.Host) {
		h.log.Warn("codec server: refused a request for a host that is not loopback nor in FANOUT_CODEC_HOSTS (DNS rebinding?)",
			"remote", r.RemoteAddr, "host", clip(r.Host, 256))
		http.Error(w, "Host not allowed", http.StatusForbidden)
		return
	}
	origin := r.Header.Get("Origin")
	allowed := origin != "" && slices.Contains(h.origins, origin)
	if allowed {
		w.Header().Set("Access-Control-Allow-Origin", origin)
	}
	w.Header().Add("Vary", "Origin")

	if r.Method == http.MethodOptions {
		h.preflight(w, r, allowed)
		return
	}
	if !strings.HasSuffix(r.URL.Path, "/encode") && !strings.HasSuffix(r.URL.Path, "/decode") {
		http.NotFound(w, r)
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST, OPTIONS")
		http.Error(w, http.StatusText(http.StatusMethodNotAllowed), http.StatusMethodNotAllowed)
		return
	}
	if !h.authorised(r) {
		h.log.Warn("codec server: refused a request without a valid token",
			"remote", r.RemoteAddr, "path", r.URL.Path, "namespace", r.Header.Get("X-Namespace"), "origin", origin,
			"authorization_present", r.Header.Get("Authorization") != "")
		w.Header().Set("WWW-Authenticate", `Bearer realm="fanout-codec"`)
		http.Error(w, http.StatusText(http.StatusUnauthorized), http.StatusUnauthorized)
		return
	}
	if r.ContentLength > h.max {
		h.tooLarge(w, r)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, h.max+1))
	if err != nil {
		http.Error(w, "reading the request body failed", http.StatusBadRequest)
		return
	}
	if int64(len(body)) > h.max {
		h.tooLarge(w, r)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	h.next.ServeHTTP(w, r)
}

func (h *handler) tooLarge(w http.ResponseWriter, r *http.Request) {
	h.log.Warn("codec server: refused a request body over the limit", "remote", r.RemoteAddr, "path", r.URL.Path, "limit_bytes", h.max)
	w.Header().Set("Connection", "close") // the rest of the body is not read
	http.Error(w, fmt.Sprintf("request body over %d bytes", h.max), http.StatusRequestEntityTooLarge)
}

// preflight answers a CORS preflight: the allowed method and headers for
// an allowed origin asking for POST, and no CORS header otherwise (the
// browser then refuses the actual request).
func (h *handler) preflight(w http.ResponseWriter, r *http.Request, allowed bool) {
	w.Header().Add("Vary", "Access-Control-Request-Method")
	w.Header().Add("Vary", "Access-Control-Request-Headers")
	if !allowed || r.Header.Get("Access-Control-Request-Method") != http.MethodPost {
		w.Header().Del("Access-Control-Allow-Origin")
		h.log.Warn("codec server: refused a CORS preflight", "remote", r.RemoteAddr, "origin", r.Header.Get("Origin"),
			"method", r.Header.Get("Access-Control-Request-Method"))
		w.WriteHeader(http.StatusForbidden)
		return
	}
	w.Header().Set("Access-Control-Allow-Methods", "POST")
	w.Header().Set("Access-Control-Allow-Headers", strings.Join(AllowedHeaders, ", "))
	w.Header().Set("Access-Control-Max-Age", strconv.Itoa(600))
	w.WriteHeader(http.StatusNoContent)
}

// authorised reports whether r presents one of the tokens (or no token is
// needed). Every configured token is compared, so the time taken does not
// say which one matched.
func (h *handler) authorised(r *http.Request) bool {
	if h.noAuth {
		return true
	}
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return false
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(token)))
	match := 0
	for i := range h.tokens {
		match |= subtle.ConstantTimeCompare(sum[:], h.tokens[i][:])
	}
	return match == 1
}

// IsLoopback reports whether addr (host:port) listens only on loopback:
// a loopback IP or "localhost". An empty host (every interface) is not.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Server is a codec server listening on an address.
type Server struct {
	srv *http.Server
	ln  net.Listener
}

// Listen validates o, listens on addr and returns the server (not yet
// serving: call Serve). InsecureNoAuth is refused unless addr is loopback.
func Listen(addr string, o Options) (*Server, error) {
	if o.InsecureNoAuth && !IsLoopback(addr) {
		return nil, fmt.Errorf("codecserver: serving without a token is allowed only on a loopback address (127.0.0.1:port, [::1]:port or localhost:port), not %q", addr)
	}
	h, err := New(o)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return &Server{ln: ln, srv: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute,
		WriteTimeout: time.Minute, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10}}, nil
}

// URL is the server's endpoint, e.g. http://127.0.0.1:8234: what
// --ui-codec-endpoint and --codec-endpoint take.
func (s *Server) URL() string { return "http://" + s.ln.Addr().String() }

// Addr is the address the server listens on.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Serve serves until Shutdown or Close; it returns nil after them.
func (s *Server) Serve() error {
	if err := s.srv.Serve(s.ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Shutdown stops the server gracefully within ctx.
func (s *Server) Shutdown(ctx context.Context) error { return s.srv.Shutdown(ctx) }

// Close stops the server at once.
func (s *Server) Close() error { return s.srv.Close() }

// clip is s cut to at most n bytes, for logs.
func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}
