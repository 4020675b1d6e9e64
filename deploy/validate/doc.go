// Package validate checks fanout's deployment files with the real tools
// instead of hand-written readers: the Helm chart (deploy/helm/fanout) is
// rendered with Helm's Go SDK and linted; every rendered object, and every
// kustomize manifest of deploy/k8s (generated from the chart), is decoded
// strictly (unknown fields fail) into its Kubernetes API type, KEDA's
// ScaledObject and TriggerAuthentication, or the Prometheus Operator's
// PodMonitor and PrometheusRule; the PrometheusRule's groups go through
// Prometheus' rule parser and each expression is type-checked by the PromQL
// parser; deploy/compose.yaml is loaded and schema-validated by compose-go.
//
// On top of that, only the fanout-specific cross-checks are hand-written
// (crosscheck_test.go): environment variable names against internal/config
// and the Temporal SDK's envconfig (read from their source), one worker
// Deployment per queue, each KEDA trigger on its Deployment's task queue and
// Temporal, NetworkPolicy ports against the configuration, images by digest.
//
// It is its own Go module so that these heavy dependencies stay out of the
// service's go.mod. Run `go test ./...` here (go tool task test does), and
// `go generate ./...` after changing the chart's templates or defaults to
// regenerate deploy/k8s.
package validate

//go:generate go run ./cmd/genk8s
