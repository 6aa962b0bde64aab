package main

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// cliLeaseProxy stands between `lease run` and the server: it notes when
// it passed an acquire on, and answers renewals 503 once told to (a server
// away, as far as baton can tell).
type cliLeaseProxy struct {
	*httptest.Server
	failRenewals atomic.Bool
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
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasSuffix(r.URL.EscapedPath(), "/renew") && p.failRenewals.Load():
			http.Error(w, "away", http.StatusServiceUnavailable)
			return
		case strings.HasSuffix(r.URL.EscapedPath(), "/acquire"):
			p.mu.Lock()
			p.acquired = time.Now()
			p.mu.Unlock()
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(p.Close)
	return p
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
	p := cliStartBaton(t, bin, []string{"BATON_SERVER=" + proxy.URL, "BATON_TOKEN=" + env.alice},
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
