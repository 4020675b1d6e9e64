package main

import (
	"cmp"
	"encoding/base64"
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/fanout/fanout/deploy/validate"
)

// chartWorkloads renders the chart with its defaults and valuesFile, as
// `helm install` would (validate.RenderManifests: Helm's SDK, the schema
// checked), and reads its workloads, with secrets for the Secret the chart
// mounts but does not create.
func chartWorkloads(chartDir, valuesFile string, secrets []validate.Manifest, img image) (Config, error) {
	vals, err := validate.ReadValuesFile(valuesFile)
	if err != nil {
		return Config{}, err
	}
	ms, err := validate.RenderManifests(chartDir, vals)
	if err != nil {
		return Config{}, err
	}
	repo, err := chartImageRepository(chartDir, vals)
	if err != nil {
		return Config{}, err
	}
	src := chartDir + " (default values"
	if valuesFile != "" {
		src += ", " + valuesFile
	}
	return k8sWorkloads(src+")", append(ms, secrets...), []string{repo}, img, true)
}

// chartImageRepository is image.repository of the values over the
// chart's defaults: the image fanout's containers run.
func chartImageRepository(chartDir string, vals map[string]any) (string, error) {
	defaults, err := validate.ReadValuesFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		return "", err
	}
	repo := func(v map[string]any) string {
		img, _ := v["image"].(map[string]any)
		s, _ := img["repository"].(string)
		return s
	}
	r := cmp.Or(repo(vals), repo(defaults))
	if r == "" {
		return "", fmt.Errorf("%s: no image.repository", chartDir)
	}
	return r, nil
}

// kustomizeWorkloads builds the kustomization in dir with kustomize's own
// library (krusty, what `kubectl apply -k` runs) and reads its workloads.
// fanout's image is the chart's default repository and whatever the
// kustomization's images rename it to.
func kustomizeWorkloads(dir, chartDir string, secrets []validate.Manifest, img image) (Config, error) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	res, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return Config{}, err
	}
	text, err := res.AsYaml()
	if err != nil {
		return Config{}, err
	}
	ms, err := validate.SplitDocuments(dir, string(text))
	if err != nil {
		return Config{}, err
	}
	repo, err := chartImageRepository(chartDir, nil)
	if err != nil {
		return Config{}, err
	}
	repos := []string{repo}
	var kust struct {
		Images []struct {
			Name    string `json:"name"`
			NewName string `json:"newName"`
		} `json:"images"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		return Config{}, err
	}
	if err := yaml.Unmarshal(b, &kust); err != nil {
		return Config{}, err
	}
	for _, i := range kust.Images {
		if i.Name == repo && i.NewName != "" {
			repos = append(repos, i.NewName)
		}
	}
	// kubectl applies Helm's hook annotations as plain annotations: a
	// hook's Job runs alongside the Deployments.
	return k8sWorkloads(dir+" (kustomize build)", append(ms, secrets...), repos, img, false)
}

// readManifestFile reads the documents of a YAML file.
func readManifestFile(file string) ([]validate.Manifest, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	return validate.SplitDocuments(file, string(b))
}

// podObject is a workload object with its pod template.
type podObject struct {
	kind, name, namespace string
	annotations           map[string]string
	replicas              int
	job                   bool
	spec                  corev1.PodSpec
}

// objects holds the rendered objects the workloads refer to.
type objects struct {
	pods       []podObject
	configMaps map[string]map[string]string // name: data (binaryData decoded)
	secrets    map[string]map[string]string // name: data (decoded) and stringData
}

func decodeObjects(ms []validate.Manifest) (objects, error) {
	o := objects{configMaps: map[string]map[string]string{}, secrets: map[string]map[string]string{}}
	for _, m := range ms {
		var tm struct {
			Kind string `json:"kind"`
		}
		if err := yaml.Unmarshal(m.YAML, &tm); err != nil {
			return o, fmt.Errorf("%s: %w", m, err)
		}
		into := func(v any) error {
			if err := yaml.Unmarshal(m.YAML, v); err != nil {
				return fmt.Errorf("%s: %s: %w", m, tm.Kind, err)
			}
			return nil
		}
		replicas := func(r *int32) int {
			if r == nil {
				return 1
			}
			return int(*r)
		}
		switch tm.Kind {
		case "Deployment":
			var d appsv1.Deployment
			if err := into(&d); err != nil {
				return o, err
			}
			o.pods = append(o.pods, podObject{tm.Kind, d.Name, d.Namespace, d.Annotations, replicas(d.Spec.Replicas), false, d.Spec.Template.Spec})
		case "StatefulSet":
			var d appsv1.StatefulSet
			if err := into(&d); err != nil {
				return o, err
			}
			o.pods = append(o.pods, podObject{tm.Kind, d.Name, d.Namespace, d.Annotations, replicas(d.Spec.Replicas), false, d.Spec.Template.Spec})
		case "DaemonSet":
			var d appsv1.DaemonSet
			if err := into(&d); err != nil {
				return o, err
			}
			o.pods = append(o.pods, podObject{tm.Kind, d.Name, d.Namespace, d.Annotations, 1, false, d.Spec.Template.Spec})
		case "Job":
			var j batchv1.Job
			if err := into(&j); err != nil {
				return o, err
			}
			o.pods = append(o.pods, podObject{tm.Kind, j.Name, j.Namespace, j.Annotations, 1, true, j.Spec.Template.Spec})
		case "CronJob":
			var j batchv1.CronJob
			if err := into(&j); err != nil {
				return o, err
			}
			o.pods = append(o.pods, podObject{tm.Kind, j.Name, j.Namespace, j.Annotations, 1, true, j.Spec.JobTemplate.Spec.Template.Spec})
		case "Pod":
			var p corev1.Pod
			if err := into(&p); err != nil {
				return o, err
			}
			o.pods = append(o.pods, podObject{tm.Kind, p.Name, p.Namespace, p.Annotations, 1, p.Spec.RestartPolicy != corev1.RestartPolicyAlways && p.Spec.RestartPolicy != "", p.Spec})
		case "ConfigMap":
			var c corev1.ConfigMap
			if err := into(&c); err != nil {
				return o, err
			}
			data := maps.Clone(c.Data)
			if data == nil {
				data = map[string]string{}
			}
			for k, v := range c.BinaryData {
				data[k] = string(v)
			}
			o.configMaps[c.Name] = data
		case "Secret":
			// Decoded by hand: corev1.Secret's data is []byte, which
			// sigs.k8s.io/yaml reads as base64 already; stringData wins over
			// data, as the API server merges them.
			var s struct {
				Metadata struct {
					Name string `json:"name"`
				} `json:"metadata"`
				Data       map[string]string `json:"data"`
				StringData map[string]string `json:"stringData"`
			}
			if err := into(&s); err != nil {
				return o, err
			}
			data := map[string]string{}
			for k, v := range s.Data {
				b, err := base64.StdEncoding.DecodeString(v)
				if err != nil {
					return o, fmt.Errorf("%s: Secret %s: data.%s: %w", m, s.Metadata.Name, k, err)
				}
				data[k] = string(b)
			}
			maps.Copy(data, s.StringData)
			o.secrets[s.Metadata.Name] = data
		}
	}
	return o, nil
}

// k8sWorkloads reads the workloads of rendered Kubernetes objects; helm:
// installed by Helm, which runs the objects with a helm.sh/hook annotation
// before or after the others (kubectl applies them all at once).
func k8sWorkloads(source string, ms []validate.Manifest, repos []string, img image, helm bool) (Config, error) {
	objs, err := decodeObjects(ms)
	if err != nil {
		return Config{}, err
	}
	cfg := Config{Source: source}
	for _, p := range objs.pods {
		hook := ""
		if helm {
			hook = p.annotations["helm.sh/hook"]
		}
		order := OrderWorkload
		switch {
		case hook == "":
			if p.job {
				order = OrderJob
			}
		case strings.Contains(hook, "pre-install"):
			order = OrderPreHook
		case strings.Contains(hook, "post-install"):
			order = OrderPostHook
		default:
			continue // test hooks, hooks of upgrades or deletes only: not part of an install
		}
		containers := func(cs []corev1.Container, init bool) error {
			for _, c := range cs {
				name := p.kind + "/" + p.name + "/" + c.Name
				repo := imageRepository(c.Image)
				if !slices.Contains(repos, repo) {
					cfg.Others = append(cfg.Others, Other{Name: name, Image: c.Image})
					continue
				}
				w, err := objs.container(p, c, img)
				if err != nil {
					return fmt.Errorf("%s: %w", name, err)
				}
				w.Name, w.Kind, w.Hook, w.Replicas, w.Init = name, p.kind, hook, p.replicas, init
				w.Job, w.Order = p.job || init, order
				if init && order == OrderWorkload {
					w.Order = OrderJob
				}
				if init && order == OrderJob {
					w.Order = OrderPreHook
				}
				cfg.Workloads = append(cfg.Workloads, w)
			}
			return nil
		}
		if err := containers(p.spec.InitContainers, true); err != nil {
			return Config{}, err
		}
		if err := containers(p.spec.Containers, false); err != nil {
			return Config{}, err
		}
	}
	sortWorkloads(cfg.Workloads)
	return cfg, nil
}

func sortWorkloads(ws []Workload) {
	slices.SortStableFunc(ws, func(a, b Workload) int {
		return cmp.Or(cmp.Compare(a.Order, b.Order), cmp.Compare(a.Name, b.Name))
	})
}

// imageRepository strips an image reference's digest and tag.
func imageRepository(ref string) string {
	ref, _, _ = strings.Cut(ref, "@")
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		ref = ref[:i]
	}
	return ref
}

// container resolves a container's process: its argv mapped to the
// image's binary, its environment (envFrom in order, then env, each later
// one winning, with $(VAR) references expanded as the kubelet does) and
// the files of its Secret and ConfigMap mounts.
func (o objects) container(p podObject, c corev1.Container, img image) (Workload, error) {
	env := map[string]string{}
	for _, ef := range c.EnvFrom {
		var data map[string]string
		var ok, optional bool
		var what string
		switch {
		case ef.ConfigMapRef != nil:
			what = "ConfigMap " + ef.ConfigMapRef.Name
			data, ok = o.configMaps[ef.ConfigMapRef.Name]
			optional = ef.ConfigMapRef.Optional != nil && *ef.ConfigMapRef.Optional
		case ef.SecretRef != nil:
			what = "Secret " + ef.SecretRef.Name
			data, ok = o.secrets[ef.SecretRef.Name]
			optional = ef.SecretRef.Optional != nil && *ef.SecretRef.Optional
		default:
			return Workload{}, fmt.Errorf("envFrom with neither configMapRef nor secretRef")
		}
		if !ok {
			if optional {
				continue
			}
			return Workload{}, fmt.Errorf("envFrom: %s does not exist", what)
		}
		for k, v := range data {
			env[ef.Prefix+k] = v
		}
	}
	for _, e := range c.Env {
		v, ok, err := o.envValue(p, c, e, env)
		if err != nil {
			return Workload{}, fmt.Errorf("env %s: %w", e.Name, err)
		}
		if ok {
			env[e.Name] = v
		}
	}
	argv := img.argv(expandAll(c.Command, env), expandAll(c.Args, env))
	bin, err := img.binary(argv)
	if err != nil {
		return Workload{}, err
	}
	w := Workload{Image: c.Image, Binary: bin, Args: argv[1:], Env: env}
	if w.Args == nil {
		w.Args = []string{}
	}
	w.Files, w.Mounts, err = o.mountedFiles(p.spec, c)
	return w, err
}

// envValue is one env entry's value; ok is false for an optional
// reference to what does not exist.
func (o objects) envValue(p podObject, c corev1.Container, e corev1.EnvVar, env map[string]string) (string, bool, error) {
	if e.ValueFrom == nil {
		return expand(e.Value, env), true, nil
	}
	ref := func(src map[string]map[string]string, what, name, key string, optional *bool) (string, bool, error) {
		v, ok := src[name][key]
		if !ok {
			if optional != nil && *optional {
				return "", false, nil
			}
			return "", false, fmt.Errorf("%s %s has no key %q", what, name, key)
		}
		return v, true, nil
	}
	switch vf := e.ValueFrom; {
	case vf.ConfigMapKeyRef != nil:
		return ref(o.configMaps, "ConfigMap", vf.ConfigMapKeyRef.Name, vf.ConfigMapKeyRef.Key, vf.ConfigMapKeyRef.Optional)
	case vf.SecretKeyRef != nil:
		return ref(o.secrets, "Secret", vf.SecretKeyRef.Name, vf.SecretKeyRef.Key, vf.SecretKeyRef.Optional)
	case vf.FieldRef != nil:
		// The pod's own fields, as one pod of the workload would have them.
		switch vf.FieldRef.FieldPath {
		case "metadata.name":
			return p.name + "-0", true, nil
		case "metadata.namespace":
			return cmp.Or(p.namespace, "default"), true, nil
		case "spec.serviceAccountName":
			return cmp.Or(p.spec.ServiceAccountName, "default"), true, nil
		case "spec.nodeName":
			return "node-0", true, nil
		case "status.podIP", "status.hostIP":
			return "127.0.0.1", true, nil
		}
		return "", false, fmt.Errorf("fieldRef %s is not supported here", vf.FieldRef.FieldPath)
	}
	return "", false, fmt.Errorf("valueFrom %v is not supported here", e.ValueFrom)
}

// expand replaces $(VAR) by VAR's value when env has it and $$ by $, as
// the kubelet expands env values, command and args.
func expand(s string, env map[string]string) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '$' && i+1 < len(s) {
			switch s[i+1] {
			case '$':
				b.WriteByte('$')
				i++
				continue
			case '(':
				if end := strings.IndexByte(s[i+2:], ')'); end >= 0 {
					if v, ok := env[s[i+2:i+2+end]]; ok {
						b.WriteString(v)
						i += end + 2
						continue
					}
				}
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func expandAll(ss []string, env map[string]string) []string {
	var out []string
	for _, s := range ss {
		out = append(out, expand(s, env))
	}
	return out
}

// mountedFiles are the files a container sees of its Secret and ConfigMap
// volumes (projected ones too), by path, and the mount directories.
func (o objects) mountedFiles(spec corev1.PodSpec, c corev1.Container) (map[string]string, []string, error) {
	files := map[string]string{}
	var mounts []string
	for _, vm := range c.VolumeMounts {
		i := slices.IndexFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == vm.Name })
		if i < 0 {
			return nil, nil, fmt.Errorf("volumeMount %s: no such volume", vm.Name)
		}
		v := spec.Volumes[i]
		type source struct {
			data     map[string]string
			items    []corev1.KeyToPath
			optional bool
			what     string
		}
		var srcs []source
		switch {
		case v.Secret != nil:
			srcs = append(srcs, source{o.secrets[v.Secret.SecretName], v.Secret.Items, v.Secret.Optional != nil && *v.Secret.Optional, "Secret " + v.Secret.SecretName})
			if _, ok := o.secrets[v.Secret.SecretName]; !ok && !srcs[0].optional {
				return nil, nil, fmt.Errorf("volume %s: Secret %s does not exist", v.Name, v.Secret.SecretName)
			}
		case v.ConfigMap != nil:
			srcs = append(srcs, source{o.configMaps[v.ConfigMap.Name], v.ConfigMap.Items, v.ConfigMap.Optional != nil && *v.ConfigMap.Optional, "ConfigMap " + v.ConfigMap.Name})
			if _, ok := o.configMaps[v.ConfigMap.Name]; !ok && !srcs[0].optional {
				return nil, nil, fmt.Errorf("volume %s: ConfigMap %s does not exist", v.Name, v.ConfigMap.Name)
			}
		case v.Projected != nil:
			for _, ps := range v.Projected.Sources {
				switch {
				case ps.Secret != nil:
					srcs = append(srcs, source{o.secrets[ps.Secret.Name], ps.Secret.Items, ps.Secret.Optional != nil && *ps.Secret.Optional, "Secret " + ps.Secret.Name})
				case ps.ConfigMap != nil:
					srcs = append(srcs, source{o.configMaps[ps.ConfigMap.Name], ps.ConfigMap.Items, ps.ConfigMap.Optional != nil && *ps.ConfigMap.Optional, "ConfigMap " + ps.ConfigMap.Name})
				}
			}
		default:
			continue // emptyDir and the like hold no configuration
		}
		mounts = append(mounts, vm.MountPath)
		for _, s := range srcs {
			keys := map[string]string{} // file path in the volume: key
			if len(s.items) == 0 {
				for k := range s.data {
					keys[k] = k
				}
			}
			for _, it := range s.items {
				if _, ok := s.data[it.Key]; !ok && !s.optional {
					return nil, nil, fmt.Errorf("volume %s: %s has no key %q", v.Name, s.what, it.Key)
				}
				keys[it.Path] = it.Key
			}
			for p, k := range keys {
				content, ok := s.data[k]
				if !ok {
					continue
				}
				switch {
				case vm.SubPath == "":
					files[path.Join(vm.MountPath, p)] = content
				case vm.SubPath == p:
					files[vm.MountPath] = content
				}
			}
		}
	}
	return files, mounts, nil
}
