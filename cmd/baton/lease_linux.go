package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

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
//     way.
//
// The guard is a child subreaper, so processes orphaned in CMD's group are
// reaped by it and it can tell when the group is empty.

// leaseGuardKillMargin is how long after the guard's own SIGKILL baton
// gives it before killing the guard itself.
const leaseGuardKillMargin = 5 * time.Second

// startLeaseChild starts the guard, which starts CMD.
func startLeaseChild(argv, env []string, stdin io.Reader, stdout, stderr io.Writer, grace time.Duration) (*leaseChild, error) {
	if _, err := exec.LookPath(argv[0]); err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find baton's own executable for the guard: %w", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	guard := exec.Command(self, append([]string{leaseGuardCmd, grace.String(), "--"}, argv...)...)
	guard.Stdin, guard.Stdout, guard.Stderr = stdin, stdout, stderr
	guard.Env = env
	guard.ExtraFiles = []*os.File{r} // fd 3 in the guard
	// Its own process group: a Ctrl-C reaches baton, which passes it on.
	guard.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = guard.Start()
	r.Close()
	if err != nil {
		w.Close()
		return nil, err
	}
	return &leaseChild{
		cmd:       guard,
		signal:    func(s syscall.Signal) { _ = guard.Process.Signal(s) },
		stop:      func() { w.Close() },
		killAfter: grace + leaseGuardKillMargin,
		kill:      func() { _ = guard.Process.Kill() },
		exited:    func() {}, // the guard stopped the group before it exited
		close:     func() { w.Close() },
	}, nil
}

func newLeaseGuardCmd() *cobra.Command {
	return &cobra.Command{
		Use:                leaseGuardCmd + " GRACE -- CMD [ARGS...]",
		Short:              "Run CMD for `baton lease run` (internal)",
		Hidden:             true,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 && args[1] == "--" {
				args = append(args[:1:1], args[2:]...)
			}
			if len(args) < 2 {
				return cliUsage(errors.New("usage: baton " + leaseGuardCmd + " GRACE -- CMD [ARGS...]"))
			}
			grace, err := time.ParseDuration(args[0])
			if err != nil || grace <= 0 {
				return cliUsage(fmt.Errorf("GRACE %q is not a positive duration", args[0]))
			}
			// fd 3 is the pipe from baton (os.NewFile alone would take any
			// number).
			var st syscall.Stat_t
			if err := syscall.Fstat(3, &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFIFO {
				return cliUsage(errors.New("run only by baton lease run"))
			}
			parent := os.NewFile(3, "baton")
			if code := runLeaseGuard(grace, args[1:], parent, cmd.ErrOrStderr()); code != 0 {
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
func runLeaseGuard(grace time.Duration, argv []string, parent *os.File, stderr io.Writer) int {
	syscall.CloseOnExec(int(parent.Fd())) // not for CMD
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); e != 0 {
		fmt.Fprintf(stderr, "baton: the guard cannot reap what %s leaves: %v\n", argv[0], e)
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
		fmt.Fprintf(stderr, "baton: start %s: %v\n", argv[0], err)
		return 1
	}
	proc, err := os.StartProcess(path, argv, &os.ProcAttr{
		Env:   os.Environ(),
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr},
		Sys:   &syscall.SysProcAttr{Setpgid: true},
	})
	if err != nil {
		fmt.Fprintf(stderr, "baton: start %s: %v\n", argv[0], err)
		return 1
	}
	pgid := proc.Pid // CMD leads its group
	_ = proc.Release()

	// The pipe from baton reads EOF once baton closed it or died.
	gone := make(chan struct{})
	go func() {
		var b [1]byte
		for {
			if _, err := parent.Read(b[:]); err != nil {
				close(gone)
				return
			}
		}
	}()

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
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if err != nil || pid <= 0 {
				break
			}
			if pid == pgid {
				status, cmdDone = ws, true
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
				fmt.Fprintf(stderr, "baton: processes of %s's group %d outlived SIGKILL\n", argv[0], pgid)
				if !cmdDone {
					return 1
				}
				break
			}
		}
		select {
		case s := <-sigs:
			_ = syscall.Kill(-pgid, s.(syscall.Signal))
		case <-gone:
			gone = nil
			stop()
		case <-chld:
		case <-tick:
		}
	}
	if status.Signaled() {
		return 128 + int(status.Signal())
	}
	return status.ExitStatus()
}
