package stack

import (
	"fmt"
	"net"
	"testing"
	"time"
)

// A refused port refuses dials and cannot be taken by a listener until it is
// released (a port from FreePort can: that is how a test's "closed"
// destination once answered 200, from another package's sink).
func TestRefusedPortStaysRefused(t *testing.T) {
	port, release, err := RefusedPort()
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		_ = c.Close()
		t.Fatalf("dial %s connected, want refused", addr)
	}
	if l, err := net.Listen("tcp", addr); err == nil {
		_ = l.Close()
		t.Fatalf("listen on %s succeeded while the port is held", addr)
	}
	release()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen on %s after release: %v", addr, err)
	}
	_ = l.Close()
}
