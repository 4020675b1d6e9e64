package stack

import (
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// The watchdog that stands in for Pdeathsig outside Linux (procs_other.go)
// runs on Linux too, so it is tested here: it leaves the child alone while
// the parent lives, kills the child's process group once the parent is
// gone, and unwatch ends it without touching the child.
func TestWatchdogKillsGroupWhenParentDies(t *testing.T) {
	parent := exec.Command("sleep", "60") // stands in for this process
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	child := exec.Command("sleep", "60")
	child.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	childDone := make(chan struct{})
	go func() { _ = child.Wait(); close(childDone) }()
	defer func() { _ = syscall.Kill(-child.Process.Pid, syscall.SIGKILL); _ = parent.Process.Kill() }()

	unwatch := startWatchdog(parent.Process.Pid, child.Process.Pid)
	defer unwatch()
	select {
	case <-childDone:
		t.Fatal("the child died while its parent was alive")
	case <-time.After(1500 * time.Millisecond):
	}
	// The group is there to be killed.
	if err := syscall.Kill(-child.Process.Pid, 0); err != nil {
		t.Fatalf("child's group: %v", err)
	}
	_ = parent.Process.Kill()
	_ = parent.Wait() // reaped, so kill -0 fails as for a dead parent
	select {
	case <-childDone:
	case <-time.After(5 * time.Second):
		t.Fatal("the child is still running 5s after its parent died")
	}
}

func TestWatchdogUnwatchLeavesChild(t *testing.T) {
	child := exec.Command("sleep", "60")
	child.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = syscall.Kill(-child.Process.Pid, syscall.SIGKILL); _ = child.Wait() }()
	unwatch := startWatchdog(syscall.Getpid(), child.Process.Pid)
	done := make(chan struct{})
	go func() { unwatch(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("unwatch did not return")
	}
	if err := child.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("unwatch hurt the child: %v", err)
	}
}
