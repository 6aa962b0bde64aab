//go:build unix && !linux

package main

import "syscall"

// leaseChildAttr puts the command of `lease run` in its own process group,
// so a lost lease stops everything it started.
func leaseChildAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
