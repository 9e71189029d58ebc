//go:build !linux

package memcachelock_test

import "syscall"

func sysProcAttr() *syscall.SysProcAttr { return nil }
