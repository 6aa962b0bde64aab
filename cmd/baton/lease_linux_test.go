package main

import (
	"context"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// cliAlive tells whether process pid runs (a zombie does not).
func cliAlive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// cliPIDs reads the PIDs a command printed as "pid N" lines.
func cliPIDs(t *testing.T, out string) []int {
	t.Helper()
	var pids []int
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, "pid "); ok {
			pid, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("bad pid line %q", line)
			}
			pids = append(pids, pid)
			t.Cleanup(func() {
				// Only after a failure: the PID of a process seen gone may
				// be another's by now.
				if t.Failed() {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			})
		}
	}
	return pids
}

// Nothing CMD started outlives `lease run` on Linux: not what it left in
// the background when it exited, not CMD itself when baton is SIGKILLed.
func TestLeaseRunStopsWhatCMDStarted(t *testing.T) {
	t.Parallel()
	bin := cliBuildBaton(t)
	env := newCLIEnv(t, cliEnvOptions{})
	ctx := context.Background()
	alice := env.apiClient(t, env.alice)
	creds := []string{"BATON_SERVER=" + env.URL, "BATON_TOKEN=" + env.alice}

	t.Run("what CMD leaves running is stopped before the lease is released", func(t *testing.T) {
		t.Parallel()
		const key = "issue:octo/demo#40"
		p := cliStartBaton(t, bin, creds, "lease", "run", key, "--",
			"sh", "-c", `sleep 300 >/dev/null 2>&1 & echo "pid $!"; exit 5`)
		if code := p.wait(t, 30*time.Second); code != 5 {
			t.Fatalf("exit %d, want CMD's 5; stderr: %s", code, p.stderr)
		}
		pids := cliPIDs(t, p.stdout.String())
		if len(pids) != 1 {
			t.Fatalf("stdout %q", p.stdout)
		}
		if cliAlive(pids[0]) {
			t.Errorf("the background sleep (pid %d) still runs after lease run exited", pids[0])
		}
		if st, err := alice.CheckLease(ctx, key); err != nil || st.Locked {
			t.Errorf("lease after the command: %+v, %v", st, err)
		}
	})

	t.Run("baton killed with SIGKILL: CMD and what it started are stopped", func(t *testing.T) {
		t.Parallel()
		const key = "issue:octo/demo#41"
		p := cliStartBaton(t, bin, creds, "lease", "run", key, "--grace", "2s", "--",
			"sh", "-c", `sleep 300 >/dev/null 2>&1 & echo "pid $!"; echo "pid $$"; wait`)
		cliEventually(t, 30*time.Second, "the command to start", func() bool { return strings.Count(p.stdout.String(), "pid ") == 2 })
		pids := cliPIDs(t, p.stdout.String())
		if err := p.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		p.wait(t, 30*time.Second)
		for _, pid := range pids {
			cliEventually(t, 20*time.Second, "process "+strconv.Itoa(pid)+" to stop", func() bool { return !cliAlive(pid) })
		}
	})
}

// The guard knows the first deadline before it starts CMD: baton may be
// stopped (Ctrl-Z, SIGSTOP) right after starting it, before it can tell
// it anything, and CMD must still be stopped then, not run unbounded
// while nobody renews the lease.
func TestLeaseGuardKnowsTheFirstDeadline(t *testing.T) {
	t.Parallel()
	var out cliLockedBuffer
	deadline := time.Now().Add(time.Second)
	child, err := startLeaseChild([]string{"sh", "-c", `trap "" TERM; echo "pid $$"; while :; do sleep 0.05; done`},
		os.Environ(), nil, &out, &out, 500*time.Millisecond, deadline)
	if err != nil {
		t.Fatal(err)
	}
	// Nothing more is said to the guard, as when baton is stopped.
	exited := make(chan error, 1)
	go func() { exited <- child.cmd.Wait() }()
	t.Cleanup(func() {
		child.kill()
		child.close()
	})
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		cliPIDs(t, out.String()) // killed after the failure
		t.Fatalf("CMD still runs 9s after its deadline; it printed %q", out.String())
	}
	if since := time.Since(deadline); since < 0 {
		t.Errorf("CMD was stopped %s before its deadline", -since)
	}
	if !child.lapsed() {
		t.Errorf("the guard did not say it stopped CMD at the deadline; it printed %q", out.String())
	}
}
