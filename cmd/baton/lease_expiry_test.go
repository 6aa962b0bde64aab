//go:build linux

package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// cliLeaseProxy stands between `lease run` and the server: it notes when
// it passed an acquire on, and answers renewals 503 once told to (a server
// away, as far as baton can tell).
type cliLeaseProxy struct {
	*httptest.Server
	down         atomic.Bool // every request gets its connection closed unanswered
	failRenewals atomic.Bool
	hangRenewals atomic.Bool  // renewals wait for their client to give up
	slowRenewals atomic.Int64 // renewals are passed on after this long (nanoseconds)
	hangAcquires atomic.Bool  // acquires wait for their client to give up
	muteAcquires atomic.Bool  // acquires are passed on, their answers kept until the client gives up
	mutedGrants  atomic.Int64 // acquires passed on and granted under muteAcquires
	acquires     atomic.Int64 // acquires received
	renewals     atomic.Int64 // renewals received
	mu           sync.Mutex
	acquired     time.Time // when the last acquire was passed on
}

func newCLILeaseProxy(t *testing.T, target string) *cliLeaseProxy {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	p := &cliLeaseProxy{}
	closing := make(chan struct{})
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p.down.Load() {
			if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
				conn.Close()
			}
			return
		}
		if strings.HasSuffix(r.URL.EscapedPath(), "/renew") {
			p.renewals.Add(1)
		}
		if strings.HasSuffix(r.URL.EscapedPath(), "/acquire") {
			p.acquires.Add(1)
		}
		switch {
		case strings.HasSuffix(r.URL.EscapedPath(), "/acquire") && p.hangAcquires.Load():
			_, _ = io.Copy(io.Discard, r.Body)
			select {
			case <-r.Context().Done():
			case <-closing:
			}
			return
		case strings.HasSuffix(r.URL.EscapedPath(), "/acquire") && p.muteAcquires.Load():
			// The server takes the acquire; its answer is lost on the way.
			rec := httptest.NewRecorder()
			rp.ServeHTTP(rec, r.WithContext(context.WithoutCancel(r.Context())))
			if rec.Code == http.StatusOK {
				p.mutedGrants.Add(1)
			}
			select {
			case <-r.Context().Done():
			case <-closing:
			}
			return
		case strings.HasSuffix(r.URL.EscapedPath(), "/renew") && p.hangRenewals.Load():
			// The body read, the server notices when the client hangs up.
			_, _ = io.Copy(io.Discard, r.Body)
			select {
			case <-r.Context().Done():
			case <-closing:
			}
			return
		case strings.HasSuffix(r.URL.EscapedPath(), "/renew") && p.failRenewals.Load():
			http.Error(w, "away", http.StatusServiceUnavailable)
			return
		case strings.HasSuffix(r.URL.EscapedPath(), "/renew") && p.slowRenewals.Load() > 0:
			select {
			case <-time.After(time.Duration(p.slowRenewals.Load())):
			case <-r.Context().Done():
				return
			case <-closing:
				return
			}
		case strings.HasSuffix(r.URL.EscapedPath(), "/acquire"):
			p.mu.Lock()
			p.acquired = time.Now()
			p.mu.Unlock()
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		close(closing)
		p.Close()
	})
	return p
}

// startBaton starts bin with args against the server behind the proxy,
// as the holder of token.
func (p *cliLeaseProxy) startBaton(t *testing.T, bin, token string, args ...string) *cliProc {
	t.Helper()
	return cliStartBaton(t, bin, []string{"BATON_SERVER=" + p.URL, "BATON_TOKEN=" + token}, args...)
}

func (p *cliLeaseProxy) acquiredAt() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.acquired
}

// When no renewal gets through, CMD (one that ignores SIGTERM, even) is
// stopped for good before the lease can expire on the server and another
// holder, baton's executor say, can take it: a lease run never overlaps
// the next holder.
func TestLeaseRunStopsCMDBeforeTheLeaseExpires(t *testing.T) {
	t.Parallel()
	bin := cliBuildBaton(t)
	env := newCLIEnv(t, cliEnvOptions{})
	proxy := newCLILeaseProxy(t, env.URL)
	const key, ttl = "issue:octo/demo#50", 6 * time.Second
	p := proxy.startBaton(t, bin, env.alice,
		"lease", "run", key, "--ttl", ttl.String(), "--grace", "1s", "--",
		"sh", "-c", `trap '' TERM; echo "pid $$"; while :; do sleep 0.05; done`)
	cliEventually(t, 30*time.Second, "the command to start", func() bool { return strings.Contains(p.stdout.String(), "pid ") })
	proxy.failRenewals.Store(true)
	pids := cliPIDs(t, p.stdout.String())
	if len(pids) != 1 {
		t.Fatalf("stdout %q", p.stdout)
	}
	// The server granted the lease after the proxy passed the acquire on:
	// it expires ttl after that at the earliest.
	expiresAt := proxy.acquiredAt().Add(ttl)
	for cliAlive(pids[0]) {
		if time.Now().After(expiresAt) {
			t.Fatalf("the command still runs when the lease may have expired (%s after the acquire); stderr: %s", ttl, p.stderr)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if code := p.wait(t, 30*time.Second); code != exitLeaseLost {
		t.Errorf("exit %d, want %d; stderr: %s", code, exitLeaseLost, p.stderr)
	}
}

// Renewals keep their pace when the server is slow to answer: each is
// asked a third of the TTL after the one before was asked, not after it
// was answered, so a slow answer does not eat into the next one's time.
// With a 15s TTL and --grace 1s the lease is stopped 3s before it may
// expire (12s after a renewal was sent); renewals that take 4.5s each must
// be sent 5s apart (each done 9.5s after the one before was sent: 2.5s to
// spare, for a loaded machine) and not 5s after the answer (14.5s: too
// late by 2s).
func TestLeaseRunRenewsOnTimeWhenTheServerIsSlow(t *testing.T) {
	t.Parallel()
	bin := cliBuildBaton(t)
	env := newCLIEnv(t, cliEnvOptions{})
	proxy := newCLILeaseProxy(t, env.URL)
	proxy.slowRenewals.Store(int64(4500 * time.Millisecond))
	const key = "issue:octo/demo#54"
	p := proxy.startBaton(t, bin, env.alice,
		"lease", "run", key, "--ttl", "15s", "--grace", "1s", "--", "sh", "-c", "sleep 18; echo done")
	if code := p.wait(t, 60*time.Second); code != 0 {
		t.Errorf("exit %d, want CMD's 0; stderr: %s", code, p.stderr)
	}
	if !strings.Contains(p.stdout.String(), "done") {
		t.Errorf("the command did not finish: stdout %q", p.stdout)
	}
	if n := proxy.renewals.Load(); n < 3 {
		t.Errorf("%d renewals in 18s of a 15s lease, want at least 3", n)
	}
}

// CMD exits while a renewal hangs on a server that does not answer: baton
// does not wait for that renewal, it releases the lease and exits.
func TestLeaseRunExitsWhileARenewalHangs(t *testing.T) {
	t.Parallel()
	bin := cliBuildBaton(t)
	env := newCLIEnv(t, cliEnvOptions{})
	proxy := newCLILeaseProxy(t, env.URL)
	proxy.hangRenewals.Store(true)
	const key = "issue:octo/demo#51"
	// The renewal starts 5s in (TTL/3) and would be waited for until 3s
	// before the lease may expire (--grace 1s and the 2s margin): 12s in.
	p := proxy.startBaton(t, bin, env.alice,
		"lease", "run", key, "--ttl", "15s", "--grace", "1s", "--", "sh", "-c", "sleep 6; echo done")
	cliEventually(t, 30*time.Second, "the command to end", func() bool { return strings.Contains(p.stdout.String(), "done") })
	ended := time.Now()
	if code := p.wait(t, 30*time.Second); code != 0 {
		t.Errorf("exit %d, want CMD's 0; stderr: %s", code, p.stderr)
	}
	if d := time.Since(ended); d > 2*time.Second {
		t.Errorf("baton exited %s after the command", d)
	}
	if proxy.renewals.Load() == 0 {
		t.Error("no renewal was in flight")
	}
	if st, err := env.apiClient(t, env.alice).CheckLease(context.Background(), key); err != nil || st.Locked {
		t.Errorf("the lease after the command: %+v, %v", st, err)
	}
	if strings.Contains(p.stderr.String(), "renewing") {
		t.Errorf("stderr: %s", p.stderr)
	}
}

// Ctrl-C (SIGINT) while the server is slow to answer the acquire stops
// baton at once, as it stops a wait for the lease: CMD never runs. (The
// client's own timeout is over a minute.)
func TestLeaseRunStopsOnASignalWhileAcquiring(t *testing.T) {
	t.Parallel()
	bin := cliBuildBaton(t)
	env := newCLIEnv(t, cliEnvOptions{})
	proxy := newCLILeaseProxy(t, env.URL)
	proxy.hangAcquires.Store(true)
	const key = "issue:octo/demo#55"
	p := proxy.startBaton(t, bin, env.alice,
		"lease", "run", key, "--", "sh", "-c", "echo ran")
	cliEventually(t, 30*time.Second, "the acquire to reach the server", func() bool { return proxy.acquires.Load() > 0 })
	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 5*time.Second); code != 128+int(syscall.SIGINT) || p.stdout.String() != "" {
		t.Errorf("exit %d, stdout %q, want %d and nothing; stderr: %s", code, p.stdout, 128+int(syscall.SIGINT), p.stderr)
	}
	if !strings.Contains(p.stderr.String(), "interrupt while taking the lease") {
		t.Errorf("stderr: %s", p.stderr)
	}
}

// A signal that cuts short an acquire the server granted all the same
// (its answer lost on the way, or not yet sent) leaves no lease behind:
// the lease is held under an owner unique to this run, which baton finds
// and gives back. Another run would otherwise find the lease held for the
// whole TTL by a run that is gone.
func TestLeaseRunSignalWhileAcquiringReleasesAGrantUnanswered(t *testing.T) {
	t.Parallel()
	bin := cliBuildBaton(t)
	env := newCLIEnv(t, cliEnvOptions{})
	proxy := newCLILeaseProxy(t, env.URL)
	proxy.muteAcquires.Store(true)
	const key = "issue:octo/demo#57"
	p := proxy.startBaton(t, bin, env.alice,
		"lease", "run", key, "--ttl", "10m", "--", "sh", "-c", "echo ran")
	cliEventually(t, 30*time.Second, "the server to grant the lease", func() bool { return proxy.mutedGrants.Load() > 0 })
	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 10*time.Second); code != 128+int(syscall.SIGINT) || p.stdout.String() != "" {
		t.Errorf("exit %d, stdout %q, want %d and nothing; stderr: %s", code, p.stdout, 128+int(syscall.SIGINT), p.stderr)
	}
	if st, err := env.apiClient(t, env.alice).CheckLease(context.Background(), key); err != nil || st.Locked {
		t.Errorf("the lease after baton stopped: %+v, %v; want it free", st, err)
	}
	// With an --owner of the caller's choosing, another run may hold the
	// lease under it: baton leaves a lease it cannot tell from that one.
	g, err := env.apiClient(t, env.alice).AcquireLease(context.Background(), key, "deploy", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	proxy.muteAcquires.Store(false)
	proxy.hangAcquires.Store(true)
	before := proxy.acquires.Load()
	p = proxy.startBaton(t, bin, env.alice,
		"lease", "run", key, "--owner", "deploy", "--", "sh", "-c", "echo ran")
	cliEventually(t, 30*time.Second, "the acquire to reach the proxy", func() bool { return proxy.acquires.Load() > before })
	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 10*time.Second); code != 128+int(syscall.SIGINT) {
		t.Errorf("exit %d, want %d; stderr: %s", code, 128+int(syscall.SIGINT), p.stderr)
	}
	if st, err := env.apiClient(t, env.alice).CheckLease(context.Background(), key); err != nil || !st.Locked || st.Token != g.Token {
		t.Errorf("another run's lease under the same --owner: %+v, %v; want it still held (token %d)", st, err, g.Token)
	}
}

// With a server that answers nothing at all, baton looks for a lease to
// give back for a few seconds at most after a signal, and a second signal
// stops it at once.
func TestLeaseRunSecondSignalSkipsTheGiveBack(t *testing.T) {
	t.Parallel()
	bin := cliBuildBaton(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var accepted atomic.Int64
	go func() {
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			conns = append(conns, c) // read nothing, answer nothing
		}
	}()
	for _, second := range []bool{false, true} {
		before := accepted.Load()
		p := cliStartBaton(t, bin, []string{"BATON_SERVER=http://" + ln.Addr().String(), "BATON_TOKEN=baton_x"},
			"lease", "run", "issue:octo/demo#58", "--", "sh", "-c", "echo ran")
		cliEventually(t, 30*time.Second, "the acquire to be sent", func() bool { return accepted.Load() > before })
		time.Sleep(100 * time.Millisecond)
		if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		limit := 6 * time.Second
		if second {
			time.Sleep(200 * time.Millisecond)
			if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
				t.Fatal(err)
			}
			limit = time.Second
		}
		start := time.Now()
		if code := p.wait(t, 30*time.Second); code != 128+int(syscall.SIGINT) || time.Since(start) > limit {
			t.Errorf("second signal %t: exit %d after %s, want %d within %s; stderr: %s", second, code,
				time.Since(start).Round(time.Millisecond), 128+int(syscall.SIGINT), limit, p.stderr)
		}
	}
}

// With --wait, a server that does not answer for a moment (restarting,
// say) is waited for too: baton says so and tries again, and takes the
// lease once the server is back.
func TestLeaseRunWaitsForTheServer(t *testing.T) {
	t.Parallel()
	bin := cliBuildBaton(t)
	env := newCLIEnv(t, cliEnvOptions{})
	proxy := newCLILeaseProxy(t, env.URL)
	proxy.down.Store(true)
	const key = "issue:octo/demo#52"
	p := proxy.startBaton(t, bin, env.alice,
		"lease", "run", key, "--wait", "--poll", "50ms", "--", "sh", "-c", "echo ran")
	cliEventually(t, 30*time.Second, "baton to say it waits", func() bool {
		select {
		case <-p.done:
			return true
		default:
			return strings.Contains(p.stderr.String(), "waiting for "+key)
		}
	})
	time.Sleep(300 * time.Millisecond)
	proxy.down.Store(false)
	if code := p.wait(t, 30*time.Second); code != 0 || p.stdout.String() != "ran\n" {
		t.Errorf("exit %d, stdout %q; stderr: %s", code, p.stdout, p.stderr)
	}
	if st, err := env.apiClient(t, env.alice).CheckLease(context.Background(), key); err != nil || st.Locked {
		t.Errorf("the lease after the command: %+v, %v", st, err)
	}
}

// baton stopped (SIGSTOP, a debugger, Ctrl-Z of a job whose terminal CMD
// does not have) renews nothing: CMD is still stopped for good before the
// lease may expire, by the guard, and baton, continued, exits 4.
func TestLeaseRunStopsCMDWhenBatonIsStopped(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the guard runs on Linux only")
	}
	t.Parallel()
	bin := cliBuildBaton(t)
	env := newCLIEnv(t, cliEnvOptions{})
	proxy := newCLILeaseProxy(t, env.URL)
	const key, ttl = "issue:octo/demo#53", 3 * time.Second
	// With --grace 200ms, the guard stops CMD 950ms before the lease may
	// expire (leaseStopLead), and kills it 750ms before. (With a --grace
	// of TTL/3, no time is left for the clocks: CMD's SIGKILL would be due
	// when the lease may expire.)
	p := proxy.startBaton(t, bin, env.alice,
		"lease", "run", key, "--ttl", ttl.String(), "--grace", "200ms", "--",
		"sh", "-c", `trap '' TERM; echo "pid $$"; while :; do sleep 0.05; done`)
	cliEventually(t, 30*time.Second, "the command to start", func() bool { return strings.Contains(p.stdout.String(), "pid ") })
	pids := cliPIDs(t, p.stdout.String())
	if len(pids) != 1 {
		t.Fatalf("stdout %q", p.stdout)
	}
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	expiresAt := proxy.acquiredAt().Add(ttl)
	for cliAlive(pids[0]) {
		if time.Now().After(expiresAt) {
			_ = p.cmd.Process.Signal(syscall.SIGCONT)
			t.Fatalf("the command still runs when the lease may have expired (%s after the acquire); stderr: %s", ttl, p.stderr)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 30*time.Second); code != exitLeaseLost {
		t.Errorf("exit %d, want %d; stderr: %s", code, exitLeaseLost, p.stderr)
	}
	// Still ours on the server (its clock has not moved): given back.
	if st, err := env.coord.Check(context.Background(), key); err != nil || st.Locked {
		t.Errorf("lease after the exit = %+v, %v; want released", st, err)
	}
}
