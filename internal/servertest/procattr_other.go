//go:build !linux

package servertest

import "syscall"

func sysProcAttr() *syscall.SysProcAttr { return nil }
