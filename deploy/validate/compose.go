package validate

import (
	"context"
	"path/filepath"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
)

// LoadCompose loads a compose file as `docker compose config` does:
// compose-go parses it, validates it against the Compose specification's
// schema (an unknown key such as extra_host fails), resolves anchors, merge
// keys and interpolation, and checks references (depends_on, networks,
// volumes). The environment is empty, so the file must not need any
// variable from the host.
func LoadCompose(ctx context.Context, file string) (*types.Project, error) {
	abs, err := filepath.Abs(file)
	if err != nil {
		return nil, err
	}
	opts, err := cli.NewProjectOptions([]string{abs},
		cli.WithWorkingDirectory(filepath.Dir(abs)),
		cli.WithName("fanout"),
		cli.WithEnv(nil),
		cli.WithoutEnvironmentResolution,
	)
	if err != nil {
		return nil, err
	}
	return opts.LoadProject(ctx)
}
