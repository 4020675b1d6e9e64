package main

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
)

// composeWorkloads loads the compose file as `docker compose up` does
// (compose-go: schema, anchors and merge keys, interpolation, env_file
// merged into environment) with an empty host environment, and reads the
// services that run fanout's image: those built from the Dockerfile, and
// those naming the image such a service builds.
func composeWorkloads(file string, img image) (Config, error) {
	abs, err := filepath.Abs(file)
	if err != nil {
		return Config{}, err
	}
	opts, err := cli.NewProjectOptions([]string{abs},
		cli.WithWorkingDirectory(filepath.Dir(abs)),
		cli.WithName("fanout"),
		cli.WithEnv(nil),
	)
	if err != nil {
		return Config{}, err
	}
	p, err := opts.LoadProject(context.Background())
	if err != nil {
		return Config{}, err
	}
	dockerfile, err := filepath.Abs(img.file)
	if err != nil {
		return Config{}, err
	}
	fanoutImages := map[string]bool{}
	for _, s := range p.Services {
		if s.Build != nil && filepath.Join(s.Build.Context, s.Build.Dockerfile) == dockerfile {
			fanoutImages[s.Image] = true
		}
	}
	if len(fanoutImages) == 0 {
		return Config{}, fmt.Errorf("no service builds %s", dockerfile)
	}
	cfg := Config{Source: file + " (compose-go)"}
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for n := range p.Services {
			if !yield(n) {
				return
			}
		}
	}) {
		s := p.Services[name]
		// A service compose restarts whenever it exits runs for good; the
		// others (restart "no", the default, or "on-failure") run to
		// completion.
		job := s.Restart != types.RestartPolicyAlways && s.Restart != types.RestartPolicyUnlessStopped
		var addrs []string
		for _, n := range s.Networks {
			if n != nil && n.Ipv4Address != "" {
				addrs = append(addrs, n.Ipv4Address)
			}
		}
		slices.Sort(addrs)
		if !fanoutImages[s.Image] {
			cfg.Others = append(cfg.Others, Other{Name: name, Image: s.Image, Addresses: addrs})
			continue
		}
		argv := img.argv(s.Entrypoint, s.Command)
		bin, err := img.binary(argv)
		if err != nil {
			return Config{}, fmt.Errorf("service %s: %w", name, err)
		}
		w := Workload{Name: name, Kind: "service", Job: job, Order: OrderWorkload, Replicas: 1,
			Image: s.Image, Binary: bin, Args: argv[1:], Env: map[string]string{}, Addresses: addrs}
		if job {
			w.Order = OrderJob
		}
		if s.Scale != nil {
			w.Replicas = *s.Scale
		} else if s.Deploy != nil && s.Deploy.Replicas != nil {
			w.Replicas = *s.Deploy.Replicas
		}
		for k, v := range s.Environment {
			if v == nil {
				w.Unset = append(w.Unset, k)
				continue
			}
			w.Env[k] = *v
		}
		slices.Sort(w.Unset)
		cfg.Workloads = append(cfg.Workloads, w)
	}
	sortWorkloads(cfg.Workloads)
	return cfg, nil
}
