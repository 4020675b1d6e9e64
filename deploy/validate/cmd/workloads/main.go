// Command workloads prints, as JSON, the processes fanout's shipped
// configurations run: the Helm chart deploy/helm/fanout (its default values
// plus -values), deploy/compose.yaml and the kustomize overlay deploy/k8s,
// each read by its real library (Helm's SDK, compose-go, kustomize's
// krusty). For each workload (Deployment, StatefulSet, DaemonSet, Job,
// CronJob, Pod; init containers; compose services) it gives the binary the
// container runs (the image's entrypoint and command mapped to the binary
// the Dockerfile installs: worker, starter, ...), its arguments, its whole
// environment resolved from env, envFrom ConfigMaps and Secrets (compose:
// environment and env_file) and the files mounted from ConfigMaps and
// Secrets, and when it runs: hooks and init containers first, then Jobs,
// then the long-running workloads, then post hooks.
//
// The Secret the chart and the kustomization mount is created by the
// operator, so neither renders it: -secret (deploy/k8s/examples/secret.yaml)
// stands for it. The end-to-end test of the shipped configurations
// (dev/e2e/shipped) runs the binaries with exactly this.
//
//	cd deploy/validate && go run ./cmd/workloads -values my-values.yaml
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
)

func main() {
	o := options{}
	flag.StringVar(&o.chart, "chart", "../helm/fanout", "the Helm chart")
	flag.StringVar(&o.values, "values", "", "a values file over the chart's defaults (empty: the defaults)")
	flag.StringVar(&o.compose, "compose", "../compose.yaml", "the compose file")
	flag.StringVar(&o.kustomize, "kustomize", "../k8s", "the kustomize directory")
	flag.StringVar(&o.secret, "secret", "../k8s/examples/secret.yaml", "the Secret(s) the operator creates, which the chart and the kustomization refer to")
	flag.StringVar(&o.dockerfile, "dockerfile", "../Dockerfile", "the image's Dockerfile (its binaries and default command)")
	flag.Parse()
	out, err := run(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "workloads:", err)
		os.Exit(1)
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		fmt.Fprintln(os.Stderr, "workloads:", err)
		os.Exit(1)
	}
}

type options struct {
	chart, values, compose, kustomize, secret, dockerfile string
}

func run(o options) (*Output, error) {
	img, err := readDockerfile(o.dockerfile)
	if err != nil {
		return nil, err
	}
	secrets, err := readManifestFile(o.secret)
	if err != nil {
		return nil, err
	}
	chart, err := chartWorkloads(o.chart, o.values, secrets, img)
	if err != nil {
		return nil, fmt.Errorf("chart %s: %w", o.chart, err)
	}
	compose, err := composeWorkloads(o.compose, img)
	if err != nil {
		return nil, fmt.Errorf("compose %s: %w", o.compose, err)
	}
	kust, err := kustomizeWorkloads(o.kustomize, o.chart, secrets, img)
	if err != nil {
		return nil, fmt.Errorf("kustomize %s: %w", o.kustomize, err)
	}
	return &Output{Chart: chart, Compose: compose, Kustomize: kust}, nil
}
