//go:build integration && linux

// Package shipped_test runs fanout's shipped configurations as they ship
// (issue 26): the Helm chart deploy/helm/fanout with its default values, the
// laptop stack deploy/compose.yaml and the kustomize overlay deploy/k8s. The
// command deploy/validate/cmd/workloads reads each with its real library
// (Helm's SDK, compose-go, kustomize's krusty) and prints every workload's
// binary, arguments, environment and mounted files; this test starts the
// real stack (the Temporal dev server, stock, with a namespace that lacks
// fanout's search attributes; kfake; redis-server), a recipients endpoint
// and a webhook sink (dev/demo's), then the fanout binaries built from this
// module with exactly those arguments and that environment, the jobs first
// (the setup job must register the search attributes), publishes events to
// the events topic as a producer does, and asserts that every recipient is
// delivered. A configuration that needs a variable it does not set fails,
// and the failure says which.
//
// What the test changes, and nothing else (the rewrite table):
//
//	what the configuration carries                 becomes
//	TEMPORAL_ADDRESS host:port                      the dev server's 127.0.0.1:port
//	FANOUT_KAFKA_BROKERS host:port (each)           kfake's 127.0.0.1:port
//	FANOUT_REDIS_URL host:port                      redis-server's 127.0.0.1:port
//	FANOUT_RECIPIENTS_URL host[:port]               the recipients endpoint's 127.0.0.1:port
//	compose's sink service address (10.213.47.10)   the sink's address, 127.0.0.2
//	*_ADDR listen addresses (":9464")               127.0.0.1:<a free port>, one per process
//	                                                (each pod has its own address; here they share one)
//	a mounted Secret's or ConfigMap's directory     a directory holding its files
//	                                                (what the kubelet does)
//
// The chart needs none of the address rewrites: it is rendered with a values
// file that sets only temporal.address, kafka.brokers, redis.url and
// webhook.recipientsURL to the stack, and image.digest (the chart refuses
// the placeholder digest). The Secret the chart and the kustomization mount
// is the example one, deploy/k8s/examples/secret.yaml (the operator creates
// theirs); the Redis it names a password for is given that password, as the
// operator's Redis has it.
//
// One variable is added where the configuration does not allow the sink:
// FANOUT_OUTBOUND_ALLOW=127.0.0.2 for the workers. The sink stands for a
// webhook destination on the Internet, which the workers' guard lets through
// without any variable; a loopback address can stand for one only through
// the allow-list. It names the sink's address alone (the recipients endpoint
// is on 127.0.0.1), so it does not stand in for anything the configuration
// needs for its recipients endpoint. Compose allows its demo sink itself,
// so nothing is added there.
//
// One process runs per workload (replicas are not started twice).
package shipped_test

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/dev/demo"
	"github.com/fanout/fanout/dev/stack"
	"github.com/fanout/fanout/internal/netguard"
	"github.com/fanout/fanout/starter"
	"github.com/fanout/fanout/workers"
)

// The events: a small one, delivered in its first workflow task by the
// events worker (at most LocalDeliveryMax recipients), and one over that
// bound, delivered in batches by a delivery worker.
var events = []stack.Event{
	{ID: "small", Audience: 20},
	{ID: "batched", Audience: 150, Priority: fanout.PriorityHigh},
}

// sinkHost is the sink's address, a loopback address of its own (Linux
// routes all of 127.0.0.0/8 to lo): allowing it lets deliveries reach the
// sink and nothing else on loopback.
const sinkHost = "127.0.0.2"

// composeStandIns are compose's services of other images and what stands
// for each here.
var composeStandIns = map[string]string{
	"temporal":     "the Temporal dev server (stock)",
	"kafka":        "kfake",
	"kafka-topics": "kfake's topics (created by the stack)",
	"redis":        "redis-server",
	"prometheus":   "nothing (monitoring; not on the delivery path)",
	"grafana":      "nothing (monitoring; not on the delivery path)",
}

// Workload and Config mirror deploy/validate/cmd/workloads's output.
type Workload struct {
	Name      string            `json:"name"`
	Kind      string            `json:"kind"`
	Init      bool              `json:"init"`
	Job       bool              `json:"job"`
	Order     int               `json:"order"`
	Hook      string            `json:"hook"`
	Replicas  int               `json:"replicas"`
	Binary    string            `json:"binary"`
	Args      []string          `json:"args"`
	Env       map[string]string `json:"env"`
	Unset     []string          `json:"unset"`
	Files     map[string]string `json:"files"`
	Mounts    []string          `json:"mounts"`
	Addresses []string          `json:"addresses"`
}

type Config struct {
	Source    string     `json:"source"`
	Workloads []Workload `json:"workloads"`
	Others    []struct {
		Name      string   `json:"name"`
		Image     string   `json:"image"`
		Addresses []string `json:"addresses"`
	} `json:"others"`
}

func TestShippedConfigurations(t *testing.T) {
	root, err := stack.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bins := buildFanout(t, root)
	for _, name := range []string{"chart", "compose", "kustomize"} {
		t.Run(name, func(t *testing.T) { runShipped(t, root, bins, name) })
	}
}

// buildFanout builds the binaries the image installs that the
// configurations run (worker and starter) from this module, once.
func buildFanout(t *testing.T, root string) map[string]string {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command("go", "build", "-o", dir+"/", "./workers/cmd/worker", "./starter/cmd/starter")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return map[string]string{"worker": filepath.Join(dir, "worker"), "starter": filepath.Join(dir, "starter")}
}

// readConfig runs the workloads command (go run in its module,
// deploy/validate; go caches the executable) with the chart values file
// and returns the configuration name.
func readConfig(t *testing.T, root, values, name string) Config {
	t.Helper()
	cmd := exec.Command("go", "run", "./cmd/workloads", "-values", values)
	cmd.Dir = filepath.Join(root, "deploy", "validate")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("workloads: %v\n%s", err, stderr.Bytes())
	}
	var all map[string]Config
	if err := json.Unmarshal(out, &all); err != nil {
		t.Fatalf("workloads output: %v", err)
	}
	cfg, ok := all[name]
	if !ok || len(cfg.Workloads) == 0 {
		t.Fatalf("workloads: no %s workloads in %s", name, out)
	}
	return cfg
}

// local is the stack and the endpoints a configuration runs against.
type local struct {
	st            *stack.Stack
	sink          *demo.Sink
	sinkURL       string
	recipientsURL string
	dir           string
}

func runShipped(t *testing.T, root string, bins map[string]string, name string) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	begin := time.Now()
	st, err := stack.Start(ctx, stack.Options{InMemory: true, StockTemporal: true, NoSearchAttributes: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	e := local{st: st, sink: demo.NewSink(), dir: t.TempDir()}
	mux := http.NewServeMux()
	e.sink.Routes(mux)
	e.sinkURL = serve(t, sinkHost+":0", mux)
	e.recipientsURL = serve(t, "127.0.0.1:0", &demo.Source{DeliverURL: e.sinkURL + "/deliver"}) + "/recipients"

	cfg := readConfig(t, root, writeValues(t, e), name)
	t.Logf("%s: %s; stack up in %s", name, cfg.Source, time.Since(begin).Round(time.Millisecond))
	rw := rewrites(t, e, name, cfg)
	procs := newProcs(t, filepath.Join(e.dir, "logs"), bins)

	var jobs, long []Workload
	for _, w := range cfg.Workloads {
		if standIn(name, w) != "" {
			t.Logf("%s: stood in for by %s", w.Name, standIn(name, w))
			continue
		}
		if w.Job {
			jobs = append(jobs, w)
		} else {
			long = append(long, w)
		}
	}
	// The Redis of a configuration with a password (from its Secret) has
	// that password.
	if pw := redisPassword(t, cfg); pw != "" {
		if err := st.RDB.ConfigSet(ctx, "requirepass", pw).Err(); err != nil {
			t.Fatal(err)
		}
	}

	// The jobs first, each to completion: the setup job registers the
	// search attributes every workflow start needs.
	for _, w := range jobs {
		if w.Order > 2 {
			t.Logf("%s: a %s hook, which Helm runs after the workloads; run first here", w.Name, w.Hook)
		}
		args, environ := rw.process(t, w, e)
		p := procs.start(w, args, environ)
		if err := p.wait(ctx, time.Minute); err != nil {
			t.Fatalf("%s (%s %s) did not complete: %v\n%s", w.Name, w.Binary, strings.Join(w.Args, " "), err, p.tail(30))
		}
	}
	t.Logf("jobs done at %s", time.Since(begin).Round(time.Millisecond))
	var started []*proc
	for _, w := range long {
		args, environ := rw.process(t, w, e)
		started = append(started, procs.start(w, args, environ))
	}

	topic := cmp.Or(bridgeEnv(cfg)["FANOUT_EVENTS_TOPIC"], starter.DefaultEventsTopic)
	pub := starter.NewPublisher(st.KafkaConn(), topic)
	defer func() { _ = pub.Close() }()
	var envs []starter.Envelope
	ids := map[string]stack.Event{}
	for _, ev := range events {
		ev.ID = name + "-" + ev.ID
		ids[ev.ID] = ev
		envs = append(envs, ev.Envelope())
	}
	if err := pub.Publish(ctx, envs...); err != nil {
		t.Fatal(err)
	}

	tc := decodingClient(t, e, cfg, rw)
	deadline := time.Now().Add(90 * time.Second)
	for {
		missing := map[string]int{}
		for id, ev := range ids {
			if got := e.sink.Event(id).Unique; got != ev.Audience {
				missing[id] = ev.Audience - got
			}
		}
		if len(missing) == 0 {
			break
		}
		for _, p := range started {
			if p.exited() {
				t.Fatalf("%s (%s) exited: %s\n%s", p.w.Name, p.w.Binary, p.state(), p.tail(30))
			}
		}
		failed := closedUndelivered(ctx, tc, missing)
		// An event may deliver and close between the sink's read above
		// and the describe: a closed workflow's deliveries are all at the
		// sink, so its count read now is final.
		for id := range failed {
			if got := e.sink.Event(id).Unique; got == ids[id].Audience {
				delete(failed, id)
				delete(missing, id)
			}
		}
		if len(failed) > 0 || time.Now().After(deadline) {
			t.Fatalf("%s as shipped does not deliver (after %s): recipients missing by event %v\n%s", name, time.Since(begin).Round(time.Millisecond), missing,
				diagnose(ctx, tc, e, cfg, rw, procs, missing))
		}
		time.Sleep(250 * time.Millisecond)
	}
	for id, ev := range ids {
		s := e.sink.Event(id)
		t.Logf("%s: %d of %d recipients delivered (%d deliveries)", id, s.Unique, ev.Audience, s.Deliveries)
	}
	t.Logf("delivered at %s", time.Since(begin).Round(time.Millisecond))
}

// standIn says what stands for a workload of fanout's image that the test
// does not run (compose's demo recipients and sink: the test's own, the
// same dev/demo code), or "".
func standIn(name string, w Workload) string {
	if name == "compose" && w.Binary == "demo" && len(w.Args) > 0 {
		switch w.Args[0] {
		case "recipients":
			return "the test's recipients endpoint (dev/demo's Source)"
		case "sink":
			return "the test's sink (dev/demo's Sink) on " + sinkHost
		}
	}
	return ""
}

// serve serves h on addr and returns its URL.
func serve(t *testing.T, addr string, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String()
}

// writeValues writes the chart's test values: the local stack's addresses
// and an image digest, nothing else.
func writeValues(t *testing.T, e local) string {
	t.Helper()
	v := fmt.Sprintf(`# The local stack (dev/e2e/shipped); everything else is the chart's default.
image:
  digest: sha256:%s
temporal:
  address: %q
kafka:
  brokers: [%q]
redis:
  url: %q
webhook:
  recipientsURL: %q
`, strings.Repeat("5", 64), e.st.TemporalAddr, e.st.KafkaAddr, "redis://"+e.st.RedisAddr+"/0", e.recipientsURL)
	f := filepath.Join(e.dir, "values.yaml")
	if err := os.WriteFile(f, []byte(v), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

// bridgeEnv is the environment of the configuration's bridge.
func bridgeEnv(cfg Config) map[string]string {
	for _, w := range cfg.Workloads {
		if w.Binary == "starter" && slices.Equal(w.Args, []string{"bridge"}) {
			return w.Env
		}
	}
	return nil
}

// redisPassword is the password the configuration's processes give Redis
// (FANOUT_REDIS_PASSWORD or the file FANOUT_REDIS_PASSWORD_FILE names).
func redisPassword(t *testing.T, cfg Config) string {
	for _, w := range cfg.Workloads {
		if pw := w.Env["FANOUT_REDIS_PASSWORD"]; pw != "" {
			return pw
		}
		if f := w.Env["FANOUT_REDIS_PASSWORD_FILE"]; f != "" {
			pw, ok := w.Files[f]
			if !ok {
				t.Fatalf("%s: FANOUT_REDIS_PASSWORD_FILE=%s is not a mounted file", w.Name, f)
			}
			return strings.TrimSpace(pw)
		}
	}
	return ""
}

// rewrite is one address substitution.
type rewrite struct{ role, from, to string }

type rewriteTable struct {
	addrs []rewrite
	// recipients is the recipients endpoint's host as configured, for the
	// diagnosis.
	recipientsURL string
}

// rewrites builds the table from the addresses the configuration carries
// (see the package comment).
func rewrites(t *testing.T, e local, name string, cfg Config) rewriteTable {
	t.Helper()
	var rw rewriteTable
	add := func(role, from, to string) {
		if from != "" && from != to && !slices.ContainsFunc(rw.addrs, func(r rewrite) bool { return r.from == from }) {
			rw.addrs = append(rw.addrs, rewrite{role, from, to})
		}
	}
	recipients, _ := url.Parse(e.recipientsURL)
	for _, w := range cfg.Workloads {
		if v := w.Env["TEMPORAL_ADDRESS"]; v != "" {
			add("temporal", v, e.st.TemporalAddr)
		}
		for b := range strings.SplitSeq(w.Env["FANOUT_KAFKA_BROKERS"], ",") {
			add("kafka", strings.TrimSpace(b), e.st.KafkaAddr)
		}
		for r := range strings.SplitSeq(w.Env["FANOUT_REDIS_URL"], ",") {
			if u, err := url.Parse(strings.TrimSpace(r)); err == nil && u.Host != "" {
				add("redis", u.Host, e.st.RedisAddr)
			}
		}
		if v := w.Env["FANOUT_RECIPIENTS_URL"]; v != "" {
			rw.recipientsURL = v
			if u, err := url.Parse(v); err == nil {
				add("recipients", u.Host, recipients.Host)
			}
		}
		if name == "compose" && standIn(name, w) != "" && w.Args[0] == "sink" {
			for _, a := range w.Addresses {
				add("sink", a, sinkHost)
			}
		}
	}
	if name == "compose" {
		for _, o := range cfg.Others {
			if composeStandIns[o.Name] == "" {
				t.Fatalf("compose service %s (%s): nothing here stands for it; add it to composeStandIns or run it", o.Name, o.Image)
			}
			t.Logf("compose service %s: stood in for by %s", o.Name, composeStandIns[o.Name])
		}
	} else if len(cfg.Others) > 0 {
		t.Fatalf("%s: containers of other images, which nothing here stands for: %+v", name, cfg.Others)
	}
	// Longest first, so a host:port is replaced before its host.
	slices.SortFunc(rw.addrs, func(a, b rewrite) int { return cmp.Compare(len(b.from), len(a.from)) })
	for _, r := range rw.addrs {
		t.Logf("rewrite (%s): %s -> %s", r.role, r.from, r.to)
	}
	return rw
}

// hostChar: a character that continues a host name or a host:port.
func hostChar(c byte) bool {
	return c == '.' || c == '-' || c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// replaceAddr replaces each whole occurrence of from in s: not inside a
// longer host name, and a bare host not when a port follows it.
func replaceAddr(s, from, to string) string {
	var b strings.Builder
	for {
		i := strings.Index(s, from)
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		end := i + len(from)
		whole := (i == 0 || !hostChar(s[i-1])) && (end == len(s) || !hostChar(s[end]) && s[end] != ':')
		b.WriteString(s[:i])
		if whole {
			b.WriteString(to)
		} else {
			b.WriteString(from)
		}
		s = s[end:]
	}
}

var listenAddr = regexp.MustCompile(`^(0\.0\.0\.0|\[::\]|)?:[0-9]+$`)

// process is a workload's argv and environment with the table applied, its
// mounted files laid out under the test's directory, and (for workers) the
// sink allowed when the configuration does not allow it.
func (rw rewriteTable) process(t *testing.T, w Workload, e local) (args, environ []string) {
	t.Helper()
	mroot := filepath.Join(e.dir, "mounts", strings.NewReplacer("/", "_").Replace(w.Name))
	for p, content := range w.Files {
		f := filepath.Join(mroot, p)
		if err := os.MkdirAll(filepath.Dir(f), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte(content), 0o400); err != nil {
			t.Fatal(err)
		}
	}
	apply := func(s string) string {
		for _, r := range rw.addrs {
			s = replaceAddr(s, r.from, r.to)
		}
		for _, m := range w.Mounts {
			if s == m || strings.HasPrefix(s, strings.TrimSuffix(m, "/")+"/") {
				s = filepath.Join(mroot, s)
			}
		}
		return s
	}
	for _, a := range w.Args {
		args = append(args, apply(a))
	}
	env := map[string]string{}
	for k, v := range w.Env {
		env[k] = apply(v)
		if strings.HasSuffix(k, "_ADDR") && listenAddr.MatchString(v) {
			port, err := stack.FreePort()
			if err != nil {
				t.Fatal(err)
			}
			env[k] = "127.0.0.1:" + strconv.Itoa(port)
		}
	}
	if w.Binary == "worker" {
		allow, err := netguard.Parse(env["FANOUT_OUTBOUND_ALLOW"])
		if err != nil {
			t.Fatalf("%s: FANOUT_OUTBOUND_ALLOW: %v", w.Name, err)
		}
		if allow.Check(netip.MustParseAddr(sinkHost)) != nil {
			env["FANOUT_OUTBOUND_ALLOW"] = strings.Trim(env["FANOUT_OUTBOUND_ALLOW"]+","+sinkHost, ",")
		}
	}
	for _, k := range slices.Sorted(maps.Keys(env)) {
		environ = append(environ, k+"="+env[k])
	}
	return args, environ
}

// procs runs the workloads' processes, each in its own process group,
// with exactly the environment given (nothing inherited from the test).
type procs struct {
	t    *testing.T
	logs string
	bin  map[string]string
}

type proc struct {
	w    Workload
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

func newProcs(t *testing.T, logs string, bins map[string]string) *procs {
	if err := os.MkdirAll(logs, 0o755); err != nil {
		t.Fatal(err)
	}
	return &procs{t: t, logs: logs, bin: bins}
}

func (ps *procs) start(w Workload, args, environ []string) *proc {
	t := ps.t
	t.Helper()
	bin, ok := ps.bin[w.Binary]
	if !ok {
		t.Fatalf("%s runs %s, a binary this test does not build", w.Name, w.Binary)
	}
	log := filepath.Join(ps.logs, strings.NewReplacer("/", "_").Replace(w.Name)+".log")
	f, err := os.Create(log)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	cmd := exec.Command(bin, args...)
	cmd.Env = environ
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: %v", w.Name, err)
	}
	p := &proc{w: w, cmd: cmd, log: log, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	t.Cleanup(p.stop)
	return p
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *proc) state() string {
	if !p.exited() {
		return "running"
	}
	return p.cmd.ProcessState.String()
}

// wait waits for a job to exit, successfully.
func (p *proc) wait(ctx context.Context, d time.Duration) error {
	select {
	case <-p.done:
		if !p.cmd.ProcessState.Success() {
			return errors.New(p.cmd.ProcessState.String())
		}
		return nil
	case <-time.After(d):
		p.stop()
		return fmt.Errorf("still running after %s", d)
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (p *proc) stop() {
	if p.exited() {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// tail is the last n lines of the process's log.
func (p *proc) tail(n int) string {
	b, _ := os.ReadFile(p.log)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return "  " + strings.Join(lines[max(0, len(lines)-n):], "\n  ")
}

// decodingClient is a Temporal client on the stack that decodes what the
// configuration's processes encrypt (FANOUT_CODEC_KEYS or _FILE), to read
// why a workflow failed.
func decodingClient(t *testing.T, e local, cfg Config, rw rewriteTable) client.Client {
	t.Helper()
	opts := client.Options{HostPort: e.st.TemporalAddr, Logger: stack.QuietLogger{}}
	for _, w := range cfg.Workloads {
		keys := w.Env["FANOUT_CODEC_KEYS"]
		if f := w.Env["FANOUT_CODEC_KEYS_FILE"]; f != "" {
			keys = w.Files[f]
		}
		if keys == "" {
			continue
		}
		k, err := workers.ParseKeys(keys)
		if err != nil {
			t.Fatalf("%s: codec keys: %v", w.Name, err)
		}
		workers.WithEncryption(k)(&opts)
		break
	}
	c, err := client.Dial(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// closedUndelivered are the events whose workflow closed with recipients
// missing, by id: their status.
func closedUndelivered(ctx context.Context, tc client.Client, missing map[string]int) map[string]string {
	out := map[string]string{}
	for id := range missing {
		d, err := tc.DescribeWorkflow(ctx, stack.WorkflowID(id), "")
		if err != nil {
			continue
		}
		if s := d.RawResponse.GetWorkflowExecutionInfo().GetStatus(); s != enums.WORKFLOW_EXECUTION_STATUS_RUNNING {
			out[id] = s.String()
		}
	}
	return out
}

var deniedRE = regexp.MustCompile(`destination not allowed: ([0-9a-fA-F.:]+) is [^"(]*`)

// diagnose says why events were not delivered: each workflow's state and
// error, the guard's refusals in the processes' logs, and the variable the
// configuration would need.
func diagnose(ctx context.Context, tc client.Client, e local, cfg Config, rw rewriteTable, ps *procs, missing map[string]int) string {
	var b strings.Builder
	var texts []string
	for _, id := range slices.Sorted(maps.Keys(missing)) {
		wid := stack.WorkflowID(id)
		d, err := tc.DescribeWorkflow(ctx, wid, "")
		if err != nil {
			fmt.Fprintf(&b, "event %s: no workflow %s (%v): the bridge did not start it\n", id, wid, err)
			continue
		}
		status := d.RawResponse.GetWorkflowExecutionInfo().GetStatus()
		fmt.Fprintf(&b, "event %s: workflow %s %s\n", id, wid, status)
		if status != enums.WORKFLOW_EXECUTION_STATUS_RUNNING {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := tc.GetWorkflow(cctx, wid, "").Get(cctx, nil)
			cancel()
			if err != nil {
				msg := err.Error()
				if len(msg) > 400 {
					msg = msg[:400] + "..."
				}
				fmt.Fprintf(&b, "  error: %s\n", msg)
				texts = append(texts, err.Error())
			}
		}
	}
	logs, _ := filepath.Glob(filepath.Join(ps.logs, "*.log"))
	for _, l := range logs {
		f, err := os.Open(l)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		n := 0
		for sc.Scan() {
			if line := sc.Text(); strings.Contains(line, "not allowed") && n < 3 {
				fmt.Fprintf(&b, "  %s: %s\n", filepath.Base(l), line)
				texts = append(texts, line)
				n++
			}
		}
		_ = f.Close()
	}
	recipientsHost := ""
	if u, err := url.Parse(e.recipientsURL); err == nil {
		recipientsHost = u.Hostname()
	}
	needs := map[string]bool{}
	for _, txt := range texts {
		for _, m := range deniedRE.FindAllStringSubmatch(txt, -1) {
			switch m[1] {
			case recipientsHost:
				if !needs["recipients"] {
					needs["recipients"] = true
					fmt.Fprintf(&b, "NEEDS FANOUT_OUTBOUND_ALLOW: the workers' outbound guard refused the recipients endpoint "+
						"FANOUT_RECIPIENTS_URL=%s (here %s, %s). As shipped, this configuration reaches its own recipients endpoint "+
						"only with FANOUT_OUTBOUND_ALLOW covering that endpoint's address, which it does not set (and which would "+
						"open deliveries to that range too): the recipients endpoint must be trusted (issue 26, item 1).\n",
						rw.recipientsURL, e.recipientsURL, strings.TrimSpace(m[0]))
				}
			case sinkHost:
				if !needs["sink"] {
					needs["sink"] = true
					fmt.Fprintf(&b, "NEEDS FANOUT_OUTBOUND_ALLOW: the guard refused deliveries to the sink (%s), which the "+
						"configuration's FANOUT_OUTBOUND_ALLOW does not allow.\n", strings.TrimSpace(m[0]))
				}
			}
		}
	}
	if len(needs) == 0 {
		b.WriteString("no guard refusal found; the processes' logs:\n")
		for _, l := range logs {
			p := &proc{log: l}
			fmt.Fprintf(&b, "--- %s\n%s\n", filepath.Base(l), p.tail(15))
		}
	}
	return b.String()
}
