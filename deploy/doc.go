// Package deploy holds fanout's deployment files: the container image
// (Dockerfile), a docker compose stack for a laptop (compose.yaml) and
// Kubernetes manifests with KEDA autoscaling (k8s/). See README.md.
//
// There is no Go code to run here: deploy_test.go validates the files
// statically under `go test ./...` (names of environment variables against
// internal/config and the Temporal SDK's envconfig, task queues against the
// names in the fanout package, KEDA targets against the Deployments, the
// binaries and packages of the Dockerfile against the repository).
package deploy
