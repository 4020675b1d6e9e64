package main

import (
	"bufio"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
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
	defer func() { _ = f.Close() }()
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

// timeWaits follows the TIME_WAIT sockets towards the sink over a run.
type timeWaits struct {
	b                   *bench
	before, peak, after int
	err                 error
	done, exited        chan struct{}
}

// startTimeWait counts the sockets now and samples them every two seconds
// until stop.
func (b *bench) startTimeWait() *timeWaits {
	t := &timeWaits{b: b, done: make(chan struct{}), exited: make(chan struct{})}
	t.before, t.err = b.sinkTimeWait()
	t.peak = t.before
	go func() {
		defer close(t.exited)
		tick := time.NewTicker(2 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-t.done:
				return
			case <-tick.C:
				t.sample()
			}
		}
	}()
	return t
}

func (t *timeWaits) sample() {
	if n, err := t.b.sinkTimeWait(); err == nil {
		t.peak, t.after = max(t.peak, n), n
	} else {
		t.err = err
	}
}

// stop ends the sampling and counts the sockets once more.
func (t *timeWaits) stop() {
	close(t.done)
	<-t.exited
	t.sample()
}

// record puts the counts in the row.
func (t *timeWaits) record(r *Row) {
	if t.err != nil {
		fmt.Fprintf(t.b.out, "[bench] TIME_WAIT not read: %v\n", t.err)
		return
	}
	r.SinkTimeWait, r.SinkTimeWaitPeak, r.SinkTimeWaitBefore = &t.after, &t.peak, &t.before
	r.Notes += fmt.Sprintf("; TIME_WAIT towards the sink: %d before, %d at peak, %d after", t.before, t.peak, t.after)
}
