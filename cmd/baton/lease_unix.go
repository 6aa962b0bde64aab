//go:build unix

package main

import "syscall"

// stopOwnJob stops baton's process group (its job at the terminal) with
// the signal that stopped CMD: SIGTTIN or SIGTTOU as they came, anything
// else as the SIGTSTP of a Ctrl-Z.
func stopOwnJob(s syscall.Signal) {
	if s != syscall.SIGTTIN && s != syscall.SIGTTOU {
		s = syscall.SIGTSTP
	}
	_ = syscall.Kill(0, s)
}
