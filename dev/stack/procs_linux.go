package stack

import "syscall"

// procAttr puts a child in its own process group and has the kernel
// SIGKILL it when this process dies (Pdeathsig, Linux only).
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// watchParent is not needed on Linux: Pdeathsig does its work.
func watchParent(int) (unwatch func()) { return func() {} }
