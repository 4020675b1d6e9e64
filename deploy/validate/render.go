package validate

import (
	"fmt"
	"maps"
	"path"
	"regexp"
	"slices"
	"strings"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	"sigs.k8s.io/yaml"
)

// Manifest is one YAML document of a rendered template or manifest file.
type Manifest struct {
	File string // template path ("fanout/templates/workers.yaml") or file path
	Doc  int    // 1-based index of the document in File
	YAML []byte
}

func (m Manifest) String() string { return fmt.Sprintf("%s#%d", m.File, m.Doc) }

// ReleaseName is the release the kustomize manifests are rendered as (and
// the tests render the chart as): object names are fanout-<role>.
const ReleaseName = "fanout"

// ReadValuesFile reads a values file (nil path: no overrides).
func ReadValuesFile(file string) (map[string]any, error) {
	if file == "" {
		return map[string]any{}, nil
	}
	v, err := chartutil.ReadValuesFile(file)
	if err != nil {
		return nil, err
	}
	return v.AsMap(), nil
}

// Render renders the chart in chartDir with values over its defaults, as
// `helm template` would for release ReleaseName in namespace, and returns
// the rendered text of each template (NOTES.txt and partials excluded).
func Render(chartDir string, values map[string]any, namespace string) (map[string]string, error) {
	ch, err := loader.Load(chartDir)
	if err != nil {
		return nil, fmt.Errorf("loading the chart %s: %w", chartDir, err)
	}
	if err := chartutil.ProcessDependenciesWithMerge(ch, values); err != nil {
		return nil, err
	}
	vals, err := chartutil.ToRenderValues(ch, values, chartutil.ReleaseOptions{
		Name: ReleaseName, Namespace: namespace, Revision: 1, IsInstall: true,
	}, nil)
	if err != nil {
		return nil, fmt.Errorf("values: %w", err)
	}
	out, err := engine.Render(ch, vals)
	if err != nil {
		return nil, fmt.Errorf("rendering %s: %w", chartDir, err)
	}
	for name := range out {
		if base := path.Base(name); base == "NOTES.txt" || strings.HasPrefix(base, "_") {
			delete(out, name)
		}
	}
	return out, nil
}

var docSeparator = regexp.MustCompile(`(?m)^---[ \t]*$`)

// SplitDocuments splits a multi-document YAML text, dropping documents that
// hold only comments and blank lines.
func SplitDocuments(file, text string) ([]Manifest, error) {
	var out []Manifest
	for i, doc := range docSeparator.Split(text, -1) {
		var probe any
		if err := yaml.Unmarshal([]byte(doc), &probe); err != nil {
			return nil, fmt.Errorf("%s#%d: %w", file, i+1, err)
		}
		if probe == nil {
			continue
		}
		out = append(out, Manifest{File: file, Doc: i + 1, YAML: []byte(strings.TrimSpace(doc) + "\n")})
	}
	return out, nil
}

// RenderManifests renders the chart and splits every template into its
// documents, in template order.
func RenderManifests(chartDir string, values map[string]any) ([]Manifest, error) {
	out, err := Render(chartDir, values, "fanout")
	if err != nil {
		return nil, err
	}
	var all []Manifest
	for _, name := range slices.Sorted(maps.Keys(out)) {
		docs, err := SplitDocuments(name, out[name])
		if err != nil {
			return nil, err
		}
		all = append(all, docs...)
	}
	return all, nil
}

// Lint runs Helm's chart linter (what `helm lint --strict` runs: Chart.yaml,
// values, templates rendered and parsed, values.schema.json when present)
// with values over the defaults. It returns the findings of severity
// warning and error; informational ones (no icon) are dropped.
func Lint(chartDir string, values map[string]any) []support.Message {
	l := lint.All(chartDir, values, "fanout", false)
	var out []support.Message
	for _, m := range l.Messages {
		if m.Severity >= support.WarningSev {
			out = append(out, m)
		}
	}
	return out
}
