package workers

import (
	"bufio"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// The pprof server has every timeout set (a client that sends half a
// header is dropped, not held forever), serves /debug/pprof/ from its own
// mux (nothing else registered on http.DefaultServeMux leaks onto it), and
// its write timeout leaves room for a 30-second CPU profile.
func TestPprofServerHasTimeouts(t *testing.T) {
	srv := pprofServer("127.0.0.1:0")
	if srv.ReadHeaderTimeout <= 0 || srv.ReadTimeout <= 0 || srv.IdleTimeout <= 0 || srv.WriteTimeout < 30*time.Second+pprofReadTimeout {
		t.Fatalf("timeouts: read header %v, read %v, write %v, idle %v", srv.ReadHeaderTimeout, srv.ReadTimeout, srv.WriteTimeout, srv.IdleTimeout)
	}
	if srv.Handler == nil || srv.Handler == http.DefaultServeMux {
		t.Fatal("pprof served from http.DefaultServeMux")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv.ReadHeaderTimeout = 200 * time.Millisecond
	go func() { _ = srv.Serve(ln) }()
	defer func() { _ = srv.Close() }()
	res, err := http.Get("http://" + ln.Addr().String() + "/debug/pprof/")
	if err != nil {
		t.Fatal(err)
	}
	_ = res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("/debug/pprof/: %s", res.Status)
	}
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	if _, err := c.Write([]byte("GET /debug/pprof/ HTTP/1.1\r\nHost: x\r\n")); err != nil {
		t.Fatal(err)
	}
	if err := c.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err == nil && !strings.Contains(line, "408") {
		t.Fatalf("half a header: got %q, want the connection dropped", line)
	}
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("half a header held the connection for 5s")
	}
}
