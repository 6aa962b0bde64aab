package executor

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// secondaryWaitTransport gives a secondary-rate-limit refusal that names
// no wait the wait GitHub documents for it, before go-github reads it.
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
type secondaryWaitTransport struct{ next http.RoundTripper }

func (t secondaryWaitTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if err != nil || resp.StatusCode != http.StatusForbidden ||
		resp.Header.Get("Retry-After") != "" || resp.Header.Get("X-Ratelimit-Remaining") == "0" {
		return resp, err
	}
	if secondaryRefusal(resp) {
		resp.Header.Set("Retry-After", strconv.Itoa(int(DefaultSecondaryWait.Seconds())))
	}
	return resp, nil
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
