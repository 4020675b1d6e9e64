// Package deploy holds fanout's deployment files: the container image
// (Dockerfile), a docker compose stack for a laptop (compose.yaml), the Helm
// chart (helm/fanout) and the kustomize manifests generated from it (k8s/).
// See README.md.
//
// There is no Go code to run here. deploy_test.go checks what needs the
// service's code imported (each container's configuration through fanout's
// start-up validation, the Dockerfile's packages and binaries against the
// repository); the validators built on Helm, the Kubernetes API, KEDA, the
// Prometheus Operator, Prometheus and compose-go live in the separate module
// deploy/validate.
package deploy
