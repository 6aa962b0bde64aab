package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/baton-dev/baton/app"
	"github.com/baton-dev/baton/app/client"
)

func TestMain(m *testing.M) {
	// `lease run` runs baton again as its guard on Linux: run in-process,
	// it runs this test binary, which must then act as baton.
	if len(os.Args) > 1 && os.Args[1] == leaseGuardCmd {
		os.Exit(run(os.Args[1:]))
	}
	code := m.Run()
	if cliBuilt.dir != "" {
		os.RemoveAll(cliBuilt.dir)
	}
	os.Exit(code)
}

// cliBuilt is the baton binary the tests built, once.
var cliBuilt struct {
	once     sync.Once
	dir, bin string
	err      error
}

// cliBuildBaton builds baton once for the tests that run it as a process.
func cliBuildBaton(t *testing.T) string {
	t.Helper()
	cliBuilt.once.Do(func() {
		if cliBuilt.dir, cliBuilt.err = os.MkdirTemp("", "baton-cli-test-"); cliBuilt.err != nil {
			return
		}
		cliBuilt.bin = filepath.Join(cliBuilt.dir, "baton")
		if out, err := exec.Command("go", "build", "-o", cliBuilt.bin, ".").CombinedOutput(); err != nil {
			cliBuilt.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if cliBuilt.err != nil {
		t.Fatal(cliBuilt.err)
	}
	return cliBuilt.bin
}

// --ttl is 1s–15m wherever it is taken, 0 included: the server would
// grant its own 60 s for 0 while `lease run` counted from 0 and stopped
// CMD at once.
func TestLeaseTTLBounds(t *testing.T) {
	t.Parallel()
	env := newCLIEnv(t, cliEnvOptions{})
	const key = "issue:octo/demo#30"
	for _, args := range [][]string{
		{"lease", "run", key, "--ttl", "0", "--", "true"},
		{"lease", "run", key, "--ttl", "16m", "--", "true"},
		{"lease", "run", key, "--ttl", "500ms", "--", "true"},
		{"lease", "acquire", key, "--ttl", "0"},
		{"lease", "acquire", key, "--ttl", "-1s"},
		{"lease", "renew", key, "--lease-token", "1", "--ttl", "0"},
		{"lease", "renew", key, "--lease-token", "1", "--ttl", "20m"},
	} {
		args = append(append(args[:2:2], "--server", env.URL, "--token", env.alice), args[2:]...)
		r := cliRun(t, "", args...)
		if r.code != 2 || !strings.Contains(r.stderr, "--ttl must be between 1s and 15m") {
			t.Errorf("baton %s: %+v", strings.Join(args, " "), r)
		}
	}
	if st, err := env.apiClient(t, env.alice).CheckLease(context.Background(), key); err != nil || st.Locked {
		t.Errorf("the lease after refused commands: %+v, %v", st, err)
	}
	// The bounds themselves are taken; run counts from the TTL it sent.
	// Each renewal of a 1s lease has a third of a second: on a loaded
	// machine one may miss it, and the lease is lost (exit 4). A run counting from another TTL fails
	// every time.
	for try := range 3 {
		r := cliRun(t, "", "lease", "run", fmt.Sprintf("issue:octo/demo#%d", 34+try), "--ttl", "1s",
			"--server", env.URL, "--token", env.alice, "--", "sh", "-c", "sleep 1.5; echo done")
		if r.code == exitLeaseLost && try < 2 {
			t.Logf("lease run --ttl 1s lost its lease, trying again: %+v", r)
			continue
		}
		if r.code != 0 || r.stdout != "done\n" {
			t.Errorf("lease run --ttl 1s: %+v", r)
		}
		break
	}
	if r := env.as(t, env.alice, "lease", "acquire", key, "--ttl", "15m", "--json"); r.code != 0 {
		t.Errorf("lease acquire --ttl 15m: %+v", r)
	}
}

// A CMD that exists but cannot be started (no "#!" line: ENOEXEC) is an
// error (exit 1) whether baton or, on Linux, its guard finds it out, and
// the lease is released.
func TestLeaseRunCannotStart(t *testing.T) {
	t.Parallel()
	env := newCLIEnv(t, cliEnvOptions{})
	const key = "issue:octo/demo#32"
	script := filepath.Join(t.TempDir(), "no-interpreter")
	if err := os.WriteFile(script, []byte("echo never\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	r := cliRun(t, "", "lease", "run", key, "--server", env.URL, "--token", env.alice, "--", script)
	if r.code != 1 || !strings.Contains(r.stderr, "start "+script) || r.stdout != "" {
		t.Errorf("lease run of a file that cannot be executed: %+v", r)
	}
	if st, err := env.apiClient(t, env.alice).CheckLease(context.Background(), key); err != nil || st.Locked {
		t.Errorf("the lease after CMD failed to start: %+v, %v", st, err)
	}
}

// lease run's help says what its code does: the default owner, no --json.
func TestLeaseRunHelp(t *testing.T) {
	t.Parallel()
	r := cliRun(t, "", "lease", "run", "--help")
	if r.code != 0 || !strings.Contains(r.stdout, "default USER@HOST:PID") || strings.Contains(r.stdout, "--json") ||
		!strings.Contains(r.stdout, "1s–15m") {
		t.Errorf("lease run --help:\n%s", r.stdout)
	}
	if r := cliRun(t, "", "lease", "run", "issue:octo/demo#31", "--json", "--", "true"); r.code != 2 {
		t.Errorf("lease run --json: %+v", r)
	}
	if r := cliRun(t, "", "lease", "acquire", "--help"); !strings.Contains(r.stdout, "default USER@HOST)") {
		t.Errorf("lease acquire --help:\n%s", r.stdout)
	}
}

// lease renew makes the lease expire --ttl from now, whatever TTL it was
// taken with: its help says so, rather than that it extends the lease (a
// 10m lease renewed without --ttl has a minute left).
func TestLeaseRenewHelp(t *testing.T) {
	t.Parallel()
	env := newCLIEnv(t, cliEnvOptions{})
	const key = "issue:octo/demo#39"
	r := env.as(t, env.alice, "lease", "acquire", key, "--ttl", "10m", "--json")
	var g client.LeaseGrant
	cliDecodeJSON(t, r.stdout, &g)
	if r := env.as(t, env.alice, "lease", "renew", key, "--lease-token", strconv.FormatInt(g.Token, 10)); r.code != 0 {
		t.Fatalf("lease renew: %+v", r)
	}
	st, err := env.apiClient(t, env.alice).CheckLease(context.Background(), key)
	if err != nil || !st.Locked || st.ExpiresIn() > time.Minute {
		t.Fatalf("a 10m lease renewed without --ttl: %+v, %v; want a minute left, as the help says", st, err)
	}
	r = cliRun(t, "", "lease", "renew", "--help")
	if r.code != 0 || strings.Contains(r.stdout, "Extend") || !strings.Contains(r.stdout, "--ttl 10m and renewed without --ttl\nhas a minute left") {
		t.Errorf("lease renew --help:\n%s", r.stdout)
	}
}

// A lease is held under its key's canonical spelling (the repository in
// lower case), whatever was typed: lease run exports that key to CMD, and
// release prints it, as acquire does.
func TestLeaseCanonicalKey(t *testing.T) {
	t.Parallel()
	env := newCLIEnv(t, cliEnvOptions{})
	const typed, key = "issue:OCTO/Demo#43", "issue:octo/demo#43"
	r := cliRun(t, "", "lease", "run", typed, "--server", env.URL, "--token", env.alice, "--", "sh", "-c", `echo "$BATON_LEASE_KEY"`)
	if r.code != 0 || r.stdout != key+"\n" {
		t.Errorf("lease run %s: BATON_LEASE_KEY: %+v, want %s", typed, r, key)
	}
	r = env.as(t, env.alice, "lease", "acquire", typed, "--json")
	var g client.LeaseGrant
	cliDecodeJSON(t, r.stdout, &g)
	if g.Key != key {
		t.Errorf("lease acquire %s: %+v", typed, r)
	}
	r = env.as(t, env.alice, "lease", "release", typed, "--lease-token", strconv.FormatInt(g.Token, 10), "--json")
	var rel struct {
		Key      string `json:"key"`
		Released bool   `json:"released"`
	}
	cliDecodeJSON(t, r.stdout, &rel)
	if rel.Key != key || !rel.Released {
		t.Errorf("lease release %s --json: %+v", typed, r)
	}
	r = env.as(t, env.alice, "lease", "release", typed, "--lease-token", strconv.FormatInt(g.Token, 10))
	if r.code != 1 || !strings.Contains(r.stderr, "lease_lost") {
		t.Errorf("a second release: %+v", r)
	}
}

// cliLockedBuffer is an io.Writer safe to read while a process writes to it.
type cliLockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *cliLockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *cliLockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// cliProc is a running baton binary.
type cliProc struct {
	cmd            *exec.Cmd
	stdout, stderr *cliLockedBuffer
	done           chan struct{}
	code           int
}

func cliStartBaton(t *testing.T, bin string, env []string, args ...string) *cliProc {
	t.Helper()
	p := &cliProc{cmd: exec.Command(bin, args...), stdout: &cliLockedBuffer{}, stderr: &cliLockedBuffer{}, done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	p.cmd.Env = append(os.Environ(), env...)
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		err := p.cmd.Wait()
		var ee *exec.ExitError
		switch {
		case err == nil:
		case errors.As(err, &ee):
			p.code = ee.ExitCode()
		default:
			p.code = -1
		}
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// wait waits for the process to exit and returns its exit status.
func (p *cliProc) wait(t *testing.T, within time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
		return p.code
	case <-time.After(within):
		t.Fatalf("baton still running after %s\nstdout: %s\nstderr: %s", within, p.stdout, p.stderr)
		return 0
	}
}

// cliEventually polls cond every 20 ms until it holds or within passes.
func cliEventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// `baton lease run`, as the built binary against a server on real parts
// whose lease coordinator runs on a fake clock.
func TestLeaseRun(t *testing.T) {
	t.Parallel()
	bin := cliBuildBaton(t)
	env := newCLIEnv(t, cliEnvOptions{})
	ctx := context.Background()
	bob := env.apiClient(t, env.bob)
	alice := env.apiClient(t, env.alice)
	creds := []string{"BATON_SERVER=" + env.URL, "BATON_TOKEN=" + env.alice}

	t.Run("held by another: exit 3", func(t *testing.T) {
		t.Parallel()
		const key = "issue:octo/demo#20"
		if _, err := bob.AcquireLease(ctx, key, "job", time.Minute); err != nil {
			t.Fatal(err)
		}
		p := cliStartBaton(t, bin, creds, "lease", "run", key, "--", "sh", "-c", "echo ran")
		if code := p.wait(t, 30*time.Second); code != 3 {
			t.Errorf("exit %d, want 3; stderr: %s", code, p.stderr)
		}
		if strings.Contains(p.stdout.String(), "ran") || !strings.Contains(p.stderr.String(), "held by bob/job") {
			t.Errorf("stdout %q, stderr %q", p.stdout, p.stderr)
		}
	})

	t.Run("--wait acquires once the holder releases; the lease is exported", func(t *testing.T) {
		t.Parallel()
		const key = "issue:octo/demo#21"
		g, err := bob.AcquireLease(ctx, key, "job", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		p := cliStartBaton(t, bin, creds, "lease", "run", key, "--wait", "--poll", "50ms", "--owner", "waiter", "--",
			"sh", "-c", `echo "$BATON_LEASE_KEY|$BATON_LEASE_OWNER|$BATON_LEASE_TOKEN"`)
		cliEventually(t, 30*time.Second, "baton to wait", func() bool { return strings.Contains(p.stderr.String(), "waiting for "+key) })
		if err := bob.ReleaseLease(ctx, key, "job", g.Token); err != nil {
			t.Fatal(err)
		}
		if code := p.wait(t, 30*time.Second); code != 0 {
			t.Fatalf("exit %d; stderr: %s", code, p.stderr)
		}
		parts := strings.Split(strings.TrimSpace(p.stdout.String()), "|")
		if len(parts) != 3 || parts[0] != key || parts[1] != "waiter" {
			t.Fatalf("the command saw %q", p.stdout)
		}
		if tok, err := strconv.ParseInt(parts[2], 10, 64); err != nil || tok <= g.Token {
			t.Errorf("BATON_LEASE_TOKEN=%s, want a token above the holder's %d", parts[2], g.Token)
		}
		if st, err := alice.CheckLease(ctx, key); err != nil || st.Locked {
			t.Errorf("after the command the lease is %+v, %v; want released", st, err)
		}
	})

	t.Run("a lost lease stops the command: exit 4", func(t *testing.T) {
		t.Parallel()
		const key = "issue:octo/demo#22"
		p := cliStartBaton(t, bin, creds, "lease", "run", key, "--ttl", "3s", "--owner", "runner", "--",
			"sh", "-c", `trap 'echo got-term; exit 0' TERM; echo started; while :; do sleep 0.05; done`)
		cliEventually(t, 30*time.Second, "the command to start", func() bool { return strings.Contains(p.stdout.String(), "started") })
		// The lease expires on the coordinator's clock and another holder
		// takes it; baton's next renewal (every second) is refused.
		env.clock.Advance(10 * time.Second)
		if _, err := bob.AcquireLease(ctx, key, "thief", time.Minute); err != nil {
			t.Fatal(err)
		}
		if code := p.wait(t, 30*time.Second); code != 4 {
			t.Errorf("exit %d, want 4; stderr: %s", code, p.stderr)
		}
		if !strings.Contains(p.stdout.String(), "got-term") || !strings.Contains(p.stderr.String(), "lost") {
			t.Errorf("stdout %q, stderr %q", p.stdout, p.stderr)
		}
		if st, _ := alice.CheckLease(ctx, key); st.Owner != "bob/thief" {
			t.Errorf("the new holder's lease was touched: %+v", st)
		}
	})

	t.Run("a renewal refused for good stops the command at once: exit 4", func(t *testing.T) {
		t.Parallel()
		const key = "issue:octo/demo#26"
		tok, rec, err := env.tokens.CreateToken(ctx, app.TokenSpec{Actor: "alice", Installations: []int64{1}})
		if err != nil {
			t.Fatal(err)
		}
		// Renewed every 10s; with no renewal through, the command would be
		// stopped 20s in, 10s before the lease may expire.
		p := cliStartBaton(t, bin, []string{"BATON_SERVER=" + env.URL, "BATON_TOKEN=" + tok}, "lease", "run", key, "--ttl", "30s", "--",
			"sh", "-c", `trap 'echo got-term; exit 0' TERM; echo started; while :; do sleep 0.05; done`)
		cliEventually(t, 30*time.Second, "the command to start", func() bool { return strings.Contains(p.stdout.String(), "started") })
		start := time.Now()
		if _, err := env.tokens.RevokeToken(ctx, rec.ID); err != nil {
			t.Fatal(err)
		}
		if code := p.wait(t, 60*time.Second); code != 4 {
			t.Errorf("exit %d, want 4; stderr: %s", code, p.stderr)
		}
		// Stopped at the first renewal (10s in), not when the lease nears
		// its expiry (20s in).
		if in := time.Since(start); in > 15*time.Second {
			t.Errorf("the command was stopped %s after the token was revoked; want at its next renewal", in.Round(time.Second))
		}
		if !strings.Contains(p.stdout.String(), "got-term") || !strings.Contains(p.stderr.String(), "refused") {
			t.Errorf("stdout %q, stderr %q", p.stdout, p.stderr)
		}
	})

	t.Run("the command's exit status; the lease is released", func(t *testing.T) {
		t.Parallel()
		const key = "issue:octo/demo#23"
		p := cliStartBaton(t, bin, creds, "lease", "run", key, "--", "sh", "-c", "exit 7")
		if code := p.wait(t, 30*time.Second); code != 7 {
			t.Errorf("exit %d, want 7; stderr: %s", code, p.stderr)
		}
		if st, err := alice.CheckLease(ctx, key); err != nil || st.Locked {
			t.Errorf("lease after the command: %+v, %v", st, err)
		}
	})

	t.Run("signals are passed on to the command", func(t *testing.T) {
		t.Parallel()
		const key = "issue:octo/demo#24"
		p := cliStartBaton(t, bin, creds, "lease", "run", key, "--",
			"sh", "-c", `trap 'exit 42' TERM; echo ready; while :; do sleep 0.05; done`)
		cliEventually(t, 30*time.Second, "the command to start", func() bool { return strings.Contains(p.stdout.String(), "ready") })
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if code := p.wait(t, 30*time.Second); code != 42 {
			t.Errorf("exit %d, want the command's 42; stderr: %s", code, p.stderr)
		}
		if st, err := alice.CheckLease(ctx, key); err != nil || st.Locked {
			t.Errorf("lease after the command: %+v, %v", st, err)
		}
	})

	t.Run("the lease is held in the coordinator operations use", func(t *testing.T) {
		t.Parallel()
		const key = "issue:octo/demo#25"
		p := cliStartBaton(t, bin, creds, "lease", "run", key, "--", "sh", "-c", `echo held; sleep 30`)
		cliEventually(t, 30*time.Second, "the command to start", func() bool { return strings.Contains(p.stdout.String(), "held") })
		st, err := alice.CheckLease(ctx, key)
		if err != nil || !st.Locked || !strings.HasPrefix(st.Owner, "alice/") {
			t.Errorf("lease while running: %+v, %v", st, err)
		}
		cst, err := env.coord.Check(ctx, key)
		if err != nil || !cst.Locked || cst.Token != st.Token {
			t.Errorf("the coordinator operations use sees %+v, %v", cst, err)
		}
		_ = p.cmd.Process.Signal(syscall.SIGINT)
		p.wait(t, 30*time.Second)
	})
}

// An owner that is blank, or begins or ends with a space, is refused
// before anything is asked of the server: "alice/   " would hold the lease
// under a name nobody can tell apart, and " job" is not "job" to renew.
func TestLeaseOwnerSpaces(t *testing.T) {
	t.Parallel()
	bin := cliBuildBaton(t)
	env := newCLIEnv(t, cliEnvOptions{})
	const key = "issue:octo/demo#33"
	for _, args := range [][]string{
		{"lease", "acquire", key, "--owner", "   "},
		{"lease", "acquire", key, "--owner", " job"},
		{"lease", "renew", key, "--lease-token", "1", "--owner", "job "},
		{"lease", "release", key, "--lease-token", "1", "--owner", "\t"},
		{"lease", "run", key, "--owner", "  ", "--", "true"},
	} {
		r := cliRun(t, "", append(append(args[:3:3], "--server", env.URL, "--token", env.alice), args[3:]...)...)
		if r.code != 2 || !strings.Contains(r.stderr, "--owner") {
			t.Errorf("baton %q: %+v", args, r)
		}
	}
	p := cliStartBaton(t, bin, []string{"BATON_SERVER=" + env.URL, "BATON_TOKEN=" + env.alice, "BATON_LEASE_OWNER=  "},
		"lease", "run", key, "--", "sh", "-c", "echo ran")
	if code := p.wait(t, 30*time.Second); code != 2 || p.stdout.String() != "" || !strings.Contains(p.stderr.String(), "BATON_LEASE_OWNER") {
		t.Errorf("BATON_LEASE_OWNER of spaces: exit %d, stdout %q, stderr %q", code, p.stdout, p.stderr)
	}
	if st, err := env.apiClient(t, env.alice).CheckLease(context.Background(), key); err != nil || st.Locked {
		t.Errorf("the lease after refused commands: %+v, %v", st, err)
	}
	// Spaces inside are the owner's own.
	if r := env.as(t, env.alice, "lease", "acquire", key, "--owner", "nightly job"); r.code != 0 {
		t.Errorf("lease acquire --owner 'nightly job': %+v", r)
	}
}

// --wait waits for a server that does not answer for the moment (refused,
// reset, 503), not for what no wait mends: a name that does not resolve, a
// certificate the client refuses, a URL scheme it does not take. Those
// fail at once instead of after a minute of retries.
func TestLeaseServerAwayOrMisconfigured(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tlsSrv := httptest.NewTLSServer(http.NotFoundHandler())
	t.Cleanup(tlsSrv.Close)
	get := func(u string) error {
		t.Helper()
		resp, err := http.Get(u) // the default client: it does not trust tlsSrv's certificate
		if err == nil {
			resp.Body.Close()
			t.Fatalf("GET %s answered", u)
		}
		return err
	}
	for _, c := range []struct {
		name string
		err  error
		away bool
	}{
		{"connection refused", get("http://127.0.0.1:1/"), true},
		{"503", &client.Error{Status: http.StatusServiceUnavailable}, true},
		{"404", &client.Error{Status: http.StatusNotFound}, false},
		{"certificate not trusted", get(tlsSrv.URL), false},
		{"scheme not taken", get("ftp://127.0.0.1/"), false},
		{"name not found", &url.Error{Op: "Post", URL: "http://baton.invalid/", Err: &net.OpError{Op: "dial", Net: "tcp",
			Err: &net.DNSError{Err: "no such host", Name: "baton.invalid", IsNotFound: true}}}, false},
		{"name server away", &url.Error{Op: "Post", URL: "http://baton.example/", Err: &net.OpError{Op: "dial", Net: "tcp",
			Err: &net.DNSError{Err: "i/o timeout", Name: "baton.example", IsTimeout: true}}}, true},
	} {
		if got := leaseServerAway(ctx, c.err); got != c.away {
			t.Errorf("%s (%v): away %v, want %v", c.name, c.err, got, c.away)
		}
	}
}
