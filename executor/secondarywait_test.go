package executor

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-github/v62/github"

	"github.com/baton-dev/baton/app/ghsim"
)

// A secondary limit that names no wait (no Retry-After) costs the
// installation a minute, as GitHub documents, not the time until the
// primary budget's x-ratelimit-reset, which every answer carries and which
// may be an hour away.
func TestSecondaryLimitWithoutRetryAfterWaitsAMinute(t *testing.T) {
	t.Parallel()
	_, gh := newSim(t, ghsim.Config{Limits: ghsim.Limits{SecondaryLimit: 1}})
	c := installationClient(t, gh)
	comment := func() (Classification, *github.Response) {
		body := "hello"
		_, resp, err := c.Issues.CreateComment(context.Background(), "octo", "demo", 10, &github.IssueComment{Body: &body})
		return Classify(err, time.Now()), resp
	}
	if cl, _ := comment(); cl.Category != "" {
		t.Fatalf("first comment: %+v", cl)
	}
	cl, resp := comment()
	if cl.Category != CategorySecondaryRateLimit || cl.NotSent {
		t.Fatalf("second comment: %+v, want a secondary limit from GitHub", cl)
	}
	if resp.Header.Get("X-Ratelimit-Reset") == "" {
		t.Fatal("the refusal carries no x-ratelimit-reset: the case this test is about is not met")
	}
	if cl.Wait != DefaultSecondaryWait || !cl.PauseInstallation {
		t.Errorf("secondary limit without Retry-After: wait %v (pause %v), want %v", cl.Wait, cl.PauseInstallation, DefaultSecondaryWait)
	}
	// go-github now refuses the installation's requests itself until the
	// wait it recorded: a minute at most, not the primary reset.
	cl, _ = comment()
	if !cl.NotSent || cl.Wait > DefaultSecondaryWait {
		t.Errorf("request after the limit: %+v, want a local refusal of at most %v", cl, DefaultSecondaryWait)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// A wait GitHub names beyond MaxProviderWait (a Retry-After of a year, a
// reset sent in milliseconds) is bounded before go-github reads it:
// go-github remembers the limit and refuses the installation's requests
// on its own until its end, which Classify's bound alone would not change.
func TestHugeWaitsBoundedBeforeGoGithub(t *testing.T) {
	t.Parallel()
	now := time.Now()
	for _, tc := range []struct {
		name    string
		status  int
		headers map[string]string
		body    string
	}{
		{"secondary limit, Retry-After of a year", 403, map[string]string{"Retry-After": "31536000", "X-Ratelimit-Remaining": "4000"},
			`{"message":"You have exceeded a secondary rate limit","documentation_url":"https://docs.github.com/rest/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits"}`},
		{"primary limit, reset in milliseconds", 403, map[string]string{"X-Ratelimit-Remaining": "0", "X-Ratelimit-Limit": "5000",
			"X-Ratelimit-Reset": strconv.FormatInt(now.Add(time.Minute).UnixMilli(), 10)},
			`{"message":"API rate limit exceeded","documentation_url":"https://docs.github.com/rest/overview/rate-limits-for-the-rest-api"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// A parallel subtest may start long after its parent: the
			// waits are put on the clock of when the answer arrives, so
			// they are measured from the subtest's own start.
			now := time.Now()
			date := now.UTC().Format(http.TimeFormat)
			var sent int
			c := github.NewClient(&http.Client{Transport: waitHeadersTransport{roundTripFunc(func(r *http.Request) (*http.Response, error) {
				sent++
				h := http.Header{"Date": {date}, "Content-Type": {"application/json"}}
				for k, v := range tc.headers {
					h.Set(k, v)
				}
				return &http.Response{StatusCode: tc.status, Status: strconv.Itoa(tc.status), Header: h, Request: r,
					Body: io.NopCloser(strings.NewReader(tc.body))}, nil
			})}})
			get := func() error {
				_, _, err := c.Issues.Get(context.Background(), "octo", "demo", 1)
				return err
			}
			if cl := Classify(get(), now); cl.Wait > MaxProviderWait || cl.Wait <= 0 {
				t.Fatalf("GitHub's refusal: %+v", cl)
			}
			err := get()
			if cl := Classify(err, now); !cl.NotSent || sent != 1 {
				t.Fatalf("second request: %+v (sent %d), want go-github's own refusal", cl, sent)
			}
			// How long go-github will go on refusing on its own (what
			// Classify makes of it is bounded in any case).
			var until time.Duration
			var rle *github.RateLimitError
			var are *github.AbuseRateLimitError
			switch {
			case errors.As(err, &rle):
				until = rle.Rate.Reset.Time.Sub(now)
			case errors.As(err, &are) && are.RetryAfter != nil:
				until = *are.RetryAfter
			default:
				t.Fatalf("second request: %v", err)
			}
			if until > MaxProviderWait+time.Minute {
				t.Errorf("go-github refuses on its own for %v, want at most about %v", until, MaxProviderWait)
			}
		})
	}
}

// The waits an answer names are put on this machine's clock before
// go-github reads them: a reset 30 s away on GitHub's clock is 30 s away
// on ours whatever the clocks say, a Retry-After given as an HTTP-date
// (which go-github does not read) becomes seconds, and Date becomes the
// time here, from which Classify measures.
func TestBoundWaitsPutsWaitsOnThisMachinesClock(t *testing.T) {
	t.Parallel()
	github0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, skew := range []time.Duration{-10 * time.Minute, 0, 3 * time.Minute} {
		now := github0.Add(skew)
		h := http.Header{}
		h.Set("Date", github0.Format(http.TimeFormat))
		h.Set("X-Ratelimit-Reset", strconv.FormatInt(github0.Add(30*time.Second).Unix(), 10))
		h.Set("Retry-After", github0.Add(45*time.Second).Format(http.TimeFormat))
		boundWaits(h, now)
		if got, want := h.Get("X-Ratelimit-Reset"), strconv.FormatInt(now.Add(30*time.Second).Unix(), 10); got != want {
			t.Errorf("clock off by %v: reset %s, want %s", skew, got, want)
		}
		if got := h.Get("Retry-After"); got != "45" {
			t.Errorf("clock off by %v: Retry-After %s, want 45", skew, got)
		}
		if got := h.Get("Date"); got != now.Format(http.TimeFormat) {
			t.Errorf("clock off by %v: Date %s, want %s", skew, got, now.Format(http.TimeFormat))
		}
		if w := resetWait(h, now); w != 30*time.Second+ResetMargin {
			t.Errorf("clock off by %v: Classify's wait %v", skew, w)
		}
	}
}

// An answer arrives at some fraction of a second: the reset put on this
// machine's clock is measured from the Date it is given (this machine's
// time in whole seconds), so the wait stays the reset plus ResetMargin.
// It was a second more, the reset rounded up past a Date rounded down.
func TestBoundWaitsAddsNoSecondToAReset(t *testing.T) {
	t.Parallel()
	github0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, frac := range []time.Duration{0, time.Millisecond, 600 * time.Millisecond, 999 * time.Millisecond} {
		for _, date := range []string{github0.Format(http.TimeFormat), "", "yesterday"} {
			now := github0.Add(frac)
			h := http.Header{}
			if date != "" {
				h.Set("Date", date)
			}
			h.Set("X-Ratelimit-Remaining", "0")
			h.Set("X-Ratelimit-Reset", strconv.FormatInt(github0.Add(30*time.Second).Unix(), 10))
			want := resetWait(h, now) // measured on the answer as GitHub gave it
			boundWaits(h, now)
			if w := resetWait(h, now); w != want {
				t.Errorf("answer at +%v with Date %q: wait %v after the rewrite, %v before", frac, date, w, want)
			}
		}
	}
}
