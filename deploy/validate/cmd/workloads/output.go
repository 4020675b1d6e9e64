package main

// Output is what the command prints: the processes of each shipped
// configuration.
type Output struct {
	Chart     Config `json:"chart"`
	Compose   Config `json:"compose"`
	Kustomize Config `json:"kustomize"`
}

// Config is one shipped configuration.
type Config struct {
	// Source says what was read (files, values).
	Source string `json:"source"`
	// Workloads run fanout's image, in start order (Order, then name).
	Workloads []Workload `json:"workloads"`
	// Others run other images (compose's Temporal, Kafka, Redis, ...).
	Others []Other `json:"others,omitempty"`
}

// When a workload runs, relative to the others: Helm's pre-install hooks
// and init containers first, then Jobs applied with the rest (kubectl apply
// -k, compose's one-shot services), then the long-running workloads, then
// Helm's post-install hooks.
const (
	OrderPreHook  = 0
	OrderJob      = 1
	OrderWorkload = 2
	OrderPostHook = 3
)

// Workload is one container (Kubernetes) or service (compose) of fanout's
// image.
type Workload struct {
	// Name is "<Kind>/<object>/<container>" (Kubernetes) or the service's
	// name (compose).
	Name string `json:"name"`
	// Kind is the object's kind (Deployment, Job, ...) or "service".
	Kind string `json:"kind"`
	// Init: a Kubernetes init container (it runs to completion before its
	// pod's other containers).
	Init bool `json:"init,omitempty"`
	// Job: runs to completion (a Job, a hook, an init container, a compose
	// service that is not restarted when it exits).
	Job   bool `json:"job"`
	Order int  `json:"order"`
	// Hook is the Helm hook annotation, if any.
	Hook     string `json:"hook,omitempty"`
	Replicas int    `json:"replicas"`
	Image    string `json:"image"`
	// Binary is the name of the binary the image installs that the
	// container runs (worker, starter, ...); Args follow it.
	Binary string   `json:"binary"`
	Args   []string `json:"args"`
	// Env is the whole environment the process gets.
	Env map[string]string `json:"env"`
	// Unset lists compose variables named without a value: they would come
	// from the host's environment, which the configuration does not set.
	Unset []string `json:"unset,omitempty"`
	// Files are the files mounted from Secrets and ConfigMaps (path:
	// content), Mounts their mount directories.
	Files  map[string]string `json:"files,omitempty"`
	Mounts []string          `json:"mounts,omitempty"`
	// Addresses are the fixed IP addresses of a compose service.
	Addresses []string `json:"addresses,omitempty"`
}

// Other is a workload of another image.
type Other struct {
	Name      string   `json:"name"`
	Image     string   `json:"image"`
	Addresses []string `json:"addresses,omitempty"`
}
