package executor

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-github/v62/github"
)

// Edges of classification the main table leaves out: a primary limit
// without a reset waits the default minute (not the one second a zero
// reset would give, which would spend the attempts on refusals); a 429 that
// names both a reset and a longer Retry-After waits the longer; a
// Retry-After date already past imposes no wait (never a negative one);
// and a 401 asks for a new installation token.
func TestClassifyEdges(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	reset := strconv.FormatInt(now.Add(90*time.Second).Unix(), 10)
	cases := []struct {
		name     string
		err      error
		category string
		wait     time.Duration
	}{
		{"RateLimitError without a reset", &github.RateLimitError{Response: resp(403, "X-Ratelimit-Remaining", "0")},
			CategoryPrimaryRateLimit, DefaultSecondaryWait},
		{"429 primary, Retry-After longer than the reset", errResp(429, "API rate limit exceeded",
			"X-Ratelimit-Remaining", "0", "X-Ratelimit-Reset", reset, "Retry-After", "120"),
			CategoryPrimaryRateLimit, 120 * time.Second},
		{"429 primary, reset longer than Retry-After", errResp(429, "API rate limit exceeded",
			"X-Ratelimit-Remaining", "0", "X-Ratelimit-Reset", reset, "Retry-After", "30"),
			CategoryPrimaryRateLimit, 90*time.Second + ResetMargin},
		// GitHub's older wording of a secondary limit, with a
		// documentation_url go-github does not know.
		{"403 abuse detection by message only", errResp(403, "You have triggered an abuse detection mechanism. Please wait a few minutes before you try again."),
			CategorySecondaryRateLimit, DefaultSecondaryWait},
		{"503 Retry-After as a date already past", errResp(503, "", "Retry-After", now.Add(-time.Minute).Format(http.TimeFormat)),
			CategoryServerError, 0},
	}
	for _, c := range cases {
		got := Classify(c.err, now)
		if got.Category != c.category || got.Wait != c.wait || !got.Retryable {
			t.Errorf("%s: got %+v, want category %s, retryable, wait %v", c.name, got, c.category, c.wait)
		}
	}
	// go-github decodes a response body after the call: a body cut short
	// (the connection lost after GitHub answered) is a bare unexpected
	// EOF, not wrapped in a *url.Error. The request may have been applied.
	for _, err := range []error{io.ErrUnexpectedEOF, fmt.Errorf("decode: %w", io.ErrUnexpectedEOF)} {
		if cl := Classify(err, now); cl.Category != CategoryNetwork || !cl.Retryable || !cl.Ambiguous {
			t.Errorf("%v: %+v, want network, retryable, ambiguous", err, cl)
		}
	}
	if cl := Classify(errResp(401, "Bad credentials"), now); !cl.RenewToken || !cl.Retryable || cl.PauseInstallation {
		t.Errorf("401: %+v, want a retry with a new token", cl)
	}
	for _, err := range []error{errResp(403, "Resource not accessible by integration"), errResp(404, "Not Found"), errResp(500, "")} {
		if Classify(err, now).RenewToken {
			t.Errorf("%v: asks for a new token", err)
		}
	}
}
