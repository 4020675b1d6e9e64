package deploy

// The checks of the deployment files that need the service's own code,
// imported: the configuration each Kubernetes container and compose service
// gets is run through fanout's start-up validation (config parsing and
// Validate, envconfig for TEMPORAL_*) with the example Secret laid out as the
// kubelet mounts it; containers run binaries the Dockerfile installs and
// starter subcommands that exist; the Dockerfile builds main packages of this
// module statically with go.mod's Go into a non-root image, stamped with the
// release version and commit and labelled (OCI); compose's workers cover
// every queue.
//
// Everything else lives in the deploy/validate module (its own go.mod, so
// its heavy dependencies stay out of the service's): the Helm chart rendered
// and linted with Helm's SDK, every object strictly decoded into its API
// type (Kubernetes, KEDA, Prometheus Operator), the rules through
// Prometheus' parser, compose.yaml through compose-go, and the cross-checks
// of env names, queues, KEDA, NetworkPolicies and pins on every rendering.
// deploy/k8s is generated from the chart there.

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.temporal.io/sdk/contrib/envconfig"
	"go.yaml.in/yaml/v3"

	"github.com/fanout/fanout/internal/config"
	"github.com/fanout/fanout/starter"
	"github.com/fanout/fanout/workers"
	"github.com/fanout/fanout/workers/webhook"
	"github.com/fanout/fanout/workflows/vocab"
)

// Paths, relative to this package's directory (go test runs tests there).
const (
	repoRoot    = ".."
	k8sDir      = "k8s"
	composeFile = "compose.yaml"
	dockerfile  = "Dockerfile"
	// examplesDir holds examples the kustomization does not apply (the
	// Secret); the checks resolve references against them.
	examplesDir = "k8s/examples"
	starterGo   = "../starter/cmd/starter/main.go"
	goMod       = "../go.mod"

	// envconfigModule is the module whose client_config_load.go names the
	// TEMPORAL_* variables the processes read.
	envconfigModule = "go.temporal.io/sdk/contrib/envconfig"
)

// ---------------------------------------------------------------------------
// YAML types. Only the fields the checks read; unknown fields are ignored.

// str is a YAML scalar that must be a string: Kubernetes rejects numbers and
// booleans where it wants strings (env values, ConfigMap data, KEDA trigger
// metadata), so `value: 8` is an error here too, naming the line.
type str string

func (s *str) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode || n.Tag != "!!str" {
		return fmt.Errorf("line %d: %q must be a string, YAML reads it as %s: quote it", n.Line, n.Value, n.Tag)
	}
	*s = str(n.Value)
	return nil
}

type objectMeta struct {
	Name      string         `yaml:"name"`
	Namespace string         `yaml:"namespace"`
	Labels    map[string]str `yaml:"labels"`
}

type object struct {
	APIVersion string     `yaml:"apiVersion"`
	Kind       string     `yaml:"kind"`
	Metadata   objectMeta `yaml:"metadata"`
}

type keyRef struct {
	Name     string `yaml:"name"`
	Key      string `yaml:"key"`
	Optional bool   `yaml:"optional"`
}

type envVar struct {
	Name      string `yaml:"name"`
	Value     *str   `yaml:"value"`
	ValueFrom *struct {
		SecretKeyRef    *keyRef `yaml:"secretKeyRef"`
		ConfigMapKeyRef *keyRef `yaml:"configMapKeyRef"`
	} `yaml:"valueFrom"`
}

type envFromSource struct {
	Prefix       string `yaml:"prefix"`
	ConfigMapRef *struct {
		Name     string `yaml:"name"`
		Optional bool   `yaml:"optional"`
	} `yaml:"configMapRef"`
	SecretRef *struct {
		Name     string `yaml:"name"`
		Optional bool   `yaml:"optional"`
	} `yaml:"secretRef"`
}

type container struct {
	Name    string          `yaml:"name"`
	Image   string          `yaml:"image"`
	Command []string        `yaml:"command"`
	Args    []string        `yaml:"args"`
	Env     []envVar        `yaml:"env"`
	EnvFrom []envFromSource `yaml:"envFrom"`
	Ports   []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	VolumeMounts []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
		ReadOnly  bool   `yaml:"readOnly"`
	} `yaml:"volumeMounts"`
	LivenessProbe *struct {
		HTTPGet *struct {
			Path string    `yaml:"path"`
			Port yaml.Node `yaml:"port"`
		} `yaml:"httpGet"`
	} `yaml:"livenessProbe"`
	Resources struct {
		Requests map[string]any `yaml:"requests"`
		Limits   map[string]any `yaml:"limits"`
	} `yaml:"resources"`
	SecurityContext *struct {
		RunAsNonRoot             *bool `yaml:"runAsNonRoot"`
		Privileged               *bool `yaml:"privileged"`
		AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
		ReadOnlyRootFilesystem   *bool `yaml:"readOnlyRootFilesystem"`
		Capabilities             struct {
			Drop []string `yaml:"drop"`
		} `yaml:"capabilities"`
	} `yaml:"securityContext"`
}

type podSpec struct {
	RestartPolicy  string      `yaml:"restartPolicy"`
	InitContainers []container `yaml:"initContainers"`
	Containers     []container `yaml:"containers"`
	Volumes        []struct {
		Name   string `yaml:"name"`
		Secret *struct {
			SecretName string `yaml:"secretName"`
		} `yaml:"secret"`
	} `yaml:"volumes"`
	SecurityContext *struct {
		RunAsNonRoot *bool `yaml:"runAsNonRoot"`
		RunAsUser    *int  `yaml:"runAsUser"`
	} `yaml:"securityContext"`
}

// workload is a Deployment or a Job.
type workload struct {
	object `yaml:",inline"`
	Spec   struct {
		Replicas *int `yaml:"replicas"`
		Selector struct {
			MatchLabels map[string]str `yaml:"matchLabels"`
		} `yaml:"selector"`
		Template struct {
			Metadata objectMeta `yaml:"metadata"`
			Spec     podSpec    `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

type configMap struct {
	object `yaml:",inline"`
	Data   map[string]str `yaml:"data"`
}

type secret struct {
	object     `yaml:",inline"`
	Data       map[string]str `yaml:"data"`
	StringData map[string]str `yaml:"stringData"`
}

type composeProject struct {
	Services map[string]composeService `yaml:"services"`
}

type composeService struct {
	Image       string    `yaml:"image"`
	Build       yaml.Node `yaml:"build"`
	Entrypoint  yaml.Node `yaml:"entrypoint"`
	Command     yaml.Node `yaml:"command"`
	Environment yaml.Node `yaml:"environment"`
	DependsOn   yaml.Node `yaml:"depends_on"`
}

// ---------------------------------------------------------------------------
// Loading.

// yamlDoc is one document of a YAML file.
type yamlDoc struct {
	where string // "k8s/workers.yaml#2 (Deployment fanout-worker-events)"
	node  *yaml.Node
	obj   object
}

func decodeDoc[T any](t *testing.T, d yamlDoc) T {
	t.Helper()
	var v T
	if err := d.node.Decode(&v); err != nil {
		t.Fatalf("%s: %v", d.where, err)
	}
	return v
}

// readYAMLDocs parses every document of a file (comment-only documents are
// skipped).
func readYAMLDocs(t *testing.T, file string) []yamlDoc {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	var docs []yamlDoc
	for i := 1; ; i++ {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: document %d: %v", file, i, err)
		}
		if n.Kind == 0 || (n.Kind == yaml.DocumentNode && len(n.Content) == 0) {
			continue
		}
		d := yamlDoc{where: fmt.Sprintf("%s#%d", file, i), node: &n}
		if err := n.Decode(&d.obj); err != nil {
			t.Fatalf("%s: %v", d.where, err)
		}
		if d.obj.Kind != "" || d.obj.Metadata.Name != "" {
			d.where += fmt.Sprintf(" (%s %s)", d.obj.Kind, d.obj.Metadata.Name)
		}
		docs = append(docs, d)
	}
	return docs
}

// manifests is everything in deploy/k8s, indexed.
type manifests struct {
	docs        []yamlDoc
	files       []string // base names of the YAML files
	deployments map[string]workload
	jobs        map[string]workload
	configMaps  map[string]configMap
	secrets     map[string]secret
	where       map[string]string // "Kind/name" -> where
}

func loadManifests(t *testing.T) *manifests {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(k8sDir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	more, _ := filepath.Glob(filepath.Join(k8sDir, "*.yml"))
	files = append(files, more...)
	if len(files) == 0 {
		t.Fatalf("no manifests in %s", k8sDir)
	}
	slices.Sort(files)
	m := &manifests{
		deployments: map[string]workload{}, jobs: map[string]workload{},
		configMaps: map[string]configMap{}, secrets: map[string]secret{},
		where: map[string]string{},
	}
	examples, err := filepath.Glob(filepath.Join(examplesDir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range slices.Concat(files, examples) {
		if !slices.Contains(examples, f) {
			m.files = append(m.files, filepath.Base(f))
		}
		for _, d := range readYAMLDocs(t, f) {
			m.docs = append(m.docs, d)
			key := d.obj.Kind + "/" + d.obj.Metadata.Name
			if prev, dup := m.where[key]; dup {
				t.Errorf("%s: %s is also defined in %s", d.where, key, prev)
			}
			m.where[key] = d.where
			switch d.obj.Kind {
			case "Deployment":
				m.deployments[d.obj.Metadata.Name] = decodeDoc[workload](t, d)
			case "Job":
				m.jobs[d.obj.Metadata.Name] = decodeDoc[workload](t, d)
			case "ConfigMap":
				m.configMaps[d.obj.Metadata.Name] = decodeDoc[configMap](t, d)
			case "Secret":
				m.secrets[d.obj.Metadata.Name] = decodeDoc[secret](t, d)
			}
		}
	}
	return m
}

// workloads returns the Deployments and Jobs by "Kind/name", sorted.
func (m *manifests) workloads() ([]string, map[string]workload) {
	all := map[string]workload{}
	for n, w := range m.deployments {
		all["Deployment/"+n] = w
	}
	for n, w := range m.jobs {
		all["Job/"+n] = w
	}
	return slices.Sorted(maps.Keys(all)), all
}

// secretValues decodes a Secret's data and stringData.
func secretValues(s secret) (map[string]string, error) {
	out := map[string]string{}
	for k, v := range s.Data {
		b, err := base64.StdEncoding.DecodeString(string(v))
		if err != nil {
			return nil, fmt.Errorf("data.%s is not base64: %v", k, err)
		}
		out[k] = string(b)
	}
	for k, v := range s.StringData {
		out[k] = string(v)
	}
	return out, nil
}

// containerEnv resolves a container's environment as Kubernetes would:
// envFrom sources first, then env entries. Names are those the process sees;
// values of references are looked up in the manifests' ConfigMaps and
// Secrets. Unresolvable references are returned as errors.
func (m *manifests) containerEnv(c container) (map[string]string, []error) {
	envm := map[string]string{}
	var errs []error
	for _, src := range c.EnvFrom {
		switch {
		case src.ConfigMapRef != nil:
			cm, ok := m.configMaps[src.ConfigMapRef.Name]
			if !ok {
				if !src.ConfigMapRef.Optional {
					errs = append(errs, fmt.Errorf("envFrom: ConfigMap %q is not defined in %s", src.ConfigMapRef.Name, k8sDir))
				}
				continue
			}
			for k, v := range cm.Data {
				envm[src.Prefix+k] = string(v)
			}
		case src.SecretRef != nil:
			s, ok := m.secrets[src.SecretRef.Name]
			if !ok {
				if !src.SecretRef.Optional {
					errs = append(errs, fmt.Errorf("envFrom: Secret %q is not defined in %s", src.SecretRef.Name, k8sDir))
				}
				continue
			}
			vals, err := secretValues(s)
			if err != nil {
				errs = append(errs, fmt.Errorf("Secret %s: %v", src.SecretRef.Name, err))
			}
			for k, v := range vals {
				envm[src.Prefix+k] = v
			}
		default:
			errs = append(errs, fmt.Errorf("envFrom entry with neither configMapRef nor secretRef"))
		}
	}
	for _, e := range c.Env {
		switch {
		case e.Name == "":
			errs = append(errs, fmt.Errorf("env entry without a name"))
		case e.Value != nil:
			envm[e.Name] = string(*e.Value)
		case e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil:
			r := e.ValueFrom.SecretKeyRef
			s, ok := m.secrets[r.Name]
			vals, _ := secretValues(s)
			v, hasKey := vals[r.Key]
			if (!ok || !hasKey) && !r.Optional {
				errs = append(errs, fmt.Errorf("env %s: secretKeyRef %s/%s is not defined in %s", e.Name, r.Name, r.Key, k8sDir))
			}
			envm[e.Name] = v
		case e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil:
			r := e.ValueFrom.ConfigMapKeyRef
			cm, ok := m.configMaps[r.Name]
			v, hasKey := cm.Data[r.Key]
			if (!ok || !hasKey) && !r.Optional {
				errs = append(errs, fmt.Errorf("env %s: configMapKeyRef %s/%s is not defined in %s", e.Name, r.Name, r.Key, k8sDir))
			}
			envm[e.Name] = string(v)
		default:
			envm[e.Name] = "" // fieldRef, resourceFieldRef, or an empty value
		}
	}
	return envm, errs
}

// mountSecrets writes the Secrets the container mounts (from the manifests
// and examples) into a temporary directory and points the environment's
// paths under each mount there, as the kubelet does, so the start-up
// validation reads the files. A path under a mount that names no key of the
// Secret is an error: the process would not find the file.
func (m *manifests) mountSecrets(t *testing.T, ps podSpec, c container, envm map[string]string) (map[string]string, error) {
	t.Helper()
	out := maps.Clone(envm)
	var errs []error
	for _, vm := range c.VolumeMounts {
		var secretName string
		for _, v := range ps.Volumes {
			if v.Name == vm.Name && v.Secret != nil {
				secretName = v.Secret.SecretName
			}
		}
		if secretName == "" {
			continue
		}
		if !vm.ReadOnly {
			errs = append(errs, fmt.Errorf("volumeMount %s (Secret %s) is not readOnly", vm.Name, secretName))
		}
		s, ok := m.secrets[secretName]
		if !ok {
			errs = append(errs, fmt.Errorf("volume %s: Secret %s is defined neither in %s nor in %s", vm.Name, secretName, k8sDir, examplesDir))
			continue
		}
		vals, err := secretValues(s)
		if err != nil {
			errs = append(errs, err)
		}
		dir := filepath.Join(t.TempDir(), filepath.FromSlash(vm.MountPath))
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		for k, v := range vals {
			if err := os.WriteFile(filepath.Join(dir, k), []byte(v), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		prefix := strings.TrimSuffix(vm.MountPath, "/") + "/"
		for name, v := range envm {
			if key, ok := strings.CutPrefix(v, prefix); ok {
				if _, has := vals[key]; !has {
					errs = append(errs, fmt.Errorf("%s=%s: Secret %s has no key %q", name, v, secretName, key))
				}
				out[name] = filepath.Join(dir, key)
			}
		}
	}
	return out, errors.Join(errs...)
}

// composeStack is deploy/compose.yaml.
type composeStack struct {
	services map[string]composeService
	names    []string
}

func loadCompose(t *testing.T) composeStack {
	t.Helper()
	docs := readYAMLDocs(t, composeFile)
	if len(docs) != 1 {
		t.Fatalf("%s: want one YAML document, got %d", composeFile, len(docs))
	}
	p := decodeDoc[composeProject](t, docs[0])
	if len(p.Services) == 0 {
		t.Fatalf("%s: no services", composeFile)
	}
	return composeStack{services: p.Services, names: slices.Sorted(maps.Keys(p.Services))}
}

// stringList decodes a compose string-or-list field (command, entrypoint).
func stringList(n yaml.Node) ([]string, error) {
	switch n.Kind {
	case 0:
		return nil, nil
	case yaml.ScalarNode:
		return strings.Fields(n.Value), nil
	case yaml.SequenceNode:
		var l []string
		err := n.Decode(&l)
		return l, err
	}
	return nil, fmt.Errorf("line %d: want a string or a list", n.Line)
}

// composeEnv decodes a service's environment (mapping or KEY=VALUE list,
// merge keys resolved).
func composeEnv(s composeService) (map[string]string, error) {
	out := map[string]string{}
	switch s.Environment.Kind {
	case 0:
		return out, nil
	case yaml.MappingNode:
		var m map[string]yaml.Node
		if err := s.Environment.Decode(&m); err != nil {
			return nil, err
		}
		for k, v := range m {
			if v.Kind != yaml.ScalarNode {
				return nil, fmt.Errorf("environment %s (line %d): want a scalar", k, v.Line)
			}
			if v.Tag != "!!null" {
				out[k] = v.Value
			} else {
				out[k] = ""
			}
		}
		return out, nil
	case yaml.SequenceNode:
		var l []string
		if err := s.Environment.Decode(&l); err != nil {
			return nil, err
		}
		for _, kv := range l {
			k, v, _ := strings.Cut(kv, "=")
			out[k] = v
		}
		return out, nil
	}
	return nil, fmt.Errorf("environment (line %d): want a mapping or a list", s.Environment.Line)
}

// composeDependsOn returns the services a service depends on.
func composeDependsOn(s composeService) ([]string, error) {
	switch s.DependsOn.Kind {
	case 0:
		return nil, nil
	case yaml.SequenceNode:
		var l []string
		err := s.DependsOn.Decode(&l)
		return l, err
	case yaml.MappingNode:
		var m map[string]yaml.Node
		err := s.DependsOn.Decode(&m)
		return slices.Sorted(maps.Keys(m)), err
	}
	return nil, fmt.Errorf("depends_on (line %d): want a list or a mapping", s.DependsOn.Line)
}

// composeBuild returns a service's build context and Dockerfile, relative to
// this directory ("" when the service has no build).
func composeBuild(s composeService) (context, file string, err error) {
	switch s.Build.Kind {
	case 0:
		return "", "", nil
	case yaml.ScalarNode:
		return s.Build.Value, filepath.Join(s.Build.Value, "Dockerfile"), nil
	case yaml.MappingNode:
		var b struct {
			Context    string `yaml:"context"`
			Dockerfile string `yaml:"dockerfile"`
		}
		if err := s.Build.Decode(&b); err != nil {
			return "", "", err
		}
		if b.Context == "" {
			b.Context = "."
		}
		if b.Dockerfile == "" {
			b.Dockerfile = "Dockerfile"
		}
		return b.Context, filepath.Join(b.Context, b.Dockerfile), nil
	}
	return "", "", fmt.Errorf("build (line %d): want a string or a mapping", s.Build.Line)
}

// ---------------------------------------------------------------------------
// What the code says.

// configDirs hold the configuration structs: the connections and loading
// (internal/config) and each stage's settings.
var configDirs = []string{"../internal/config", "../starter", "../workers", "../workers/webhook", "../activities/limits"}

// configDir names them in messages.
var configDir = strings.Join(configDirs, ", ")

// fanoutEnvNames returns the FANOUT_* variables the processes read: every
// `env:"..."` tag of the structs in configDirs, and the string constants
// there that are exactly a variable's name (variables read directly, such
// as FANOUT_TEMPORAL_API_KEY_FILE).
func fanoutEnvNames(t *testing.T) map[string]bool {
	t.Helper()
	var files []string
	for _, dir := range configDirs {
		fs, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
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
			case *ast.ValueSpec:
				for _, v := range n.Values {
					if lit, ok := v.(*ast.BasicLit); ok && lit.Kind == token.STRING {
						if s, err := strconv.Unquote(lit.Value); err == nil && nameOnly.MatchString(s) {
							names[s] = true
						}
					}
				}
			case *ast.StructType:
				for _, fld := range n.Fields.List {
					if fld.Tag == nil {
						continue
					}
					tag, err := strconv.Unquote(fld.Tag.Value)
					if err != nil {
						t.Fatalf("%s: tag %s: %v", file, fld.Tag.Value, err)
					}
					if v, ok := reflect.StructTag(tag).Lookup("env"); ok {
						if name, _, _ := strings.Cut(v, ","); name != "" {
							names[name] = true
						}
					}
				}
			}
			return true
		})
	}
	if len(names) == 0 {
		t.Fatalf("%s: found no env:\"...\" struct tags", configDir)
	}
	return names
}

// temporalEnvNames returns the TEMPORAL_* variables envconfig reads, from
// its client_config_load.go in the module cache (the version go.mod
// selects): exact names, and prefixes (names ending in "_", such as
// TEMPORAL_GRPC_META_). Without the go command or the source it falls back
// to the names of envconfig v1.0.2.
func temporalEnvNames(t *testing.T) (names map[string]bool, prefixes []string) {
	t.Helper()
	fallback := func(why string) (map[string]bool, []string) {
		t.Logf("TEMPORAL_* names: using the built-in list of envconfig v1.0.2 (%s)", why)
		names := map[string]bool{}
		for _, n := range []string{
			"TEMPORAL_CONFIG_FILE", "TEMPORAL_PROFILE", "TEMPORAL_ADDRESS", "TEMPORAL_NAMESPACE",
			"TEMPORAL_API_KEY", "TEMPORAL_CLIENT_AUTHORITY", "TEMPORAL_TLS",
			"TEMPORAL_TLS_CLIENT_CERT_PATH", "TEMPORAL_TLS_CLIENT_CERT_DATA",
			"TEMPORAL_TLS_CLIENT_KEY_PATH", "TEMPORAL_TLS_CLIENT_KEY_DATA",
			"TEMPORAL_TLS_SERVER_CA_CERT_PATH", "TEMPORAL_TLS_SERVER_CA_CERT_DATA",
			"TEMPORAL_TLS_SERVER_NAME", "TEMPORAL_TLS_DISABLE_HOST_VERIFICATION",
			"TEMPORAL_CODEC_ENDPOINT", "TEMPORAL_CODEC_AUTH",
		} {
			names[n] = true
		}
		return names, []string{"TEMPORAL_GRPC_META_"}
	}
	goCmd, err := exec.LookPath("go")
	if err != nil {
		return fallback("no go command")
	}
	out, err := exec.Command(goCmd, "list", "-m", "-f", "{{.Dir}}", envconfigModule).Output()
	dir := strings.TrimSpace(string(out))
	if err != nil || dir == "" {
		return fallback(fmt.Sprintf("go list -m %s: %v", envconfigModule, err))
	}
	src := filepath.Join(dir, "client_config_load.go")
	f, err := parser.ParseFile(token.NewFileSet(), src, nil, parser.SkipObjectResolution)
	if err != nil {
		return fallback(err.Error())
	}
	names = map[string]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		lit, ok := n.(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			return true
		}
		s, err := strconv.Unquote(lit.Value)
		if err != nil || !regexp.MustCompile(`^TEMPORAL_[A-Z0-9_]+$`).MatchString(s) {
			return true
		}
		if strings.HasSuffix(s, "_") {
			if !slices.Contains(prefixes, s) {
				prefixes = append(prefixes, s)
			}
		} else {
			names[s] = true
		}
		return true
	})
	if !names["TEMPORAL_ADDRESS"] || !names["TEMPORAL_NAMESPACE"] {
		t.Fatalf("%s: found no TEMPORAL_ADDRESS / TEMPORAL_NAMESPACE literals; has envconfig changed?", src)
	}
	return names, prefixes
}

// starterSubcommands returns the string cases of starter/main.go's main()
// (`starter bridge`, `starter publish`, ...).
func starterSubcommands(t *testing.T) map[string]bool {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), starterGo, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	cmds := map[string]bool{}
	for _, decl := range f.Decls {
		fn, ok := decl.(*ast.FuncDecl)
		if !ok || fn.Name.Name != "main" || fn.Recv != nil {
			continue
		}
		ast.Inspect(fn, func(n ast.Node) bool {
			cc, ok := n.(*ast.CaseClause)
			if !ok {
				return true
			}
			for _, e := range cc.List {
				if lit, ok := e.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					if s, err := strconv.Unquote(lit.Value); err == nil {
						cmds[s] = true
					}
				}
			}
			return true
		})
	}
	if len(cmds) == 0 {
		t.Fatalf("%s: found no subcommands (case \"...\" in main)", starterGo)
	}
	return cmds
}

// Queue names of FANOUT_QUEUES and their task queues come from the
// workflows' vocabulary.
var (
	allQueues   = vocab.Queues
	taskQueueOf = vocab.TaskQueues
)

// parseQueues checks a FANOUT_QUEUES value the way the worker reads it
// (comma-separated) and returns its queues.
func parseQueues(v string) ([]string, error) {
	if strings.TrimSpace(v) == "" {
		return nil, fmt.Errorf("FANOUT_QUEUES is empty")
	}
	var qs []string
	for _, q := range strings.Split(v, ",") {
		if _, err := taskQueueOf(q); err != nil {
			return nil, fmt.Errorf("FANOUT_QUEUES=%q: queue %q is not one of %s", v, q, strings.Join(allQueues(), ", "))
		}
		if slices.Contains(qs, q) {
			return nil, fmt.Errorf("FANOUT_QUEUES=%q: %q twice", v, q)
		}
		qs = append(qs, q)
	}
	return qs, nil
}

// ---------------------------------------------------------------------------
// The Dockerfile.

type dockerImage struct {
	builderFrom string            // image of the stage that runs go build
	packages    []string          // go build package arguments ("./starter/cmd/starter")
	cgoDisabled bool              // CGO_ENABLED=0 on the go build
	built       map[string]string // binary name -> path in the builder
	binaries    map[string]string // binary name -> path in the final image
	finalUser   string            // USER of the final stage
	finalFrom   string
	ldflags     string            // the go build's -ldflags value
	builderArgs map[string]bool   // ARGs declared in the stage that runs go build
	finalArgs   map[string]bool   // ARGs declared in the final stage
	labels      map[string]string // LABELs of the final stage
	// pkgArgs are the build args a go build takes its package from
	// ("${MAIN}"): arg -> its default (in packages) and the binary built.
	pkgArgs   map[string]string
	argBinary map[string]string
	cmd       []string // the final stage's exec-form CMD
}

// dockerInstructions joins continuation lines and drops comments.
func dockerInstructions(b []byte) []string {
	var out []string
	var cur strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "#") || (line == "" && cur.Len() == 0) {
			continue
		}
		if cont, ok := strings.CutSuffix(line, "\\"); ok {
			cur.WriteString(cont + " ")
			continue
		}
		cur.WriteString(line)
		if s := strings.TrimSpace(cur.String()); s != "" {
			out = append(out, s)
		}
		cur.Reset()
	}
	if s := strings.TrimSpace(cur.String()); s != "" {
		out = append(out, s)
	}
	return out
}

// shellWords splits a command line into words, honouring quotes.
func shellWords(s string) []string {
	var words []string
	var cur strings.Builder
	in := false
	var quote rune
	for _, r := range s {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case r == '"' || r == '\'':
			quote, in = r, true
		case r == ' ' || r == '\t':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	if in {
		words = append(words, cur.String())
	}
	return words
}

// goBuildValueFlags are go build flags that take the next word as value.
var goBuildValueFlags = map[string]bool{
	"-o": true, "-ldflags": true, "-gcflags": true, "-asmflags": true, "-tags": true, "-mod": true,
	"-p": true, "-buildmode": true, "-pgo": true, "-modfile": true, "-overlay": true, "-installsuffix": true,
}

func parseDockerfile(t *testing.T) dockerImage {
	t.Helper()
	b, err := os.ReadFile(dockerfile)
	if err != nil {
		t.Fatal(err)
	}
	return parseDockerfileText(t, b)
}

// argRef is a word that is only a build arg's value: $NAME or ${NAME}.
var argRef = regexp.MustCompile(`^\$(?:\{(\w+)\}|(\w+))$`)

func parseDockerfileText(t *testing.T, b []byte) dockerImage {
	t.Helper()
	img := dockerImage{built: map[string]string{}, binaries: map[string]string{}, labels: map[string]string{},
		pkgArgs: map[string]string{}, argBinary: map[string]string{}}
	stage, stageFrom := "", ""
	stageArgs := map[string]bool{}
	argDefaults := map[string]string{}
	stageEnvCGO := map[string]bool{}
	builderStage := ""
	for _, ins := range dockerInstructions(b) {
		op, rest, _ := strings.Cut(ins, " ")
		rest = strings.TrimSpace(rest)
		switch strings.ToUpper(op) {
		case "FROM":
			var words []string
			for _, w := range strings.Fields(rest) {
				if !strings.HasPrefix(w, "--") {
					words = append(words, w)
				}
			}
			if len(words) == 0 {
				t.Fatalf("%s: FROM without an image: %q", dockerfile, ins)
			}
			stageFrom, stage = words[0], ""
			if len(words) >= 3 && strings.EqualFold(words[1], "AS") {
				stage = words[2]
			}
			img.finalFrom, img.finalUser = stageFrom, ""
			stageArgs, argDefaults = map[string]bool{}, map[string]string{}
			img.finalArgs, img.labels, img.cmd = stageArgs, map[string]string{}, nil
		case "ARG":
			for _, w := range shellWords(rest) {
				name, def, _ := strings.Cut(w, "=")
				stageArgs[name], argDefaults[name] = true, def
			}
		case "CMD":
			if err := json.Unmarshal([]byte(rest), &img.cmd); err != nil {
				t.Fatalf("%s: CMD %s: want the exec form: %v", dockerfile, rest, err)
			}
		case "LABEL":
			for _, w := range shellWords(rest) {
				if k, v, ok := strings.Cut(w, "="); ok {
					img.labels[k] = v
				}
			}
		case "ENV":
			if regexp.MustCompile(`\bCGO_ENABLED=0\b`).MatchString(rest) {
				stageEnvCGO[stage] = true
			}
		case "USER":
			img.finalUser = rest
		case "RUN":
			words := shellWords(rest)
			for i := 0; i+1 < len(words); i++ {
				if words[i] != "go" || words[i+1] != "build" {
					continue
				}
				builderStage = stage
				img.builderFrom = stageFrom
				img.builderArgs = maps.Clone(stageArgs) // those declared before the go build
				img.cgoDisabled = stageEnvCGO[stage] || regexp.MustCompile(`\bCGO_ENABLED=0\b`).MatchString(rest)
				outFlag := ""
				var pkgs []string
				fromArg := map[string]string{} // package -> the arg it came from
				for j := i + 2; j < len(words); j++ {
					w := words[j]
					if w == "&&" || w == ";" || w == "||" || w == "|" {
						break
					}
					if strings.HasPrefix(w, "-") {
						if v, ok := strings.CutPrefix(w, "-ldflags="); ok {
							img.ldflags = v
						} else if w == "-ldflags" && j+1 < len(words) {
							img.ldflags = words[j+1]
						}
						if strings.Contains(w, "=") {
							if v, ok := strings.CutPrefix(w, "-o="); ok {
								outFlag = v
							}
							continue
						}
						if goBuildValueFlags[w] && j+1 < len(words) {
							if w == "-o" {
								outFlag = words[j+1]
							}
							j++
						}
						continue
					}
					if m := argRef.FindStringSubmatch(w); m != nil {
						arg := m[1] + m[2]
						if !stageArgs[arg] {
							t.Fatalf("%s: go build %s: no ARG %s declared before it", dockerfile, w, arg)
						}
						w = argDefaults[arg]
						img.pkgArgs[arg], fromArg[w] = w, arg
					}
					pkgs = append(pkgs, w)
				}
				img.packages = append(img.packages, pkgs...)
				for _, p := range pkgs {
					name := path.Base(p)
					if arg, ok := fromArg[p]; ok {
						// Built under the -o name (a directory keeps the
						// package's, which varies with the arg).
						name = path.Base(outFlag)
						if outFlag == "" || strings.HasSuffix(outFlag, "/") || len(pkgs) > 1 {
							name = "${" + arg + "}"
						}
						img.argBinary[arg] = name
					}
					switch {
					case outFlag == "":
						img.built[name] = "/" + name // relative to WORKDIR; only the name matters
					case strings.HasSuffix(outFlag, "/") || len(pkgs) > 1:
						img.built[name] = path.Join(outFlag, name)
					default:
						img.built[path.Base(outFlag)] = outFlag
					}
				}
			}
		case "COPY":
			words := strings.Fields(rest)
			from := ""
			var args []string
			for _, w := range words {
				if v, ok := strings.CutPrefix(w, "--from="); ok {
					from = v
				} else if !strings.HasPrefix(w, "--") {
					args = append(args, w)
				}
			}
			if from == "" || from != builderStage || len(args) < 2 {
				continue
			}
			dest := args[len(args)-1]
			for _, src := range args[:len(args)-1] {
				for name, p := range img.built {
					if p == src || strings.TrimSuffix(path.Dir(p), "/")+"/" == strings.TrimSuffix(src, "/")+"/" {
						if strings.HasSuffix(dest, "/") || len(args) > 2 {
							img.binaries[name] = path.Join(dest, name)
						} else {
							img.binaries[path.Base(dest)] = dest
						}
					}
				}
			}
		}
	}
	return img
}

// ---------------------------------------------------------------------------
// Commands.

// command is what a container or service runs: the binary (base name), the
// path it was named by, and the arguments.
type command struct {
	binary string
	path   string
	args   []string
}

// k8sCommand is a container's command + args (the image's CMD when empty).
func k8sCommand(c container) command {
	argv := append(slices.Clone(c.Command), c.Args...)
	if len(argv) == 0 {
		return command{}
	}
	return command{binary: path.Base(argv[0]), path: argv[0], args: argv[1:]}
}

// checkCommand checks that a command runs a binary of the image and, for
// starter, a subcommand starter has. It returns "worker", "bridge", "starter
// <sub>" or "" (not a fanout binary), and the problems found.
func checkCommand(c command, img dockerImage, subcommands map[string]bool) (role string, problems []string) {
	if c.path == "" {
		return "", []string{"no command: name the binary (worker or starter ...) explicitly"}
	}
	want, ok := img.binaries[c.binary]
	if !ok {
		return "", []string{fmt.Sprintf("runs %q, which %s does not install (it installs %s)",
			c.path, dockerfile, strings.Join(slices.Sorted(maps.Keys(img.binaries)), ", "))}
	}
	if strings.Contains(c.path, "/") && c.path != want {
		problems = append(problems, fmt.Sprintf("runs %q, but %s installs %s at %q", c.path, dockerfile, c.binary, want))
	}
	switch c.binary {
	case "worker":
		if len(c.args) > 0 {
			problems = append(problems, fmt.Sprintf("worker takes no arguments (got %q); it reads FANOUT_QUEUES", c.args))
		}
		return "worker", problems
	case "starter":
		if len(c.args) == 0 {
			return "", append(problems, "starter without a subcommand")
		}
		sub := c.args[0]
		if !subcommands[sub] {
			problems = append(problems, fmt.Sprintf("`starter %s`: %s has no subcommand %q (it has %s)",
				sub, starterGo, sub, strings.Join(slices.Sorted(maps.Keys(subcommands)), ", ")))
		}
		if sub == "bridge" {
			return "bridge", problems
		}
		return "starter " + sub, problems
	}
	return c.binary, problems
}

// ---------------------------------------------------------------------------
// Environment checks shared by Kubernetes and compose.

type envNames struct {
	fanout           map[string]bool
	temporal         map[string]bool
	temporalPrefixes []string
}

func loadEnvNames(t *testing.T) envNames {
	tn, tp := temporalEnvNames(t)
	return envNames{fanout: fanoutEnvNames(t), temporal: tn, temporalPrefixes: tp}
}

// check returns the problems with the names of an environment.
func (n envNames) check(envm map[string]string) []string {
	var problems []string
	for _, name := range slices.Sorted(maps.Keys(envm)) {
		switch {
		case strings.HasPrefix(name, "FANOUT_"):
			if !n.fanout[name] {
				problems = append(problems, fmt.Sprintf("%s is not read by fanout: no `env:%q` tag in %s", name, name, configDir))
			}
		case strings.HasPrefix(name, "TEMPORAL_"):
			if !n.temporal[name] && !slices.ContainsFunc(n.temporalPrefixes, func(p string) bool { return strings.HasPrefix(name, p) }) {
				problems = append(problems, fmt.Sprintf("%s is not read by %s (see its client_config_load.go: TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, TEMPORAL_API_KEY, TEMPORAL_TLS*, ...)", name, envconfigModule))
			}
		}
	}
	return problems
}

type mapLookup map[string]string

func (m mapLookup) Environ() []string {
	var out []string
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	return out
}

func (m mapLookup) LookupEnv(k string) (string, bool) { v, ok := m[k]; return v, ok }

// validateConfig loads the environment the way the process does at start-up
// (config.LoadFrom = defaults, env parsing and Validate, and envconfig for TEMPORAL_*), so a
// manifest that would make the process exit fails here.
func validateConfig(role string, envm map[string]string) error {
	var err error
	switch role {
	case "worker":
		var pool workers.Config
		var hook webhook.Config
		if err = config.LoadFrom(envm, &pool, &hook); err == nil {
			err = pool.CheckType(hook.TypeOptions())
		}
	case "bridge":
		var s starter.Settings
		err = config.LoadFrom(envm, &s)
	}
	if err != nil {
		return fmt.Errorf("fanout configuration: %w", err)
	}
	if _, err := envconfig.LoadClientOptions(envconfig.LoadClientOptionsRequest{DisableFile: true, EnvLookup: mapLookup(envm)}); err != nil {
		return fmt.Errorf("temporal configuration (TEMPORAL_*): %w", err)
	}
	return nil
}

// ---------------------------------------------------------------------------
// Tests.

// TestManifestCommands: containers run binaries the Dockerfile installs (and
// starter subcommands that exist), and the worker and bridge containers get
// an environment their start-up validation accepts.
func TestManifestCommands(t *testing.T) {
	m := loadManifests(t)
	img := parseDockerfile(t)
	subs := starterSubcommands(t)
	roles := map[string]int{}
	wnames, all := m.workloads()
	for _, name := range wnames {
		for _, c := range all[name].Spec.Template.Spec.Containers {
			role, problems := checkCommand(k8sCommand(c), img, subs)
			for _, p := range problems {
				t.Errorf("%s container %s: %s", m.where[name], c.Name, p)
			}
			roles[role]++
			envm, _ := m.containerEnv(c)
			envm, err := m.mountSecrets(t, all[name].Spec.Template.Spec, c, envm)
			if err != nil {
				t.Errorf("%s container %s: %v", m.where[name], c.Name, err)
			}
			if err := validateConfig(role, envm); err != nil {
				t.Errorf("%s container %s (%s): the process would exit at start-up: %v", m.where[name], c.Name, role, err)
			}
			// A worker with FANOUT_BRIDGE=true runs the bridge too, with
			// the bridge's settings.
			if role == "worker" && envm["FANOUT_BRIDGE"] == "true" {
				roles["bridge"]++
				if err := validateConfig("bridge", envm); err != nil {
					t.Errorf("%s container %s (the bridge in a worker): the process would exit at start-up: %v", m.where[name], c.Name, err)
				}
			}
		}
	}
	for _, role := range []string{"worker", "bridge", "starter setup"} {
		if roles[role] == 0 {
			t.Errorf("no container in %s runs %s (a worker with FANOUT_BRIDGE=true counts as a bridge)", k8sDir, role)
		}
	}
}

// TestDockerfile: the image builds packages that exist and are commands,
// statically, with the Go of go.mod, into /usr/local/bin of a non-root
// runtime.
func TestDockerfile(t *testing.T) {
	img := parseDockerfile(t)
	if len(img.packages) == 0 {
		t.Fatalf("%s: no `go build` with package arguments", dockerfile)
	}
	for _, p := range img.packages {
		if !strings.HasPrefix(p, "./") {
			t.Errorf("%s: go build %s: want a path relative to the module root (./...)", dockerfile, p)
			continue
		}
		dir := filepath.Join(repoRoot, filepath.FromSlash(p))
		pkgs, err := packageNames(dir)
		if err != nil {
			t.Errorf("%s: go build %s: %v", dockerfile, p, err)
			continue
		}
		if _, ok := pkgs["main"]; !ok || len(pkgs) != 1 {
			t.Errorf("%s: go build %s: %s is not a main package (packages: %v)", dockerfile, p, dir, slices.Sorted(maps.Keys(pkgs)))
		}
	}
	for _, want := range []string{"./workers/cmd/worker", "./starter/cmd/starter"} {
		if !slices.Contains(img.packages, want) {
			t.Errorf("%s: does not build %s", dockerfile, want)
		}
	}
	if !img.cgoDisabled {
		t.Errorf("%s: go build without CGO_ENABLED=0: the runtime image has no libc", dockerfile)
	}
	for _, bin := range []string{"worker", "starter"} {
		if got := img.binaries[bin]; got != "/usr/local/bin/"+bin {
			t.Errorf("%s: %s is installed at %q, want /usr/local/bin/%s (built: %v, installed: %v)", dockerfile, bin, got, bin, img.built, img.binaries)
		}
	}
	// The builder's Go must be at least go.mod's (golang images set GOTOOLCHAIN=local).
	repo, tag, _ := strings.Cut(img.builderFrom, ":")
	if path.Base(repo) != "golang" {
		t.Errorf("%s: go build runs in %q, want a golang image", dockerfile, img.builderFrom)
	} else {
		modV := goModVersion(t)
		imgV := regexp.MustCompile(`^\d+\.\d+(\.\d+)?`).FindString(tag)
		if imgV == "" || versionLess(imgV, modV) {
			t.Errorf("%s: builder %s is older than go.mod's go %s", dockerfile, img.builderFrom, modV)
		}
	}
	// A numeric non-root user, so Kubernetes' runAsNonRoot can verify it.
	user, _, _ := strings.Cut(img.finalUser, ":")
	if uid, err := strconv.Atoi(user); err != nil || uid == 0 {
		t.Errorf("%s: final stage (%s) USER %q: want a numeric non-root uid", dockerfile, img.finalFrom, img.finalUser)
	}
}

// stockMain is the worker's main package the image builds by default.
const stockMain = "./workers/cmd/worker"

// buildsAnyMain checks that the image builds its worker from the MAIN build
// arg (default: the stock worker) and runs what it built: the go build's
// package is ${MAIN}, its binary is the one the final stage copies to the
// path of the default command.
func buildsAnyMain(img dockerImage) []string {
	def, ok := img.pkgArgs["MAIN"]
	if !ok {
		return []string{fmt.Sprintf("no go build of the MAIN build arg's package (want `go build ... -o /out/worker \"${MAIN}\"`, ARG MAIN=%s): --build-arg MAIN=./cmd/mine would be ignored", stockMain)}
	}
	var problems []string
	if def != stockMain {
		problems = append(problems, fmt.Sprintf("ARG MAIN defaults to %q, want the stock worker %s", def, stockMain))
	}
	bin := img.argBinary["MAIN"]
	installed, ok := img.binaries[bin]
	switch {
	case !ok:
		problems = append(problems, fmt.Sprintf("${MAIN} is built as %q, which the final stage does not COPY from the build (it installs %v)", bin, img.binaries))
	case len(img.cmd) != 1 || img.cmd[0] != installed:
		problems = append(problems, fmt.Sprintf("CMD %q: want [%q], the binary built from ${MAIN}", img.cmd, installed))
	case bin != "worker":
		problems = append(problems, fmt.Sprintf("${MAIN} is installed as %q: want worker, the name the chart and compose run", bin))
	}
	return problems
}

// TestDockerfileBuildsAnyMain: --build-arg MAIN=./cmd/mine builds that main
// as the image's worker, its default command; and the check fires on a
// Dockerfile that ignores the arg, installs its binary elsewhere or runs
// something else.
func TestDockerfileBuildsAnyMain(t *testing.T) {
	for _, p := range buildsAnyMain(parseDockerfile(t)) {
		t.Errorf("%s: %s", dockerfile, p)
	}
	b, err := os.ReadFile(dockerfile)
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []struct{ old, new, want string }{
		{`"${MAIN}"`, stockMain, "no go build of the MAIN"},
		{`-o /out/worker "${MAIN}"`, `-o /out/mine "${MAIN}"`, "does not COPY"},
		{`CMD ["/usr/local/bin/worker"]`, `CMD ["/usr/local/bin/starter"]`, "CMD"},
		{`ARG MAIN=./workers/cmd/worker`, `ARG MAIN=./starter/cmd/starter`, "ARG MAIN defaults"},
	} {
		text := strings.Replace(string(b), bad.old, bad.new, 1)
		if text == string(b) {
			t.Fatalf("%s has no %s to change", dockerfile, bad.old)
		}
		problems := buildsAnyMain(parseDockerfileText(t, []byte(text)))
		if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, bad.want) }) {
			t.Errorf("%s with %s instead of %s: problems %q, want one about %s", dockerfile, bad.new, bad.old, problems, bad.want)
		}
	}
}

// versionPackage is where the binaries' version and commit are linked in
// (-ldflags -X), and versionVars the variables the image stamps, by the
// build arg that sets them.
const (
	versionPackage = "github.com/fanout/fanout/internal/version"
	versionGo      = "../internal/version/version.go"
)

var versionVars = map[string]string{"version": "VERSION", "commit": "COMMIT"}

// TestDockerfileStamps: the image's binaries get the VERSION and COMMIT build
// args linked into internal/version's variables (the context has no .git,
// so Go cannot stamp them: `worker -version` said "(devel)"), and the image
// carries the OCI labels, the version and revision from the same args.
func TestDockerfileStamps(t *testing.T) {
	img := parseDockerfile(t)
	// The variables exist: -X on a missing symbol is silently ignored.
	f, err := parser.ParseFile(token.NewFileSet(), versionGo, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	declared := map[string]bool{}
	for _, d := range f.Decls {
		if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.VAR {
			for _, sp := range g.Specs {
				for _, n := range sp.(*ast.ValueSpec).Names {
					declared[n.Name] = true
				}
			}
		}
	}
	ld := shellWords(img.ldflags)
	for v, arg := range versionVars {
		if !declared[v] {
			t.Errorf("%s declares no variable %s, which the image stamps", versionGo, v)
		}
		want := versionPackage + "." + v + "=${" + arg + "}"
		found := false
		for i := 0; i+1 < len(ld); i++ {
			found = found || (ld[i] == "-X" && ld[i+1] == want)
		}
		if !found {
			t.Errorf("%s: go build -ldflags %q: no -X %s", dockerfile, img.ldflags, want)
		}
		if !img.builderArgs[arg] {
			t.Errorf("%s: the go build's stage declares no ARG %s before it: ${%s} would be empty", dockerfile, arg, arg)
		}
	}
	if !slices.Contains(shellWords(img.ldflags), "-s") {
		t.Errorf("%s: go build -ldflags %q: want -s -w (no symbol table in the image)", dockerfile, img.ldflags)
	}
	license, err := os.ReadFile(filepath.Join(repoRoot, "LICENSE"))
	if err != nil {
		t.Fatal(err)
	}
	spdx := ""
	if bytes.Contains(license, []byte("Apache License")) && bytes.Contains(license, []byte("Version 2.0")) {
		spdx = "Apache-2.0"
	}
	for label, want := range map[string]string{
		"org.opencontainers.image.version":  "${VERSION}",
		"org.opencontainers.image.revision": "${COMMIT}",
		"org.opencontainers.image.created":  "${CREATED}",
		"org.opencontainers.image.licenses": spdx,
		"org.opencontainers.image.source":   "https://github.com/fanout/fanout",
		"org.opencontainers.image.title":    "fanout",
	} {
		if got, ok := img.labels[label]; !ok || got != want {
			t.Errorf("%s: final stage LABEL %s=%q (present: %v), want %q", dockerfile, label, got, ok, want)
		}
	}
	if img.labels["org.opencontainers.image.description"] == "" {
		t.Errorf("%s: no org.opencontainers.image.description label", dockerfile)
	}
	// Each ${ARG} a label uses is declared in the final stage (an ARG of
	// another stage is empty there).
	for k, v := range img.labels {
		for _, m := range regexp.MustCompile(`\$\{?(\w+)`).FindAllStringSubmatch(v, -1) {
			if !img.finalArgs[m[1]] {
				t.Errorf("%s: LABEL %s uses ${%s}, which the final stage does not declare (ARG %s)", dockerfile, k, m[1], m[1])
			}
		}
	}
}

// taskfile is the repository's Taskfile (go tool task).
const taskfile = "../Taskfile.yml"

// TestReleaseShipsTheImagesCommands: `go tool task release` (and build)
// build the commands listed in the Taskfile's SHIPPED_CMDS, which are
// exactly those the image builds, and every command of the shipped stages
// (the main packages under starter/ and workers/) is among them.
func TestReleaseShipsTheImagesCommands(t *testing.T) {
	b, err := os.ReadFile(taskfile)
	if err != nil {
		t.Fatal(err)
	}
	var tf struct {
		Vars  map[string]any `yaml:"vars"`
		Tasks map[string]struct {
			Cmds []any `yaml:"cmds"`
		} `yaml:"tasks"`
	}
	if err := yaml.Unmarshal(b, &tf); err != nil {
		t.Fatalf("%s: %v", taskfile, err)
	}
	list, _ := tf.Vars["SHIPPED_CMDS"].(string)
	shipped := strings.Fields(list)
	if len(shipped) == 0 {
		t.Fatalf("%s: no SHIPPED_CMDS variable", taskfile)
	}
	img := parseDockerfile(t)
	if got, want := slices.Sorted(slices.Values(img.packages)), slices.Sorted(slices.Values(shipped)); !slices.Equal(got, want) {
		t.Errorf("%s builds %v, but %s's SHIPPED_CMDS (the release archives) %v: keep them the same", dockerfile, got, taskfile, want)
	}
	for _, stage := range []string{"starter", "workers"} {
		err := filepath.WalkDir(filepath.Join(repoRoot, stage), func(p string, d os.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return err
			}
			if d.Name() == "testdata" {
				return filepath.SkipDir
			}
			pkgs, err := packageNames(p)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(repoRoot, p)
			if pkg := "./" + filepath.ToSlash(rel); pkgs["main"] && !slices.Contains(shipped, pkg) {
				t.Errorf("%s is a command of a shipped stage, missing from %s's SHIPPED_CMDS (and the image)", pkg, taskfile)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	// The tasks build that list, stamped with the version.
	for _, task := range []string{"build", "release"} {
		cmds, err := yaml.Marshal(tf.Tasks[task].Cmds)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"{{.SHIPPED_CMDS}}", "{{.VERSION_LDFLAGS}}"} {
			if !strings.Contains(string(cmds), want) {
				t.Errorf("%s: task %s does not build with %s", taskfile, task, want)
			}
		}
	}
}

func goModVersion(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(goMod)
	if err != nil {
		t.Fatal(err)
	}
	v := regexp.MustCompile(`(?m)^go (\d+\.\d+(\.\d+)?)\s*$`).FindSubmatch(b)
	if v == nil {
		t.Fatalf("%s: no go line", goMod)
	}
	return string(v[1])
}

// versionLess reports a < b for Go versions "1.26" / "1.26.4"; a version
// without a patch ("1.26", an image tag tracking the newest 1.26.x) is not
// less than any patch of its minor.
func versionLess(a, b string) bool {
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(pa) && i < len(pb); i++ {
		x, _ := strconv.Atoi(pa[i])
		y, _ := strconv.Atoi(pb[i])
		if x != y {
			return x < y
		}
	}
	return false
}

// TestCompose: the laptop stack's services run binaries of the image, name
// only variables the code reads, give the worker and bridge a valid
// configuration, and its workers cover every queue.
func TestCompose(t *testing.T) {
	c := loadCompose(t)
	img := parseDockerfile(t)
	subs := starterSubcommands(t)
	names := loadEnvNames(t)
	fanoutImages := map[string]bool{}
	for _, n := range c.names {
		s := c.services[n]
		ctx, file, err := composeBuild(s)
		if err != nil {
			t.Errorf("%s service %s: %v", composeFile, n, err)
			continue
		}
		if file == "" {
			continue
		}
		if _, err := os.Stat(file); err != nil {
			t.Errorf("%s service %s: build.dockerfile: %v", composeFile, n, err)
		}
		if _, err := os.Stat(filepath.Join(ctx, "go.mod")); err != nil {
			t.Errorf("%s service %s: build.context %q is not the module root: %v", composeFile, n, ctx, err)
		}
		if abs, _ := filepath.Abs(file); abs != mustAbs(t, dockerfile) {
			continue
		}
		fanoutImages[s.Image] = true
	}
	if len(fanoutImages) == 0 {
		t.Fatalf("%s: no service builds %s", composeFile, dockerfile)
	}
	roles := map[string]int{}
	served := map[string]bool{}
	for _, n := range c.names {
		s := c.services[n]
		where := fmt.Sprintf("%s service %s", composeFile, n)
		envm, err := composeEnv(s)
		if err != nil {
			t.Errorf("%s: %v", where, err)
			continue
		}
		for _, p := range names.check(envm) {
			t.Errorf("%s: %s", where, p)
		}
		deps, err := composeDependsOn(s)
		if err != nil {
			t.Errorf("%s: %v", where, err)
		}
		for _, d := range deps {
			if _, ok := c.services[d]; !ok {
				t.Errorf("%s: depends_on %q, which is not a service", where, d)
			}
		}
		if !fanoutImages[s.Image] {
			continue
		}
		entry, err := stringList(s.Entrypoint)
		if err != nil {
			t.Errorf("%s: entrypoint: %v", where, err)
		}
		argv, err := stringList(s.Command)
		if err != nil {
			t.Errorf("%s: command: %v", where, err)
		}
		argv = append(entry, argv...)
		var cmd command
		if len(argv) > 0 {
			cmd = command{binary: path.Base(argv[0]), path: argv[0], args: argv[1:]}
		}
		role, problems := checkCommand(cmd, img, subs)
		for _, p := range problems {
			t.Errorf("%s: %s", where, p)
		}
		roles[role]++
		if err := validateConfig(role, envm); err != nil {
			t.Errorf("%s (%s): the process would exit at start-up: %v", where, role, err)
		}
		if role == "worker" {
			v, ok := envm["FANOUT_QUEUES"]
			if !ok {
				t.Errorf("%s: worker without FANOUT_QUEUES", where)
				continue
			}
			qs, err := parseQueues(v)
			if err != nil {
				t.Errorf("%s: %v", where, err)
			}
			for _, q := range qs {
				served[q] = true
			}
		}
	}
	for _, q := range allQueues() {
		if !served[q] {
			t.Errorf("%s: no worker serves queue %q", composeFile, q)
		}
	}
	for _, role := range []string{"worker", "bridge", "starter setup"} {
		if roles[role] == 0 {
			t.Errorf("%s: no service runs %s", composeFile, role)
		}
	}
}

func mustAbs(t *testing.T, p string) string {
	t.Helper()
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// packageNames returns the package names of the non-test Go files in dir
// (their package clauses only).
func packageNames(dir string) (map[string]bool, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	pkgs := map[string]bool{}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.PackageClauseOnly)
		if err != nil {
			return nil, err
		}
		pkgs[f.Name.Name] = true
	}
	return pkgs, nil
}
