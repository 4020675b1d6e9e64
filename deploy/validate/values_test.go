package validate

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/lint/support"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
)

// TestSchemaRefusesValues: values.schema.json fails `helm template`
// (Render) and `helm lint` on a misspelled key or a wrong type, naming the
// key, at every level the chart defines.
func TestSchemaRefusesValues(t *testing.T) {
	cases := []struct {
		name   string
		values string
		want   []string // all in the error
	}{
		{"misspelled pool key", "workers:\n  high:\n    replicaCount: 3\n", []string{"/workers/high", "replicaCount"}},
		{"misspelled key under workers", "workers:\n  replicaCount: 3\n", []string{"/workers", "replicaCount"}},
		{"unknown queue", "workers:\n  urgent: {enabled: true}\n", []string{"/workers", "urgent"}},
		{"misspelled top-level key", "nodeSelecter: {pool: a}\n", []string{"nodeSelecter"}},
		{"misspelled nested key", "kafka:\n  tls:\n    insecureSkipVerfy: true\n", []string{"/kafka/tls", "insecureSkipVerfy"}},
		{"misspelled codec server key", "codecServer:\n  tokenSecret: t\n", []string{"/codecServer", "tokenSecret"}},
		{"wrong type", "workers:\n  high:\n    batchSlots: eight\n", []string{"/workers/high/batchSlots", "integer"}},
		{"wrong type of a switch", "bridge:\n  inEventsWorker: \"yes\"\n", []string{"/bridge/inEventsWorker", "boolean"}},
		{"wrong type of a list", "kafka:\n  brokers: kafka:9092\n", []string{"/kafka/brokers", "array"}},
		{"a value out of its set", "redis:\n  mode: sentinal\n", []string{"/redis/mode"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			values := parseValues(t, c.values)
			setDigest(values)
			_, err := Render(ChartDir, values, "fanout")
			if err == nil {
				t.Fatalf("rendered %q; want a schema error", c.values)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
			msgs := Lint(ChartDir, values)
			if !slices.ContainsFunc(msgs, func(m support.Message) bool { return strings.Contains(m.Error(), c.want[len(c.want)-1]) }) {
				t.Errorf("helm lint: %v; want a finding naming %q", msgs, c.want[len(c.want)-1])
			}
		})
	}
}

// TestZeroDigestRefused: the default image digest is an all-zero
// placeholder; rendering it fails, telling what to set. A tag instead of
// a digest renders.
func TestZeroDigestRefused(t *testing.T) {
	_, err := Render(ChartDir, nil, "fanout")
	if err == nil {
		t.Fatal("the default values (zero digest) rendered; want a failure")
	}
	for _, w := range []string{"image.digest", "all-zero", "image.tag"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not mention %q", err, w)
		}
	}
	if _, err := Render(ChartDir, map[string]any{"image": map[string]any{"digest": "", "tag": "v1.2.3"}}, "fanout"); err != nil {
		t.Errorf("image.tag without a digest: %v", err)
	}
}

// TestPoolSettings: the scheduling keys combine as values.yaml says, on
// the scheduling value set: maps merge (the pool's keys win, never over
// the selector labels), anything else a pool sets replaces the default,
// even when empty; a spread constraint without a labelSelector gets the
// pool's pod labels; the setup Job takes no spread constraints.
func TestPoolSettings(t *testing.T) {
	objs := renderObjects(t, valueSets(t)["scheduling"])
	pods := map[string]corev1.PodTemplateSpec{}
	for _, o := range objs {
		switch v := o.Obj.(type) {
		case *appsv1.Deployment:
			pods[v.Name] = v.Spec.Template
		case *batchv1.Job:
			pods[v.Name] = v.Spec.Template
		}
	}
	normal, high, bridge, setup := pods["fanout-worker-delivery-normal"], pods["fanout-worker-delivery-high"], pods["fanout-bridge"], pods["fanout-setup"]
	for name, p := range map[string]corev1.PodTemplateSpec{"normal": normal, "high": high, "bridge": bridge, "setup": setup} {
		if len(p.Spec.Containers) == 0 {
			t.Fatalf("%s: not rendered (%v)", name, slices.Sorted(maps.Keys(pods)))
		}
	}
	eq := func(what string, got, want any) {
		t.Helper()
		if g, w := toYAML(t, got), toYAML(t, want); g != w {
			t.Errorf("%s:\n%s\nwant\n%s", what, g, w)
		}
	}
	// The defaults alone.
	eq("normal nodeSelector", normal.Spec.NodeSelector, map[string]string{"node-pool": "fanout"})
	eq("normal tolerations", normal.Spec.Tolerations, []corev1.Toleration{{Key: "dedicated", Operator: "Equal", Value: "fanout", Effect: "NoSchedule"}})
	eq("normal priorityClassName", normal.Spec.PriorityClassName, "fanout-default")
	eq("normal team label", normal.Labels["team"], "messaging")
	eq("normal owner annotation", normal.Annotations["example.com/owner"], "messaging")
	eq("normal volumes", normal.Spec.Volumes[1].Name, "ca-bundle")
	eq("normal mounts", normal.Spec.Containers[0].VolumeMounts[1].MountPath, "/etc/ssl/corporate")
	eq("normal spread", normal.Spec.TopologySpreadConstraints[0].LabelSelector.MatchLabels, map[string]string{
		"app.kubernetes.io/name": "fanout", "app.kubernetes.io/instance": "fanout", "app.kubernetes.io/component": "worker-delivery-normal"})
	// high overrides.
	eq("high nodeSelector (merged)", high.Spec.NodeSelector, map[string]string{"node-pool": "fanout", "tier": "fast"})
	eq("high tolerations (replaced by an empty list)", len(high.Spec.Tolerations), 0)
	eq("high priorityClassName", high.Spec.PriorityClassName, "fanout-high")
	eq("high labels (merged)", []string{high.Labels["team"], high.Labels["tier"], high.Labels["app.kubernetes.io/component"]}, []string{"messaging", "fast", "worker-delivery-high"})
	eq("high spread (replaced)", high.Spec.TopologySpreadConstraints[0].TopologyKey, "topology.kubernetes.io/zone")
	eq("high spread selector (filled in)", high.Spec.TopologySpreadConstraints[0].LabelSelector.MatchLabels["app.kubernetes.io/component"], "worker-delivery-high")
	eq("high affinity", high.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions[0].Key, "kubernetes.io/arch")
	if !slices.ContainsFunc(high.Spec.Containers[0].Env, func(e corev1.EnvVar) bool { return e.Name == "FANOUT_DEDUP" && e.Value == "true" }) {
		t.Errorf("high env %v: want its extraEnv FANOUT_DEDUP=true", high.Spec.Containers[0].Env)
	}
	if normal.Spec.Affinity != nil {
		t.Errorf("normal has high's affinity")
	}
	// bridge: volumes replaced by empty lists.
	eq("bridge volumes", len(bridge.Spec.Volumes), 1)
	eq("bridge mounts", len(bridge.Spec.Containers[0].VolumeMounts), 1)
	// setup: no spread, its own annotation merged.
	eq("setup spread", len(setup.Spec.TopologySpreadConstraints), 0)
	eq("setup annotations", []string{setup.Annotations["sidecar.istio.io/inject"], setup.Annotations["example.com/owner"]}, []string{"false", "messaging"})
}

// TestBridgeSwitch: with bridge.inEventsWorker (the default) there is no
// bridge Deployment and the events workers get FANOUT_BRIDGE=true and
// bridge.extraEnv (their own extraEnv winning); off, the bridge is its own
// Deployment and no worker runs it.
func TestBridgeSwitch(t *testing.T) {
	env := func(objs []Object, name string) (map[string]string, bool) {
		for _, o := range objs {
			if d, ok := o.Obj.(*appsv1.Deployment); ok && d.Name == name {
				out := map[string]string{}
				for _, e := range d.Spec.Template.Spec.Containers[0].Env {
					out[e.Name] = e.Value
				}
				return out, true
			}
		}
		return nil, false
	}
	on := renderObjects(t, parseValues(t, "image: {digest: "+testDigest+"}\n"+
		"bridge: {extraEnv: {FANOUT_COMMIT_INTERVAL: 500ms, FANOUT_MAX_PAYLOAD_BYTES: \"1000\"}}\n"+
		"workers: {events: {extraEnv: {FANOUT_MAX_PAYLOAD_BYTES: \"2000\"}}}\n"))
	if _, ok := env(on, "fanout-bridge"); ok {
		t.Error("bridge.inEventsWorker: a bridge Deployment is rendered too")
	}
	ev, _ := env(on, "fanout-worker-events")
	if ev["FANOUT_BRIDGE"] != "true" || ev["FANOUT_COMMIT_INTERVAL"] != "500ms" || ev["FANOUT_MAX_PAYLOAD_BYTES"] != "2000" {
		t.Errorf("events worker env %v: want FANOUT_BRIDGE=true, the bridge's FANOUT_COMMIT_INTERVAL=500ms, the pool's FANOUT_MAX_PAYLOAD_BYTES=2000", ev)
	}
	if hi, _ := env(on, "fanout-worker-delivery-high"); hi["FANOUT_BRIDGE"] != "" || hi["FANOUT_COMMIT_INTERVAL"] != "" {
		t.Errorf("a delivery worker got the bridge's env: %v", hi)
	}
	for _, o := range on {
		if o.Kind == "PodDisruptionBudget" && o.Name == "fanout-bridge" {
			t.Error("a PodDisruptionBudget for the bridge Deployment that is not rendered")
		}
	}
	off := renderObjects(t, parseValues(t, "image: {digest: "+testDigest+"}\nbridge: {inEventsWorker: false}\n"))
	if _, ok := env(off, "fanout-bridge"); !ok {
		t.Error("bridge.inEventsWorker false: no bridge Deployment")
	}
	if ev, _ := env(off, "fanout-worker-events"); ev["FANOUT_BRIDGE"] != "" {
		t.Errorf("bridge.inEventsWorker false: the events worker still runs the bridge (%v)", ev)
	}
	if _, err := Render(ChartDir, parseValues(t, "image: {digest: "+testDigest+"}\nworkers: {events: {enabled: false}}\n"), "fanout"); err == nil || !strings.Contains(err.Error(), "bridge.inEventsWorker") {
		t.Errorf("the bridge in a disabled events pool: %v; want an error naming bridge.inEventsWorker", err)
	}
}

// TestSetupTopicsFlags: setup.topics.create passes -topics to `starter
// setup`, and each topics setting its flag only when set (else the
// starter's own default applies).
func TestSetupTopicsFlags(t *testing.T) {
	argv := func(values string) []string {
		t.Helper()
		for _, o := range renderObjects(t, parseValues(t, "image: {digest: "+testDigest+"}\n"+values)) {
			if j, ok := o.Obj.(*batchv1.Job); ok && j.Name == "fanout-setup" {
				c := j.Spec.Template.Spec.Containers[0]
				return append(slices.Clone(c.Command), c.Args...)
			}
		}
		t.Fatal("no Job fanout-setup")
		return nil
	}
	cases := []struct {
		values string
		want   []string
	}{
		{"", []string{"/usr/local/bin/starter", "setup"}},
		{"setup: {topics: {create: false, partitions: 24}}", []string{"/usr/local/bin/starter", "setup"}},
		{"setup: {topics: {create: true}}", []string{"/usr/local/bin/starter", "setup", "-topics"}},
		{"setup: {topics: {create: true, partitions: 24, retention: 72h, dlqPartitions: 6, dlqRetention: 720h, replication: -1}}",
			[]string{"/usr/local/bin/starter", "setup", "-topics", "-dlq-partitions=6", "-dlq-retention=720h", "-partitions=24", "-replication=-1", "-retention=72h"}},
	}
	for _, c := range cases {
		if got := argv(c.values); !slices.Equal(got, c.want) {
			t.Errorf("%q: setup runs %q, want %q", c.values, got, c.want)
		}
	}
	if _, err := Render(ChartDir, parseValues(t, "image: {digest: "+testDigest+"}\nsetup: {topics: {retention: 7d}}\n"), "fanout"); err == nil || !strings.Contains(err.Error(), "/setup/topics/retention") {
		t.Errorf("retention 7d (not a Go duration): %v; want a schema error naming it", err)
	}
}
