package stack

import (
	"fmt"
	"os/exec"
	"syscall"
)

// watchdogScript polls the parent every second (kill -0, a shell builtin,
// so no process per poll) and SIGKILLs the process group once the parent is
// gone. It ignores SIGTERM, SIGINT and SIGHUP, so a graceful Stop of the
// group (SIGTERM) leaves it watching until the child has exited; Proc's
// waiter then kills it. $1 is the parent's pid, $2 the group's.
const watchdogScript = `trap '' TERM INT HUP
while kill -0 "$1" 2>/dev/null; do sleep 1; done
kill -KILL -"$2" 2>/dev/null`

// startWatchdog starts /bin/sh running watchdogScript inside the process
// group of pgid (the child's pid), watching parent. It is the stand-in for
// Linux's Pdeathsig where there is none (macOS), and is itself a member of
// the group, so killing the group kills it too. Should the child be gone
// already (the group cannot be joined), there is nothing to watch.
func startWatchdog(parent, pgid int) (unwatch func()) {
	cmd := exec.Command("/bin/sh", "-c", watchdogScript, "fanout-watchdog", fmt.Sprint(parent), fmt.Sprint(pgid))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pgid: pgid}
	if err := cmd.Start(); err != nil {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	return func() {
		_ = cmd.Process.Kill()
		<-done
	}
}
