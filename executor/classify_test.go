package executor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bradleyfalzon/ghinstallation/v2"
	"github.com/google/go-github/v62/github"
)

func resp(status int, headers ...string) *http.Response {
	h := http.Header{}
	h.Set("X-GitHub-Request-Id", "REQ-1")
	for i := 0; i+1 < len(headers); i += 2 {
		h.Set(headers[i], headers[i+1])
	}
	return &http.Response{StatusCode: status, Status: fmt.Sprintf("%d %s", status, http.StatusText(status)), Header: h}
}

// withBody gives r a body (ghinstallation leaves a failed exchange's body
// open for its caller).
func withBody(r *http.Response, body string) *http.Response {
	r.Body = io.NopCloser(strings.NewReader(body))
	return r
}

// syntheticResp is the response go-github makes up when it refuses to
// send a request.
func syntheticResp() *http.Response {
	return &http.Response{Status: http.StatusText(http.StatusForbidden), StatusCode: http.StatusForbidden, Header: make(http.Header)}
}

func errResp(status int, msg string, headers ...string) error {
	return &github.ErrorResponse{Response: resp(status, headers...), Message: msg}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

func TestClassify(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	reset := now.Add(90 * time.Second)
	secs := func(d time.Duration) *time.Duration { return &d }
	urlErr := func(err error) error { return &url.Error{Op: "Put", URL: "https://api.github.com/x", Err: err} }
	cases := []struct {
		name      string
		err       error
		category  string
		retryable bool
		ambiguous bool
		pause     bool
		wait      time.Duration
		status    int
	}{
		{"primary RateLimitError with reset", &github.RateLimitError{Rate: github.Rate{Reset: github.Timestamp{Time: reset}}, Response: resp(403)},
			CategoryPrimaryRateLimit, true, false, true, 90*time.Second + ResetMargin, 403},
		// go-github's own refusals carry a made-up 403 without headers
		// (checkRateLimitBeforeDo, checkSecondaryRateLimitBeforeDo).
		{"primary RateLimitError synthetic (not sent)", &github.RateLimitError{Rate: github.Rate{Reset: github.Timestamp{Time: now.Add(5 * time.Minute)}},
			Response: syntheticResp(), Message: "API rate limit of 5000 still exceeded until 2026-03-01 12:05:00 +0000 UTC, not making remote request."},
			CategoryPrimaryRateLimit, true, false, true, 5*time.Minute + ResetMargin, 0},
		{"secondary AbuseRateLimitError synthetic (not sent)", &github.AbuseRateLimitError{Response: syntheticResp(), RetryAfter: secs(40 * time.Second),
			Message: "API secondary rate limit exceeded until 2026-03-01 12:00:40 +0000 UTC, not making remote request."},
			CategorySecondaryRateLimit, true, false, true, 40 * time.Second, 0},
		{"secondary AbuseRateLimitError with Retry-After", &github.AbuseRateLimitError{Response: resp(403, "Retry-After", "90"), RetryAfter: secs(90 * time.Second)},
			CategorySecondaryRateLimit, true, false, true, 90 * time.Second, 403},
		{"secondary AbuseRateLimitError without Retry-After", &github.AbuseRateLimitError{Response: resp(403)},
			CategorySecondaryRateLimit, true, false, true, DefaultSecondaryWait, 403},
		// go-github takes X-RateLimit-Reset, which GitHub sends on every
		// answer, for the wait when Retry-After is absent: with primary
		// budget left it is not the secondary limit's end.
		{"secondary AbuseRateLimitError, reset with budget left", &github.AbuseRateLimitError{
			Response:   resp(403, "X-Ratelimit-Remaining", "4000", "X-Ratelimit-Reset", strconv.FormatInt(now.Add(50*time.Minute).Unix(), 10)),
			RetryAfter: secs(50 * time.Minute)},
			CategorySecondaryRateLimit, true, false, true, DefaultSecondaryWait, 403},
		{"secondary AbuseRateLimitError, reset with no budget left", &github.AbuseRateLimitError{
			Response:   resp(403, "X-Ratelimit-Remaining", "0", "X-Ratelimit-Reset", strconv.FormatInt(reset.Unix(), 10)),
			RetryAfter: secs(90 * time.Second)},
			CategorySecondaryRateLimit, true, false, true, 90*time.Second + ResetMargin, 403},
		{"secondary by message only", errResp(403, "You have exceeded a secondary rate limit and have been temporarily blocked"),
			CategorySecondaryRateLimit, true, false, true, DefaultSecondaryWait, 403},
		{"secondary by message with Retry-After", errResp(403, "You have exceeded a secondary rate limit", "Retry-After", "7"),
			CategorySecondaryRateLimit, true, false, true, 7 * time.Second, 403},
		{"429 with Retry-After", errResp(429, "Too Many Requests", "Retry-After", "2"),
			CategoryRateLimited, true, false, true, 2 * time.Second, 429},
		{"429 without Retry-After", errResp(429, "Too Many Requests"),
			CategoryRateLimited, true, false, true, DefaultSecondaryWait, 429},
		{"429 primary (remaining 0, reset)", errResp(429, "API rate limit exceeded", "X-Ratelimit-Remaining", "0", "X-Ratelimit-Reset", strconv.FormatInt(reset.Unix(), 10)),
			CategoryPrimaryRateLimit, true, false, true, 90*time.Second + ResetMargin, 429},
		{"AcceptedError", &github.AcceptedError{}, CategoryServerError, true, true, false, 0, 202},
		{"500", errResp(500, "Server Error"), CategoryServerError, true, true, false, 0, 500},
		{"502", errResp(502, ""), CategoryServerError, true, true, false, 0, 502},
		{"503 with Retry-After", errResp(503, "", "Retry-After", "3"), CategoryServerError, true, true, false, 3 * time.Second, 503},
		{"400", errResp(400, "Problems parsing JSON"), CategoryValidation, false, false, false, 0, 400},
		{"401", errResp(401, "Bad credentials"), CategoryUnauthorized, true, false, false, 0, 401},
		{"403 plain", errResp(403, "Resource not accessible by integration"), CategoryForbidden, false, false, false, 0, 403},
		{"451 repository blocked", errResp(451, "Repository access blocked"), CategoryForbidden, false, false, false, 0, 451},
		{"404", errResp(404, "Not Found"), CategoryNotFound, false, false, false, 0, 404},
		{"405 not mergeable", errResp(405, "Pull Request is not mergeable"), CategoryValidation, false, false, false, 0, 405},
		{"409 stale sha", errResp(409, "Head branch was modified"), CategoryConflict, false, false, false, 0, 409},
		{"422", errResp(422, "Validation Failed"), CategoryValidation, false, false, false, 0, 422},
		{"TwoFactorAuthError", (*github.TwoFactorAuthError)(&github.ErrorResponse{Response: resp(401)}), CategoryUnauthorized, false, false, false, 0, 401},
		{"connection reset", urlErr(&net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}),
			CategoryNetwork, true, true, false, 0, 0},
		{"connection refused (not sent)", urlErr(&net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}),
			CategoryNetwork, true, false, false, 0, 0},
		{"EOF after sending", urlErr(io.EOF), CategoryNetwork, true, true, false, 0, 0},
		{"unexpected EOF", urlErr(io.ErrUnexpectedEOF), CategoryNetwork, true, true, false, 0, 0},
		{"client timeout", urlErr(timeoutErr{}), CategoryTimeout, true, true, false, 0, 0},
		{"context deadline", fmt.Errorf("call: %w", context.DeadlineExceeded), CategoryTimeout, true, true, false, 0, 0},
		{"context canceled", urlErr(context.Canceled), CategoryCancelled, false, false, false, 0, 0},
		{"installation token 404 (removed)", &ghinstallation.HTTPError{Message: "x", Response: resp(404)},
			CategoryInstallationUnavailable, false, false, false, 0, 404},
		{"installation token 403 (suspended)", &ghinstallation.HTTPError{Message: "x", Response: resp(403)},
			CategoryInstallationUnavailable, false, false, false, 0, 403},
		{"installation token 429", &ghinstallation.HTTPError{Message: "x", Response: resp(429, "Retry-After", "5")},
			CategoryRateLimited, true, false, true, 5 * time.Second, 429},
		{"installation token 429 without Retry-After", &ghinstallation.HTTPError{Message: "x", Response: resp(429)},
			CategoryRateLimited, true, false, true, DefaultSecondaryWait, 429},
		{"403 suspended (token issued before)", errResp(403, "This installation has been suspended"),
			CategoryInstallationUnavailable, false, false, false, 0, 403},
		// A token exchange refused for a rate limit: wait and retry, it is
		// not the installation going away.
		{"installation token 403 primary limit", &ghinstallation.HTTPError{Message: "x",
			Response: resp(403, "X-Ratelimit-Remaining", "0", "X-Ratelimit-Reset", strconv.FormatInt(reset.Unix(), 10))},
			CategoryPrimaryRateLimit, true, false, true, 90*time.Second + ResetMargin, 403},
		{"installation token 429 primary limit", &ghinstallation.HTTPError{Message: "x",
			Response: resp(429, "X-Ratelimit-Remaining", "0", "X-Ratelimit-Reset", strconv.FormatInt(reset.Unix(), 10))},
			CategoryPrimaryRateLimit, true, false, true, 90*time.Second + ResetMargin, 429},
		{"installation token 403 secondary limit (body)", &ghinstallation.HTTPError{Message: "x",
			Response: withBody(resp(403), `{"message":"You have exceeded a secondary rate limit. Please wait a few minutes before you try again.","documentation_url":"https://docs.github.com/rest/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits"}`)},
			CategorySecondaryRateLimit, true, false, true, DefaultSecondaryWait, 403},
		{"installation token 403 secondary limit (Retry-After)", &ghinstallation.HTTPError{Message: "x", Response: resp(403, "Retry-After", "7")},
			CategorySecondaryRateLimit, true, false, true, 7 * time.Second, 403},
		{"installation token 403 other body", &ghinstallation.HTTPError{Message: "x",
			Response: withBody(resp(403), `{"message":"This installation has been suspended"}`)},
			CategoryInstallationUnavailable, false, false, false, 0, 403},
		{"installation token 500", &ghinstallation.HTTPError{Message: "x", Response: resp(500)},
			CategoryServerError, true, false, false, 0, 500},
		// The exchange got no answer: the call it was for was never sent,
		// so nothing can have been applied (NotSent, not ambiguous).
		{"installation token network", &ghinstallation.HTTPError{Message: "x", RootCause: urlErr(io.EOF)},
			CategoryNetwork, true, false, false, 0, 0},
		{"something else", errors.New("boom"), CategoryInternal, false, false, false, 0, 0},
		// The request that spent the last of the budget, refused for
		// another reason: go-github makes it a RateLimitError.
		{"403 for another reason with the budget spent", &github.RateLimitError{Rate: github.Rate{Reset: github.Timestamp{Time: reset}},
			Response: resp(403, "X-Ratelimit-Remaining", "0"), Message: "Resource not accessible by integration"},
			CategoryForbidden, false, false, false, 0, 403},
		{"403 suspended with the budget spent", &github.RateLimitError{Rate: github.Rate{Reset: github.Timestamp{Time: reset}},
			Response: resp(403, "X-Ratelimit-Remaining", "0"), Message: "This installation has been suspended"},
			CategoryInstallationUnavailable, false, false, false, 0, 403},
		{"secondary limit with the budget spent, Retry-After after the reset", &github.RateLimitError{Rate: github.Rate{Reset: github.Timestamp{Time: now.Add(10 * time.Second)}},
			Response: resp(403, "X-Ratelimit-Remaining", "0", "Retry-After", "120"), Message: "You have exceeded a secondary rate limit."},
			CategorySecondaryRateLimit, true, false, true, 120 * time.Second, 403},
		{"installation token 403 suspended with the App's budget spent", &ghinstallation.HTTPError{Message: "x",
			Response: withBody(resp(403, "X-Ratelimit-Remaining", "0", "X-Ratelimit-Reset", strconv.FormatInt(reset.Unix(), 10)),
				`{"message":"This installation has been suspended","documentation_url":"https://docs.github.com/rest/apps/apps#create-an-installation-access-token-for-an-app"}`)},
			CategoryInstallationUnavailable, false, false, false, 0, 403},
		{"primary RateLimitError with GitHub's message", &github.RateLimitError{Rate: github.Rate{Reset: github.Timestamp{Time: reset}},
			Response: resp(403, "X-Ratelimit-Remaining", "0"), Message: "API rate limit exceeded for installation ID 1."},
			CategoryPrimaryRateLimit, true, false, true, 90*time.Second + ResetMargin, 403},
	}
	for _, c := range cases {
		got := Classify(c.err, now)
		if again := Classify(c.err, now); again != got {
			t.Errorf("%s: classified twice: %+v then %+v", c.name, got, again)
		}
		if got.Category != c.category || got.Retryable != c.retryable || got.Ambiguous != c.ambiguous ||
			got.PauseInstallation != c.pause || got.Wait != c.wait || got.Status != c.status {
			t.Errorf("%s: got %+v\nwant category=%s retryable=%v ambiguous=%v pause=%v wait=%v status=%d",
				c.name, got, c.category, c.retryable, c.ambiguous, c.pause, c.wait, c.status)
		}
	}
	for _, err := range []error{cases[1].err, cases[2].err} {
		if cl := Classify(err, now); !cl.NotSent || cl.RequestID != "" {
			t.Errorf("go-github refusal %v: %+v", err, cl)
		}
	}
	for _, c := range cases {
		// A failed token exchange sent nothing of the call it was for.
		if (c.name == "installation token 500" || c.name == "installation token network") && !Classify(c.err, now).NotSent {
			t.Errorf("%s: not NotSent", c.name)
		}
	}
	for _, err := range []error{cases[0].err, cases[3].err, errResp(429, "")} {
		if Classify(err, now).NotSent {
			t.Errorf("%v: NotSent for an answer from GitHub", err)
		}
	}
	if Classify(errResp(500, ""), now).RequestID != "REQ-1" {
		t.Error("request ID not kept")
	}
}

// A wait GitHub imposes is read without overflow and bounded by
// MaxProviderWait: a Retry-After or reset far away (a reset in
// milliseconds from a proxy, a corrupt header) must not pause an
// installation and park its operations for centuries. Retry-After may
// also be an HTTP-date.
func TestClassifyBoundsProviderWaits(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	far := now.AddDate(300, 0, 0) // beyond what a time.Duration holds
	secs := func(d time.Duration) *time.Duration { return &d }
	// What go-github makes of "Retry-After: 10000000000": seconds times
	// time.Second, which overflows.
	n := int64(10000000000)
	overflowed := time.Duration(n) * time.Second
	cases := []struct {
		name string
		err  error
		wait time.Duration
	}{
		{"429 Retry-After of centuries", errResp(429, "", "Retry-After", "9000000000"), MaxProviderWait},
		{"429 Retry-After overflowing a Duration", errResp(429, "", "Retry-After", "10000000000"), MaxProviderWait},
		{"429 Retry-After overflowing int64", errResp(429, "", "Retry-After", "99999999999999999999"), MaxProviderWait},
		{"503 Retry-After of centuries", errResp(503, "", "Retry-After", "9000000000"), MaxProviderWait},
		{"429 primary, reset in milliseconds", errResp(429, "", "X-Ratelimit-Remaining", "0",
			"X-Ratelimit-Reset", strconv.FormatInt(now.Add(time.Minute).UnixMilli(), 10)), MaxProviderWait},
		{"RateLimitError with a reset centuries away", &github.RateLimitError{Rate: github.Rate{Reset: github.Timestamp{Time: far}}, Response: resp(403)},
			MaxProviderWait},
		{"AbuseRateLimitError whose Retry-After go-github overflowed", &github.AbuseRateLimitError{
			Response: resp(403, "Retry-After", "10000000000"), RetryAfter: &overflowed}, MaxProviderWait},
		{"AbuseRateLimitError synthetic, centuries", &github.AbuseRateLimitError{Response: syntheticResp(),
			RetryAfter: secs(far.Sub(now)), Message: "not making remote request."}, MaxProviderWait},
		{"installation token 429 Retry-After of centuries", &ghinstallation.HTTPError{Message: "x", Response: resp(429, "Retry-After", "9000000000")},
			MaxProviderWait},
		{"429 Retry-After as an HTTP-date", errResp(429, "", "Retry-After", now.Add(2*time.Minute).Format(http.TimeFormat)), 2 * time.Minute},
		{"429 Retry-After as an HTTP-date in the past", errResp(429, "", "Retry-After", now.Add(-time.Minute).Format(http.TimeFormat)),
			DefaultSecondaryWait},
		{"503 Retry-After negative", errResp(503, "", "Retry-After", "-5"), 0},
	}
	for _, c := range cases {
		if got := Classify(c.err, now).Wait; got != c.wait {
			t.Errorf("%s: wait %v, want %v", c.name, got, c.wait)
		}
	}
}

// A rate-limit reset is a time on GitHub's clock. It is measured from the
// answer's Date, GitHub's clock too, so that this machine's clock being
// off does not change the wait: ahead of GitHub's by two minutes, it took
// a reset 30 s away for one already past and waited a second, spending
// the operation's attempts on requests GitHub refused again; behind, it
// paused the installation minutes too long.
func TestClassifyMeasuresResetsOnGitHubsClock(t *testing.T) {
	t.Parallel()
	github0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC) // GitHub's clock when it answered
	reset := github0.Add(30 * time.Second)
	date := github0.Format(http.TimeFormat)
	resetHdr := strconv.FormatInt(reset.Unix(), 10)
	for _, skew := range []time.Duration{2 * time.Minute, -5 * time.Minute} {
		now := github0.Add(skew) // this machine's clock
		untilByOurClock := reset.Sub(now)
		cases := []struct {
			name string
			err  error
			wait time.Duration
		}{
			{"RateLimitError", &github.RateLimitError{Rate: github.Rate{Reset: github.Timestamp{Time: reset}},
				Response: resp(403, "Date", date, "X-Ratelimit-Remaining", "0", "X-Ratelimit-Reset", resetHdr)}, 30*time.Second + ResetMargin},
			{"429 primary", errResp(429, "", "Date", date, "X-Ratelimit-Remaining", "0", "X-Ratelimit-Reset", resetHdr), 30*time.Second + ResetMargin},
			{"installation token 403 primary", &ghinstallation.HTTPError{Message: "x",
				Response: resp(403, "Date", date, "X-Ratelimit-Remaining", "0", "X-Ratelimit-Reset", resetHdr)}, 30*time.Second + ResetMargin},
			// GitHub names a secondary limit's end by a reset instead of
			// Retry-After when no primary budget is left; go-github
			// measures it by this machine's clock.
			{"secondary limit with a reset", &github.AbuseRateLimitError{RetryAfter: &untilByOurClock,
				Response: resp(403, "Date", date, "X-Ratelimit-Remaining", "0", "X-Ratelimit-Reset", resetHdr)}, 30*time.Second + ResetMargin},
			{"429 Retry-After as an HTTP-date", errResp(429, "", "Date", date, "Retry-After", reset.Format(http.TimeFormat)), 30 * time.Second},
			// go-github's own refusal has no Date: it refuses by this
			// machine's clock, so the wait is measured by it.
			{"RateLimitError synthetic", &github.RateLimitError{Rate: github.Rate{Reset: github.Timestamp{Time: reset}},
				Response: syntheticResp(), Message: "not making remote request."}, max(untilByOurClock+ResetMargin, time.Second)},
		}
		for _, c := range cases {
			if got := Classify(c.err, now).Wait; got != c.wait {
				t.Errorf("clock off by %v: %s: wait %v, want %v", skew, c.name, got, c.wait)
			}
		}
	}
}
