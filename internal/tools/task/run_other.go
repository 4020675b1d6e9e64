//go:build !unix

package main

import (
	"errors"
	"os"
	"os/exec"
	"os/signal"
)

// run starts the task runner as a child and exits with its status. Ctrl-C
// reaches the child from the console; this process ignores it and waits.
func run(goBin string, args []string) error {
	signal.Ignore(os.Interrupt)
	cmd := exec.Command(goBin, args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		os.Exit(exit.ExitCode())
	}
	if err != nil {
		return err
	}
	os.Exit(0)
	return nil
}
