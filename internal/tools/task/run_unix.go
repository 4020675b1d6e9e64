//go:build unix

package main

import (
	"os"
	"syscall"
)

// run replaces this process with the task runner, so that its exit status,
// signals (Ctrl-C in `go tool task dev`) and terminal are the runner's own.
func run(goBin string, args []string) error {
	return syscall.Exec(goBin, args, os.Environ())
}
