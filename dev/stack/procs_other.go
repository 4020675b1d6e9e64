//go:build !linux

package stack

import (
	"os"
	"syscall"
)

// procAttr puts a child in its own process group. There is no Pdeathsig
// outside Linux (macOS has none), so watchParent adds a watchdog.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// watchParent starts a watchdog in the child's process group that kills
// the group once this process is gone, however it ends (SIGKILL and
// crashes included, which no handler in this process could see). unwatch
// stops the watchdog once the child has exited.
func watchParent(pid int) (unwatch func()) {
	return startWatchdog(os.Getpid(), pid)
}
