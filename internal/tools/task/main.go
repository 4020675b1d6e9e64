// Command task is what `go tool task` runs: it hands over to the pinned task
// runner (go-task) of the tools module internal/tools/devtools, as
// `go tool -modfile=internal/tools/devtools/go.mod task ARGS...`.
//
// The task runner and the other development tools (workflowcheck, the
// linters) are tools of that module rather than of the main one, so that a
// program importing github.com/fanout/fanout does not inherit their
// requirements (cloud SDKs, terminal UIs, linters); this package, of the main
// module and standard library only, is the one tool the main go.mod names,
// and keeps the commands as short as `go tool task dev` and `go tool task
// test`.
package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// toolsModFile is the tools module's go.mod, relative to the repository root.
var toolsModFile = filepath.Join("internal", "tools", "devtools", "go.mod")

func main() {
	wd, err := os.Getwd()
	if err != nil {
		fail(err)
	}
	root, err := repoRoot(wd)
	if err != nil {
		fail(err)
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		fail(err)
	}
	args := append([]string{"go", "tool", "-modfile=" + filepath.Join(root, toolsModFile), "task"}, os.Args[1:]...)
	if err := run(goBin, args); err != nil {
		fail(err)
	}
}

// repoRoot returns dir or its nearest ancestor that holds the tools module.
func repoRoot(dir string) (string, error) {
	for d := dir; ; {
		if _, err := os.Stat(filepath.Join(d, toolsModFile)); err == nil {
			return d, nil
		}
		parent := filepath.Dir(d)
		if parent == d {
			return "", errors.New("no " + filepath.ToSlash(toolsModFile) + " in " + dir + " or above it: run go tool task inside the fanout repository")
		}
		d = parent
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "task:", err)
	os.Exit(1)
}
