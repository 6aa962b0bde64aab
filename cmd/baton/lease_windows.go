package main

import (
	"io"
	"os/exec"
	"syscall"
	"time"
)

// startLeaseChild starts CMD. Windows has no process groups to signal nor
// job control here: a lost lease kills CMD itself (not what it started),
// and if baton dies CMD keeps running. baton builds on Windows so that
// its server and client run there; `lease run`'s guarantee that nothing
// outlives the lease holds on Linux only.
func startLeaseChild(argv, env []string, stdin io.Reader, stdout, stderr io.Writer, grace time.Duration, _ time.Time) (*leaseChild, error) {
	child := exec.Command(argv[0], argv[1:]...)
	child.Stdin, child.Stdout, child.Stderr = stdin, stdout, stderr
	child.Env = env
	if err := child.Start(); err != nil {
		return nil, err
	}
	kill := func() { _ = child.Process.Kill() }
	return &leaseChild{
		cmd:       child,
		stderr:    stderr,
		signal:    func(syscall.Signal) { kill() }, // no signals to pass on: Ctrl-C ends CMD
		stop:      kill,
		killAfter: grace,
		kill:      kill,
		exited:    func() {},
		resume:    func() {},
		deadline:  func(time.Time) {},
		lapsed:    func() bool { return false },
		close:     func() {},
	}, nil
}

// stopOwnJob is never called here: CMD is not lent a terminal, so nothing
// reports it stopped.
func stopOwnJob(syscall.Signal) {}
