//go:build integration

// Package gomain_test runs a Go main of one's own built on workers.Main
// (./mine: one event type in Go) with a types file beside it, as its own
// process on the real stack: the temporal dev server, redis-server, kfake
// over TCP, the bridge inside the worker (FANOUT_BRIDGE=true) and a real
// HTTP receiver on loopback.
package gomain_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fanout/fanout/dev/stack"
	"github.com/fanout/fanout/starter"
	"github.com/fanout/fanout/workers/webhook"
	"github.com/fanout/fanout/workflows/vocab"
)

// receiver counts the deliveries it gets by their webhook-id
// (type/event/recipient), and checks the file type's signatures.
type receiver struct {
	secrets []string // the file type's signing secret
	mu      sync.Mutex
	got     map[string]int
	bad     []string
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	id := r.Header.Get("webhook-id")
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if err != nil || id == "" {
		rc.bad = append(rc.bad, fmt.Sprintf("a delivery without webhook-id (%v)", err))
		http.Error(w, "no webhook-id", http.StatusBadRequest)
		return
	}
	if strings.HasPrefix(id, "notes/") {
		err := webhook.Verify(rc.secrets, id, r.Header.Get("webhook-timestamp"), r.Header.Get("webhook-signature"), body, time.Now(), 5*time.Minute)
		if err != nil {
			rc.bad = append(rc.bad, fmt.Sprintf("%s: signature: %v", id, err))
		}
	}
	rc.got[id]++
}

// check returns what is wrong with the deliveries of event id of type typ:
// each of want recipients (prefix0 ... prefix<want-1>) exactly once.
func (rc *receiver) check(typ, id, prefix string, want int) []string {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var problems []string
	n := 0
	for k, c := range rc.got {
		if !strings.HasPrefix(k, typ+"/"+id+"/") {
			continue
		}
		n++
		if c != 1 {
			problems = append(problems, fmt.Sprintf("%s delivered %d times", k, c))
		}
	}
	for i := range want {
		if k := typ + "/" + id + "/" + prefix + strconv.Itoa(i); rc.got[k] == 0 {
			problems = append(problems, k+" never delivered")
			break
		}
	}
	if n != want {
		problems = append(problems, fmt.Sprintf("%d recipients of %s/%s delivered, want %d", n, typ, id, want))
	}
	return problems
}

// build compiles ./mine (a main on workers.Main) into dir.
func build(t *testing.T, dir string) string {
	t.Helper()
	root, err := stack.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "mine")
	cmd := exec.Command("go", "build", "-o", bin, "./dev/e2e/gomain/mine")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./dev/e2e/gomain/mine: %v\n%s", err, out)
	}
	return bin
}

// The main's command line: -h lists the variables workers.Main reads (the
// types file's among them) and its Go type, -version names it; neither
// needs a configuration.
func TestGoMainCommandLine(t *testing.T) {
	bin := build(t, t.TempDir())
	out, err := exec.Command(bin, "-h").Output()
	if err != nil {
		t.Fatalf("mine -h: %v", err)
	}
	for _, want := range []string{"mine runs fanout's Temporal workers", "(greetings)", "FANOUT_TYPES_FILE", "FANOUT_BRIDGE", "FANOUT_OUTBOUND_ALLOW", "TEMPORAL_ADDRESS", "GOGC", "-version", "mine check-types FILE"} {
		if !bytes.Contains(out, []byte(want)) {
			t.Errorf("mine -h: no %q in\n%s", want, out)
		}
	}
	if bytes.Contains(out, []byte("FANOUT_RECIPIENTS_URL")) {
		t.Errorf("mine -h lists FANOUT_RECIPIENTS_URL, the stock webhook type's, which it does not serve")
	}
	out, err = exec.Command(bin, "-version").Output()
	if err != nil || !strings.HasPrefix(string(out), "mine ") || !strings.Contains(string(out), " go1.") {
		t.Errorf("mine -version: %v, %q", err, out)
	}
}

func TestGoMainOnTheStack(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	dir := t.TempDir()
	bin := build(t, dir)
	s, err := stack.Start(ctx, stack.Options{InMemory: true, Log: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	const secret = "whsec_c2lnbmluZy1zZWNyZXQtb2YtdGhlLW5vdGVzLXR5cGU="
	rc := &receiver{secrets: []string{secret}, got: map[string]int{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: rc, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer func() { _ = srv.Close() }()
	url := "http://" + ln.Addr().String() + "/in"

	if err := os.WriteFile(filepath.Join(dir, "notes-signing"), []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "types.yaml")
	text := `types:
  notes:
    batch_size: 25
    recipients:
      inline: {pointer: /to}
    message:
      passthrough: {pointer: /note}
    channel:
      webhook: {signing_secret_file: notes-signing}
`
	if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	// A type in Go and in the file is refused at start-up, naming the
	// file, its line and the type, before the main connects anywhere.
	clash := filepath.Join(dir, "clash.yaml")
	if err := os.WriteFile(clash, []byte(strings.Replace(text, "  notes:", "  greetings:", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = append(s.Env(), "FANOUT_TYPES_FILE="+clash)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !bytes.Contains(out, []byte(clash+`:2: type "greetings": already registered`)) {
		t.Fatalf("mine with a types file redefining its Go type: %v, %s; want exit 1 naming %s:2 and the type", err, out, clash)
	}

	logf, err := os.Create(filepath.Join(dir, "mine.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = logf.Close() }()
	cmd = exec.Command(bin)
	cmd.Env = append(s.Env(), "FANOUT_QUEUES="+strings.Join(vocab.Queues(), ","), "FANOUT_BRIDGE=true", "FANOUT_TYPES_FILE="+file)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			if err := <-exited; err != nil {
				t.Logf("mine, killed: %v", err)
			}
		}
	}()

	stamp := time.Now().UTC().Format("150405.000")
	const people, noted = 230, 60
	greetID, noteID := "greet-"+stamp, "note-"+stamp
	greet, _ := json.Marshal(map[string]any{"count": people, "url": url, "text": "hello"})
	to := make([]map[string]string, noted)
	for i := range to {
		to[i] = map[string]string{"id": "n" + strconv.Itoa(i), "address": url}
	}
	note, _ := json.Marshal(map[string]any{"note": map[string]string{"text": "hi"}, "to": to})
	if err := s.Publisher.Publish(ctx, starter.Envelope{ID: greetID, Type: "greetings", Payload: greet},
		starter.Envelope{ID: noteID, Type: "notes", Payload: note}); err != nil {
		t.Fatal(err)
	}
	for _, e := range []struct {
		typ, id, prefix string
		n               int
	}{{"greetings", greetID, "person-", people}, {"notes", noteID, "n", noted}} {
		res, err := s.WaitWorkflow(ctx, vocab.WorkflowID(e.typ, e.id), e.id)
		if err != nil {
			log, _ := os.ReadFile(logf.Name())
			t.Fatalf("%s: %v\nmine's log:\n%s", e.typ, err, log)
		}
		if res.Delivered != int64(e.n) {
			t.Errorf("%s %s: %d delivered, want %d", e.typ, e.id, res.Delivered, e.n)
		}
		for _, p := range rc.check(e.typ, e.id, e.prefix, e.n) {
			t.Error(p)
		}
	}
	rc.mu.Lock()
	for _, b := range rc.bad {
		t.Error(b)
	}
	rc.mu.Unlock()

	// SIGTERM stops it cleanly: Main returns and the process exits 0.
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			log, _ := os.ReadFile(logf.Name())
			t.Errorf("mine after SIGTERM: %v\n%s", err, log)
		}
	case <-time.After(45 * time.Second):
		t.Error("mine still running 45s after SIGTERM")
	}
}
