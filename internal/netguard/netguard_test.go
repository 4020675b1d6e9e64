package netguard

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"
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
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, host := range []string{"127.0.0.1", "localhost"} {
		d := net.Dialer{Control: Policy{}.Control}
		if c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(host, port)); err == nil {
			c.Close()
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
		c.Close()
	}
}

func FuzzCheck(f *testing.F) {
	for _, s := range []string{"127.0.0.1", "::ffff:169.254.169.254", "8.8.8.8", "fe80::1%eth0", "64:ff9b::7f00:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ip, err := netip.ParseAddr(s)
		if err != nil {
			return
		}
		if (Policy{}).Check(ip) != nil {
			return
		}
		// Anything allowed with no allow-list is a public unicast address.
		u := ip.Unmap()
		if u.IsLoopback() || u.IsPrivate() || u.IsLinkLocalUnicast() || u.IsMulticast() || u.IsUnspecified() || u.IsLinkLocalMulticast() {
			t.Fatalf("Check allowed %s", s)
		}
	})
}
