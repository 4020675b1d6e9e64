//go:build integration

package chaos

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The fault suite at reduced sizes, on the real stack (a fresh one per
// scenario): nothing may be missing, and duplicates stay within what the
// scenario allows. Scenarios 2, 4, 5 and 8 run only in the full suite
// (`go tool task chaos`).

// lineWriter sends whole lines to t.Log.
type lineWriter struct {
	t   *testing.T
	mu  sync.Mutex
	buf bytes.Buffer
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	for {
		line, err := w.buf.ReadString('\n')
		if err != nil {
			w.buf.WriteString(line)
			return len(p), nil
		}
		w.t.Log(strings.TrimRight(line, "\n"))
	}
}

func runScenario(t *testing.T, n, size int) Report {
	t.Helper()
	sc, ok := ByNumber(n)
	if !ok {
		t.Fatalf("no scenario %d", n)
	}
	dir := t.TempDir()
	o := Options{Log: &lineWriter{t: t}, Dir: dir, Timeout: 4 * time.Minute}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	r, err := sc.Run(ctx, o, size)
	t.Logf("report: %+v", r)
	if err != nil {
		t.Errorf("scenario %d: %v", n, err)
	}
	for _, p := range sc.Problems(r) {
		t.Errorf("scenario %d: %s", n, p)
	}
	if r.Expected != size*sc.Events {
		t.Errorf("scenario %d: expected %d recipients, want %d", n, r.Expected, size*sc.Events)
	}
	if t.Failed() {
		dumpLogs(t, filepath.Join(dir, strconv.Itoa(n)))
	}
	return r
}

// dumpLogs logs the tail of each process log of a failed scenario.
func dumpLogs(t *testing.T, dir string) {
	t.Helper()
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	for _, p := range logs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		if len(b) > 4000 {
			b = b[len(b)-4000:]
		}
		t.Logf("--- tail of %s ---\n%s", filepath.Base(p), b)
	}
}

func TestKillDeliveryWorker(t *testing.T) {
	r := runScenario(t, 1, 10000)
	// The kills wait for deliveries in flight, so each leaves gate keys
	// held without a delivered mark.
	if r.InFlightAtKills == 0 {
		t.Errorf("no deliveries in flight at the kills: %+v", r)
	}
}

func TestReplayTopicAfterRetention(t *testing.T) {
	runScenario(t, 3, 200)
}

func TestSinkErrors(t *testing.T) {
	r := runScenario(t, 6, 5000)
	if r.DeadLettered != 0 {
		t.Errorf("dead-lettered %d recipients of a sink that recovers", r.DeadLettered)
	}
}

func TestPermanentFailuresRedrive(t *testing.T) {
	r := runScenario(t, 7, 5000)
	if want := 50; r.DeadLettered != want || r.Redriven != want {
		t.Errorf("dead-lettered %d, redriven %d; want %d each", r.DeadLettered, r.Redriven, want)
	}
}

func TestDuplicateRecipients(t *testing.T) {
	runScenario(t, 9, 5000)
}

func TestKillEventsWorker(t *testing.T) {
	r := runScenario(t, 10, 50)
	if r.InFlightAtKills == 0 {
		t.Errorf("no deliveries in flight at the kills: %+v", r)
	}
}

// The at-most-once scenarios: no recipient called twice, and every missing
// one was in flight at a fault (unconfirmed in the gate and the DLQ), at most
// the in-flight capacity (checked by Problems).
func TestAtMostOnceKillDeliveryWorker(t *testing.T) {
	r := runScenario(t, 11, 10000)
	if r.InFlightAtKills == 0 || r.Unconfirmed == 0 {
		t.Errorf("no call in flight at the kills, nothing unconfirmed: %+v", r)
	}
	if r.MaxCalls != 1 {
		t.Errorf("most calls to one recipient %d, want 1", r.MaxCalls)
	}
}

func TestAtMostOnceRestartRedis(t *testing.T) {
	r := runScenario(t, 12, 10000)
	if r.MaxCalls != 1 {
		t.Errorf("most calls to one recipient %d, want 1", r.MaxCalls)
	}
}
