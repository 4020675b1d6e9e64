package validate

// The fanout-specific checks of rendered (or kustomize) objects, which no
// schema knows: environment names against the code, one worker Deployment
// per queue, KEDA triggers against their Deployments, NetworkPolicy ports
// against the configuration, Secret keys, probes, images by digest. The
// objects are already strictly decoded into their API types.

import (
	"cmp"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Paths of the code the checks read, from this module's directory.
const (
	repoRoot      = "../.."
	vocabFile     = "../../workflows/vocab/vocab.go"
	fanoutFile    = "../../fanout.go"
	secretExample = "../k8s/examples/secret.yaml"
	envconfigMod  = "go.temporal.io/sdk/contrib/envconfig"
)

// ---------------------------------------------------------------------------
// What the code says, read from its source (this module does not import the
// service's packages, so that their dependencies stay out of it).

// goStringConsts returns the string constants of a Go file by name, and the
// names of constants of the given type.
func goStringConsts(t *testing.T, file, typ string) (consts map[string]string, ofType []string) {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	consts = map[string]string{}
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok {
			return true
		}
		for i, v := range vs.Values {
			lit, ok := v.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING || i >= len(vs.Names) {
				continue
			}
			s, _ := strconv.Unquote(lit.Value)
			consts[vs.Names[i].Name] = s
			if id, ok := vs.Type.(*ast.Ident); ok && id.Name == typ {
				ofType = append(ofType, s)
			}
		}
		return true
	})
	return consts, ofType
}

// queueNames maps each FANOUT_QUEUES name (events, then the priorities of
// fanout.go) to the task queues its workers serve, as workflows/vocab's
// TaskQueues does: a priority's delivery queue and its large-batch queue
// (low: one).
func queueNames(t *testing.T) map[string][]string {
	t.Helper()
	vocab, _ := goStringConsts(t, vocabFile, "")
	_, priorities := goStringConsts(t, fanoutFile, "Priority")
	events, eventsTQ, prefix, large := vocab["QueueEvents"], vocab["EventsTaskQueue"], vocab["deliveryTaskQueuePrefix"], vocab["largeTaskQueueSuffix"]
	if events == "" || eventsTQ == "" || prefix == "" || large == "" || len(priorities) == 0 {
		t.Fatalf("%s / %s: QueueEvents, EventsTaskQueue, deliveryTaskQueuePrefix, largeTaskQueueSuffix or the Priority constants not found; has the code moved?", vocabFile, fanoutFile)
	}
	out := map[string][]string{events: {eventsTQ}}
	for _, p := range priorities {
		out[p] = []string{prefix + p, prefix + p + large}
	}
	// Low's pages share its few slots (vocab.LargeDeliveryTaskQueue).
	out["low"] = out["low"][:1]
	return out
}

// configDirs hold the configuration structs: the connections and loading
// (internal/config) and each stage's settings.
var configDirs = []string{"../../internal/config", "../../internal/codecserver", "../../starter", "../../workers", "../../workers/webhook", "../../activities/limits"}

// configDir names them in messages.
var configDir = strings.Join(configDirs, ", ")

// fanoutEnvNames returns the FANOUT_* variables the processes read: every
// `env:"..."` tag in configDirs and its string constants that are a
// variable's name (read directly, such as FANOUT_TEMPORAL_API_KEY_FILE).
func fanoutEnvNames(t *testing.T) map[string]bool {
	t.Helper()
	var files []string
	for _, dir := range configDirs {
		fs, _ := filepath.Glob(filepath.Join(dir, "*.go"))
		files = append(files, fs...)
	}
	nameOnly := regexp.MustCompile(`^FANOUT_[A-Z0-9_]+$`)
	names := map[string]bool{}
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.BasicLit:
				if s, err := strconv.Unquote(n.Value); err == nil && n.Kind == token.STRING && nameOnly.MatchString(s) {
					names[s] = true
				}
			case *ast.Field:
				if n.Tag != nil {
					tag, _ := strconv.Unquote(n.Tag.Value)
					if v, ok := reflect.StructTag(tag).Lookup("env"); ok {
						name, _, _ := strings.Cut(v, ",")
						names[name] = true
					}
				}
			}
			return true
		})
	}
	if !names["FANOUT_QUEUES"] || !names["FANOUT_REDIS_URL"] {
		t.Fatalf("%s: found no env tags (FANOUT_QUEUES, FANOUT_REDIS_URL); has the code moved?", configDir)
	}
	return names
}

// temporalEnvNames returns the TEMPORAL_* variables the SDK's envconfig
// reads, from its source in the module cache (the version the service's
// go.mod selects), and the name prefixes (TEMPORAL_GRPC_META_).
func temporalEnvNames(t *testing.T) (map[string]bool, []string) {
	t.Helper()
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", envconfigMod)
	cmd.Dir = repoRoot
	out, err := cmd.Output()
	if err != nil || strings.TrimSpace(string(out)) == "" {
		t.Fatalf("go list -m %s in %s: %v (run go mod download at the root)", envconfigMod, repoRoot, err)
	}
	src := filepath.Join(strings.TrimSpace(string(out)), "client_config_load.go")
	f, err := parser.ParseFile(token.NewFileSet(), src, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	var prefixes []string
	re := regexp.MustCompile(`^TEMPORAL_[A-Z0-9_]+$`)
	ast.Inspect(f, func(n ast.Node) bool {
		if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
			if s, err := strconv.Unquote(lit.Value); err == nil && re.MatchString(s) {
				if strings.HasSuffix(s, "_") {
					prefixes = append(prefixes, s)
				} else {
					names[s] = true
				}
			}
		}
		return true
	})
	if !names["TEMPORAL_ADDRESS"] || !names["TEMPORAL_API_KEY"] {
		t.Fatalf("%s: no TEMPORAL_ADDRESS / TEMPORAL_API_KEY; has envconfig changed?", src)
	}
	return names, prefixes
}

// secretKeys returns the keys documented in k8s/examples/secret.yaml.
func secretKeys(t *testing.T) (name string, keys map[string]bool) {
	t.Helper()
	b, err := os.ReadFile(secretExample)
	if err != nil {
		t.Fatal(err)
	}
	o, err := Decode(Manifest{File: secretExample, Doc: 1, YAML: b})
	if err != nil {
		t.Fatal(err)
	}
	s := o.Obj.(*corev1.Secret)
	keys = map[string]bool{}
	for k := range s.StringData {
		keys[k] = true
	}
	for k := range s.Data {
		keys[k] = true
	}
	return s.Name, keys
}

// codeFacts is what the checks compare the objects with.
type codeFacts struct {
	queues           map[string][]string // FANOUT_QUEUES name -> the task queues its workers serve
	fanoutEnv        map[string]bool
	temporalEnv      map[string]bool
	temporalPrefixes []string
	secretName       string
	secretKeys       map[string]bool
}

var (
	factsOnce sync.Once
	facts     codeFacts
)

func loadFacts(t *testing.T) codeFacts {
	t.Helper()
	factsOnce.Do(func() {
		facts.queues = queueNames(t)
		facts.fanoutEnv = fanoutEnvNames(t)
		facts.temporalEnv, facts.temporalPrefixes = temporalEnvNames(t)
		facts.secretName, facts.secretKeys = secretKeys(t)
	})
	if facts.queues == nil {
		t.Fatal("reading the code failed (see the first test that did)")
	}
	return facts
}

// ---------------------------------------------------------------------------
// The checks.

// index holds decoded objects by kind.
type index struct {
	deployments    []*appsv1.Deployment
	jobs           []*batchv1.Job
	configMaps     map[string]*corev1.ConfigMap
	scaledObjects  []*kedav1alpha1.ScaledObject
	triggerAuths   map[string]*kedav1alpha1.TriggerAuthentication
	networkPols    []*networkingv1.NetworkPolicy
	pdbs           []*policyv1.PodDisruptionBudget
	serviceAccts   map[string]*corev1.ServiceAccount
	services       []*corev1.Service
	metas          []metav1.Object // every object but a Kustomization
	podMonitors    []*monitoringv1.PodMonitor
	prometheusRule []*monitoringv1.PrometheusRule
}

func indexObjects(objs []Object) index {
	ix := index{configMaps: map[string]*corev1.ConfigMap{}, triggerAuths: map[string]*kedav1alpha1.TriggerAuthentication{},
		serviceAccts: map[string]*corev1.ServiceAccount{}}
	for _, o := range objs {
		if m, ok := o.Obj.(metav1.Object); ok {
			ix.metas = append(ix.metas, m)
		}
		switch v := o.Obj.(type) {
		case *corev1.ServiceAccount:
			ix.serviceAccts[v.Name] = v
		case *corev1.Service:
			ix.services = append(ix.services, v)
		case *appsv1.Deployment:
			ix.deployments = append(ix.deployments, v)
		case *batchv1.Job:
			ix.jobs = append(ix.jobs, v)
		case *corev1.ConfigMap:
			ix.configMaps[v.Name] = v
		case *kedav1alpha1.ScaledObject:
			ix.scaledObjects = append(ix.scaledObjects, v)
		case *kedav1alpha1.TriggerAuthentication:
			ix.triggerAuths[v.Name] = v
		case *networkingv1.NetworkPolicy:
			ix.networkPols = append(ix.networkPols, v)
		case *policyv1.PodDisruptionBudget:
			ix.pdbs = append(ix.pdbs, v)
		case *monitoringv1.PodMonitor:
			ix.podMonitors = append(ix.podMonitors, v)
		case *monitoringv1.PrometheusRule:
			ix.prometheusRule = append(ix.prometheusRule, v)
		}
	}
	return ix
}

// pod is a workload's pod template with what the checks derive from it.
type pod struct {
	where    string   // "Deployment/fanout-worker-events"
	role     string   // worker, bridge, setup, codec-server
	argv     []string // the first container's command and args
	template corev1.PodTemplateSpec
	env      map[string]string // the first container's resolved environment
	queue    string            // a worker's FANOUT_QUEUES
	meta     metav1.ObjectMeta // the workload's own metadata
}

// runsBridge reports whether the pod consumes the events topic: `starter
// bridge`, or an events worker with FANOUT_BRIDGE=true.
func (p pod) runsBridge() bool {
	return p.role == "bridge" || (p.role == "worker" && p.env["FANOUT_BRIDGE"] == "true")
}

func roleOf(c corev1.Container) string {
	argv := append(slices.Clone(c.Command), c.Args...)
	switch {
	case len(argv) == 1 && argv[0] == "/usr/local/bin/worker":
		return "worker"
	case len(argv) >= 2 && argv[0] == "/usr/local/bin/starter":
		return argv[1]
	}
	return strings.Join(argv, " ")
}

func (ix index) containerEnv(c corev1.Container) (map[string]string, []string) {
	env := map[string]string{}
	var problems []string
	for _, src := range c.EnvFrom {
		if src.ConfigMapRef == nil {
			problems = append(problems, "envFrom other than a ConfigMap")
			continue
		}
		cm, ok := ix.configMaps[src.ConfigMapRef.Name]
		if !ok {
			problems = append(problems, fmt.Sprintf("envFrom ConfigMap %q is not rendered", src.ConfigMapRef.Name))
		}
		if cm != nil {
			for k, v := range cm.Data {
				env[src.Prefix+k] = v
			}
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom != nil {
			problems = append(problems, fmt.Sprintf("env %s comes from valueFrom: secrets are files, the rest is in the ConfigMap", e.Name))
		}
		env[e.Name] = e.Value
	}
	return env, problems
}

func (ix index) pods() []pod {
	var out []pod
	add := func(where string, meta metav1.ObjectMeta, tpl corev1.PodTemplateSpec) {
		p := pod{where: where, template: tpl, meta: meta}
		if len(tpl.Spec.Containers) > 0 {
			c := tpl.Spec.Containers[0]
			p.role = roleOf(c)
			p.argv = append(slices.Clone(c.Command), c.Args...)
			p.env, _ = ix.containerEnv(tpl.Spec.Containers[0])
			p.queue = p.env["FANOUT_QUEUES"]
		}
		out = append(out, p)
	}
	for _, d := range ix.deployments {
		add("Deployment/"+d.Name, d.ObjectMeta, d.Spec.Template)
	}
	for _, j := range ix.jobs {
		add("Job/"+j.Name, j.ObjectMeta, j.Spec.Template)
	}
	return out
}

func selects(sel *metav1.LabelSelector, podLabels map[string]string) bool {
	s, err := metav1.LabelSelectorAsSelector(sel)
	return err == nil && s.Matches(labels.Set(podLabels))
}

// crossCheck returns every problem of a set of decoded objects.
func crossCheck(t *testing.T, objs []Object) []string {
	t.Helper()
	f := loadFacts(t)
	ix := indexObjects(objs)
	var problems []string
	report := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	pods := ix.pods()

	// Environment names, references, Secret files, images, probes, lockdown.
	for _, cm := range ix.configMaps {
		if cm.Labels["grafana_dashboard"] != "" {
			continue
		}
		for _, p := range f.checkEnvNames(cm.Data) {
			report("ConfigMap/%s: %s", cm.Name, p)
		}
	}
	for _, p := range pods {
		spec := p.template.Spec
		secretVolumes := map[string]string{}
		for _, v := range spec.Volumes {
			if v.Secret != nil {
				secretVolumes[v.Name] = v.Secret.SecretName
			}
		}
		for _, c := range spec.Containers {
			cw := fmt.Sprintf("%s container %s", p.where, c.Name)
			env, envProblems := ix.containerEnv(c)
			for _, e := range envProblems {
				report("%s: %s", cw, e)
			}
			for _, e := range f.checkEnvNames(env) {
				report("%s: %s", cw, e)
			}
			if !regexp.MustCompile(`@sha256:[0-9a-f]{64}$`).MatchString(c.Image) {
				report("%s: image %q is not pinned by digest", cw, c.Image)
			}
			// Every file variable under a Secret mount names a documented key
			// of a mounted, read-only Secret.
			for _, vm := range c.VolumeMounts {
				secretName, ok := secretVolumes[vm.Name]
				if !ok {
					continue
				}
				if !vm.ReadOnly {
					report("%s: Secret volume %s is mounted read-write", cw, vm.Name)
				}
				if secretName != f.secretName {
					report("%s: mounts Secret %q, but %s documents %q", cw, secretName, secretExample, f.secretName)
				}
				prefix := strings.TrimSuffix(vm.MountPath, "/") + "/"
				for _, name := range slices.Sorted(maps.Keys(env)) {
					if key, ok := strings.CutPrefix(env[name], prefix); ok && !f.secretKeys[key] {
						report("%s: %s=%s: key %q is not documented in %s", cw, name, env[name], key, secretExample)
					}
				}
			}
			sc := c.SecurityContext
			podSC := spec.SecurityContext
			if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
				sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
				sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") ||
				podSC == nil || podSC.RunAsNonRoot == nil || !*podSC.RunAsNonRoot {
				report("%s: not locked down (runAsNonRoot, no privilege escalation, read-only root, capabilities dropped)", cw)
			}
			if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
				report("%s: wants requests.cpu, requests.memory and limits.memory", cw)
			}
			if p.role == "worker" || p.role == "bridge" {
				_, port, err := net.SplitHostPort(env["FANOUT_METRICS_ADDR"])
				lp := c.LivenessProbe
				switch {
				case err != nil:
					report("%s: FANOUT_METRICS_ADDR=%q: want [host]:port", cw, env["FANOUT_METRICS_ADDR"])
				case lp == nil || lp.HTTPGet == nil || lp.HTTPGet.Path != "/metrics":
					report("%s: no liveness probe on /metrics", cw)
				case strconv.Itoa(containerPort(c, lp.HTTPGet.Port.String())) != port:
					report("%s: liveness probe port %s is not FANOUT_METRICS_ADDR's %s", cw, lp.HTTPGet.Port.String(), port)
				}
			}
		}
	}

	// One worker Deployment per queue, every queue served; the bridge in two
	// or more replicas.
	served := map[string]string{}
	bridges := 0
	for _, d := range ix.deployments {
		p := pod{where: "Deployment/" + d.Name}
		for _, q := range pods {
			if q.where == p.where {
				p = q
			}
		}
		switch p.role {
		case "worker":
			if _, ok := f.queues[p.queue]; !ok {
				report("%s: FANOUT_QUEUES=%q: want exactly one of %v", p.where, p.queue, slices.Sorted(maps.Keys(f.queues)))
				continue
			}
			if prev, dup := served[p.queue]; dup {
				report("queue %s is served by %s and %s", p.queue, prev, d.Name)
			}
			served[p.queue] = d.Name
		}
		if p.runsBridge() {
			bridges++
			// Two or more consumers in the group, so one restarting pod does
			// not stop the intake: the replicas, or KEDA's floor.
			minimum := int32(0)
			if d.Spec.Replicas != nil {
				minimum = *d.Spec.Replicas
			}
			for _, so := range ix.scaledObjects {
				if so.Spec.ScaleTargetRef.Name == d.Name && so.Spec.MinReplicaCount != nil {
					minimum = *so.Spec.MinReplicaCount
				}
			}
			if minimum < 2 {
				report("%s: runs the bridge, which wants at least 2 replicas in its consumer group (replicas or KEDA's minReplicaCount: %d)", p.where, minimum)
			}
			if p.role == "worker" && p.queue != "events" {
				report("%s: FANOUT_BRIDGE=true on a worker of queue %q: the bridge starts events on its own events worker", p.where, p.queue)
			}
		}
		if !selects(d.Spec.Selector, d.Spec.Template.Labels) {
			report("%s: its selector does not select its pods", p.where)
		}
	}
	for _, b := range ix.pdbs {
		if !slices.ContainsFunc(ix.deployments, func(d *appsv1.Deployment) bool { return selects(b.Spec.Selector, d.Spec.Template.Labels) }) {
			report("PodDisruptionBudget/%s selects no Deployment's pods", b.Name)
		}
	}
	for q := range f.queues {
		if _, ok := served[q]; !ok {
			report("no worker Deployment serves queue %s (FANOUT_QUEUES=%s)", q, q)
		}
	}
	if bridges == 0 {
		report("no bridge: neither a starter bridge Deployment nor an events worker with FANOUT_BRIDGE=true")
	}

	problems = append(problems, checkLabelsAndAccounts(ix, pods)...)
	problems = append(problems, checkSetupHook(ix, pods)...)

	problems = append(problems, checkKEDA(f, ix, pods)...)
	problems = append(problems, checkNetworkPolicies(ix, pods)...)

	// The PodMonitor scrapes every worker and the bridge on a port they have.
	for _, pm := range ix.podMonitors {
		sel := pm.Spec.Selector
		for _, p := range pods {
			if p.role != "worker" && p.role != "bridge" {
				continue
			}
			if !selects(&sel, p.template.Labels) {
				report("PodMonitor/%s does not select %s", pm.Name, p.where)
			}
			for _, ep := range pm.Spec.PodMetricsEndpoints {
				if ep.Port == nil || containerPort(p.template.Spec.Containers[0], *ep.Port) == 0 {
					report("PodMonitor/%s: endpoint port %v is not a port of %s", pm.Name, ep.Port, p.where)
				}
			}
		}
	}
	for _, pr := range ix.prometheusRule {
		for _, err := range CheckPrometheusRule(pr) {
			report("PrometheusRule/%s: %v", pr.Name, err)
		}
	}
	slices.Sort(problems)
	return problems
}

func containerPort(c corev1.Container, nameOrNumber string) int {
	if n, err := strconv.Atoi(nameOrNumber); err == nil {
		return n
	}
	for _, p := range c.Ports {
		if p.Name == nameOrNumber {
			return int(p.ContainerPort)
		}
	}
	return 0
}

func (f codeFacts) checkEnvNames(env map[string]string) []string {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(env)) {
		switch {
		case strings.HasPrefix(name, "FANOUT_") && !f.fanoutEnv[name]:
			out = append(out, fmt.Sprintf("%s is not read by fanout (no env tag or name in internal/config)", name))
		case strings.HasPrefix(name, "TEMPORAL_") && !f.temporalEnv[name] &&
			!slices.ContainsFunc(f.temporalPrefixes, func(p string) bool { return strings.HasPrefix(name, p) }):
			out = append(out, fmt.Sprintf("%s is not read by %s", name, envconfigMod))
		}
	}
	return out
}

// checkKEDA: every worker Deployment has one ScaledObject (when KEDA is
// used) with a temporal trigger on each of its own task queues, against the Temporal
// endpoint and namespace its pods get, with a fallback, at least one replica
// and an existing TriggerAuthentication reading documented Secret keys.
func checkKEDA(f codeFacts, ix index, pods []pod) []string {
	var problems []string
	report := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	if len(ix.scaledObjects) == 0 {
		return nil
	}
	byName := map[string]pod{}
	for _, p := range pods {
		byName[p.where] = p
	}
	scaled := map[string]bool{}
	for _, so := range ix.scaledObjects {
		w := "ScaledObject/" + so.Name
		ref := so.Spec.ScaleTargetRef
		p, ok := byName["Deployment/"+ref.Name]
		if !ok || cmp.Or(ref.Kind, "Deployment") != "Deployment" {
			report("%s: scaleTargetRef %s %s is not a rendered Deployment", w, ref.Kind, ref.Name)
			continue
		}
		if p.role != "worker" {
			report("%s: scales %s, which is not a worker", w, ref.Name)
			continue
		}
		scaled[ref.Name] = true
		for _, d := range ix.deployments {
			if d.Name == ref.Name && d.Spec.Replicas != nil {
				report("%s: Deployment %s sets replicas while KEDA owns them (every apply would reset the count)", w, ref.Name)
			}
		}
		if so.Spec.MinReplicaCount == nil || *so.Spec.MinReplicaCount < 1 {
			report("%s: minReplicaCount must be at least 1: an idle task queue's backlog reads 0, so a pool at zero is never woken", w)
		}
		if so.Spec.Fallback == nil || so.Spec.Fallback.Replicas < 1 || so.Spec.Fallback.FailureThreshold < 1 {
			report("%s: no fallback (replicas to keep while the backlog cannot be read)", w)
		}
		var onQueues []string
		for _, tr := range so.Spec.Triggers {
			onQueues = append(onQueues, tr.Metadata["taskQueue"])
		}
		if want := f.queues[p.queue]; !slices.Equal(onQueues, want) {
			report("%s: triggers on task queues %q, but %s serves FANOUT_QUEUES=%s, task queues %q (one trigger each)", w, onQueues, ref.Name, p.queue, want)
		}
		for _, tr := range so.Spec.Triggers {
			md := tr.Metadata
			if tr.Type != "temporal" {
				report("%s: trigger type %q, want temporal", w, tr.Type)
				continue
			}
			if md["endpoint"] != p.env["TEMPORAL_ADDRESS"] {
				report("%s: endpoint %q, but %s's workers use TEMPORAL_ADDRESS=%q", w, md["endpoint"], ref.Name, p.env["TEMPORAL_ADDRESS"])
			}
			if cmp.Or(md["namespace"], "default") != cmp.Or(p.env["TEMPORAL_NAMESPACE"], "default") {
				report("%s: namespace %q, but %s's workers use TEMPORAL_NAMESPACE=%q", w, md["namespace"], ref.Name, p.env["TEMPORAL_NAMESPACE"])
			}
			qt := strings.Split(md["queueTypes"], ",")
			if !slices.Contains(qt, "workflow") || !slices.Contains(qt, "activity") {
				report("%s: queueTypes %q: every pool runs workflows and activities on its queue", w, md["queueTypes"])
			}
			if n, err := strconv.Atoi(md["targetQueueSize"]); err != nil || n < 1 {
				report("%s: targetQueueSize %q: want a positive integer", w, md["targetQueueSize"])
			}
			tls := p.env["TEMPORAL_API_KEY"] != "" || p.env["FANOUT_TEMPORAL_API_KEY_FILE"] != "" || p.env["TEMPORAL_TLS_CLIENT_CERT_PATH"] != ""
			switch ar := tr.AuthenticationRef; {
			case ar == nil && tls:
				report("%s: the workers authenticate to Temporal but the trigger has no authenticationRef", w)
			case ar != nil:
				if _, ok := ix.triggerAuths[ar.Name]; !ok || cmp.Or(ar.Kind, "TriggerAuthentication") != "TriggerAuthentication" {
					report("%s: authenticationRef %s %q is not a rendered TriggerAuthentication", w, ar.Kind, ar.Name)
				}
			}
		}
	}
	for _, p := range pods {
		if name, ok := strings.CutPrefix(p.where, "Deployment/"); ok && p.role == "worker" && !scaled[name] {
			report("%s: worker Deployment without a ScaledObject", p.where)
		}
	}
	for _, ta := range ix.triggerAuths {
		for _, r := range ta.Spec.SecretTargetRef {
			if r.Name != f.secretName || !f.secretKeys[r.Key] {
				report("TriggerAuthentication/%s: %s reads Secret %s key %s, not a key documented in %s", ta.Name, r.Parameter, r.Name, r.Key, secretExample)
			}
		}
	}
	return problems
}

// neededEgress is the egress a process of role makes with environment env
// (beyond DNS): "TCP/<port>" of Temporal, Kafka, Redis, the recipients
// source and the webhook destinations.
func neededEgress(role, queue string, argv []string, env map[string]string) ([]string, error) {
	var out []string
	add := func(p string) {
		if !slices.Contains(out, "TCP/"+p) {
			out = append(out, "TCP/"+p)
		}
	}
	if role == "codec-server" {
		return out, nil // it only answers
	}
	_, port, err := net.SplitHostPort(cmp.Or(env["TEMPORAL_ADDRESS"], "localhost:7233"))
	if err != nil {
		return nil, fmt.Errorf("TEMPORAL_ADDRESS: %v", err)
	}
	add(port)
	// starter setup reads Redis's eviction policy, and creates the topics
	// with -topics.
	kafka := role == "worker" || role == "bridge" || (role == "setup" && slices.ContainsFunc(argv, func(a string) bool {
		return a == "-topics" || a == "--topics" || strings.HasPrefix(a, "-topics=") || strings.HasPrefix(a, "--topics=")
	}))
	redis := role == "worker" || role == "bridge" || role == "setup"
	if kafka {
		for _, b := range strings.Split(env["FANOUT_KAFKA_BROKERS"], ",") {
			_, port, err := net.SplitHostPort(strings.TrimSpace(b))
			if err != nil {
				return nil, fmt.Errorf("FANOUT_KAFKA_BROKERS %q: %v", b, err)
			}
			add(port)
		}
	}
	if redis {
		for _, raw := range strings.Split(cmp.Or(env["FANOUT_REDIS_URL"], "redis://localhost:6379"), ",") {
			u, err := url.Parse(strings.TrimSpace(raw))
			if err != nil {
				return nil, fmt.Errorf("FANOUT_REDIS_URL: not a URL")
			}
			add(cmp.Or(u.Port(), "6379"))
		}
	}
	if role == "worker" {
		add("443")
		add("80")
		if queue == "events" && env["FANOUT_RECIPIENTS_URL"] != "" {
			u, err := url.Parse(env["FANOUT_RECIPIENTS_URL"])
			if err != nil {
				return nil, fmt.Errorf("FANOUT_RECIPIENTS_URL: not a URL")
			}
			add(cmp.Or(u.Port(), map[string]string{"http": "80", "https": "443"}[u.Scheme]))
		}
	}
	return out, nil
}

// checkNetworkPolicies: when there are policies, every pod is selected by a
// default-deny one, and the policies selecting it open exactly the ports its
// configuration uses (plus DNS), destinations only to public addresses, and
// Prometheus' ingress on the metrics port.
func checkNetworkPolicies(ix index, pods []pod) []string {
	if len(ix.networkPols) == 0 {
		return nil
	}
	var problems []string
	report := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	for _, p := range pods {
		denied := false
		allowed := map[string]bool{}
		ingress := map[string]bool{}
		var destinations []networkingv1.NetworkPolicyPeer
		for _, np := range ix.networkPols {
			if !selects(&np.Spec.PodSelector, p.template.Labels) {
				continue
			}
			types := np.Spec.PolicyTypes
			if slices.Contains(types, networkingv1.PolicyTypeIngress) && slices.Contains(types, networkingv1.PolicyTypeEgress) &&
				len(np.Spec.Ingress) == 0 && len(np.Spec.Egress) == 0 {
				denied = true
			}
			for _, r := range np.Spec.Egress {
				if len(r.Ports) == 0 {
					report("NetworkPolicy/%s: an egress rule without ports opens every port", np.Name)
				}
				for _, port := range r.Ports {
					key := string(ptrOr(port.Protocol, corev1.ProtocolTCP)) + "/" + port.Port.String()
					allowed[key] = true
					if key == "TCP/443" || key == "TCP/80" {
						destinations = append(destinations, r.To...)
					}
				}
			}
			for _, r := range np.Spec.Ingress {
				if len(r.From) == 0 {
					report("NetworkPolicy/%s: an ingress rule without from lets anyone in", np.Name)
				}
				for _, port := range r.Ports {
					ingress[string(ptrOr(port.Protocol, corev1.ProtocolTCP))+"/"+port.Port.String()] = true
				}
			}
		}
		if !denied {
			report("%s: no default-deny NetworkPolicy selects its pods", p.where)
		}
		want, err := neededEgress(p.role, p.queue, p.argv, p.env)
		if err != nil {
			report("%s: %v", p.where, err)
			continue
		}
		for _, port := range want {
			if !allowed[port] {
				report("%s (%s): its configuration needs egress to %s; no NetworkPolicy allows it", p.where, p.role, port)
			}
		}
		for _, port := range slices.Sorted(maps.Keys(allowed)) {
			if !slices.Contains(want, port) && port != "TCP/53" && port != "UDP/53" {
				report("%s (%s): egress to %s is allowed but its configuration does not use it", p.where, p.role, port)
			}
		}
		for _, peer := range destinations {
			if peer.IPBlock == nil {
				continue
			}
			for _, private := range []string{"10.0.0.1", "172.16.0.1", "192.168.0.1", "127.0.0.1", "169.254.169.254", "100.64.0.1", "::1", "fd00::1", "fe80::1"} {
				if cidrAllows(peer.IPBlock.CIDR, peer.IPBlock.Except, private) {
					report("%s: egress on 80/443 reaches %s (%s except %v)", p.where, private, peer.IPBlock.CIDR, peer.IPBlock.Except)
				}
			}
		}
		if p.role == "worker" || p.role == "bridge" {
			_, port, _ := net.SplitHostPort(p.env["FANOUT_METRICS_ADDR"])
			if !ingress["TCP/"+port] {
				report("%s: Prometheus cannot scrape FANOUT_METRICS_ADDR=%s: no ingress on %s", p.where, p.env["FANOUT_METRICS_ADDR"], port)
			}
		}
		if p.role == "codec-server" {
			for _, cp := range p.template.Spec.Containers[0].Ports {
				if !ingress[fmt.Sprintf("%s/%d", ptrOr(&cp.Protocol, corev1.ProtocolTCP), cp.ContainerPort)] {
					report("%s: no ingress on its port %s (%d): nobody could call it", p.where, cp.Name, cp.ContainerPort)
				}
			}
		}
	}
	return problems
}

func ptrOr[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

// cidrAllows reports whether ip is in cidr and in none of except.
func cidrAllows(cidr string, except []string, ip string) bool {
	addr := net.ParseIP(ip)
	_, n, err := net.ParseCIDR(cidr)
	if err != nil || !n.Contains(addr) || (addr.To4() == nil) != (n.IP.To4() == nil) {
		return false
	}
	for _, e := range except {
		if _, en, err := net.ParseCIDR(e); err == nil && en.Contains(addr) {
			return false
		}
	}
	return true
}

// checkLabelsAndAccounts: every object carries the standard labels (the
// selector's name and instance, helm.sh/chart, app.kubernetes.io/managed-by,
// version, part-of) and no selector the chart's version; every pod runs as
// a rendered ServiceAccount (when the chart creates them) without an API
// token.
func checkLabelsAndAccounts(ix index, pods []pod) []string {
	var problems []string
	report := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	for _, m := range ix.metas {
		l := m.GetLabels()
		for _, k := range []string{"app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/version", "app.kubernetes.io/part-of", "app.kubernetes.io/managed-by", "helm.sh/chart"} {
			if l[k] == "" {
				report("%s: no label %s", m.GetName(), k)
			}
		}
	}
	for _, d := range ix.deployments {
		for k := range d.Spec.Selector.MatchLabels {
			if k == "helm.sh/chart" || k == "app.kubernetes.io/version" {
				report("Deployment/%s: selector label %s changes with the chart, but a selector is immutable", d.Name, k)
			}
		}
	}
	for _, p := range pods {
		spec := p.template.Spec
		if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
			report("%s: mounts a Kubernetes API token (automountServiceAccountToken), which fanout never uses", p.where)
		}
		if len(ix.serviceAccts) > 0 {
			if _, ok := ix.serviceAccts[spec.ServiceAccountName]; !ok {
				report("%s: serviceAccountName %q is not a rendered ServiceAccount (%v)", p.where, spec.ServiceAccountName, slices.Sorted(maps.Keys(ix.serviceAccts)))
			}
		}
	}
	return problems
}

// hookWeight returns an object's Helm hook phases and weight ("" when it
// is not a hook).
func hookWeight(m metav1.Object) (hook string, weight int) {
	a := m.GetAnnotations()
	weight, _ = strconv.Atoi(a["helm.sh/hook-weight"])
	return a["helm.sh/hook"], weight
}

// checkSetupHook: the setup Job runs before install and upgrade, is deleted
// when it succeeded, and what it needs at hook time (its ConfigMap, its
// ServiceAccount when rendered) are hooks of the same phases created before
// it (a lower weight), since the release's own objects do not exist yet.
func checkSetupHook(ix index, pods []pod) []string {
	var problems []string
	report := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	byName := map[string]metav1.Object{}
	for _, m := range ix.metas {
		byName[reflect.TypeOf(m).Elem().Name()+"/"+m.GetName()] = m
	}
	for _, p := range pods {
		if p.role != "setup" {
			continue
		}
		hook, weight := hookWeight(&p.meta)
		if hook != "pre-install,pre-upgrade" {
			report("%s: helm.sh/hook %q; want pre-install,pre-upgrade (setup before anything starts events)", p.where, hook)
		}
		if pol := p.meta.Annotations["helm.sh/hook-delete-policy"]; pol != "before-hook-creation,hook-succeeded" {
			report("%s: helm.sh/hook-delete-policy %q; want before-hook-creation,hook-succeeded", p.where, pol)
		}
		var needs []string
		for _, src := range p.template.Spec.Containers[0].EnvFrom {
			if src.ConfigMapRef != nil {
				needs = append(needs, "ConfigMap/"+src.ConfigMapRef.Name)
			}
		}
		if sa := p.template.Spec.ServiceAccountName; sa != "" && len(ix.serviceAccts) > 0 {
			needs = append(needs, "ServiceAccount/"+sa)
		}
		for _, n := range needs {
			m, ok := byName[n]
			if !ok {
				report("%s: needs %s, which is not rendered", p.where, n)
				continue
			}
			h, w := hookWeight(m)
			if h != hook || w >= weight {
				report("%s: needs %s at hook time, but it is not a %q hook of a lower weight (hook %q, weight %d; the Job's %d)", p.where, n, hook, h, w, weight)
			}
		}
	}
	return problems
}
