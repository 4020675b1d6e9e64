package netguard

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	"code.dny.dev/ssrf"
)

func TestCheck(t *testing.T) {
	denied := []string{
		"127.0.0.1", "127.1.2.3", "::1", "10.0.0.1", "172.16.5.4", "192.168.1.1", "169.254.169.254",
		"100.64.0.1", "0.0.0.0", "::", "fd00::1", "fe80::1", "224.0.0.1", "255.255.255.255",
		"::ffff:127.0.0.1", "::ffff:169.254.169.254", "::ffff:10.0.0.1", "64:ff9b::a9fe:a9fe", "2002:a9fe:a9fe::1",
	}
	allowed := []string{"93.184.216.34", "8.8.8.8", "2606:4700:4700::1111", "::ffff:8.8.8.8"}
	var p Policy
	for _, s := range denied {
		if err := p.Check(netip.MustParseAddr(s)); !errors.Is(err, ErrDenied) {
			t.Errorf("Check(%s) = %v, want denied", s, err)
		}
	}
	for _, s := range allowed {
		if err := p.Check(netip.MustParseAddr(s)); err != nil {
			t.Errorf("Check(%s) = %v, want allowed", s, err)
		}
	}
	lb := Loopback()
	if err := lb.Check(netip.MustParseAddr("127.0.0.1")); err != nil {
		t.Errorf("Loopback policy refused 127.0.0.1: %v", err)
	}
	if err := lb.Check(netip.MustParseAddr("::ffff:127.0.0.1")); err != nil {
		t.Errorf("Loopback policy refused ::ffff:127.0.0.1: %v", err)
	}
	if err := lb.Check(netip.MustParseAddr("169.254.169.254")); err == nil {
		t.Error("Loopback policy allowed the metadata address")
	}
}

// TestDeniesTheIANASpecialPurposeRanges: every range of the IANA
// special-purpose registries (as code.dny.dev/ssrf generates them) is
// refused, and every IPv6 address outside global unicast (2000::/3), the
// IPv4-compatible ::a.b.c.d forms among them; the allow-list still wins.
func TestDeniesTheIANASpecialPurposeRanges(t *testing.T) {
	denied := []string{
		"192.31.196.1", "192.52.193.1", "192.88.99.1", "192.175.48.1", // AS112, AMT, 6to4 relay
		"2001::1", "2001:20::1", "2620:4f:8000::1", "3fff::1", // Teredo, ORCHIDv2, AS112, documentation
		"::7f00:1", "::a9fe:a9fe", "::2", "4000::1", "5f00::1", // IPv4-compatible, outside 2000::/3
	}
	for _, s := range denied {
		if err := (Policy{}).Check(netip.MustParseAddr(s)); !errors.Is(err, ErrDenied) {
			t.Errorf("Check(%s) = %v, want denied", s, err)
		}
	}
	p, err := Parse("192.88.99.0/24,3fff::/20")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"192.88.99.7", "3fff::7"} {
		if err := p.Check(netip.MustParseAddr(s)); err != nil {
			t.Errorf("%s refused although allowed: %v", s, err)
		}
	}
}

func TestParse(t *testing.T) {
	p, err := Parse(" 10.20.0.0/16, ::1 ,192.168.1.7")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"10.20.3.4", "::1", "192.168.1.7"} {
		if err := p.Check(netip.MustParseAddr(s)); err != nil {
			t.Errorf("%s refused by its allow-list: %v", s, err)
		}
	}
	for _, s := range []string{"10.21.0.1", "192.168.1.8", "127.0.0.1"} {
		if err := p.Check(netip.MustParseAddr(s)); err == nil {
			t.Errorf("%s allowed, not in the list", s)
		}
	}
	for _, bad := range []string{"10.0.0.0/33", "example.com", "1.2.3"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) = nil error", bad)
		}
	}
}

// TestControlRefusesTheDialledAddress: a dialer with the guard cannot
// connect to a loopback listener, whatever name led there; with loopback
// allowed it can.
func TestControlRefusesTheDialledAddress(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, host := range []string{"127.0.0.1", "localhost"} {
		d := net.Dialer{Control: Policy{}.Control}
		if c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(host, port)); err == nil {
			_ = c.Close()
			t.Errorf("guarded dial to %s succeeded", host)
		} else if !errors.Is(err, ErrDenied) {
			t.Errorf("guarded dial to %s: %v, want ErrDenied", host, err)
		}
		d = net.Dialer{Control: Loopback().Control}
		c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(host, port))
		if err != nil {
			t.Errorf("dial to %s with loopback allowed: %v", host, err)
			continue
		}
		_ = c.Close()
	}
}

// listen accepts and closes connections on addr until the test ends; it
// returns the port.
func listen(t *testing.T, addr string) string {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}

// TestPinTrustsTheConfiguredHostOnly: Pin dials its own host and port
// unguarded (loopback here, which the guard refuses), in any case; another
// port of the same address, another name of the same address (localhost)
// and any other address are dialled under the guard: refused unless the
// policy allows them.
func TestPinTrustsTheConfiguredHostOnly(t *testing.T) {
	port := listen(t, "127.0.0.1:0")
	other := listen(t, "127.0.0.1:0")
	allowedPort := listen(t, "127.0.0.2:0")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	dial := Policy{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")}}.Pin(net.Dialer{}, "127.0.0.1:"+port, "Pinned.Example:"+port)
	for _, addr := range []string{"127.0.0.1:" + port, "127.0.0.2:" + allowedPort} {
		c, err := dial(ctx, "tcp", addr)
		if err != nil {
			t.Errorf("dial %s: %v, want it connected", addr, err)
			continue
		}
		_ = c.Close()
	}
	for _, addr := range []string{"127.0.0.1:" + other, "localhost:" + port, "[::ffff:127.0.0.1]:" + port} {
		if c, err := dial(ctx, "tcp", addr); err == nil {
			_ = c.Close()
			t.Errorf("dial %s connected, want it refused by the guard", addr)
		} else if !errors.Is(err, ErrDenied) {
			t.Errorf("dial %s: %v, want ErrDenied", addr, err)
		}
	}
	// A pinned name is compared without case and never resolved by Pin:
	// the dial fails in DNS (the name does not exist), not in the guard.
	if _, err := dial(ctx, "tcp", "PINNED.example:"+port); err == nil || errors.Is(err, ErrDenied) {
		t.Errorf("dial of the pinned name in capitals: %v, want a DNS error, not the guard", err)
	}
}

// TestDialAddrIsWhatTheTransportDials: for every URL, DialAddr is the
// address net/http's transport hands its DialContext (lower-cased), so a
// pinned endpoint matches its own requests: default ports, IPv6 literals,
// capitals and an internationalised name; URLs it cannot pin fail.
func TestDialAddrIsWhatTheTransportDials(t *testing.T) {
	var dialled string
	errStop := errors.New("stop")
	tr := &http.Transport{DialContext: func(_ context.Context, _, addr string) (net.Conn, error) {
		dialled = addr
		return nil, errStop
	}, DialTLSContext: func(_ context.Context, _, addr string) (net.Conn, error) {
		dialled = addr
		return nil, errStop
	}}
	c := &http.Client{Transport: tr}
	for rawURL, want := range map[string]string{
		"http://recipients.example.svc.cluster.local/recipients": "recipients.example.svc.cluster.local:80",
		"https://Hooks.Example.COM/x?y=1":                        "hooks.example.com:443",
		"http://host.docker.internal:8080/recipients":            "host.docker.internal:8080",
		"http://127.0.0.1:9/r":                                   "127.0.0.1:9",
		"http://[::1]:8443/r":                                    "[::1]:8443",
		"https://[2001:db8::1]/r":                                "[2001:db8::1]:443",
		"http://bücher.example/r":                                "xn--bcher-kva.example:80",
		"http://my_svc:81/r":                                     "my_svc:81",
		"http://user:pw@example.com:80/r":                        "example.com:80",
	} {
		u, err := url.Parse(rawURL)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DialAddr(u)
		if err != nil || got != want {
			t.Errorf("DialAddr(%s) = %q %v, want %q", rawURL, got, err, want)
		}
		dialled = ""
		if _, err := c.Get(rawURL); !errors.Is(err, errStop) {
			t.Fatalf("GET %s: %v", rawURL, err)
		}
		if strings.ToLower(dialled) != got {
			t.Errorf("%s: the transport dialled %q, DialAddr says %q", rawURL, dialled, got)
		}
	}
	for _, rawURL := range []string{"ftp://example.com/", "http:///x", "/relative", "http://-ü.example/"} {
		u, err := url.Parse(rawURL)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := DialAddr(u); err == nil {
			t.Errorf("DialAddr(%s) = %q, want an error", rawURL, got)
		}
	}
}

// FuzzCheck holds Check to an oracle of its own: code.dny.dev/ssrf's
// Guardian, built from the IANA special-purpose registries, with the same
// allow-list, asked about the address as it is dialled (unmapped, no zone).
func FuzzCheck(f *testing.F) {
	for _, s := range []string{"127.0.0.1", "::ffff:169.254.169.254", "8.8.8.8", "fe80::1%eth0", "64:ff9b::7f00:1", "::7f00:1", "2001::1"} {
		f.Add(s, "")
	}
	f.Add("127.0.0.1", "127.0.0.0/8,::1")
	f.Add("192.88.99.7", "192.88.99.0/24")
	f.Add("3fff::7", "3fff::/20,10.0.0.0/8")
	f.Fuzz(func(t *testing.T, s, allow string) {
		ip, err := netip.ParseAddr(s)
		if err != nil {
			return
		}
		p, err := Parse(allow)
		if err != nil {
			return
		}
		var v4, v6 []netip.Prefix
		for _, a := range p.Allow {
			if a.Addr().Is4() {
				v4 = append(v4, a)
			} else {
				v6 = append(v6, a)
			}
		}
		g := ssrf.New(ssrf.WithAnyNetwork(), ssrf.WithAnyPort(), ssrf.WithAllowedV4Prefixes(v4...), ssrf.WithAllowedV6Prefixes(v6...))
		want := g.SafeAddr(ip.Unmap().WithZone(""))
		got := p.Check(ip)
		if (got == nil) != (want == nil) {
			t.Fatalf("Check(%s) with allow %q = %v; the IANA lists say %v", s, allow, got, want)
		}
		if got != nil && !errors.Is(got, ErrDenied) {
			t.Fatalf("Check(%s) = %v, not ErrDenied", s, got)
		}
	})
}
