package ghsim

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-github/v62/github"
)

func TestPrimaryLimit(t *testing.T) {
	t.Parallel()
	for _, status := range []int{http.StatusForbidden, http.StatusTooManyRequests} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			t.Parallel()
			clk := newClock()
			e := seeded(t, Config{Now: clk.Now, Limits: Limits{PrimaryLimit: 3, PrimaryStatus: status}})
			c := ctx(t)
			cl := e.client(1)
			for i := range 3 {
				_, resp, err := cl.Issues.Get(c, "octo", "demo", 10)
				if err != nil {
					t.Fatal(err)
				}
				if resp.Rate.Limit != 3 || resp.Rate.Remaining != 2-i || resp.Header.Get("X-RateLimit-Used") != strconv.Itoa(i+1) {
					t.Errorf("request %d: rate %+v used %s", i, resp.Rate, resp.Header.Get("X-RateLimit-Used"))
				}
			}
			// go-github refuses to send once it saw remaining 0: a fresh client.
			_, resp, err := e.client(1).Issues.Get(c, "octo", "demo", 10)
			wantStatus(t, err, status)
			if resp.Header.Get("X-RateLimit-Remaining") != "0" || !strings.Contains(fmt.Sprint(err), "API rate limit exceeded for installation ID 1.") {
				t.Errorf("over the limit: %v, remaining %q", err, resp.Header.Get("X-RateLimit-Remaining"))
			}
			var rl *github.RateLimitError
			if status == http.StatusForbidden && !errors.As(err, &rl) {
				t.Errorf("go-github did not see a RateLimitError: %T", err)
			}
			if resp.Rate.Reset.Time.Sub(clk.Now()) > time.Hour || resp.Rate.Reset.Time.Before(clk.Now()) {
				t.Errorf("reset %v is not within the hour", resp.Rate.Reset)
			}
			clk.Advance(time.Hour)
			_, resp, err = e.client(1).Issues.Get(c, "octo", "demo", 10)
			if err != nil {
				t.Fatalf("after the window: %v", err)
			}
			// The Date comes from the simulator's clock, as the reset
			// does: baton measures the one against the other.
			if d, err := http.ParseTime(resp.Header.Get("Date")); err != nil || !d.Equal(clk.Now().Truncate(time.Second)) {
				t.Errorf("Date %q, want the simulator's clock %v", resp.Header.Get("Date"), clk.Now())
			}
		})
	}
}

func TestSecondaryLimit(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		retryAfter time.Duration
		want       string
	}{
		"without Retry-After": {0, ""},
		"fixed Retry-After":   {90 * time.Second, "90"},
		"auto Retry-After":    {RetryAfterAuto, "60"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			clk := newClock()
			e := seeded(t, Config{Now: clk.Now, Limits: Limits{SecondaryLimit: 5, SecondaryRetryAfter: tc.retryAfter}})
			if _, err := e.sim.AddRepo("acme", "widgets", 2); err != nil {
				t.Fatal(err)
			}
			if _, err := e.sim.AddIssue("acme", "widgets", NewIssue{Title: "x"}); err != nil {
				t.Fatal(err)
			}
			c := ctx(t)
			cl := e.client(1)
			for i := range 5 {
				if _, _, err := cl.Issues.CreateComment(c, "octo", "demo", 10, &github.IssueComment{Body: ptr(fmt.Sprint(i))}); err != nil {
					t.Fatalf("request %d: %v", i, err)
				}
			}
			// Reads are not content-creating.
			if _, _, err := cl.Issues.Get(c, "octo", "demo", 10); err != nil {
				t.Fatal(err)
			}
			// The refused request's operation lists 403 in GitHub's
			// description, so its answer is validated in full.
			if route, _ := e.spec.find("POST", "/repos/octo/demo/issues/10/comments"); route == nil || route.Operation.Responses.Status(http.StatusForbidden) == nil {
				t.Fatal("GitHub's description lists no 403 for creating a comment")
			}
			validated := e.validated.Load()
			_, resp, err := cl.Issues.CreateComment(c, "octo", "demo", 10, &github.IssueComment{Body: ptr("one too many")})
			wantStatus(t, err, http.StatusForbidden)
			if e.validated.Load() == validated {
				t.Error("the refusal was not validated")
			}
			var ab *github.AbuseRateLimitError
			if !errors.As(err, &ab) || !strings.HasPrefix(ab.Message, "You have exceeded a secondary rate limit") {
				t.Fatalf("go-github did not see an AbuseRateLimitError: %v", err)
			}
			if got := resp.Header.Get("Retry-After"); got != tc.want {
				t.Errorf("Retry-After = %q, want %q", got, tc.want)
			}
			// Labels count too (their description does not list 403: the
			// answer is checked as GitHub's basic error).
			_, _, err = e.client(1).Issues.AddLabelsToIssue(c, "octo", "demo", 10, []string{"x"})
			if !errors.As(err, &ab) {
				t.Errorf("labels over the limit: %v", err)
			}
			// Another installation is unaffected.
			if _, _, err := e.client(2).Issues.CreateComment(c, "acme", "widgets", 1, &github.IssueComment{Body: ptr("y")}); err != nil {
				t.Fatalf("other installation: %v", err)
			}
			if n := len(e.sim.Effects()); n != 6 {
				t.Errorf("%d effects, want 6 (the refused request applied nothing)", n)
			}
			clk.Advance(time.Minute)
			if _, _, err := e.client(1).Issues.CreateComment(c, "octo", "demo", 10, &github.IssueComment{Body: ptr("later")}); err != nil {
				t.Fatalf("after the window: %v", err)
			}
		})
	}
}

func TestSecondaryLimitSlidingWindow(t *testing.T) {
	t.Parallel()
	clk := newClock()
	var l limiter
	cfg, _ := Limits{SecondaryLimit: 2, SecondaryWindow: time.Second, SecondaryRetryAfter: RetryAfterAuto}.withDefaults()
	l.init(cfg)
	start := clk.Now()
	at := func(ms int) time.Time { return start.Add(time.Duration(ms) * time.Millisecond) }
	for _, step := range []struct {
		ms   int
		ok   bool
		wait time.Duration
	}{{0, true, 0}, {400, true, 0}, {900, false, 100 * time.Millisecond}, {1000, true, 0}, {1100, false, 300 * time.Millisecond}, {1400, true, 0}} {
		ok, wait, _ := l.takeSecondary(1, at(step.ms))
		if ok != step.ok || wait != step.wait {
			t.Errorf("at %dms: ok %v wait %v, want %v %v", step.ms, ok, wait, step.ok, step.wait)
		}
	}
}

func TestSetLimitsValidates(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	for _, l := range []Limits{{PrimaryStatus: 500}, {SecondaryLimit: -1}, {SecondaryRetryAfter: -5}} {
		if err := e.sim.SetLimits(l); !errors.Is(err, ErrInvalid) {
			t.Errorf("SetLimits(%+v) = %v", l, err)
		}
	}
	if _, err := New(Config{Limits: Limits{PrimaryStatus: 418}, PrivateKey: sharedKey(t)}); err == nil {
		t.Error("New accepted a bad primary status")
	}
}
