package main

import "syscall"

// leaseChildAttr puts the command of `lease run` in its own process group
// (so a lost lease stops everything it started) and has the kernel send it
// SIGTERM if baton dies: without baton nobody renews the lease.
func leaseChildAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}
