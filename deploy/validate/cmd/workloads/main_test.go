package main

import (
	"maps"
	"slices"
	"strings"
	"testing"
)

func defaults(t *testing.T) *Output {
	t.Helper()
	out, err := run(options{chart: "../../../helm/fanout", values: "testdata/digest.yaml", compose: "../../../compose.yaml", kustomize: "../../../k8s",
		secret: "../../../k8s/examples/secret.yaml", dockerfile: "../../../Dockerfile"})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// The chart's defaults (with an image digest) and deploy/k8s (generated from them) run the same
// processes: same binaries, arguments, environments and files, the setup
// Job among them; only when it runs differs (a Helm hook, or a Job that
// kubectl applies with the rest).
func TestChartAndKustomizeRunTheSameProcesses(t *testing.T) {
	out := defaults(t)
	byName := func(c Config) map[string]Workload {
		m := map[string]Workload{}
		for _, w := range c.Workloads {
			m[w.Name] = w
		}
		return m
	}
	chart, kust := byName(out.Chart), byName(out.Kustomize)
	if !slices.Equal(slices.Sorted(maps.Keys(chart)), slices.Sorted(maps.Keys(kust))) {
		t.Fatalf("chart workloads %v, kustomize %v", slices.Sorted(maps.Keys(chart)), slices.Sorted(maps.Keys(kust)))
	}
	queues := map[string]bool{}
	var setup bool
	for name, c := range chart {
		k := kust[name]
		if c.Binary != k.Binary || !slices.Equal(c.Args, k.Args) || !maps.Equal(c.Env, k.Env) || !maps.Equal(c.Files, k.Files) {
			t.Errorf("%s: chart runs %s %v %v, kustomize %s %v %v", name, c.Binary, c.Args, c.Env, k.Binary, k.Args, k.Env)
		}
		if c.Binary == "worker" {
			queues[c.Env["FANOUT_QUEUES"]] = true
		}
		if c.Binary == "starter" && slices.Equal(c.Args, []string{"setup"}) {
			setup = true
			if !c.Job || !k.Job || k.Order != OrderJob || c.Order == OrderWorkload {
				t.Errorf("%s: chart job=%v order=%d hook=%q, kustomize job=%v order=%d: want a Job, a hook in the chart", name, c.Job, c.Order, c.Hook, k.Job, k.Order)
			}
		}
		if f := c.Env["FANOUT_CODEC_KEYS_FILE"]; f != "" && c.Files[f] == "" {
			t.Errorf("%s: FANOUT_CODEC_KEYS_FILE=%s is not a mounted file of the example Secret", name, f)
		}
	}
	if !setup {
		t.Error("no workload runs starter setup")
	}
	for _, q := range []string{"events", "high", "normal", "low"} {
		if !queues[q] {
			t.Errorf("no worker with FANOUT_QUEUES=%s (got %v)", q, queues)
		}
	}
}

// compose: the fanout services with their environment, the demo
// recipients endpoint and sink with the sink's fixed address, which the
// workers allow; the other images listed apart.
func TestCompose(t *testing.T) {
	c := defaults(t).Compose
	got := map[string]Workload{}
	for _, w := range c.Workloads {
		got[w.Name] = w
	}
	sink := got["sink"]
	if sink.Binary != "demo" || len(sink.Addresses) != 1 {
		t.Fatalf("sink = %+v, want the demo binary at one fixed address", sink)
	}
	for _, name := range []string{"worker-events", "worker-delivery"} {
		if a := got[name].Env["FANOUT_OUTBOUND_ALLOW"]; a != sink.Addresses[0] {
			t.Errorf("%s: FANOUT_OUTBOUND_ALLOW=%q, want the sink's address %s", name, a, sink.Addresses[0])
		}
	}
	if u := got["worker-events"].Env["FANOUT_RECIPIENTS_URL"]; !strings.Contains(u, "//recipients:") || got["recipients"].Binary != "demo" {
		t.Errorf("worker-events: FANOUT_RECIPIENTS_URL=%q, recipients service %+v: want the demo recipients service", u, got["recipients"])
	}
	if s := got["setup"]; !s.Job || s.Order != OrderJob || s.Binary != "starter" {
		t.Errorf("setup = %+v, want a one-shot starter setup", s)
	}
	if w := got["worker-events"]; w.Job || w.Env["TEMPORAL_ADDRESS"] == "" || w.Env["FANOUT_QUEUES"] != "events" {
		t.Errorf("worker-events = %+v, want a long-running worker with the shared environment", w)
	}
	var others []string
	for _, o := range c.Others {
		others = append(others, o.Name)
	}
	if !slices.Contains(others, "temporal") || slices.Contains(others, "worker-events") {
		t.Errorf("others = %v, want the third-party images only", others)
	}
}

// The kubelet's expansion of $(VAR) in env values, command and args.
func TestExpand(t *testing.T) {
	env := map[string]string{"A": "x", "B": "y"}
	for in, want := range map[string]string{
		"$(A)-$(B)": "x-y", "$$(A)": "$(A)", "$(C)": "$(C)", "plain": "plain", "$(A": "$(A", "a$": "a$",
	} {
		if got := expand(in, env); got != want {
			t.Errorf("expand(%q) = %q, want %q", in, got, want)
		}
	}
}

// The Dockerfile's binaries and command decide what a container runs.
func TestImageArgv(t *testing.T) {
	img, err := readDockerfile("../../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{"worker", "starter", "demo"} {
		if img.binaries[b] != "/usr/local/bin/"+b {
			t.Errorf("binaries = %v, want %s in /usr/local/bin", img.binaries, b)
		}
	}
	if bin, err := img.binary(img.argv(nil, nil)); err != nil || bin != "worker" {
		t.Errorf("the image's default runs %q (%v), want worker", bin, err)
	}
	if _, err := img.binary(img.argv([]string{"/bin/sh"}, []string{"-c", "x"})); err == nil {
		t.Error("a binary the image does not install was accepted")
	}
	if argv := img.argv(nil, []string{"starter", "setup"}); !slices.Equal(argv, []string{"starter", "setup"}) {
		t.Errorf("command starter setup runs %v", argv)
	}
}
