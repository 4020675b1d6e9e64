// Package netguard decides where fanout's outbound HTTP may connect. Every
// address a recipients endpoint or a recipient names is untrusted: the guard
// checks the IP actually dialled (after DNS, at dial time, so a name that
// resolves to an internal address or changes between check and use is caught)
// against the ranges no delivery should reach — loopback, private, link-local
// (the cloud metadata address 169.254.169.254 among them), CGNAT, multicast,
// reserved, IPv6 unique-local, and the IPv4-mapped and NAT64 forms of them —
// unless an allow-list names them.
package netguard

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"syscall"
)

// Denied are the ranges refused unless allowed.
var Denied = mustPrefixes(
	"0.0.0.0/8",       // "this network"
	"10.0.0.0/8",      // private
	"100.64.0.0/10",   // CGNAT
	"127.0.0.0/8",     // loopback
	"169.254.0.0/16",  // link-local, cloud metadata
	"172.16.0.0/12",   // private
	"192.0.0.0/24",    // IETF protocol assignments
	"192.0.2.0/24",    // documentation
	"192.168.0.0/16",  // private
	"198.18.0.0/15",   // benchmarking
	"198.51.100.0/24", // documentation
	"203.0.113.0/24",  // documentation
	"224.0.0.0/4",     // multicast
	"240.0.0.0/4",     // reserved, broadcast
	"::/128",          // unspecified
	"::1/128",         // loopback
	"64:ff9b::/96",    // NAT64 (embeds IPv4 addresses)
	"64:ff9b:1::/48",  // local NAT64
	"100::/64",        // discard
	"2001:db8::/32",   // documentation
	"2002::/16",       // 6to4 (embeds IPv4 addresses)
	"fc00::/7",        // unique local
	"fe80::/10",       // link-local
	"ff00::/8",        // multicast
)

func mustPrefixes(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParsePrefix(s)
	}
	return out
}

// ErrDenied is wrapped by every refusal.
var ErrDenied = errors.New("destination not allowed")

// Policy is an allow-list of ranges that are reachable although Denied
// holds them (a private network the recipients really live on, loopback in
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
	for _, d := range Denied {
		if d.Contains(ip) {
			return fmt.Errorf("%w: %s is in %s (allow it with FANOUT_OUTBOUND_ALLOW)", ErrDenied, ip, d)
		}
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
