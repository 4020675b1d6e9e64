package main

import (
	"bufio"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// tcpTimeWait is the state of a socket in TIME_WAIT in /proc/net/tcp.
const tcpTimeWait = "06"

// sinkTimeWait counts the TCP sockets in TIME_WAIT with the sink's port at
// either end. A connection's TIME_WAIT stays on the side that closed it
// first for a minute: a client that reuses its connections leaves none, one
// whose idle pool is smaller than its concurrency leaves one per
// connection it closed.
func (b *bench) sinkTimeWait() (int, error) {
	u, err := url.Parse(b.st.SinkURL)
	if err != nil {
		return 0, err
	}
	port, err := strconv.ParseUint(u.Port(), 10, 16)
	if err != nil {
		return 0, fmt.Errorf("sink URL %s: %w", b.st.SinkURL, err)
	}
	n := 0
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		k, err := countTimeWait(f, uint16(port))
		if err != nil {
			return 0, err
		}
		n += k
	}
	return n, nil
}

// countTimeWait counts the lines of a /proc/net/tcp file in TIME_WAIT whose
// local or remote port is port ("sl local_address rem_address st ...",
// addresses as HEXIP:HEXPORT).
func countTimeWait(path string, port uint16) (int, error) {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return 0, nil // no IPv6
	}
	if err != nil {
		return 0, err
	}
	defer f.Close()
	want := fmt.Sprintf(":%04X", port)
	n := 0
	sc := bufio.NewScanner(f)
	sc.Scan() // the header
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 4 || fields[3] != tcpTimeWait {
			continue
		}
		if strings.HasSuffix(fields[1], want) || strings.HasSuffix(fields[2], want) {
			n++
		}
	}
	return n, sc.Err()
}

// sampleTimeWait samples sinkTimeWait every two seconds until the returned
// stop, which returns the largest count seen.
func (b *bench) sampleTimeWait() (stop func() int) {
	var peak atomic.Int64
	sample := func() {
		if n, err := b.sinkTimeWait(); err == nil && int64(n) > peak.Load() {
			peak.Store(int64(n))
		}
	}
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(2 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				sample()
			}
		}
	}()
	return func() int {
		close(done)
		<-exited
		sample()
		return int(peak.Load())
	}
}
