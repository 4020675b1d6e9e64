package webhook

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// URLPrefix is one entry of a URL allow-list (FANOUT_RECIPIENTS_URL_ALLOW):
// a scheme, host and port, and a path that a URL's path must start with.
// It matches parsed URLs, never strings: "http://127.0.0.1:9999" does not
// match "http://127.0.0.1:9999@other/" (user information, then another
// host) nor "http://127.0.0.1:99990/"; "https://a.example.com" does not
// match "https://a.example.com.evil/".
type URLPrefix struct {
	scheme, host, port string
	path               string // "/" or a path ending in "/"
}

// ParseURLPrefix reads an allow-list entry: "http" or "https", "://", a host
// of ASCII letters, digits and ".-_" (or an IP address), an optional ":port"
// (1-65535), then nothing or a path ending in "/" ("https://hooks.example.com/recipients/").
// An entry that ends anywhere else ("http://127.0.0.1:", "https://a.example.com/api"),
// or has user information, a query, a fragment or a "." or ".." segment, is
// refused: it would read as a string prefix of URLs it does not mean.
func ParseURLPrefix(entry string) (URLPrefix, error) {
	u, err := url.Parse(entry)
	if err != nil {
		return URLPrefix{}, errors.New("not a URL")
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Opaque != "" || u.Host == "" {
		return URLPrefix{}, errors.New("not an http or https URL with a host")
	}
	if u.User != nil || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || strings.ContainsAny(entry, "?#@") {
		return URLPrefix{}, errors.New("user information, a query or a fragment is not allowed")
	}
	p := URLPrefix{scheme: u.Scheme, host: strings.ToLower(u.Hostname()), port: effectivePort(u)}
	if !asciiHost(p.host) {
		return URLPrefix{}, errors.New("the host is not ASCII letters, digits and .-_ (write a name in its xn-- form)")
	}
	if strings.HasSuffix(u.Host, ":") || !validPort(p.port) {
		return URLPrefix{}, errors.New("it does not end at the host: the port is empty or not 1-65535")
	}
	switch p.path = u.EscapedPath(); {
	case p.path == "":
		p.path = "/"
	case !strings.HasSuffix(p.path, "/") || u.Path != p.path || hasDotSegment(u.Path):
		return URLPrefix{}, errors.New("the path does not end with \"/\" or holds an escape, \".\" or \"..\" segment")
	}
	return p, nil
}

// ParseURLPrefixes parses every entry of list; the error names the first
// bad entry.
func ParseURLPrefixes(list []string) ([]URLPrefix, error) {
	out := make([]URLPrefix, 0, len(list))
	for _, e := range list {
		p, err := ParseURLPrefix(e)
		if err != nil {
			return nil, fmt.Errorf("%.128q: %w", e, err)
		}
		out = append(out, p)
	}
	return out, nil
}

// Match reports whether u is under p: no user information, the same scheme,
// host (any case) and port (a missing one is the scheme's default), and a
// path that starts with p's path, both as written and decoded, and holds
// no "." or ".." segment a server would resolve out of it.
func (p URLPrefix) Match(u *url.URL) bool {
	if u == nil || u.User != nil || u.Opaque != "" || u.Scheme != p.scheme {
		return false
	}
	if strings.ToLower(u.Hostname()) != p.host || effectivePort(u) != p.port || strings.HasSuffix(u.Host, ":") {
		return false
	}
	path, escaped := u.Path, u.EscapedPath()
	if path == "" && escaped == "" {
		path, escaped = "/", "/"
	}
	return strings.HasPrefix(path, p.path) && strings.HasPrefix(escaped, p.path) && !hasDotSegment(path)
}

// effectivePort is u's port, or its scheme's default.
func effectivePort(u *url.URL) string {
	if port := u.Port(); port != "" {
		return port
	}
	if u.Scheme == "https" {
		return "443"
	}
	return "80"
}

func validPort(port string) bool {
	n, err := strconv.Atoi(port)
	return err == nil && n >= 1 && n <= 65535 && strconv.Itoa(n) == port
}

// asciiHost: a host name or IP address of ASCII letters, digits and
// ".-_:" (":" for IPv6, which url.URL.Hostname gives without brackets).
func asciiHost(h string) bool {
	if h == "" {
		return false
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '.' && c != '-' && c != '_' && c != ':' {
			return false
		}
	}
	return true
}

// hasDotSegment reports whether a decoded path has a "." or ".." segment.
func hasDotSegment(path string) bool {
	for seg := range strings.SplitSeq(path, "/") {
		if seg == "." || seg == ".." {
			return true
		}
	}
	return false
}
