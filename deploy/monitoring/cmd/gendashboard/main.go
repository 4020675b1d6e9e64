// Command gendashboard writes fanout's Grafana dashboard to the Helm chart's
// files/dashboard.json (run from deploy/monitoring: go generate ./...).
package main

import (
	"fmt"
	"os"

	"github.com/fanout/fanout/deploy/monitoring"
)

func main() {
	b, err := monitoring.JSON()
	if err == nil {
		err = os.WriteFile(monitoring.DashboardFile, b, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gendashboard:", err)
		os.Exit(1)
	}
}
