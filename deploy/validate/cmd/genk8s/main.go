// Command genk8s regenerates deploy/k8s from the Helm chart's default values
// (run by `go generate ./...` in deploy/validate). It removes the YAML files
// of deploy/k8s it no longer generates; k8s/examples is left alone.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/fanout/fanout/deploy/validate"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "genk8s:", err)
		os.Exit(1)
	}
}

func run() error {
	files, err := validate.GenerateK8s(validate.ChartDir)
	if err != nil {
		return err
	}
	old, err := filepath.Glob(filepath.Join(validate.K8sDir, "*.yaml"))
	if err != nil {
		return err
	}
	for _, f := range old {
		if _, keep := files[filepath.Base(f)]; !keep {
			if err := os.Remove(f); err != nil {
				return err
			}
			fmt.Println("removed", f)
		}
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(validate.K8sDir, name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	fmt.Printf("wrote %d files to %s\n", len(files), validate.K8sDir)
	return nil
}
