// Package netguard decides where fanout's outbound HTTP may connect. Every
// address a recipients endpoint or a recipient names is untrusted: the guard
// checks the IP actually dialled (after DNS, at dial time, so a name that
// resolves to an internal address or changes between check and use is caught)
// against the IANA special-purpose address registries, as code.dny.dev/ssrf
// generates them from the registries — loopback, private, link-local (the
// cloud metadata address 169.254.169.254 among them), CGNAT, documentation,
// benchmarking, AS112, 6to4, Teredo, reserved — plus multicast and every IPv6
// address outside global unicast (2000::/3: unique-local, link-local, NAT64,
// IPv4-compatible ::a.b.c.d, ...), IPv4-mapped addresses judged as the IPv4
// address they carry, unless the operator's allow-list names them.
//
// An endpoint the operator configures (a recipients URL, a types file's
// source) is trusted for its own host only: Pin dials that host and port
// wherever its name resolves, private or loopback as it may be, and every
// other address under the guard.
package netguard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"syscall"

	"code.dny.dev/ssrf"
	"golang.org/x/net/idna"
)

// deniedBy says why ip (unmapped, no zone) is refused ("in 10.0.0.0/8"),
// or "" when it is a public unicast address.
func deniedBy(ip netip.Addr) string {
	if ip.Is4() {
		for _, d := range ssrf.IPv4DeniedPrefixes {
			if d.Contains(ip) {
				return "in " + d.String()
			}
		}
		return ""
	}
	if !ssrf.IPv6GlobalUnicast.Contains(ip) {
		return "outside IPv6 global unicast " + ssrf.IPv6GlobalUnicast.String()
	}
	for _, d := range ssrf.IPv6DeniedPrefixes {
		if d.Contains(ip) {
			return "in " + d.String()
		}
	}
	return ""
}

func mustPrefixes(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParsePrefix(s)
	}
	return out
}

// ErrDenied is wrapped by every refusal.
var ErrDenied = errors.New("destination not allowed")

// Policy is an allow-list of ranges that are reachable although the
// special-purpose registries hold them (a private network the recipients really live on, loopback in
// development). The zero Policy allows only public addresses.
type Policy struct {
	Allow []netip.Prefix
}

// Parse reads a comma-separated list of CIDR prefixes or single addresses
// ("127.0.0.0/8,::1,10.20.0.0/16"); empty allows nothing extra.
func Parse(list string) (Policy, error) {
	var p Policy
	for _, f := range strings.Split(list, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if !strings.Contains(f, "/") {
			a, err := netip.ParseAddr(f)
			if err != nil {
				return Policy{}, fmt.Errorf("%q is neither an address nor a CIDR prefix", f)
			}
			f = netip.PrefixFrom(a, a.BitLen()).String()
		}
		pr, err := netip.ParsePrefix(f)
		if err != nil {
			return Policy{}, fmt.Errorf("%q: %w", f, err)
		}
		p.Allow = append(p.Allow, pr.Masked())
	}
	return p, nil
}

// Loopback allows 127.0.0.0/8 and ::1: for development and tests, where the
// recipients and the sink run on this machine.
func Loopback() Policy {
	return Policy{Allow: mustPrefixes("127.0.0.0/8", "::1/128")}
}

// Check reports whether ip may be dialled.
func (p Policy) Check(ip netip.Addr) error {
	if !ip.IsValid() {
		return fmt.Errorf("%w: invalid address", ErrDenied)
	}
	ip = ip.Unmap().WithZone("")
	for _, a := range p.Allow {
		if a.Contains(ip) {
			return nil
		}
	}
	if d := deniedBy(ip); d != "" {
		return fmt.Errorf("%w: %s is %s (allow it with FANOUT_OUTBOUND_ALLOW)", ErrDenied, ip, d)
	}
	return nil
}

// Control is a net.Dialer Control function: it runs after DNS resolution,
// on the very address about to be connected, and refuses it unless Check
// allows it.
func (p Policy) Control(network, address string, _ syscall.RawConn) error {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return fmt.Errorf("%w: %q: %v", ErrDenied, address, err)
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return fmt.Errorf("%w: %q is not an IP address", ErrDenied, host)
	}
	return p.Check(ip)
}

// Dial returns d's DialContext with p's guard on every connection (Control:
// the IP about to be connected, after DNS): the dialling of untrusted
// addresses.
func (p Policy) Dial(d net.Dialer) func(ctx context.Context, network, addr string) (net.Conn, error) {
	d.Control = p.Control
	return d.DialContext
}

// Pin returns the DialContext of a client for endpoints the operator
// configured: a connection to one of hosts (DialAddr of each endpoint's URL)
// is dialled by d unguarded, wherever that name resolves (the operator
// chose the host, an in-cluster Service or a loopback port as it may be);
// a connection to any other address (a redirect to another host) is
// dialled under p, as every untrusted address is. The comparison is on the
// host and port the transport dials (net/http hands DialContext the
// request's host, IDNA ASCII, and port, the scheme's default when the URL
// names none; without a proxy), never on what the name resolves to.
func (p Policy) Pin(d net.Dialer, hosts ...string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	pinned := make(map[string]bool, len(hosts))
	for _, h := range hosts {
		pinned[strings.ToLower(h)] = true
	}
	trusted, guarded := d.DialContext, p.Dial(d)
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if pinned[strings.ToLower(addr)] {
			return trusted(ctx, network, addr)
		}
		return guarded(ctx, network, addr)
	}
}

// DialAddr is the host:port net/http's transport dials for u without a
// proxy: u's host (IDNA ASCII when it is not ASCII) and its port, or the scheme's (80 for http,
// 443 for https) when u names none; lower-case (Pin compares without case).
// It fails for a URL without a host or an http(s) scheme, and for a host
// that is not a valid IDNA name.
func DialAddr(u *url.URL) (string, error) {
	host := u.Hostname()
	if host == "" {
		return "", errors.New("no host")
	}
	port := u.Port()
	if port == "" {
		switch u.Scheme {
		case "http":
			port = "80"
		case "https":
			port = "443"
		default:
			return "", fmt.Errorf("scheme %.16q is not http or https", u.Scheme)
		}
	}
	if !isASCII(host) { // as net/http: an ASCII host is dialled as written
		var err error
		if host, err = idna.Lookup.ToASCII(host); err != nil {
			return "", fmt.Errorf("host: %w", err)
		}
	}
	return strings.ToLower(net.JoinHostPort(host, port)), nil
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}
