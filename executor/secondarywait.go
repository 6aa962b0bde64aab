package executor

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// waitHeadersTransport sets the waits an answer names to what baton
// waits, before go-github reads them: go-github remembers a rate limit's
// end and refuses the installation's requests on its own until then, so a
// wait only Classify bounded would still hold the installation.
//
// It bounds Retry-After and x-ratelimit-reset to MaxProviderWait (from the
// answer's Date): a reset sent in milliseconds, or a Retry-After of
// years, would have go-github refuse every request for as long, each
// refusal sending the operation back to the queue without spending an
// attempt, until a restart. And it puts them on this machine's clock,
// which go-github refuses by (boundWaits).
//
// And it gives a secondary-rate-limit refusal that names no wait the wait
// GitHub documents for it.
//
// GitHub's rule for a secondary limit: wait for Retry-After when it is
// there; else, when x-ratelimit-remaining is 0, until x-ratelimit-reset;
// otherwise at least a minute. go-github (v62) takes x-ratelimit-reset
// whenever Retry-After is absent; but GitHub sends x-ratelimit-reset on
// every answer, as the reset of the primary budget's hour. go-github would
// then refuse every request of the installation on its own until that
// reset, up to an hour away, and baton would pause the installation as
// long. The transport adds "Retry-After: 60" (DefaultSecondaryWait) to
// such a refusal, so go-github and Classify both wait the minute.
type waitHeadersTransport struct{ next http.RoundTripper }

func (t waitHeadersTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	boundWaits(resp.Header, time.Now())
	if resp.StatusCode != http.StatusForbidden ||
		resp.Header.Get("Retry-After") != "" || resp.Header.Get("X-Ratelimit-Remaining") == "0" {
		return resp, err
	}
	if secondaryRefusal(resp) {
		resp.Header.Set("Retry-After", strconv.Itoa(int(DefaultSecondaryWait.Seconds())))
	}
	return resp, nil
}

// boundWaits caps Retry-After and x-ratelimit-reset at MaxProviderWait
// from the answer, and puts them on this machine's clock, the one
// go-github refuses by: x-ratelimit-reset (epoch seconds on GitHub's
// clock) becomes the same distance from now as it was from the answer's
// Date, a Retry-After given as an HTTP-date (which go-github does not
// read) becomes seconds, and Date becomes this machine's time of receipt,
// so that Classify, which measures from Date, reads them consistently.
// Both are in whole seconds: the reset is put as far from the new Date
// as it was from GitHub's, so that the wait Classify reads is the one
// GitHub named, not a second more. (A Date that cannot be read is left
// as it is: Classify measures from now then, and so does the reset.)
// (With this machine's clock behind GitHub's, go-github would otherwise
// refuse the installation's requests for as long again after a reset,
// each refusal sending the operation back to the queue until then.)
func boundWaits(h http.Header, now time.Time) {
	github := now
	date, dateErr := http.ParseTime(h.Get("Date"))
	if dateErr == nil {
		github = date
	}
	maxSecs := int64(MaxProviderWait / time.Second)
	if v := strings.TrimSpace(h.Get("Retry-After")); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		switch {
		case (err == nil && n > maxSecs) || (errors.Is(err, strconv.ErrRange) && n > 0):
			h.Set("Retry-After", strconv.FormatInt(maxSecs, 10))
		case err != nil:
			if t, err := http.ParseTime(v); err == nil {
				d := min(max(t.Sub(github), 0), MaxProviderWait)
				h.Set("Retry-After", strconv.FormatInt(int64((d+time.Second-1)/time.Second), 10))
			}
		}
	}
	if v := h.Get("X-Ratelimit-Reset"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if (err == nil || errors.Is(err, strconv.ErrRange)) && n > 0 {
			// Seconds from GitHub's now: compared in seconds, so that a
			// huge value does not overflow.
			secs := min(max(n-github.Unix(), -maxSecs), maxSecs)
			h.Set("X-Ratelimit-Reset", strconv.FormatInt(now.Unix()+secs, 10))
		}
	}
	if dateErr == nil {
		h.Set("Date", now.UTC().Format(http.TimeFormat))
	}
}

// secondaryRefusal reports whether a 403's body says a secondary rate
// limit, by its documentation_url (as go-github tells it) or its message.
// It reads at most 64 KiB of the body and puts back what it read, ahead
// of whatever of the body it did not read.
func secondaryRefusal(r *http.Response) bool {
	if r.Body == nil || r.Body == http.NoBody {
		return false
	}
	orig := r.Body
	b, err := io.ReadAll(io.LimitReader(orig, 64<<10))
	r.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(b), orig), orig}
	if err != nil {
		return false
	}
	var body struct {
		Message          string `json:"message"`
		DocumentationURL string `json:"documentation_url"`
	}
	if json.Unmarshal(b, &body) != nil {
		return false
	}
	return strings.HasSuffix(body.DocumentationURL, "secondary-rate-limits") ||
		strings.HasSuffix(body.DocumentationURL, "#abuse-rate-limits") || secondaryText(body.Message)
}
