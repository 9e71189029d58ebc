package memcachelock_test

import "syscall"

// sysProcAttr has the kernel SIGKILL a memcached the tests started when the
// test binary dies without running its cleanups (a panic, a -timeout).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
