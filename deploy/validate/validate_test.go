package validate

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	kustomizetypes "sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/yaml"
)

const (
	composeFile = "../compose.yaml"
	rulesFile   = ChartDir + "/files/rules.yaml"
	dashboard   = ChartDir + "/files/dashboard.json"
)

// testDigest stands for a real image digest: the chart refuses its default,
// the all-zero placeholder.
const testDigest = "sha256:1234567890abcdef1234567890abcdef1234567890abcdef1234567890abcdef"

// valueSets are the configurations the chart is rendered, linted and
// checked with: the defaults and each testdata/values file.
func valueSets(t *testing.T) map[string]map[string]any {
	t.Helper()
	sets := map[string]map[string]any{"defaults": {"image": map[string]any{"digest": testDigest}}}
	files, _ := filepath.Glob("testdata/values/*.yaml")
	if len(files) < 3 {
		t.Fatalf("testdata/values: want the value sets, found %v", files)
	}
	for _, f := range files {
		v, err := ReadValuesFile(f)
		if err != nil {
			t.Fatal(err)
		}
		sets[strings.TrimSuffix(filepath.Base(f), ".yaml")] = v
	}
	return sets
}

func renderObjects(t *testing.T, values map[string]any) []Object {
	t.Helper()
	ms, err := RenderManifests(ChartDir, values)
	if err != nil {
		t.Fatal(err)
	}
	objs, errs := DecodeAll(ms)
	for _, err := range errs {
		t.Error(err)
	}
	return objs
}

func kindCounts(objs []Object) map[string]int {
	n := map[string]int{}
	for _, o := range objs {
		n[o.Kind]++
	}
	return n
}

// TestChartLint: `helm lint` finds nothing of severity warning or error
// with any value set.
func TestChartLint(t *testing.T) {
	for name, values := range valueSets(t) {
		for _, m := range Lint(ChartDir, values) {
			t.Errorf("%s: helm lint: %s", name, m)
		}
	}
}

// TestChartRendersStrictly: every object the chart renders with every value
// set decodes strictly into its API type, has no namespace (helm -n / the
// kustomization sets it), and names no object twice; the value sets render
// what they switch on.
func TestChartRendersStrictly(t *testing.T) {
	for name, values := range valueSets(t) {
		t.Run(name, func(t *testing.T) {
			objs := renderObjects(t, values)
			seen := map[string]string{}
			for _, o := range objs {
				if o.Namespace != "" {
					t.Errorf("%s: metadata.namespace %q: leave it to helm -n", o, o.Namespace)
				}
				key := o.Kind + "/" + o.Name
				if prev, dup := seen[key]; dup {
					t.Errorf("%s: %s also rendered by %s", o, key, prev)
				}
				seen[key] = o.String()
			}
			n := kindCounts(objs)
			// 4 worker pools, plus the bridge where it has its own
			// Deployment, plus the codec server where it is on.
			wantDeployments := map[string]int{"defaults": 4, "mtls": 4, "cloud": 5, "plain": 5, "scheduling": 5}
			if want, ok := wantDeployments[name]; !ok || n["Deployment"] != want || n["ConfigMap"] < 1 {
				t.Errorf("rendered %v; want %d Deployments (a new value set: add it to wantDeployments) and the ConfigMap", n, want)
			}
			if name == "cloud" {
				for _, k := range []string{"PodMonitor", "PrometheusRule", "TriggerAuthentication", "ScaledObject", "NetworkPolicy", "PodDisruptionBudget", "Job", "ServiceAccount", "Service"} {
					if n[k] == 0 {
						t.Errorf("the cloud set renders no %s (%v)", k, n)
					}
				}
				_, err := os.Stat(dashboard)
				hasDashboard := slices.ContainsFunc(objs, func(o Object) bool {
					cm, ok := o.Obj.(*corev1.ConfigMap)
					return ok && cm.Labels["grafana_dashboard"] == "1" && cm.Data["fanout.json"] != ""
				})
				if hasDashboard != (err == nil) {
					t.Errorf("dashboard ConfigMap rendered: %v; %s exists: %v", hasDashboard, dashboard, err == nil)
				}
			}
			if name == "plain" {
				for _, k := range []string{"ScaledObject", "NetworkPolicy", "Job", "ServiceAccount"} {
					if n[k] != 0 {
						t.Errorf("the plain set switches %s off but renders %d", k, n[k])
					}
				}
			}
		})
	}
}

// TestChartCrossChecks: fanout's own rules hold for every value set.
func TestChartCrossChecks(t *testing.T) {
	for name, values := range valueSets(t) {
		t.Run(name, func(t *testing.T) {
			for _, p := range crossCheck(t, renderObjects(t, values)) {
				t.Error(p)
			}
		})
	}
}

// loadK8s decodes every file of deploy/k8s (the kustomize manifests) and
// the example Secret.
func loadK8s(t *testing.T) []Object {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(K8sDir, "*.yaml"))
	if len(files) == 0 {
		t.Fatalf("no manifests in %s", K8sDir)
	}
	var objs []Object
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		ms, err := SplitDocuments(f, string(b))
		if err != nil {
			t.Fatal(err)
		}
		o, errs := DecodeAll(ms)
		for _, err := range errs {
			t.Error(err)
		}
		objs = append(objs, o...)
	}
	return objs
}

// TestKustomizeStrict: the kustomize manifests decode strictly (the
// Kustomization into kustomize's own type), the kustomization lists every
// manifest file and pins the image by digest, and the cross-checks hold.
func TestKustomizeStrict(t *testing.T) {
	objs := loadK8s(t)
	var k *kustomizetypes.Kustomization
	files := map[string]bool{}
	for _, o := range objs {
		if kk, ok := o.Obj.(*kustomizetypes.Kustomization); ok {
			k = kk
			continue
		}
		files[filepath.Base(o.File)] = true
	}
	if k == nil {
		t.Fatalf("%s: no kustomization.yaml", K8sDir)
	}
	if got, want := slices.Sorted(slices.Values(k.Resources)), slices.Sorted(maps.Keys(files)); !slices.Equal(got, want) {
		t.Errorf("kustomization resources %v; the manifest files are %v", got, want)
	}
	if len(k.Images) == 0 {
		t.Error("kustomization: no images entry")
	}
	for _, im := range k.Images {
		if im.NewTag != "" || !strings.HasPrefix(im.Digest, "sha256:") || len(im.Digest) != len("sha256:")+64 {
			t.Errorf("kustomization image %s: want digest sha256:<64 hex> and no newTag (tag %q, digest %q)", im.Name, im.NewTag, im.Digest)
		}
	}
	for _, p := range crossCheck(t, objs) {
		t.Error(p)
	}
}

// TestKustomizeGenerated: deploy/k8s is what `go generate` makes of the
// chart's defaults; a change to the chart without regenerating fails.
func TestKustomizeGenerated(t *testing.T) {
	want, err := GenerateK8s(ChartDir)
	if err != nil {
		t.Fatal(err)
	}
	on, _ := filepath.Glob(filepath.Join(K8sDir, "*.yaml"))
	for _, f := range on {
		if _, ok := want[filepath.Base(f)]; !ok {
			t.Errorf("%s is not generated from the chart: remove it, or run go generate ./... in deploy/validate", f)
		}
	}
	for name, content := range want {
		got, err := os.ReadFile(filepath.Join(K8sDir, name))
		if err != nil || string(got) != content {
			t.Errorf("%s/%s is stale (or missing): run go generate ./... in deploy/validate", K8sDir, name)
		}
	}
}

// TestRuleFile: the chart's files/rules.yaml is a valid Prometheus rule file
// with type-correct expressions.
func TestRuleFile(t *testing.T) {
	b, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, err := range CheckRuleFile(b) {
		t.Errorf("%s: %v", rulesFile, err)
	}
}

// TestCompose: compose-go loads deploy/compose.yaml against the Compose
// schema, and it has the fanout services.
func TestCompose(t *testing.T) {
	p, err := LoadCompose(context.Background(), composeFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"temporal", "kafka", "redis", "setup", "worker-events", "worker-delivery", "bridge"} {
		if _, ok := p.Services[s]; !ok {
			t.Errorf("%s: no service %s (services: %v)", composeFile, s, slices.Sorted(maps.Keys(p.Services)))
		}
	}
}

// TestBrokenFixtures: each validator fails on a broken file, naming what is
// wrong.
func TestBrokenFixtures(t *testing.T) {
	decodeErr := func(file string) error {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		ms, err := SplitDocuments(file, string(b))
		if err != nil {
			return err
		}
		_, errs := DecodeAll(ms)
		if len(errs) == 0 {
			return nil
		}
		return errs[0]
	}
	cases := []struct {
		file, want string
		check      func(string) error
	}{
		{"testdata/broken/deployment-typo.yaml", "terminationGracePeriodSecond", decodeErr},
		{"testdata/broken/deployment-env-number.yaml", "cannot unmarshal number", decodeErr},
		{"testdata/broken/scaledobject-typo.yaml", "stabilizationWindowSecond", decodeErr},
		{"testdata/broken/scaledobject-metadata-number.yaml", "cannot unmarshal number", decodeErr},
		{"testdata/broken/triggerauth-typo.yaml", "secretTargetRefs", decodeErr},
		{"testdata/broken/networkpolicy-typo.yaml", "podSelectors", decodeErr},
		{"testdata/broken/podmonitor-typo.yaml", "podMetricEndpoints", decodeErr},
		{"testdata/broken/prometheusrule-typo.yaml", "expression", decodeErr},
		{"testdata/broken/kustomization-typo.yaml", "resource", decodeErr},
		{"testdata/broken/unknown-kind.yaml", "not a kind the validators know", decodeErr},
		{"testdata/broken/rules-parse.yaml", "parse error", ruleErr},
		{"testdata/broken/rules-type.yaml", "range vector", ruleErr},
		{"testdata/broken/rules-unknown-field.yaml", "expression", ruleErr},
		{"testdata/broken/compose-typo.yaml", "extra_host", func(f string) error {
			_, err := LoadCompose(context.Background(), f)
			return err
		}},
		{"testdata/broken/chart", "version", lintErr},
		{"testdata/broken/chart-template", "unexpected", lintErr},
		{"testdata/broken/chart-template", "unexpected", func(dir string) error {
			_, err := Render(dir, nil, "")
			return err
		}},
	}
	for _, c := range cases {
		err := c.check(c.file)
		if err == nil {
			t.Errorf("%s: accepted; want an error about %q", c.file, c.want)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %q does not mention %q", c.file, err, c.want)
		}
	}
}

func lintErr(dir string) error {
	if ms := Lint(dir, nil); len(ms) > 0 {
		return ms[0].Err
	}
	return nil
}

func ruleErr(file string) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	if errs := CheckRuleFile(b); len(errs) > 0 {
		return errs[0]
	}
	return nil
}

// TestCrossChecksFail: each cross-check reports a broken rendering (the
// cloud set, changed in one place).
func TestCrossChecksFail(t *testing.T) {
	sets := valueSets(t)
	find := func(objs []Object, kind, name string) any {
		for _, o := range objs {
			if o.Kind == kind && o.Name == name {
				return o.Obj
			}
		}
		t.Fatalf("no %s %s rendered", kind, name)
		return nil
	}
	worker := func(objs []Object, name string) *corev1.Container {
		return &find(objs, "Deployment", name).(*appsv1.Deployment).Spec.Template.Spec.Containers[0]
	}
	cases := []struct {
		name, want string
		breakIt    func(objs []Object)
	}{
		{"unknown FANOUT_ variable", "FANOUT_BATCH_SLOT is not read", func(objs []Object) {
			c := worker(objs, "fanout-worker-delivery-high")
			c.Env = append(c.Env, corev1.EnvVar{Name: "FANOUT_BATCH_SLOT", Value: "4"})
		}},
		{"unknown TEMPORAL_ variable", "TEMPORAL_ADRESS is not read", func(objs []Object) {
			find(objs, "ConfigMap", "fanout-config").(*corev1.ConfigMap).Data["TEMPORAL_ADRESS"] = "x:7233"
		}},
		{"undocumented Secret key", "not documented", func(objs []Object) {
			find(objs, "ConfigMap", "fanout-config").(*corev1.ConfigMap).Data["FANOUT_REDIS_PASSWORD_FILE"] = "/etc/fanout/secrets/redis-pass"
		}},
		{"queue served twice", "queue normal is served by", func(objs []Object) {
			c := worker(objs, "fanout-worker-delivery-low")
			for i := range c.Env {
				if c.Env[i].Name == "FANOUT_QUEUES" {
					c.Env[i].Value = "normal"
				}
			}
		}},
		{"KEDA on another task queue", "task queues [\"fanout-delivery-low\"", func(objs []Object) {
			find(objs, "ScaledObject", "fanout-worker-delivery-high").(*kedav1alpha1.ScaledObject).Spec.Triggers[0].Metadata["taskQueue"] = "fanout-delivery-low"
		}},
		{"KEDA on another Temporal", "endpoint", func(objs []Object) {
			find(objs, "ScaledObject", "fanout-worker-events").(*kedav1alpha1.ScaledObject).Spec.Triggers[0].Metadata["endpoint"] = "localhost:7233"
		}},
		{"KEDA without fallback", "no fallback", func(objs []Object) {
			find(objs, "ScaledObject", "fanout-worker-events").(*kedav1alpha1.ScaledObject).Spec.Fallback = nil
		}},
		{"KEDA at zero", "minReplicaCount must be at least 1", func(objs []Object) {
			zero := int32(0)
			find(objs, "ScaledObject", "fanout-worker-delivery-low").(*kedav1alpha1.ScaledObject).Spec.MinReplicaCount = &zero
		}},
		{"NetworkPolicy misses Kafka's port", "needs egress to TCP/9096", func(objs []Object) {
			np := find(objs, "NetworkPolicy", "fanout-kafka").(*networkingv1.NetworkPolicy)
			np.Spec.Egress[0].Ports[0].Port = ptr(intstr.FromInt32(9092))
		}},
		{"destinations reach the metadata address", "169.254.169.254", func(objs []Object) {
			np := find(objs, "NetworkPolicy", "fanout-destinations").(*networkingv1.NetworkPolicy)
			np.Spec.Egress[0].To[0].IPBlock.Except = nil
		}},
		{"image by tag", "not pinned by digest", func(objs []Object) {
			worker(objs, "fanout-worker-delivery-high").Image = "registry.example.com/fanout:latest"
		}},
		{"probe on another port", "no liveness probe on /metrics", func(objs []Object) {
			worker(objs, "fanout-worker-events").LivenessProbe.HTTPGet.Path = "/healthz"
		}},
		{"PodMonitor misses the events workers", "does not select Deployment/fanout-worker-events", func(objs []Object) {
			pm := find(objs, "PodMonitor", "fanout").(*monitoringv1.PodMonitor)
			pm.Spec.Selector.MatchExpressions[2].Values = []string{"worker-delivery-high", "worker-delivery-normal", "worker-delivery-low", "bridge"}
		}},
		{"no bridge anywhere", "no bridge", func(objs []Object) {
			c := worker(objs, "fanout-worker-events")
			c.Env = slices.DeleteFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "FANOUT_BRIDGE" })
		}},
		{"a single bridge consumer", "wants at least 2 replicas", func(objs []Object) {
			one := int32(1)
			find(objs, "ScaledObject", "fanout-worker-events").(*kedav1alpha1.ScaledObject).Spec.MinReplicaCount = &one
		}},
		{"an object without the chart label", "no label helm.sh/chart", func(objs []Object) {
			delete(find(objs, "Service", "fanout-codec-server").(*corev1.Service).Labels, "helm.sh/chart")
		}},
		{"the chart version in a selector", "selector label helm.sh/chart", func(objs []Object) {
			find(objs, "Deployment", "fanout-worker-delivery-low").(*appsv1.Deployment).Spec.Selector.MatchLabels["helm.sh/chart"] = "fanout-0.1.0"
		}},
		{"a pod on a ServiceAccount nobody creates", "is not a rendered ServiceAccount", func(objs []Object) {
			find(objs, "Deployment", "fanout-codec-server").(*appsv1.Deployment).Spec.Template.Spec.ServiceAccountName = "fanout-codec"
		}},
		{"setup after the install", "want pre-install,pre-upgrade", func(objs []Object) {
			find(objs, "Job", "fanout-setup").(*batchv1.Job).Annotations["helm.sh/hook"] = "post-install,post-upgrade"
		}},
		{"setup's ConfigMap created after it", "needs ConfigMap/fanout-setup-config at hook time", func(objs []Object) {
			find(objs, "ConfigMap", "fanout-setup-config").(*corev1.ConfigMap).Annotations["helm.sh/hook-weight"] = "0"
		}},
		{"setup's ConfigMap a release object", "needs ConfigMap/fanout-config at hook time", func(objs []Object) {
			j := find(objs, "Job", "fanout-setup").(*batchv1.Job)
			j.Spec.Template.Spec.Containers[0].EnvFrom[0].ConfigMapRef.Name = "fanout-config"
		}},
		{"setup creating topics without Kafka egress", "Job/fanout-setup (setup): its configuration needs egress to TCP/9096", func(objs []Object) {
			np := find(objs, "NetworkPolicy", "fanout-kafka").(*networkingv1.NetworkPolicy)
			np.Spec.PodSelector.MatchExpressions[0].Values = slices.DeleteFunc(np.Spec.PodSelector.MatchExpressions[0].Values, func(v string) bool { return v == "setup" })
		}},
		{"codec server unreachable", "no ingress on its port http", func(objs []Object) {
			find(objs, "NetworkPolicy", "fanout-codec-server").(*networkingv1.NetworkPolicy).Spec.Ingress[0].Ports[0].Port = ptr(intstr.FromInt32(8000))
		}},
		{"PrometheusRule with a bad expression", "PrometheusRule/fanout", func(objs []Object) {
			pr := find(objs, "PrometheusRule", "fanout").(*monitoringv1.PrometheusRule)
			pr.Spec.Groups[0].Rules[0].Expr = intstr.FromString("sum(rate(fanout_deliveries_total))")
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			objs := renderObjects(t, sets["cloud"])
			if p := crossCheck(t, objs); len(p) > 0 {
				t.Fatalf("the unbroken rendering already fails: %v", p)
			}
			c.breakIt(objs)
			problems := crossCheck(t, objs)
			if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, c.want) }) {
				t.Errorf("want a problem mentioning %q, got %v", c.want, problems)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// parseValues reads values from YAML text.
func parseValues(t *testing.T, text string) map[string]any {
	t.Helper()
	v := map[string]any{}
	if err := yaml.Unmarshal([]byte(text), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// setDigest sets image.digest to testDigest unless the values set one.
func setDigest(values map[string]any) {
	img, _ := values["image"].(map[string]any)
	if img == nil {
		img = map[string]any{}
		values["image"] = img
	}
	if _, ok := img["digest"]; !ok {
		img["digest"] = testDigest
	}
}

func toYAML(t *testing.T, v any) string {
	t.Helper()
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
