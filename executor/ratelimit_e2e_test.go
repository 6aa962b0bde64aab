package executor

import (
	"cmp"
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/baton-dev/baton/app/ghsim"
	"github.com/baton-dev/baton/schema"
)

// After the installation's primary budget is spent, its operations wait
// for the reset and then go on. GitHub names the reset in whole seconds:
// a request sent at that very second could find the window not renewed
// yet and be refused again, which spent the attempt of an operation that
// had only one, and it failed with primary_rate_limit. baton sends again
// a second after the reset.
func TestPrimaryLimitResumesAfterItsReset(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	if err := s.sim.SetLimits(ghsim.Limits{PrimaryLimit: 1, PrimaryWindow: 3 * time.Second}); err != nil {
		t.Fatal(err)
	}
	first := s.submit(t, "spends-the-budget", schema.ActionComment, issue(10), `{"body":"one"}`)
	if got := s.await(t, first.OperationID, 10*time.Second); got.Status != schema.StatusSucceeded {
		t.Fatalf("first: %s %s", got.Status, got.LastErrorMessage)
	}
	second := s.submit(t, "waits-for-the-reset", schema.ActionComment, issue(10), `{"body":"two"}`,
		func(sub *schema.Submission) { sub.MaxAttempts = 1 })
	got := s.await(t, second.OperationID, 20*time.Second)
	if got.Status != schema.StatusSucceeded || got.Attempts != 1 {
		t.Fatalf("status=%s attempts=%d %s log=%+v", got.Status, got.Attempts, got.LastErrorMessage, got.AttemptLog)
	}
	for _, a := range got.AttemptLog {
		if a.HTTPStatus == 403 {
			t.Errorf("a request GitHub refused for the spent budget: %+v", a)
		}
	}
}

// The request that spends the last of the installation's budget can be
// refused for another reason: its 403 carries x-ratelimit-remaining 0,
// which go-github takes for the primary limit. The operation was parked
// until the reset, up to an hour, only to be refused again; it fails now
// with what GitHub said.
func TestForbiddenWithTheBudgetSpentFailsAtOnce(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	if err := s.sim.SetInstallationPermissions(1, map[string]string{"issues": "read", "metadata": "read"}); err != nil {
		t.Fatal(err)
	}
	if err := s.sim.SetLimits(ghsim.Limits{PrimaryLimit: 1}); err != nil {
		t.Fatal(err)
	}
	rec := s.submit(t, "not-permitted", schema.ActionComment, issue(10), `{"body":"x"}`)
	got := s.await(t, rec.OperationID, 10*time.Second)
	if got.Status != schema.StatusFailed || got.LastErrorCategory != CategoryForbidden || got.Attempts != 1 {
		t.Fatalf("status=%s category=%s attempts=%d log=%+v", got.Status, got.LastErrorCategory, got.Attempts, got.AttemptLog)
	}
}

// A secondary limit met with the primary budget spent too comes as a 403
// with x-ratelimit-remaining 0, which go-github takes for the primary
// limit. Its Retry-After (GitHub says to wait for it first) was ignored
// for the sooner reset, and the request sent again at the reset was
// refused again, spending the operation's last attempt.
func TestSecondaryLimitWithTheBudgetSpentWaitsItsRetryAfter(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var until time.Time
	front := func(t testing.TB, simURL string) string {
		u, _ := url.Parse(simURL)
		rp := httputil.NewSingleHostReverseProxy(u)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == "POST" && strings.HasSuffix(r.URL.Path, "/comments") {
				mu.Lock()
				now := time.Now()
				if until.IsZero() {
					until = now.Add(5 * time.Second)
				}
				refuse := now.Before(until)
				mu.Unlock()
				if refuse {
					w.Header().Set("X-RateLimit-Remaining", "0")
					w.Header().Set("X-RateLimit-Reset", strconv.FormatInt(now.Add(2*time.Second).Unix(), 10))
					w.Header().Set("Retry-After", "5")
					w.Header().Set("Content-Type", "application/json")
					w.WriteHeader(403)
					_, _ = w.Write([]byte(`{"message":"You have exceeded a secondary rate limit. Please wait a few minutes before you try again.","documentation_url":"https://docs.github.com/rest/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits"}`))
					return
				}
			}
			rp.ServeHTTP(w, r)
		}))
		t.Cleanup(srv.Close)
		return srv.URL
	}
	s := newStack(t, stackOptions{front: front})
	rec := s.submit(t, "k", schema.ActionComment, issue(10), `{"body":"x"}`, func(sub *schema.Submission) { sub.MaxAttempts = 2 })
	got := s.await(t, rec.OperationID, 20*time.Second)
	if got.Status != schema.StatusSucceeded {
		t.Fatalf("status=%s attempts=%d %s log=%+v", got.Status, got.Attempts, got.LastErrorMessage, got.AttemptLog)
	}
}

// go-github refuses the installation's requests on its own until the
// reset it last saw, by this machine's clock; GitHub names the reset on
// its own. With this machine's clock ten minutes behind GitHub's, a
// reset four seconds away held the installation for ten minutes more.
// The reset is put on this machine's clock before go-github reads it.
func TestPrimaryResetOnThisMachinesClock(t *testing.T) {
	t.Parallel()
	github := func() time.Time { return time.Now().Add(10 * time.Minute) }
	s := newStack(t, stackOptions{sim: ghsim.Config{Now: github, JWTNow: github}})
	if err := s.sim.SetLimits(ghsim.Limits{PrimaryLimit: 1, PrimaryWindow: 4 * time.Second}); err != nil {
		t.Fatal(err)
	}
	first := s.submit(t, "spends-the-budget", schema.ActionComment, issue(10), `{"body":"one"}`)
	if got := s.await(t, first.OperationID, 10*time.Second); got.Status != schema.StatusSucceeded {
		t.Fatalf("first: %s %s", got.Status, got.LastErrorMessage)
	}
	second := s.submit(t, "waits-for-the-reset", schema.ActionComment, issue(10), `{"body":"two"}`)
	deadline := time.Now().Add(15 * time.Second)
	for {
		got, err := s.store.Get(context.Background(), second.OperationID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status == schema.StatusSucceeded {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not done 15 s after a reset 4 s away: status=%s next attempt in %v log=%+v",
				got.Status, time.Until(*cmp.Or(got.NextAttemptAt, &deadline)), got.AttemptLog)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The installation-token exchange that spends the last of the App's own
// budget can be refused for another reason: a suspended installation's
// 403 then carries x-ratelimit-remaining 0 too. The operation waited for
// the App's reset, up to an hour, as if for a rate limit, only to be
// refused again; it fails now, its installation unavailable.
func TestExchangeRefusedWithTheBudgetSpentIsNotAWait(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	if err := s.sim.SuspendInstallation(1, true); err != nil {
		t.Fatal(err)
	}
	if err := s.sim.SetLimits(ghsim.Limits{PrimaryLimit: 1}); err != nil {
		t.Fatal(err)
	}
	rec := s.submit(t, "suspended", schema.ActionComment, issue(10), `{"body":"x"}`)
	got := s.await(t, rec.OperationID, 10*time.Second)
	if got.Status != schema.StatusFailed || got.LastErrorCategory != CategoryInstallationUnavailable {
		t.Fatalf("status=%s category=%s log=%+v", got.Status, got.LastErrorCategory, got.AttemptLog)
	}
	if a := got.AttemptLog[0]; a.HTTPStatus != 403 {
		t.Errorf("first call %+v", a)
	}
}

// A rate limit that pauses the whole installation says so, at Warn,
// naming the installation: every operation of it waits, which an operator
// should not have to piece together from the attempts logged at Info.
func TestInstallationPauseIsLogged(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zap.InfoLevel)
	s := newStack(t, stackOptions{logger: zap.New(core)})
	if err := s.sim.SetLimits(ghsim.Limits{PrimaryLimit: 1, PrimaryWindow: 3 * time.Second}); err != nil {
		t.Fatal(err)
	}
	first := s.submit(t, "spends-the-budget", schema.ActionComment, issue(10), `{"body":"one"}`)
	if got := s.await(t, first.OperationID, 10*time.Second); got.Status != schema.StatusSucceeded {
		t.Fatalf("first: %s %s", got.Status, got.LastErrorMessage)
	}
	second := s.submit(t, "waits-for-the-reset", schema.ActionComment, issue(11), `{"body":"two"}`)
	if got := s.await(t, second.OperationID, 20*time.Second); got.Status != schema.StatusSucceeded {
		t.Fatalf("second: %s %s", got.Status, got.LastErrorMessage)
	}
	paused := logs.FilterField(zap.String(LogEvent, "installation_paused")).All()
	if len(paused) != 1 {
		t.Fatalf("%d installation_paused lines, want 1: %+v", len(paused), paused)
	}
	e := paused[0]
	if e.Level != zap.WarnLevel || e.ContextMap()[LogInstallation] != int64(1) {
		t.Errorf("installation_paused at %s with %v, want Warn naming installation 1", e.Level, e.ContextMap())
	}
}
