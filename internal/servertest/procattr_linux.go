package servertest

import "syscall"

// sysProcAttr makes the kernel SIGKILL a server when the test binary dies
// without running its cleanups (a panic, a -timeout). (Linux sends the
// signal when the thread that started the child exits; Go ends a thread
// only when its goroutine exits locked with runtime.LockOSThread, so do
// not start servers from such a goroutine.)
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
