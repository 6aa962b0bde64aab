package executor

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/bradleyfalzon/ghinstallation/v2"
	"github.com/google/go-github/v62/github"
)

// Error categories, recorded on attempts and records
// (lastErrorCategory) and logged as errorCategory.
const (
	CategoryNetwork                 = "network"
	CategoryTimeout                 = "timeout"
	CategoryServerError             = "server_error"
	CategoryRateLimited             = "rate_limited"
	CategorySecondaryRateLimit      = "secondary_rate_limit"
	CategoryPrimaryRateLimit        = "primary_rate_limit"
	CategoryValidation              = "validation"
	CategoryNotFound                = "not_found"
	CategoryUnauthorized            = "unauthorized"
	CategoryForbidden               = "forbidden"
	CategoryConflict                = "conflict"
	CategoryInstallationUnavailable = "installation_unavailable"
	CategoryCancelled               = "cancelled"
	CategoryInternal                = "internal"
)

// DefaultSecondaryWait is how long baton waits after a secondary rate
// limit that names no wait: GitHub asks integrators to wait at least a
// minute.
const DefaultSecondaryWait = 60 * time.Second

// MaxProviderWait bounds a wait GitHub imposes (Retry-After, a rate-limit
// reset). GitHub's primary window is an hour, so no honest reset is
// further away; a longer value (a reset in milliseconds from a proxy, a
// corrupt header) would pause the installation and park its operations
// for years. After an hour the request is simply sent again: if the limit
// still holds, it is refused, and the new refusal says how long to wait.
const MaxProviderWait = time.Hour

// ResetMargin is how long after a rate limit's reset baton sends again.
// GitHub names the reset in whole seconds and asks not to send until
// after it: a request sent at that very second can find the window not
// yet renewed and be refused again, spending an attempt (an operation of
// one attempt failed so). go-github's own wait for a reset, and GitHub's
// JavaScript client, add a second too.
const ResetMargin = time.Second

// Classification is what baton makes of one failed call to GitHub.
type Classification struct {
	// Category names the kind of failure (Category* constants).
	Category string
	// Retryable is true when another attempt may succeed.
	Retryable bool
	// Ambiguous is true when the request may have been applied even though
	// it failed (a timeout, a connection lost after sending, a 5xx): the
	// action probes its post-condition before mutating again.
	Ambiguous bool
	// Wait is the wait GitHub imposed (Retry-After, or until a rate-limit
	// reset); zero when it imposed none.
	Wait time.Duration
	// PauseInstallation is true when the wait applies to every request of
	// the installation, not only this operation's: GitHub refused the
	// request for a rate limit (categories rate_limited,
	// primary_rate_limit, secondary_rate_limit), so it was not applied.
	PauseInstallation bool
	// Status is the HTTP status, when there was a response.
	Status int
	// RequestID is GitHub's X-GitHub-Request-Id, when there was a response.
	RequestID string
	// RenewToken is true when GitHub refused the installation token (401
	// "Bad credentials") although the exchange had just issued it: a token
	// not yet usable everywhere at GitHub, or one this machine's clock,
	// behind GitHub's, still takes for valid. The installation's client is
	// dropped, so the next attempt asks for a new token.
	RenewToken bool
	// NotSent is true when the request never reached GitHub: go-github
	// refused it itself because a rate limit it saw earlier has not reset
	// yet, or the installation token it needed could not be had (the
	// exchange answered 5xx, or not at all). It was not applied: it
	// spends no attempt and owes no probe (see runner.attempt).
	NotSent bool
	// Message is a short description for the record, free of secrets.
	Message string
}

// Classify sorts a GitHub error into retryable or not, ambiguous or not,
// and finds any wait GitHub imposed. It is the only place baton decides
// these things. now is the clock rate-limit resets are measured against.
func Classify(err error, now time.Time) Classification {
	var (
		rle *github.RateLimitError
		are *github.AbuseRateLimitError
		ace *github.AcceptedError
		ere *github.ErrorResponse
		ghi *ghinstallation.HTTPError
		tfa *github.TwoFactorAuthError
	)
	var ae *actionError
	switch {
	case err == nil:
		return Classification{}
	case errors.As(err, &ae):
		return ae.c
	case errors.As(err, &ghi) && ghi.Response != nil:
		// Exchanging the App's JWT for an installation token failed: the
		// request it was for was never sent.
		c := Classification{Status: ghi.Response.StatusCode, RequestID: requestID(ghi.Response), Message: "installation token: " + ghi.Response.Status}
		h := ghi.Response.Header
		var msg string
		if ghi.Response.StatusCode == http.StatusForbidden {
			msg = exchangeMessage(ghi.Response)
		}
		switch s := ghi.Response.StatusCode; {
		case s == http.StatusForbidden && h.Get("X-Ratelimit-Remaining") == "0" && rateLimitText(msg):
			// The App's own budget (the JWT's) is spent: wait for the
			// reset, as for a 429 with the same header. No token was
			// issued, so nothing was applied. (The exchange that spent
			// the last of it can be refused for another reason, an
			// installation suspended: that is not a wait.)
			tooManyRequests(&c, h, now)
		case s == http.StatusForbidden && (h.Get("Retry-After") != "" || secondaryText(msg)):
			// A secondary rate limit met by the exchange.
			c.Category, c.Retryable, c.PauseInstallation = CategorySecondaryRateLimit, true, true
			c.Wait = retryAfter(h, now)
			if c.Wait <= 0 {
				c.Wait = DefaultSecondaryWait
			}
		case s == http.StatusNotFound || s == http.StatusForbidden || s == http.StatusUnauthorized:
			// Removed or suspended installation, or the App lost access.
			// The record says which, as far as GitHub does: its status
			// alone ("403 Forbidden") leaves the user guessing.
			c.Category = CategoryInstallationUnavailable
			if s == http.StatusNotFound {
				c.Message += " (the installation was removed, or the App cannot reach it)"
			} else if m := strings.TrimSpace(msg); m != "" && len(m) <= 200 && !strings.ContainsAny(m, "\n<") {
				c.Message += ": " + m
			}
		case s == http.StatusTooManyRequests:
			// The exchange met a rate limit of the installation: every
			// request of it waits, as for any other 429. No token was
			// issued, so nothing was applied.
			tooManyRequests(&c, ghi.Response.Header, now)
		case s >= 500:
			// Not ambiguous, unlike a 5xx to the call itself: the call was
			// not sent (NotSent: it spends no attempt, on a budget of its
			// own, see runner.attempt). (A rate limit met by the exchange
			// pauses the installation and is accounted as any other.)
			c.Category, c.Retryable, c.NotSent = CategoryServerError, true, true
			c.Wait = retryAfter(ghi.Response.Header, now)
		default:
			c.Category = CategoryUnauthorized
		}
		return c
	case errors.As(err, &ghi) && ghi.RootCause != nil:
		// The exchange got no answer (a network error, a timeout): the
		// request it was for was never sent, so it cannot have been
		// applied.
		c := Classify(ghi.RootCause, now)
		c.Ambiguous, c.NotSent = false, true
		c.Message = "installation token: " + c.Message
		return c
	case errors.As(err, &rle) && rle.Response != nil && !synthetic(rle.Response, rle.Message) && !rateLimitText(rle.Message):
		// go-github takes every 403 with x-ratelimit-remaining 0 for the
		// primary limit; but the request that spent the last of the
		// budget can be refused for another reason ("Resource not
		// accessible by integration"), which waiting for the reset would
		// not change: the operation would be parked for up to an hour
		// only to be refused again. It is what GitHub says it is. (The
		// budget is spent all the same: go-github refuses the
		// installation's next requests on its own, which pauses it.)
		return classifyResponse(&github.ErrorResponse{Response: rle.Response, Message: rle.Message}, now)
	case errors.As(err, &rle):
		// Primary rate limit: nothing more until the reset, for the whole
		// installation. go-github also returns this without sending when it
		// already knows the budget is spent.
		c := Classification{Category: CategoryPrimaryRateLimit, Retryable: true, PauseInstallation: true,
			Message: "primary rate limit exhausted"}
		c.Status, c.RequestID = respInfo(rle.Response)
		if synthetic(rle.Response, rle.Message) {
			c.Status, c.NotSent = 0, true
			c.Message += " (not sent)"
		}
		if !rle.Rate.Reset.Time.IsZero() {
			c.Wait = untilReset(rle.Rate.Reset.Time, header(rle.Response), now)
		} else {
			c.Wait = DefaultSecondaryWait
		}
		if !c.NotSent {
			// A secondary limit met with the budget spent as well: go-github
			// takes it for the primary one, but GitHub's Retry-After comes
			// first (GitHub's rule, and tooManyRequests's for a 429); a
			// reset sooner than it would be met by another refusal.
			c.Wait = max(c.Wait, retryAfter(rle.Response.Header, now))
			if secondaryText(rle.Message) {
				c.Category, c.Message = CategorySecondaryRateLimit, "secondary rate limit"
			}
		}
		return c
	case errors.As(err, &are):
		// Secondary rate limit. go-github also returns this, without
		// sending, until the Retry-After it last saw has passed.
		c := Classification{Category: CategorySecondaryRateLimit, Retryable: true, PauseInstallation: true,
			Message: "secondary rate limit"}
		c.Status, c.RequestID = respInfo(are.Response)
		if synthetic(are.Response, are.Message) {
			c.Status, c.NotSent = 0, true
			c.Message += " (not sent)"
		}
		// GitHub's answer is read from its own headers, by GitHub's rule
		// (secondaryWait): go-github overflows on a huge Retry-After,
		// measures a reset by this machine's clock, and takes the primary
		// budget's reset for the wait even with budget left. Its
		// RetryAfter is used only when it refused on its own: it is what
		// is left of the wait, by this machine's clock, which is the one
		// it refuses by.
		var w time.Duration
		if !c.NotSent {
			w = secondaryWait(are.Response.Header, now)
		} else if are.RetryAfter != nil && *are.RetryAfter > 0 {
			w = min(*are.RetryAfter, MaxProviderWait)
		}
		c.Wait = cmp.Or(w, DefaultSecondaryWait)
		return c
	case errors.As(err, &ace):
		// 202: GitHub accepted the request and works on it in the
		// background. The actions that can get one treat it as success
		// before it reaches here; anywhere else it is a success we cannot
		// confirm, so it is probed.
		return Classification{Category: CategoryServerError, Retryable: true, Ambiguous: true, Status: http.StatusAccepted,
			Message: "accepted for background processing"}
	case errors.As(err, &ere) && ere.Response != nil:
		return classifyResponse(ere, now)
	case errors.As(err, &tfa):
		return Classification{Category: CategoryUnauthorized, Status: http.StatusUnauthorized, Message: "two-factor authentication required"}

	case errors.Is(err, context.Canceled):
		return Classification{Category: CategoryCancelled, Message: "cancelled"}
	case errors.Is(err, context.DeadlineExceeded) || isTimeout(err):
		// The request may have reached GitHub and been applied.
		return Classification{Category: CategoryTimeout, Retryable: true, Ambiguous: true, Message: "request timed out"}
	case isNetwork(err):
		return Classification{Category: CategoryNetwork, Retryable: true, Ambiguous: !notSent(err), Message: networkMessage(err)}
	}
	return Classification{Category: CategoryInternal, Message: "unexpected error"}
}

func classifyResponse(ere *github.ErrorResponse, now time.Time) Classification {
	r := ere.Response
	c := Classification{Status: r.StatusCode, RequestID: requestID(r), Message: shortMessage(r.StatusCode, withDetails(ere))}
	switch s := r.StatusCode; {
	case s == http.StatusTooManyRequests:
		// go-github does not turn a 429 into a rate-limit error.
		tooManyRequests(&c, r.Header, now)
	case s == http.StatusForbidden && secondaryText(ere.Message):
		// A secondary limit whose documentation_url go-github did not
		// recognise.
		c.Category, c.Retryable, c.PauseInstallation = CategorySecondaryRateLimit, true, true
		c.Wait = retryAfter(r.Header, now)
		if c.Wait <= 0 {
			c.Wait = DefaultSecondaryWait
		}
	case s >= 500:
		c.Category, c.Retryable, c.Ambiguous = CategoryServerError, true, true
		c.Wait = retryAfter(r.Header, now)
	case s == http.StatusUnauthorized:
		// The request was not applied. A token GitHub refuses is asked for
		// anew, once per run (runner.renewToken); an App GitHub no longer
		// knows fails at that exchange, for good.
		c.Category, c.Retryable, c.RenewToken = CategoryUnauthorized, true, true
	case s == http.StatusForbidden && strings.Contains(strings.ToLower(ere.Message), "installation has been suspended"):
		// A token issued before the suspension.
		c.Category = CategoryInstallationUnavailable
	case s == http.StatusForbidden, s == http.StatusUnavailableForLegalReasons:
		// 451: a repository GitHub blocked (a takedown); like a 403,
		// baton may not act there, and asking again will not change it.
		c.Category = CategoryForbidden
	case s == http.StatusNotFound || s == http.StatusGone:
		// 410: GitHub's answer for an issue that was deleted. Either way
		// the thing is not there, and asking again will not bring it back.
		c.Category = CategoryNotFound
	case s == http.StatusConflict:
		c.Category = CategoryConflict
	case s >= 300 && s < 400:
		// A redirect httpClient does not follow: one that would have
		// changed the request's method (an issue transferred to another
		// repository), or one off GitHub's host. Either way the thing is
		// not where the operation names it.
		c.Category = CategoryNotFound
	default:
		c.Category = CategoryValidation
	}
	return c
}

// tooManyRequests classifies a 429 from its headers. GitHub sends it for
// both limits: with x-ratelimit-remaining 0 it is the primary limit (wait
// for the reset), otherwise a secondary one (Retry-After, or at least a
// minute). Either way the whole installation waits.
func tooManyRequests(c *Classification, h http.Header, now time.Time) {
	c.Retryable, c.PauseInstallation = true, true
	if h.Get("X-Ratelimit-Remaining") == "0" {
		c.Category = CategoryPrimaryRateLimit
		c.Wait = max(resetWait(h, now), retryAfter(h, now))
	} else {
		c.Category = CategoryRateLimited
		c.Wait = retryAfter(h, now)
	}
	if c.Wait <= 0 {
		c.Wait = DefaultSecondaryWait
	}
}

// rateLimitText reports whether a 403's message, with the budget spent,
// is a rate limit's ("API rate limit exceeded for installation ID …",
// "You have exceeded a secondary rate limit", "… abuse detection …"), or
// says nothing else.
func rateLimitText(msg string) bool {
	m := strings.ToLower(msg)
	return strings.TrimSpace(m) == "" || strings.Contains(m, "rate limit") || strings.Contains(m, "abuse")
}

func secondaryText(msg string) bool {
	m := strings.ToLower(msg)
	return strings.Contains(m, "secondary rate limit") || strings.Contains(m, "abuse detection")
}

// exchangeMessage returns what the body of a failed token exchange (left
// open by ghinstallation for its caller) says: its JSON message, or the
// body itself. It reads at most 64 KiB, closes the body and puts what it
// read back, so that the response can be classified again. (It must be
// read before the request's context ends: see attempt.)
func exchangeMessage(r *http.Response) string {
	if r.Body == nil || r.Body == http.NoBody {
		return ""
	}
	b, _ := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	_ = r.Body.Close()
	r.Body = io.NopCloser(bytes.NewReader(b))
	var body struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(b, &body) == nil && body.Message != "" {
		return body.Message
	}
	return string(b)
}

// retryAfter reads Retry-After: seconds (what GitHub sends) or an
// HTTP-date, which is measured against GitHub's clock (see githubNow). The
// result is at most MaxProviderWait; 0 when there is none.
func retryAfter(h http.Header, now time.Time) time.Duration {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	n, err := strconv.ParseInt(v, 10, 64)
	switch {
	case err == nil && n <= 0:
		return 0
	case err == nil || (errors.Is(err, strconv.ErrRange) && n > 0):
		// Compared in seconds: multiplied first, a huge value would
		// overflow time.Duration.
		return time.Duration(min(n, int64(MaxProviderWait/time.Second))) * time.Second
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0
	}
	return min(max(t.Sub(githubNow(h, now)), 0), MaxProviderWait)
}

// resetWait is the wait until X-RateLimit-Reset (epoch seconds on
// GitHub's clock), or 0 without one.
func resetWait(h http.Header, now time.Time) time.Duration {
	n, err := strconv.ParseInt(h.Get("X-Ratelimit-Reset"), 10, 64)
	if err != nil || n <= 0 {
		return 0
	}
	return untilReset(time.Unix(n, 0), h, now)
}

// untilReset is the wait until ResetMargin after reset, a time on
// GitHub's clock: measured from the response's Date (GitHub's clock too)
// when it has one, so that this machine's clock being off does not change
// it, and from now otherwise; at least a second and at most
// MaxProviderWait. (A clock ahead of GitHub's would otherwise see a reset
// minutes away as past, and spend attempts on requests GitHub refuses
// again.)
func untilReset(reset time.Time, h http.Header, now time.Time) time.Duration {
	return min(max(reset.Add(ResetMargin).Sub(githubNow(h, now)), time.Second), MaxProviderWait)
}

// secondaryWait is the wait a secondary rate limit names, by GitHub's
// rule: Retry-After; else X-RateLimit-Reset when X-RateLimit-Remaining is
// 0; 0 when it names none (the caller then waits DefaultSecondaryWait).
// GitHub sends X-RateLimit-Reset on every answer, as the reset of the
// primary budget's hour, so with budget left it is not a wait
// (waitHeadersTransport gives such an answer Retry-After: 60 already).
func secondaryWait(h http.Header, now time.Time) time.Duration {
	if w := retryAfter(h, now); w > 0 {
		return w
	}
	if h.Get("X-Ratelimit-Remaining") != "0" {
		return 0
	}
	return resetWait(h, now)
}

// githubNow is the time on GitHub's clock when it answered: the
// response's Date header (whole seconds, rounded down, so a wait measured
// from it errs on the long side by under a second), or now if there is
// none (go-github's own refusals have no headers).
func githubNow(h http.Header, now time.Time) time.Time {
	if t, err := http.ParseTime(h.Get("Date")); err == nil {
		return t
	}
	return now
}

func header(r *http.Response) http.Header {
	if r == nil {
		return nil
	}
	return r.Header
}

// synthetic reports whether a rate-limit error is one go-github made up
// without sending the request: until a limit it saw resets, it answers
// with a fake 403 of its own (no headers, so no X-GitHub-Request-Id) and a
// message saying no request was made.
func synthetic(r *http.Response, msg string) bool {
	if r == nil {
		return true
	}
	return strings.Contains(msg, "not making remote request") ||
		(len(r.Header) == 0 && r.StatusCode == http.StatusForbidden)
}

func respInfo(r *http.Response) (int, string) {
	if r == nil {
		return 0, ""
	}
	return r.StatusCode, requestID(r)
}

func requestID(r *http.Response) string {
	if r == nil {
		return ""
	}
	return r.Header.Get("X-Github-Request-Id")
}

// shortMessage is "<status> <text>: msg", with msg cut (at a character)
// to 200 bytes.
func shortMessage(status int, msg string) string {
	m := strconv.Itoa(status) + " " + http.StatusText(status)
	if msg != "" {
		if len(msg) > 200 {
			msg = strings.ToValidUTF8(msg[:200], "")
		}
		m += ": " + msg
	}
	return m
}

// withDetails is an error answer's message followed by what its errors
// say: GitHub's 422 "Validation Failed" names what failed only there.
// Each entry is told by its message, or else by its field and code
// ("name invalid"); the value an entry may carry is left out.
func withDetails(ere *github.ErrorResponse) string {
	var parts []string
	for _, e := range ere.Errors {
		switch {
		case e.Message != "":
			parts = append(parts, e.Message)
		case e.Field != "" || e.Code != "":
			parts = append(parts, strings.TrimSpace(e.Field+" "+e.Code))
		}
	}
	if len(parts) == 0 {
		return ere.Message
	}
	return strings.TrimSpace(ere.Message + " (" + strings.Join(parts, "; ") + ")")
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func isNetwork(err error) bool {
	var (
		ue *url.Error
		oe *net.OpError
	)
	return errors.As(err, &ue) || errors.As(err, &oe) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF)
}

// notSent reports whether the error shows the request never left: the
// connection could not be made.
func notSent(err error) bool {
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "dial" {
		return true
	}
	var de *net.DNSError
	return errors.Is(err, syscall.ECONNREFUSED) || errors.As(err, &de)
}

func networkMessage(err error) string {
	switch {
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case notSent(err):
		return "could not connect"
	}
	return "connection lost"
}

func asAccepted(err error, target **github.AcceptedError) bool {
	return err != nil && errors.As(err, target)
}

func asErrorResponse(err error, target **github.ErrorResponse) bool {
	return err != nil && errors.As(err, target)
}
