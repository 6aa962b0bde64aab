package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"syscall"
	"time"
	"unsafe"

	"github.com/spf13/cobra"
)

func init() { register(newLeaseGuardCmd) }

// On Linux, `lease run` does not start CMD itself: it starts a guard, baton
// run again as the hidden command `__lease-guard`, and the guard starts CMD
// in a process group of its own. baton talks to the guard as it would to
// CMD (signals in, exit status out); the guard
//
//   - passes on to CMD's group the signals baton passes on to it;
//   - when CMD exits, stops the group: SIGTERM, SIGKILL after --grace, and
//     exits with CMD's status once the group is empty, so that nothing CMD
//     started outlives the lease;
//   - when the pipe it shares with baton closes (baton asks it to stop on a
//     lost lease, or baton died, even of SIGKILL), stops the group the same
//     way;
//   - stops the group the same way at the deadline baton last gave it
//     (when baton itself would stop CMD, short of a renewal), so that CMD
//     is stopped in time even if baton does not run then (stopped, say);
//   - at a terminal, lends it to CMD and tells baton when CMD stops
//     (runLeaseGuard).
//
// The guard is a child subreaper, so processes orphaned in CMD's group are
// reaped by it and it can tell when the group is empty.

// leaseGuardKillMargin is how long after the guard's own SIGKILL baton
// gives it before killing the guard itself.
const leaseGuardKillMargin = 5 * time.Second

// startLeaseChild starts the guard, which starts CMD and stops it at
// deadline unless told a later one.
func startLeaseChild(argv, env []string, stdin io.Reader, stdout, stderr io.Writer, grace time.Duration, deadline time.Time) (*leaseChild, error) {
	if _, err := exec.LookPath(argv[0]); err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find baton's own executable for the guard: %w", err)
	}
	// At a terminal (stdin and stdout are baton's controlling terminal),
	// the guard lends the terminal to CMD while baton's job has it, and
	// tells baton when CMD stops (Ctrl-Z). job is baton's process group, 0
	// elsewhere. In a pipeline (| less, say) the terminal stays with the
	// job, whose other commands may read it.
	job, tty := 0, -1
	if in, ok := stdin.(*os.File); ok {
		if out, ok := stdout.(*os.File); ok && leaseSameTerminal(in, out) {
			if _, err := leaseTcgetpgrp(int(in.Fd())); err == nil {
				job, tty = syscall.Getpgrp(), int(in.Fd())
			}
		}
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	sr, sw, err := os.Pipe()
	if err != nil {
		r.Close()
		w.Close()
		return nil, err
	}
	// The first deadline is in the pipe before the guard starts CMD: baton
	// may be stopped (Ctrl-Z, SIGSTOP) from then on, before it can say
	// more, and CMD must not run on unbounded then.
	if _, err := w.Write(leaseDeadlineMsg(deadline)); err != nil {
		r.Close()
		w.Close()
		sr.Close()
		sw.Close()
		return nil, err
	}
	guard := exec.Command(self, append([]string{leaseGuardCmd, grace.String(), strconv.Itoa(job), "--"}, argv...)...)
	guard.Stdin, guard.Stdout, guard.Stderr = stdin, stdout, stderr
	guard.Env = env
	guard.ExtraFiles = []*os.File{r, sw} // fds 3 and 4 in the guard
	// Its own process group: a Ctrl-C reaches baton (or, at a terminal,
	// CMD), not the guard.
	guard.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = guard.Start()
	r.Close()
	sw.Close()
	if err != nil {
		w.Close()
		sr.Close()
		return nil, err
	}
	// The guard writes the number of the signal that stopped CMD, or
	// leaseGuardLapsed.
	stopped := make(chan syscall.Signal, 1)
	var lapsed bool
	heard := make(chan struct{}) // closed once the guard is gone
	go func() {
		defer close(heard)
		defer sr.Close()
		var b [1]byte
		for {
			if _, err := sr.Read(b[:]); err != nil {
				return
			}
			if b[0] == leaseGuardLapsed {
				lapsed = true
				continue
			}
			select {
			case stopped <- syscall.Signal(b[0]):
			default: // CMD cannot stop again before baton continued it
			}
		}
	}()
	say := stderr
	if job != 0 {
		say = leaseNoTTOU{stderr}
	}
	return &leaseChild{
		cmd:       guard,
		stderr:    say,
		signal:    func(s syscall.Signal) { _ = guard.Process.Signal(s) },
		stop:      func() { w.Close() },
		killAfter: grace + leaseGuardKillMargin,
		kill:      func() { _ = guard.Process.Kill() },
		// The guard stopped the group before it exited, and gave the
		// terminal back to the job; should the terminal still name a
		// group that is gone (the guard did not get to it), baton takes
		// it back before the shell, after it, reads from it.
		exited: func() {
			if job != 0 {
				leaseReclaimTerminal(tty, job, -1)
			}
		},
		stopped: stopped,
		resume:  func() { _, _ = w.Write([]byte{leaseGuardResume}) },
		deadline: func(t time.Time) {
			_, _ = w.Write(leaseDeadlineMsg(t)) // at most PIPE_BUF: never interleaved
		},
		lapsed: func() bool {
			<-heard
			return lapsed
		},
		close: func() {
			w.Close()
			if job != 0 {
				// The guard gives the terminal back when CMD ends; if it
				// was killed first, the terminal may be left to CMD's
				// empty group.
				leaseReclaimTerminal(tty, job, 0)
			}
		},
	}, nil
}

// What baton and the guard write to each other besides stop signals.
const (
	// leaseGuardResume, to the guard, continues CMD after it stopped.
	leaseGuardResume = 'c'
	// leaseGuardDeadline, to the guard, is followed by the time (on
	// leaseMonotonic's clock, 8 bytes big-endian) at which the guard
	// stops CMD unless told a later one: baton misses its own deadline
	// only if it does not run (stopped, say).
	leaseGuardDeadline = 'd'
	// leaseGuardLapsed, to baton: the guard stopped CMD at the deadline.
	leaseGuardLapsed = 'L'
)

// leaseDeadlineMsg is the leaseGuardDeadline message for t.
func leaseDeadlineMsg(t time.Time) []byte {
	// On the clock both processes share; read before the time left, so
	// that a pause between the two errs early.
	now := leaseMonotonic()
	msg := make([]byte, 9)
	msg[0] = leaseGuardDeadline
	binary.BigEndian.PutUint64(msg[1:], uint64(now+int64(time.Until(t))))
	return msg
}

// leaseMonotonic is CLOCK_MONOTONIC in nanoseconds: one clock for baton
// and its guard.
func leaseMonotonic() int64 {
	var ts syscall.Timespec
	_, _, _ = syscall.RawSyscall(syscall.SYS_CLOCK_GETTIME, 1 /* CLOCK_MONOTONIC */, uintptr(unsafe.Pointer(&ts)), 0)
	return ts.Nano()
}

// leaseGuardSay writes a message of the guard. The guard's process group
// is never the terminal's foreground (leaseNoTTOU).
func leaseGuardSay(w io.Writer, format string, args ...any) {
	_, _ = fmt.Fprintf(leaseNoTTOU{w}, format, args...)
}

// leaseNoTTOU writes with SIGTTOU blocked, as shells do: a terminal with
// tostop set then lets a process of a background group write instead of
// stopping it. The guard, and baton while CMD has the terminal, write
// so: stopped, they would stop nothing (CMD runs on) and renew nothing.
type leaseNoTTOU struct{ w io.Writer }

func (l leaseNoTTOU) Write(p []byte) (int, error) {
	runtime.LockOSThread() // the signal mask is the thread's
	defer runtime.UnlockOSThread()
	set, old := leaseSigmask(syscall.SIGTTOU), uint64(0)
	if err := leaseSigprocmask(sigBlock, &set, &old); err == nil {
		defer func() { _ = leaseSigprocmask(sigSetmask, &old, nil) }()
	}
	return l.w.Write(p)
}

// rt_sigprocmask(2) of the calling thread.
const sigBlock, sigSetmask = 0, 2 // SIG_BLOCK, SIG_SETMASK

func leaseSigmask(s syscall.Signal) uint64 { return 1 << (s - 1) }

func leaseSigprocmask(how int, set, old *uint64) error {
	if _, _, e := syscall.RawSyscall6(syscall.SYS_RT_SIGPROCMASK, uintptr(how), uintptr(unsafe.Pointer(set)), uintptr(unsafe.Pointer(old)), 8, 0, 0); e != 0 {
		return e
	}
	return nil
}

// leaseSameTerminal tells whether a and b are one terminal.
func leaseSameTerminal(a, b *os.File) bool {
	var sa, sb syscall.Stat_t
	if syscall.Fstat(int(a.Fd()), &sa) != nil || syscall.Fstat(int(b.Fd()), &sb) != nil {
		return false
	}
	return sa.Mode&syscall.S_IFMT == syscall.S_IFCHR && sb.Mode&syscall.S_IFMT == syscall.S_IFCHR && sa.Rdev == sb.Rdev
}

// leaseTcgetpgrp is tcgetpgrp(3): the foreground process group of the
// terminal fd, if it is the caller's controlling terminal.
func leaseTcgetpgrp(fd int) (int, error) {
	var pgrp int32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.TIOCGPGRP, uintptr(unsafe.Pointer(&pgrp))); e != 0 {
		return 0, e
	}
	return int(pgrp), nil
}

// leaseTcsetpgrp is tcsetpgrp(3) as a process of a background group may
// call it, as shells do: with SIGTTOU blocked, which the kernel would
// otherwise send to stop the caller.
func leaseTcsetpgrp(fd, pgrp int) error {
	runtime.LockOSThread() // the signal mask is the thread's
	defer runtime.UnlockOSThread()
	set, old := leaseSigmask(syscall.SIGTTOU), uint64(0)
	if err := leaseSigprocmask(sigBlock, &set, &old); err != nil {
		return err
	}
	p := int32(pgrp)
	_, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.TIOCSPGRP, uintptr(unsafe.Pointer(&p)))
	_ = leaseSigprocmask(sigSetmask, &old, nil)
	if e != 0 {
		return e
	}
	return nil
}

// leaseReclaimTerminal gives the terminal fd back to baton's job once CMD
// ended, if CMD's group cmdGroup has it, or a group that is gone (one CMD
// made, say). A group that still runs may be one the shell chose since: it
// keeps the terminal.
func leaseReclaimTerminal(fd, job, cmdGroup int) {
	p, err := leaseTcgetpgrp(fd)
	if err != nil || p == job {
		return
	}
	if err := syscall.Kill(-p, 0); p == cmdGroup || errors.Is(err, syscall.ESRCH) {
		_ = leaseTcsetpgrp(fd, job)
	}
}

func newLeaseGuardCmd() *cobra.Command {
	return &cobra.Command{
		Use:                leaseGuardCmd + " GRACE JOB -- CMD [ARGS...]",
		Short:              "Run CMD for `baton lease run` (internal)",
		Hidden:             true,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) < 4 || args[2] != "--" {
				return cliUsage(errors.New("usage: baton " + leaseGuardCmd + " GRACE JOB -- CMD [ARGS...]"))
			}
			grace, err := time.ParseDuration(args[0])
			if err != nil || grace <= 0 {
				return cliUsage(fmt.Errorf("GRACE %q is not a positive duration", args[0]))
			}
			job, err := strconv.Atoi(args[1])
			if err != nil || job < 0 {
				return cliUsage(fmt.Errorf("JOB %q is not a process group", args[1]))
			}
			// fds 3 and 4 are the pipes from and to baton (os.NewFile
			// alone would take any number).
			for fd := 3; fd <= 4; fd++ {
				var st syscall.Stat_t
				if err := syscall.Fstat(fd, &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFIFO {
					return cliUsage(errors.New("run only by baton lease run"))
				}
			}
			parent, toParent := os.NewFile(3, "baton"), os.NewFile(4, "baton")
			if code := runLeaseGuard(grace, job, args[3:], parent, toParent, cmd.ErrOrStderr()); code != 0 {
				return &exitError{code: code}
			}
			return nil
		},
	}
}

// prSetChildSubreaper is PR_SET_CHILD_SUBREAPER of prctl(2).
const prSetChildSubreaper = 36

// runLeaseGuard is the guard: it returns CMD's exit status (128+N when
// killed by signal N), or 1 if CMD could not be started (as baton does when
// it finds no CMD to start).
//
// job is baton's process group when stdin is baton's terminal, 0
// elsewhere. At a terminal CMD gets the terminal whenever baton's job has
// it: when CMD starts and when it continues after a stop; when CMD stops
// or ends, the terminal goes back to baton's job. A stop of CMD is told
// to baton (the signal's number, on toParent), which stops its own job
// likewise and later writes leaseGuardResume to continue CMD.
func runLeaseGuard(grace time.Duration, job int, argv []string, parent, toParent *os.File, stderr io.Writer) int {
	syscall.CloseOnExec(int(parent.Fd())) // not for CMD
	syscall.CloseOnExec(int(toParent.Fd()))
	const tty = 0 // stdin
	if job != 0 {
		if _, err := leaseTcgetpgrp(tty); err != nil {
			job = 0 // not a terminal after all
		}
	}
	// ownsTerminal tells whether baton's job has the terminal.
	ownsTerminal := func() bool {
		p, err := leaseTcgetpgrp(tty)
		return job != 0 && err == nil && p == job
	}
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); e != 0 {
		leaseGuardSay(stderr, "baton: the guard cannot reap what %s leaves: %v\n", argv[0], e)
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	defer signal.Stop(sigs)
	// CMD's end, and the end of what it left, wake the loop below: no
	// polling while CMD runs.
	chld := make(chan os.Signal, 1)
	signal.Notify(chld, syscall.SIGCHLD)
	defer signal.Stop(chld)

	path, err := exec.LookPath(argv[0])
	if err != nil {
		leaseGuardSay(stderr, "baton: start %s: %v\n", argv[0], err)
		return 1
	}
	proc, err := os.StartProcess(path, argv, &os.ProcAttr{
		Env:   os.Environ(),
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr},
		Sys:   &syscall.SysProcAttr{Setpgid: true, Foreground: ownsTerminal(), Ctty: tty},
	})
	if err != nil {
		leaseGuardSay(stderr, "baton: start %s: %v\n", argv[0], err)
		return 1
	}
	pgid := proc.Pid // CMD leads its group
	_ = proc.Release()

	// The pipe from baton reads EOF once baton closed it or died.
	gone := make(chan struct{})
	resume := make(chan struct{}, 1)
	deadlines := make(chan int64, 1) // the latest deadline baton gave
	go func() {
		var b [8]byte
		for {
			if _, err := parent.Read(b[:1]); err != nil {
				close(gone)
				return
			}
			switch b[0] {
			case leaseGuardResume:
				select {
				case resume <- struct{}{}:
				default:
				}
			case leaseGuardDeadline:
				if _, err := io.ReadFull(parent, b[:]); err != nil {
					close(gone)
					return
				}
				select {
				case <-deadlines:
				default:
				}
				deadlines <- int64(binary.BigEndian.Uint64(b[:]))
			}
		}
	}()
	var lapse *time.Timer
	defer func() {
		if lapse != nil {
			lapse.Stop()
		}
	}()
	var lapseC <-chan time.Time
	// While CMD is stopped (at a terminal: Ctrl-Z), baton is stopped too
	// and renews nothing, and the deadline it gives is the lease's expiry:
	// CMD does not run. A process of CMD's group that ignores or catches
	// SIGTSTP does, though: at the deadline in force when CMD stopped (when
	// baton would have stopped CMD, short of a renewal), the whole group
	// gets SIGSTOP, which nothing ignores; continuing CMD continues it. Not
	// at once: a process catching SIGTSTP (an editor) first puts the
	// terminal back as it found it.
	var (
		deadline   int64 // the latest deadline baton gave; 0: none yet
		cmdStopped bool  // CMD stopped, and baton has not continued it
		pause      *time.Timer
		pauseC     <-chan time.Time
	)
	setDeadline := func(d int64) {
		deadline = d
		if lapse != nil {
			lapse.Stop()
		}
		lapse = time.NewTimer(time.Duration(d - leaseMonotonic()))
		lapseC = lapse.C
	}
	defer func() {
		if pause != nil {
			pause.Stop()
		}
	}()
	// Stops of CMD matter only at a terminal.
	waitOpts := syscall.WNOHANG
	if job != 0 {
		waitOpts |= syscall.WUNTRACED
	}

	var (
		status   syscall.WaitStatus
		cmdDone  bool
		stopping bool
		killAt   time.Time
		giveUp   time.Time
		// tick polls while the group is being stopped: its last member need not
		// be our child, so its end may send us no SIGCHLD.
		ticker *time.Ticker
		tick   <-chan time.Time
	)
	stop := func() {
		if stopping {
			return
		}
		stopping = true
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		killAt = time.Now().Add(grace)
		giveUp = killAt.Add(leaseGuardKillMargin)
		ticker = time.NewTicker(20 * time.Millisecond)
		tick = ticker.C
	}
	defer func() {
		if ticker != nil {
			ticker.Stop()
		}
	}()
	for {
		// Reap CMD and whatever was orphaned to us.
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, waitOpts, nil)
			if err != nil || pid <= 0 {
				break
			}
			switch {
			case pid != pgid:
			case ws.Stopped():
				// Ctrl-Z, or CMD read the terminal while baton's job was in
				// the background: the terminal is the job's again, and
				// baton stops the job as the terminal would have.
				if p, err := leaseTcgetpgrp(tty); err == nil && p == pgid {
					_ = leaseTcsetpgrp(tty, job)
				}
				if cmdStopped {
					break // stopped again before baton continued it (the pause)
				}
				cmdStopped = true
				if pause != nil {
					pause.Stop()
				}
				pause = time.NewTimer(time.Duration(max(deadline-leaseMonotonic(), 0)))
				pauseC = pause.C
				_, _ = toParent.Write([]byte{byte(ws.StopSignal())})
			case !cmdDone:
				status, cmdDone = ws, true
				if job != 0 {
					leaseReclaimTerminal(tty, job, pgid)
				}
			}
		}
		if cmdDone {
			stop()
			if err := syscall.Kill(-pgid, 0); errors.Is(err, syscall.ESRCH) {
				break
			}
		}
		if stopping {
			now := time.Now()
			if !killAt.IsZero() && !now.Before(killAt) {
				_ = syscall.Kill(-pgid, syscall.SIGKILL)
				killAt = time.Time{}
			}
			if now.After(giveUp) {
				leaseGuardSay(stderr, "baton: processes of %s's group %d outlived SIGKILL\n", argv[0], pgid)
				if !cmdDone {
					return 1
				}
				break
			}
		}
		select {
		case s := <-sigs:
			_ = syscall.Kill(-pgid, s.(syscall.Signal))
			// A stopped process takes the signal only once continued:
			// continue the group, as a shell's kill does a stopped job.
			// CMD stops for good when it reads a terminal it was not
			// lent (stdout is not the terminal, say), and would hold the
			// lease with Ctrl-C pending. Not a CMD suspended at the
			// terminal: baton continues it once the lease is surely held.
			if !cmdStopped {
				_ = syscall.Kill(-pgid, syscall.SIGCONT)
			}
		case <-gone:
			gone = nil
			stop()
		case d := <-deadlines:
			setDeadline(d)
		case <-pauseC:
			pauseC = nil
			if cmdStopped && !cmdDone {
				_ = syscall.Kill(-pgid, syscall.SIGSTOP)
			}
		case <-lapseC:
			lapseC = nil
			if !stopping {
				_, _ = toParent.Write([]byte{leaseGuardLapsed})
				stop()
				leaseGuardSay(stderr, "baton: the lease was not renewed in time; stopping %s\n", argv[0])
			}
		case <-resume:
			select {
			case d := <-deadlines: // baton wrote it before: it is in force
				setDeadline(d)
			default:
			}
			cmdStopped, pauseC = false, nil
			if pause != nil {
				pause.Stop()
			}
			if !cmdDone && !stopping {
				if ownsTerminal() {
					_ = leaseTcsetpgrp(tty, pgid)
				}
				_ = syscall.Kill(-pgid, syscall.SIGCONT)
			}
		case <-chld:
		case <-tick:
		}
	}
	if status.Signaled() {
		return 128 + int(status.Signal())
	}
	return status.ExitStatus()
}
