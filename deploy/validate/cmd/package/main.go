// Command package packages the Helm chart for a release with Helm's SDK,
// as `helm package --version --app-version` does (loader, chartutil.Save):
// the chart's version is the release's, without a leading v as Helm charts
// go, and its appVersion the release's tag (app.kubernetes.io/version).
// `go tool task release` runs it from deploy/validate:
//
//	go run ./cmd/package -version v1.2.0 -out ../../dist
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"regexp"
	"strings"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"

	"github.com/fanout/fanout/deploy/validate"
)

func main() {
	path, err := run(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "package:", err)
		os.Exit(1)
	}
	fmt.Println(path)
}

// semVer is SemVer 2's own expression (https://semver.org).
var semVer = regexp.MustCompile(`^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)` +
	`(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?` +
	`(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$`)

// run packages the chart as the flags say and returns the archive's path.
func run(args []string) (string, error) {
	fs := flag.NewFlagSet("package", flag.ContinueOnError)
	version := fs.String("version", "", "the release version, a SemVer tag (v1.2.0); required")
	out := fs.String("out", "dist", "directory the chart archive is written to (created if missing)")
	chart := fs.String("chart", validate.ChartDir, "the chart's directory")
	if err := fs.Parse(args); err != nil {
		return "", err
	}
	if fs.NArg() > 0 {
		return "", fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if *version == "" {
		return "", errors.New("-version is required (the release's tag, v1.2.0)")
	}
	// Helm takes "1.2" too; a release is a full SemVer 2 version.
	if !semVer.MatchString(strings.TrimPrefix(*version, "v")) {
		return "", fmt.Errorf("-version %q: want a SemVer 2 version (v1.2.0, v1.2.0-rc.1)", *version)
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return "", err
	}
	// What action.Package (helm package) does, with the packages the
	// validators already use: load, set the versions, check, save.
	ch, err := loader.LoadDir(*chart)
	if err != nil {
		return "", err
	}
	ch.Metadata.Version = strings.TrimPrefix(*version, "v")
	ch.Metadata.AppVersion = *version
	if err := ch.Validate(); err != nil {
		return "", fmt.Errorf("-version %q: %w (a chart's version is SemVer: v1.2.0, v1.2.0-rc.1)", *version, err)
	}
	return chartutil.Save(ch, *out)
}
