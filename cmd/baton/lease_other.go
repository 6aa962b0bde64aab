//go:build unix && !linux

package main

import (
	"io"
	"os/exec"
	"syscall"
	"time"
)

// startLeaseChild starts CMD in its own process group. Unlike on Linux
// there is no guard: if baton dies of SIGKILL, CMD keeps running, and what
// CMD leaves behind when it exits gets SIGTERM only.
func startLeaseChild(argv, env []string, stdin io.Reader, stdout, stderr io.Writer, grace time.Duration, _ time.Time) (*leaseChild, error) {
	child := exec.Command(argv[0], argv[1:]...)
	child.Stdin, child.Stdout, child.Stderr = stdin, stdout, stderr
	child.Env = env
	child.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := child.Start(); err != nil {
		return nil, err
	}
	pgid := child.Process.Pid
	// As on Linux: a stopped process takes the signal only once continued,
	// as a shell's kill continues a stopped job.
	pass := func(s syscall.Signal) {
		_ = syscall.Kill(-pgid, s)
		_ = syscall.Kill(-pgid, syscall.SIGCONT)
	}
	return &leaseChild{
		cmd:       child,
		stderr:    stderr,
		signal:    pass,
		stop:      func() { _ = syscall.Kill(-pgid, syscall.SIGTERM) },
		killAfter: grace,
		kill:      func() { _ = syscall.Kill(-pgid, syscall.SIGKILL) },
		exited:    func() { _ = syscall.Kill(-pgid, syscall.SIGTERM) },
		resume:    func() {},
		deadline:  func(time.Time) {},
		lapsed:    func() bool { return false },
		close:     func() {},
	}, nil
}
