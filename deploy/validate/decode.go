package validate

import (
	"bytes"
	"encoding/json"
	"fmt"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	kustomizetypes "sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/yaml"
)

// kinds maps "apiVersion/Kind" to the Go type of the API that serves it.
// Anything else in a manifest is an error: a kind this list lacks is one
// nothing here can check, so add its type.
var kinds = map[string]func() any{
	"v1/ConfigMap":                                  func() any { return new(corev1.ConfigMap) },
	"v1/Secret":                                     func() any { return new(corev1.Secret) },
	"v1/Service":                                    func() any { return new(corev1.Service) },
	"v1/ServiceAccount":                             func() any { return new(corev1.ServiceAccount) },
	"apps/v1/Deployment":                            func() any { return new(appsv1.Deployment) },
	"batch/v1/Job":                                  func() any { return new(batchv1.Job) },
	"policy/v1/PodDisruptionBudget":                 func() any { return new(policyv1.PodDisruptionBudget) },
	"networking.k8s.io/v1/NetworkPolicy":            func() any { return new(networkingv1.NetworkPolicy) },
	"keda.sh/v1alpha1/ScaledObject":                 func() any { return new(kedav1alpha1.ScaledObject) },
	"keda.sh/v1alpha1/TriggerAuthentication":        func() any { return new(kedav1alpha1.TriggerAuthentication) },
	"monitoring.coreos.com/v1/PodMonitor":           func() any { return new(monitoringv1.PodMonitor) },
	"monitoring.coreos.com/v1/ServiceMonitor":       func() any { return new(monitoringv1.ServiceMonitor) },
	"monitoring.coreos.com/v1/PrometheusRule":       func() any { return new(monitoringv1.PrometheusRule) },
	"kustomize.config.k8s.io/v1beta1/Kustomization": func() any { return new(kustomizetypes.Kustomization) },
}

// Object is a strictly decoded manifest.
type Object struct {
	Manifest
	APIVersion, Kind, Name, Namespace string
	// Obj is a pointer to the API type (*appsv1.Deployment, ...).
	Obj any
}

func (o Object) String() string { return fmt.Sprintf("%s (%s %s)", o.Manifest, o.Kind, o.Name) }

type named interface {
	GetName() string
	GetNamespace() string
}

// Decode decodes a manifest strictly into its API type: YAML converted to
// JSON (duplicate keys fail) and decoded with unknown fields disallowed, so a
// misspelt field (terminationGracePeriodSecond), a number where the API wants
// a string (an unquoted env value) or a field at the wrong level fails.
func Decode(m Manifest) (Object, error) {
	var tm struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := yaml.Unmarshal(m.YAML, &tm); err != nil {
		return Object{}, fmt.Errorf("%s: %w", m, err)
	}
	if tm.APIVersion == "" || tm.Kind == "" {
		return Object{}, fmt.Errorf("%s: no apiVersion or kind", m)
	}
	newObj, ok := kinds[tm.APIVersion+"/"+tm.Kind]
	if !ok {
		return Object{}, fmt.Errorf("%s: %s %s is not a kind the validators know (add its API type to kinds)", m, tm.APIVersion, tm.Kind)
	}
	obj := newObj()
	// YAML to JSON without looking at the target type (sigs.k8s.io/yaml's
	// Unmarshal would turn an unquoted 8 into "8" where the API wants a
	// string; kubectl and the API server do not), then a JSON decode that
	// refuses unknown fields.
	j, err := yaml.YAMLToJSONStrict(m.YAML)
	if err != nil {
		return Object{}, fmt.Errorf("%s: %w", m, err)
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.DisallowUnknownFields()
	if err := dec.Decode(obj); err != nil {
		return Object{}, fmt.Errorf("%s: %s %s: %w", m, tm.APIVersion, tm.Kind, err)
	}
	o := Object{Manifest: m, APIVersion: tm.APIVersion, Kind: tm.Kind, Obj: obj}
	switch v := obj.(type) {
	case named:
		o.Name, o.Namespace = v.GetName(), v.GetNamespace()
	case *kustomizetypes.Kustomization:
		o.Name = v.MetaData.Name
	}
	if o.Name == "" {
		return Object{}, fmt.Errorf("%s: %s without metadata.name", m, tm.Kind)
	}
	return o, nil
}

// DecodeAll decodes every manifest and returns the objects and the errors.
func DecodeAll(ms []Manifest) ([]Object, []error) {
	var objs []Object
	var errs []error
	for _, m := range ms {
		o, err := Decode(m)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		objs = append(objs, o)
	}
	return objs, errs
}
