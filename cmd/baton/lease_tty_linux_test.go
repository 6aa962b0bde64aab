package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// cliTick matches a line of the ticking CMD of TestLeaseRunSuspended (not
// the command line the shell shows).
var cliTick = regexp.MustCompile(`tick [0-9]`)

// cliJobShell is the shell a CMD that gets Ctrl-Z or Ctrl-C runs in. Not
// sh: dash starts commands with vfork(2), and a key that comes around the
// vfork misses the command (seen about once in ten keys on a loaded
// machine, with dash and a job-control shell alone, without baton):
//   - a Ctrl-Z between the child's vfork and its exec stops the child
//     while dash waits, in the kernel, for that exec; dash never stops, so
//     nobody hears that the job stopped, and the terminal hangs;
//   - a Ctrl-C while dash blocks signals for the vfork reaches dash but
//     not the command it starts, which runs on (sleep 30: 30s); dash,
//     which catches SIGINT under -c, waits for it before it exits.
//
// bash forks.
const cliJobShell = "bash"

// cliTerminal is a shell script run as the session leader of a pseudo-
// terminal, the way a user runs baton from a terminal.
type cliTerminal struct {
	*cliProc
	master *os.File
	out    *cliLockedBuffer // what the terminal shows
}

// cliStartTerminal runs bash -c script in a new session whose controlling
// terminal is a new pseudo-terminal.
func cliStartTerminal(t *testing.T, env []string, script string) *cliTerminal {
	t.Helper()
	fd, err := syscall.Open("/dev/ptmx", syscall.O_RDWR|syscall.O_NOCTTY|syscall.O_CLOEXEC|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	var unlock int32
	var n uint32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); e != 0 {
		t.Fatal(e)
	}
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.TIOCGPTN, uintptr(unsafe.Pointer(&n))); e != 0 {
		t.Fatal(e)
	}
	master := os.NewFile(uintptr(fd), "ptmx") // non-blocking: Close ends a Read
	t.Cleanup(func() { master.Close() })
	tty, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	term := &cliTerminal{master: master, out: &cliLockedBuffer{}}
	go func() {
		b := make([]byte, 4096)
		for {
			n, err := master.Read(b)
			_, _ = term.out.Write(b[:n])
			if err != nil {
				return
			}
		}
	}()
	p := &cliProc{cmd: exec.Command("bash", "-c", script), stdout: term.out, stderr: term.out, done: make(chan struct{})}
	p.cmd.Stdin, p.cmd.Stdout, p.cmd.Stderr = tty, tty, tty
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	err = p.cmd.Start()
	tty.Close()
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = p.cmd.Wait()
		p.code = p.cmd.ProcessState.ExitCode()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	term.cliProc = p
	return term
}

// send types s at the terminal.
func (term *cliTerminal) send(t *testing.T, s string) {
	t.Helper()
	if _, err := term.master.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
}

// waitFor waits until the terminal shows s.
func (term *cliTerminal) waitFor(t *testing.T, s string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(term.out.String(), s) {
		if time.Now().After(deadline) {
			t.Fatalf("the terminal never showed %q; it shows:\n%s", s, term.out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// finish waits for the script to end.
func (term *cliTerminal) finish(t *testing.T) {
	t.Helper()
	select {
	case <-term.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("the script still runs after 30s; the terminal shows:\n%s", term.out)
	}
}

// `lease run` at a terminal: CMD can use the terminal as it would without
// baton, and the terminal is the shell's again once baton exited.
func TestLeaseRunAtATerminal(t *testing.T) {
	t.Parallel()
	bin := cliBuildBaton(t)
	env := newCLIEnv(t, cliEnvOptions{})
	alice := env.apiClient(t, env.alice)
	creds := []string{"BATON_SERVER=" + env.URL, "BATON_TOKEN=" + env.alice, "BATON=" + bin}

	t.Run("CMD reads the terminal", func(t *testing.T) {
		t.Parallel()
		const key = "issue:octo/demo#60"
		term := cliStartTerminal(t, creds, `"$BATON" lease run '`+key+`' -- sh -c 'echo ready; read x; echo "got $x"; exit 6'
echo "status $?"; read y; echo "shell read $y"`)
		term.waitFor(t, "ready")
		term.send(t, "hello\n")
		term.waitFor(t, "got hello")
		term.waitFor(t, "status 6")
		term.send(t, "again\n")
		term.waitFor(t, "shell read again")
		term.finish(t)
		if st, err := alice.CheckLease(context.Background(), key); err != nil || st.Locked {
			t.Errorf("the lease after the command: %+v, %v", st, err)
		}
	})

	t.Run("a pipeline reading the terminal keeps it", func(t *testing.T) {
		t.Parallel()
		const key = "issue:octo/demo#64"
		// A pager after baton reads the keyboard: CMD, whose output goes
		// to the pipe, does not take the terminal from it.
		term := cliStartTerminal(t, creds, `set -m
"$BATON" lease run '`+key+`' -- sh -c 'echo out; sleep 2; echo done' | sh -c 'sleep 1; echo asking; read k </dev/tty; echo "key $k"; cat'
echo "status $?"`)
		term.waitFor(t, "asking")
		term.send(t, "q\n")
		term.waitFor(t, "key q")
		term.waitFor(t, "status 0")
		term.finish(t)
	})

	t.Run("Ctrl-C reaches CMD once; baton exits with its status", func(t *testing.T) {
		t.Parallel()
		const key = "issue:octo/demo#61"
		term := cliStartTerminal(t, creds, `"$BATON" lease run '`+key+`' -- `+cliJobShell+` -c 'n=0; trap "n=\$((n+1))" INT; echo ready
i=0; while [ $n = 0 ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; sleep 1; echo "interrupts $n"
trap - INT; echo again; sleep 30'
echo "status $?"`)
		term.waitFor(t, "ready")
		term.send(t, "\x03")
		term.waitFor(t, "interrupts ")
		if !strings.Contains(term.out.String(), "interrupts 1") {
			t.Errorf("CMD got Ctrl-C other than once; the terminal shows:\n%s", term.out)
		}
		term.waitFor(t, "again")
		term.send(t, "\x03")
		term.waitFor(t, "status 130")
		term.finish(t)
		if st, err := alice.CheckLease(context.Background(), key); err != nil || st.Locked {
			t.Errorf("the lease after the command: %+v, %v", st, err)
		}
	})
}

// Ctrl-Z stops CMD with baton: CMD does not run while nobody renews the
// lease; on fg baton renews it before CMD goes on, and if the lease was
// lost meanwhile, CMD never runs again and baton exits 4.
func TestLeaseRunSuspended(t *testing.T) {
	t.Parallel()
	bin := cliBuildBaton(t)
	env := newCLIEnv(t, cliEnvOptions{})
	ctx := context.Background()
	alice := env.apiClient(t, env.alice)
	bob := env.apiClient(t, env.bob)
	creds := []string{"BATON_SERVER=" + env.URL, "BATON_TOKEN=" + env.alice, "BATON=" + bin}
	// The subtests run one after the other: the second moves the server's
	// clock.
	// A job-control shell, as a user's: Ctrl-Z gives it the terminal back.
	// CMD is bash, not sh (dash): see cliJobShell.
	script := func(key, ttl string) string {
		return `set -m
"$BATON" lease run '` + key + `' --ttl ` + ttl + ` --grace 2s -- ` + cliJobShell + ` -c 'echo "pid $$"
i=0; while [ $i -lt 30 ]; do echo "tick $i"; sleep 0.1; i=$((i+1)); done; echo finished'
echo "suspended $?"; read go; fg; echo "status $?"`
	}
	// suspend types Ctrl-Z once CMD ran a bit, and checks that CMD stays
	// stopped until until() (called once baton's job stopped).
	suspend := func(t *testing.T, term *cliTerminal, until func() time.Time) int {
		t.Helper()
		term.waitFor(t, "tick 3")
		pids := cliPIDs(t, strings.ReplaceAll(term.out.String(), "\r", ""))
		if len(pids) != 1 {
			t.Fatalf("the terminal shows:\n%s", term.out)
		}
		term.send(t, "\x1a")
		term.waitFor(t, "suspended 148")
		time.Sleep(time.Until(until()))
		_, after, _ := strings.Cut(term.out.String(), "suspended 148")
		if cliTick.MatchString(after) {
			t.Errorf("CMD ran while baton was stopped; the terminal shows:\n%s", term.out)
		}
		return pids[0]
	}

	t.Run("fg: the lease is renewed and CMD goes on", func(t *testing.T) {
		const key = "issue:octo/demo#62"
		// With --ttl 9s and --grace 2s, baton stops CMD 3s before the
		// lease may expire when no renewal got through: 6s after the
		// acquire. Suspended past that, CMD waits for a renewal on fg,
		// which has until the expiry. Counted from the acquire (the
		// proxy's time for it), not from the suspension: what comes
		// between, CMD's start and the Ctrl-Z, takes long on a loaded
		// machine, and would come out of the renewal's time.
		proxy := newCLILeaseProxy(t, env.URL)
		term := cliStartTerminal(t, []string{"BATON_SERVER=" + proxy.URL, "BATON_TOKEN=" + env.alice, "BATON=" + bin}, script(key, "9s"))
		suspend(t, term, func() time.Time { return proxy.acquiredAt().Add(6500 * time.Millisecond) })
		term.send(t, "go\n")
		term.waitFor(t, "status 0")
		if !strings.Contains(term.out.String(), "finished") {
			t.Errorf("the terminal shows:\n%s", term.out)
		}
		term.finish(t)
		if st, err := alice.CheckLease(ctx, key); err != nil || st.Locked {
			t.Errorf("the lease after the command: %+v, %v", st, err)
		}
	})

	t.Run("fg after the lease was lost: exit 4, CMD never runs again", func(t *testing.T) {
		const key = "issue:octo/demo#63"
		// Suspended past the lease's expiry (3s after the acquire), when
		// the server lets another take it.
		term := cliStartTerminal(t, creds, script(key, "3s"))
		pid := suspend(t, term, func() time.Time { return time.Now().Add(3500 * time.Millisecond) })
		env.clock.Advance(10 * time.Second)
		if _, err := bob.AcquireLease(ctx, key, "thief", time.Minute); err != nil {
			t.Fatal(err)
		}
		term.send(t, "go\n")
		term.waitFor(t, "status 4")
		_, after, _ := strings.Cut(term.out.String(), "suspended 148")
		if cliTick.MatchString(after) || !strings.Contains(after, "; stopping "+cliJobShell) {
			t.Errorf("the terminal shows:\n%s", term.out)
		}
		if cliAlive(pid) {
			t.Errorf("CMD (pid %d) still runs", pid)
		}
		term.finish(t)
		if st, _ := alice.CheckLease(ctx, key); st.Owner != "bob/thief" {
			t.Errorf("the new holder's lease was touched: %+v", st)
		}
	})
}

// With the terminal's tostop set, a process of a background group that
// writes to the terminal is stopped (SIGTTOU). While CMD has the terminal,
// baton and its guard are in the background: their messages must not stop
// them, or nobody renews the lease, or stops CMD in time.
func TestLeaseRunTerminalTostop(t *testing.T) {
	t.Parallel()
	bin := cliBuildBaton(t)
	env := newCLIEnv(t, cliEnvOptions{})
	const ttl = 6 * time.Second
	run := func(t *testing.T, key, setup string, during func(t *testing.T, proxy *cliLeaseProxy, term *cliTerminal)) *cliTerminal {
		proxy := newCLILeaseProxy(t, env.URL)
		term := cliStartTerminal(t, []string{"BATON_SERVER=" + proxy.URL, "BATON_TOKEN=" + env.alice, "BATON=" + bin}, setup+`; stty tostop
"$BATON" lease run '`+key+`' --ttl 6s --grace 1s -- sh -c 'trap "" TERM; echo "pid $$"; echo "guard $PPID"; while :; do sleep 0.05; done'
echo "status $?"`)
		term.waitFor(t, "guard ")
		time.Sleep(100 * time.Millisecond)
		pids := cliPIDs(t, strings.ReplaceAll(term.out.String(), "\r", ""))
		if len(pids) != 1 {
			t.Fatalf("the terminal shows:\n%s", term.out)
		}
		during(t, proxy, term)
		expiresAt := proxy.acquiredAt().Add(ttl)
		for cliAlive(pids[0]) {
			if time.Now().After(expiresAt) {
				psOut, _ := exec.Command("ps", "-eo", "pid,ppid,pgid,stat,wchan:20,cmd").Output()
				t.Fatalf("the command still runs when the lease may have expired; the terminal shows:\n%s\n%s", term.out, psOut)
			}
			time.Sleep(10 * time.Millisecond)
		}
		return term
	}

	t.Run("baton's messages", func(t *testing.T) {
		t.Parallel()
		// A job-control shell: baton's job is not orphaned, so the
		// terminal would stop it.
		term := run(t, "issue:octo/demo#65", "set -m", func(t *testing.T, proxy *cliLeaseProxy, _ *cliTerminal) {
			proxy.failRenewals.Store(true)
		})
		term.waitFor(t, "status 4")
		if out := term.out.String(); !strings.Contains(out, "renewing") || strings.Contains(out, "Stopped") {
			t.Errorf("the terminal shows:\n%s", out)
		}
		term.finish(t)
	})

	t.Run("the guard's messages", func(t *testing.T) {
		t.Parallel()
		// baton is stopped (and renews nothing): the guard stops CMD and
		// says so.
		var baton int
		term := run(t, "issue:octo/demo#66", "true", func(t *testing.T, _ *cliLeaseProxy, term *cliTerminal) {
			_, after, _ := strings.Cut(term.out.String(), "guard ")
			var guard int
			if _, err := fmt.Sscanf(after, "%d", &guard); err != nil {
				t.Fatal(err)
			}
			baton = cliParent(t, guard)
			if err := syscall.Kill(baton, syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
		})
		if err := syscall.Kill(baton, syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		term.waitFor(t, "status 4")
		term.finish(t)
	})
}

// cliParent is the parent of process pid.
func cliParent(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	var ppid int
	if i := strings.LastIndexByte(s, ')'); i < 0 {
		t.Fatalf("/proc/%d/stat: %q", pid, s)
	} else if _, err := fmt.Sscanf(s[i+2:], "%c %d", new(rune), &ppid); err != nil {
		t.Fatalf("/proc/%d/stat: %q: %v", pid, s, err)
	}
	return ppid
}

// Ctrl-Z stops CMD's leader, but a process of its group that ignores
// SIGTSTP goes on: nothing stops it when baton is stopped with the job. So
// that nothing of CMD runs once the lease may expire short of a renewal,
// the guard stops the whole group (SIGSTOP) at the deadline baton would
// have stopped CMD at, and continues it on fg once the lease was renewed.
func TestLeaseRunSuspendedStopsTheGroup(t *testing.T) {
	t.Parallel()
	bin := cliBuildBaton(t)
	env := newCLIEnv(t, cliEnvOptions{})
	marks := t.TempDir() + "/marks"
	creds := []string{"BATON_SERVER=" + env.URL, "BATON_TOKEN=" + env.alice, "BATON=" + bin, "MARKS=" + marks}
	// With --ttl 12s and --grace 2s, CMD is stopped 4s before the lease
	// may expire when no renewal got through: 8s after the acquire.
	term := cliStartTerminal(t, creds, `set -m
"$BATON" lease run 'issue:octo/demo#67' --ttl 12s --grace 2s -- `+cliJobShell+` -c 'echo "pid $$"
(trap "" TSTP; while :; do echo x >>"$MARKS"; sleep 0.05; done) &
i=0; while [ $i -lt 30 ]; do echo "tick $i"; sleep 0.1; i=$((i+1)); done; kill $!; echo finished'
echo "suspended $?"; read go; fg; echo "status $?"`)
	term.waitFor(t, "pid ")
	started := time.Now() // after the acquire
	term.waitFor(t, "tick 3")
	term.send(t, "\x1a")
	term.waitFor(t, "suspended 148")
	marksNow := func() int {
		b, _ := os.ReadFile(marks)
		return strings.Count(string(b), "x")
	}
	if n := marksNow(); n == 0 {
		t.Fatalf("the process ignoring SIGTSTP never ran; the terminal shows:\n%s", term.out)
	}
	time.Sleep(time.Until(started.Add(9 * time.Second)))
	before := marksNow()
	time.Sleep(time.Second) // the lease may expire 12s after the acquire
	if after := marksNow(); after != before {
		t.Errorf("a process of CMD's group ran past baton's deadline while baton was stopped (%d marks, then %d)", before, after)
	}
	term.send(t, "go\n")
	term.waitFor(t, "status 0")
	if !strings.Contains(term.out.String(), "finished") {
		t.Errorf("the terminal shows:\n%s", term.out)
	}
	term.finish(t)
}

// cliStopped tells whether the process is stopped (by a signal).
func cliStopped(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] == 'T'
}

// Run at a terminal with its output elsewhere, CMD is not lent the
// terminal: reading it, CMD stops (SIGTTIN) for good, and would hold the
// lease so. Ctrl-C still ends it: a signal baton passes on reaches a
// stopped CMD too.
func TestLeaseRunCtrlCReachesAStoppedCMD(t *testing.T) {
	t.Parallel()
	bin := cliBuildBaton(t)
	env := newCLIEnv(t, cliEnvOptions{})
	const key = "issue:octo/demo#68"
	out := t.TempDir() + "/out"
	creds := []string{"BATON_SERVER=" + env.URL, "BATON_TOKEN=" + env.alice, "BATON=" + bin, "OUT=" + out}
	term := cliStartTerminal(t, creds, `"$BATON" lease run '`+key+`' -- sh -c 'echo "pid $$" >&2; read x; echo "got $x"' >"$OUT"
echo "status $?"`)
	term.waitFor(t, "pid ")
	pids := cliPIDs(t, strings.ReplaceAll(term.out.String(), "\r", ""))
	if len(pids) != 1 {
		t.Fatalf("the terminal shows:\n%s", term.out)
	}
	cliEventually(t, 30*time.Second, "the command to stop reading the terminal", func() bool { return cliStopped(pids[0]) })
	term.send(t, "\x03")
	term.waitFor(t, "status 130")
	term.finish(t)
	if st, err := env.apiClient(t, env.alice).CheckLease(context.Background(), key); err != nil || st.Locked {
		t.Errorf("the lease after the command: %+v, %v", st, err)
	}
}
