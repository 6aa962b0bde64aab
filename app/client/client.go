package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/baton-dev/baton/schema"
)

// Error codes of the API (see Error.Code).
const (
	CodeInvalidRequest      = "invalid_request"
	CodeUnauthorized        = "unauthorized"
	CodeForbidden           = "forbidden"
	CodeNotFound            = "not_found"
	CodeIdempotencyConflict = "idempotency_conflict"
	CodeAlreadyTerminal     = "already_terminal"
	CodeLeaseHeld           = "lease_held"
	CodeLeaseLost           = "lease_lost"
	CodePayloadTooLarge     = "payload_too_large"
	CodeRateLimited         = "rate_limited"
	CodeInternal            = "internal"
)

// MaxWait is the longest one status request waits on the server; Wait
// repeats requests to wait longer.
const MaxWait = 60 * time.Second

// waitStep is the longest Wait asks the server to wait in one request:
// under the 60 s read and idle timeouts of common reverse proxies and load
// balancers (nginx's proxy_read_timeout, an AWS ALB's idle timeout), which
// would otherwise cut every long poll that runs to its end with a 502 or
// 504.
const waitStep = 50 * time.Second

// maxResponseBytes bounds what the client reads of an answer.
const maxResponseBytes = 64 << 20

type (
	// Operation is the status view of an operation.
	Operation = schema.View
	// SubmitRequest is what Submit sends.
	SubmitRequest = schema.Submission
	// Resource names what an operation mutates.
	Resource = schema.Resource
	// Attempt is one call to GitHub made for an operation.
	Attempt = schema.Attempt
)

// OperationList is a page of operations, newest first.
type OperationList struct {
	Operations []Operation `json:"operations"`
	// NextCursor continues the list (ListOptions.Cursor); "" on the last
	// page.
	NextCursor string `json:"nextCursor"`
}

// ListOptions filters List. Empty fields match anything.
type ListOptions struct {
	Status       string
	Action       string
	ResourceType string
	ResourceID   string
	// Actor filters by actor; only admin tokens may name another actor
	// than their own.
	Actor string
	// Limit is the page size (1–500; the server defaults to 50).
	Limit  int
	Cursor string
}

// LeaseGrant is a lease acquired or renewed.
type LeaseGrant struct {
	Key   string `json:"key"`
	Owner string `json:"owner"`
	// Token is the fencing token: renew and release need it.
	Token     int64     `json:"token"`
	ExpiresAt time.Time `json:"expiresAt"`
}

// LeaseState is who holds a lease, if anyone.
type LeaseState struct {
	Key    string `json:"key"`
	Locked bool   `json:"locked"`
	// Owner is the holder: ACTOR/OWNER for a lease taken over the API,
	// an operation ID for an operation's, mergequeue:WHAT for the merge
	// queue's on a repo: key.
	Owner            string  `json:"owner,omitempty"`
	Token            int64   `json:"token,omitempty"`
	ExpiresInSeconds float64 `json:"expiresIn,omitempty"`
}

// ExpiresIn is how long the lease has left unless renewed.
func (s LeaseState) ExpiresIn() time.Duration {
	return time.Duration(s.ExpiresInSeconds * float64(time.Second))
}

// DeadLetter is an operation the queue gave up delivering.
type DeadLetter struct {
	Sequence    uint64    `json:"sequence"`
	OperationID string    `json:"operationId"`
	Reason      string    `json:"reason"`
	Failures    int       `json:"failures"`
	Time        time.Time `json:"time"`
}

// DeadLetterList is a page of dead letters, oldest first.
type DeadLetterList struct {
	DeadLetters []DeadLetter `json:"deadLetters"`
	// NextAfter continues the list; 0 on the last page.
	NextAfter uint64 `json:"nextAfter"`
}

// Readiness is the answer of /readyz.
type Readiness struct {
	Status string            `json:"status"`
	Checks map[string]string `json:"checks"`
}

// Error is an answer of the API other than 2xx.
type Error struct {
	// Status is the HTTP status.
	Status int
	// Code is the API's error code (Code* constants); empty when the
	// answer was not an API error body (a proxy's page, say).
	Code    string
	Message string
	Details map[string]any
}

func (e *Error) Error() string {
	if e.Code == "" {
		return fmt.Sprintf("HTTP %d: %s", e.Status, e.Message)
	}
	return e.Message
}

// ErrorCode returns the API's error code, so that schema.ErrorCode reads it.
func (e *Error) ErrorCode() string { return e.Code }

// ErrorDetails returns the error's details.
func (e *Error) ErrorDetails() map[string]any { return e.Details }

// CodeOf returns the API error code of err, or "" if err is not an *Error.
func CodeOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// DefaultRetries is how many times a client sends a request that is safe
// to repeat again after a passing failure (see WithRetries).
const DefaultRetries = 5

// Delays between tries: retryBaseDelay · 2^n with jitter, at most
// retryMaxDelay, raised to the server's Retry-After; a Retry-After longer
// than maxRetryAfter is not waited for (the *Error is returned).
const (
	retryBaseDelay = 250 * time.Millisecond
	retryMaxDelay  = 5 * time.Second
	maxRetryAfter  = 30 * time.Second
)

// waitUnreachable is how long Wait goes on asking a server that answered
// it and then stopped answering: long enough for a restart, a graceful
// stop's 30 s deadline included.
const waitUnreachable = 2 * time.Minute

// minWaitInterval is the least time between the starts of two status
// requests of one Wait: a server (or a proxy) that answers ?wait= at once
// is asked at most once a second.
const minWaitInterval = time.Second

// Client talks to one baton server. It is safe for concurrent use.
type Client struct {
	base      string
	token     string
	hc        *http.Client
	userAgent string
	retries   int
	// answered is set once the server has answered a request with
	// success: a Wait that then cannot reach it takes it for a restart.
	answered atomic.Bool
}

// Option configures a Client.
type Option func(*Client) error

// WithToken authenticates requests with an API token.
func WithToken(token string) Option {
	return func(c *Client) error {
		if strings.ContainsAny(token, "\r\n") {
			return errors.New("client: the token holds a line break")
		}
		c.token = strings.TrimSpace(token)
		if hasControl(c.token) {
			// It cannot be sent in a header: every request would fail.
			return errors.New("client: the token holds a control character")
		}
		return nil
	}
}

// hasControl reports whether s holds a byte no header value may hold (a
// control character other than a tab).
func hasControl(s string) bool {
	for i := 0; i < len(s); i++ {
		if b := s[i]; (b < ' ' && b != '\t') || b == 0x7f {
			return true
		}
	}
	return false
}

// WithHTTPClient sends requests through hc instead of a client with a 90 s
// timeout. The client keeps a copy of hc that follows a redirect only to
// the server's own scheme, host and port, with the request's method (its
// CheckRedirect, if any, is asked after that). With a shorter hc.Timeout, Wait asks the server to wait at most
// two thirds of it per request, so that its long polls are not cut off.
func WithHTTPClient(hc *http.Client) Option {
	return func(c *Client) error {
		if hc == nil {
			return errors.New("client: WithHTTPClient(nil)")
		}
		c.hc = hc
		return nil
	}
}

// WithRetries sets how many times a request that is safe to repeat is sent
// again after a passing failure (default DefaultRetries; 0: never). Safe to
// repeat are the reads (GET) and Submit, whose idempotency key makes a
// repeated submission answer with the operation the first one created
// (then created is false). Passing failures are errors of the transport
// (connection refused or reset, a timeout), except the end of the
// context and a server certificate the client does not trust, and the
// answers 429, 502, 503 and 504; the client waits
// 250 ms · 2^n with jitter between tries (at most 5 s), or the answer's
// Retry-After when that is longer (an answer asking for more than 30 s is
// returned at once). Cancel, the lease routes, dead-letter replay and
// merge-queue reconcile are never repeated: a second cancel or release
// would be refused because the first one took effect, and a second
// acquire would find the lease held.
func WithRetries(n int) Option {
	return func(c *Client) error {
		if n < 0 {
			return errors.New("client: WithRetries needs 0 or more")
		}
		c.retries = n
		return nil
	}
}

// WithUserAgent sets the User-Agent of requests.
func WithUserAgent(ua string) Option {
	return func(c *Client) error {
		if hasControl(ua) {
			return errors.New("client: the User-Agent holds a control character")
		}
		c.userAgent = ua
		return nil
	}
}

// New returns a client of the server at baseURL (for example
// http://127.0.0.1:8080, or https://example.com/baton behind a reverse
// proxy that serves baton under a path prefix).
func New(baseURL string, opts ...Option) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("client: server URL %q must look like http://host:port", redactURL(baseURL))
	}
	if u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
		// The routes' paths are appended to the base URL: after a query
		// or a fragment they would not be paths at all.
		return nil, fmt.Errorf("client: server URL %q must have no query (?) or fragment (#)", redactURL(baseURL))
	}
	c := &Client{
		base:      strings.TrimRight(u.String(), "/"),
		hc:        &http.Client{Timeout: MaxWait + 30*time.Second},
		userAgent: "baton-client",
		retries:   DefaultRetries,
	}
	for _, o := range opts {
		if err := o(c); err != nil {
			return nil, err
		}
	}
	c.hc = keepOnOrigin(c.hc)
	return c, nil
}

// keepOnOrigin returns a copy of hc that follows a redirect only to the
// same scheme, host and port and with the request's own method. Anything
// else is answered as the redirect itself (see redirectError): net/http
// would send the token to another port or scheme of the same host (an
// https server redirected to http:// would have it travel in the clear),
// or to a subdomain, and would follow a 301, 302 or 303 to a POST with a
// GET, whose answer (a list of operations, say) would be taken for the
// POST's.
func keepOnOrigin(hc *http.Client) *http.Client {
	c := *hc
	next := hc.CheckRedirect
	c.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		first := via[0]
		if req.Method != first.Method || req.URL.Scheme != first.URL.Scheme || req.URL.Host != first.URL.Host {
			return http.ErrUseLastResponse
		}
		if next != nil {
			return next(req, via)
		}
		if len(via) >= 10 {
			return errors.New("stopped after 10 redirects")
		}
		return nil
	}
	return &c
}

// redirectError is the error of an answer that is a redirect the client
// did not follow (keepOnOrigin), or nil.
func redirectError(resp *http.Response) error {
	if resp.StatusCode < 300 || resp.StatusCode > 399 {
		return nil
	}
	loc, err := resp.Location()
	if err != nil {
		return nil
	}
	return &Error{Status: resp.StatusCode, Message: fmt.Sprintf(
		"the server redirected %s %s to %s, which the client does not follow (another address, or another method); give that address as the server URL if it is baton's",
		resp.Request.Method, resp.Request.URL.Path, redactURL(loc.String()))}
}

// redactURL is raw with the password of its user information hidden, as
// net/http hides it in its own errors: a server URL may carry one for a
// proxy in front of baton, and errors end up in CI logs. A URL that does
// not parse loses everything between "//" and its last "@".
func redactURL(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		return u.Redacted()
	}
	if i, j := strings.Index(raw, "//"), strings.LastIndex(raw, "@"); i >= 0 && j > i {
		return raw[:i+2] + "xxxxx" + raw[j:]
	}
	return raw
}

// BaseURL returns the server's URL, for display: a password in it is
// hidden.
func (c *Client) BaseURL() string { return redactURL(c.base) }

// Submit submits an operation. created is false when the key named an
// existing operation with the same input (HTTP 200 rather than 201): also
// when the client sent the submission again after a passing failure (see
// WithRetries) and the first one had reached the server. SubmitResent
// tells the two apart.
func (c *Client) Submit(ctx context.Context, req SubmitRequest) (op Operation, created bool, err error) {
	op, created, _, err = c.SubmitResent(ctx, req)
	return op, created, err
}

// SubmitResent is Submit, and also says whether the client sent the
// submission more than once (after a passing failure, see WithRetries).
// An operation found (created false) by a resent submission may be the
// one its first sending created, whose answer was lost.
func (c *Client) SubmitResent(ctx context.Context, req SubmitRequest) (op Operation, created, resent bool, err error) {
	status, tries, err := c.doTries(ctx, http.MethodPost, "/v1/operations", nil, req, &op)
	return op, status == http.StatusCreated, tries > 1, err
}

// ErrInvalidOperationID is returned, wrapped, by Get, Wait and Cancel for
// an ID that is not an operation ID (64 lower-case hex characters): such a
// request is never sent, since a path such as "." or "a/b" would name
// another route of the API.
var ErrInvalidOperationID = errors.New("not an operation ID")

// checkOperationID refuses what is not an operation ID.
func checkOperationID(id string) error {
	if !schema.ValidOperationID(id) {
		return fmt.Errorf("%w: %q must be 64 lower-case hex characters", ErrInvalidOperationID, id)
	}
	return nil
}

// Get returns an operation's status. An id that is not an operation ID is
// ErrInvalidOperationID.
func (c *Client) Get(ctx context.Context, id string) (Operation, error) {
	var op Operation
	if err := checkOperationID(id); err != nil {
		return op, err
	}
	_, err := c.do(ctx, http.MethodGet, "/v1/operations/"+url.PathEscape(id), nil, nil, &op)
	return op, err
}

// Wait returns the operation once it is terminal or in the dead-letter
// stream (DeadLetter set: it waits for an operator, not for time), or as
// it stands after d (d <= 0: no limit but ctx). Each request waits at most 50 s on the
// server (less than the 60 s timeouts of common proxies); requests start
// at least a second apart, so a server that
// answers at once (one shutting down, say) is not flooded. A server that
// has answered (this Wait, or any earlier request of c) and then cannot
// be reached (restarting: a stopping server
// answers waits at once and stops listening), or whose reverse proxy
// answers 502, 503 or 504 instead, is asked again until it answers, for
// up to waitUnreachable, within d. An id that is not an
// operation ID is ErrInvalidOperationID.
func (c *Client) Wait(ctx context.Context, id string, d time.Duration) (Operation, error) {
	if err := checkOperationID(id); err != nil {
		return Operation{}, err
	}
	var deadline time.Time
	if d > 0 {
		deadline = time.Now().Add(d)
	}
	// (A Wait after a submission the server answered, baton submit
	// --wait, rides through a restart begun in between.)
	answered := c.answered.Load()
	var unreachableSince time.Time
	for {
		step := waitStep
		if !deadline.IsZero() {
			step = min(step, time.Until(deadline))
		}
		if t := c.hc.Timeout; t > 0 {
			step = min(step, t*2/3)
		}
		step = step.Round(time.Millisecond)
		if step <= 0 {
			return c.Get(ctx, id)
		}
		var op Operation
		q := url.Values{"wait": {step.String()}}
		started := time.Now()
		if status, err := c.do(ctx, http.MethodGet, "/v1/operations/"+url.PathEscape(id), q, nil, &op); err != nil {
			// No answer at all (status 0), or a gateway's (502, 503,
			// 504: the reverse proxy in front of it), from a server that
			// answered before: it is restarting.
			if !answered || !restarting(status) || permanent(err) || ctx.Err() != nil {
				return op, err
			}
			if unreachableSince.IsZero() {
				unreachableSince = started
			}
			pause := minWaitInterval // do's own retries have backed off
			if !deadline.IsZero() {
				pause = min(pause, time.Until(deadline))
			}
			if time.Since(unreachableSince) >= waitUnreachable || pause <= 0 {
				return op, err
			}
			if err := sleep(ctx, pause); err != nil {
				return op, err
			}
			continue
		}
		answered, unreachableSince = true, time.Time{}
		if op.Status.Terminal() || op.DeadLetter != nil || (!deadline.IsZero() && !time.Now().Before(deadline)) {
			return op, nil
		}
		pause := minWaitInterval - time.Since(started)
		if !deadline.IsZero() {
			pause = min(pause, time.Until(deadline))
		}
		if err := sleep(ctx, pause); err != nil {
			return op, err
		}
	}
}

// restarting reports whether a status request's failure is what a
// server that is restarting looks like: no answer at all (status 0), or,
// through a reverse proxy, the proxy's 502, 503 or 504 until the server
// listens again.
func restarting(status int) bool {
	switch status {
	case 0, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// sleep waits d, or until ctx ends (its error).
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// List returns a page of operations, newest first.
func (c *Client) List(ctx context.Context, o ListOptions) (OperationList, error) {
	q := url.Values{}
	set := func(k, v string) {
		if v != "" {
			q.Set(k, v)
		}
	}
	set("status", o.Status)
	set("action", o.Action)
	set("resourceType", o.ResourceType)
	set("resourceId", o.ResourceID)
	set("actor", o.Actor)
	set("cursor", o.Cursor)
	if o.Limit != 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	var out OperationList
	_, err := c.do(ctx, http.MethodGet, "/v1/operations", q, nil, &out)
	return out, err
}

// Cancel cancels a queued operation, or asks a running one to stop between
// attempts. A terminal operation is an *Error with code already_terminal;
// an id that is not an operation ID is ErrInvalidOperationID.
func (c *Client) Cancel(ctx context.Context, id string) (Operation, error) {
	var op Operation
	if err := checkOperationID(id); err != nil {
		return op, err
	}
	_, err := c.do(ctx, http.MethodPost, "/v1/operations/"+url.PathEscape(id)+"/cancel", nil, nil, &op)
	return op, err
}

// LeasePath is the path of a lease key: the key percent-encoded as one
// segment (issue:octo/app#42 → /v1/leases/issue%3Aocto%2Fapp%2342).
func LeasePath(key string) string {
	return "/v1/leases/" + strings.ReplaceAll(url.PathEscape(key), ":", "%3A")
}

type leaseBody struct {
	Owner      string `json:"owner"`
	Token      int64  `json:"token,omitempty"`
	TTLSeconds int64  `json:"ttlSeconds,omitempty"`
}

// ttlSeconds rounds a TTL up to whole seconds; 0 lets the server choose.
func ttlSeconds(ttl time.Duration) int64 {
	if ttl <= 0 {
		return 0
	}
	return int64((ttl + time.Second - 1) / time.Second)
}

// AcquireLease takes the lease on key for owner. Another holder's live
// lease is an *Error with code lease_held (Details "owner", "expiresIn").
// ttl 0 lets the server choose (60 s).
func (c *Client) AcquireLease(ctx context.Context, key, owner string, ttl time.Duration) (LeaseGrant, error) {
	var g LeaseGrant
	_, err := c.do(ctx, http.MethodPost, LeasePath(key)+"/acquire", nil, leaseBody{Owner: owner, TTLSeconds: ttlSeconds(ttl)}, &g)
	return g, err
}

// RenewLease extends a lease the owner holds with token; otherwise it is an
// *Error with code lease_lost.
func (c *Client) RenewLease(ctx context.Context, key, owner string, token int64, ttl time.Duration) (LeaseGrant, error) {
	var g LeaseGrant
	_, err := c.do(ctx, http.MethodPost, LeasePath(key)+"/renew", nil,
		leaseBody{Owner: owner, Token: token, TTLSeconds: ttlSeconds(ttl)}, &g)
	return g, err
}

// ReleaseLease releases a lease the owner holds with token; otherwise it
// is an *Error with code lease_lost.
func (c *Client) ReleaseLease(ctx context.Context, key, owner string, token int64) error {
	_, err := c.do(ctx, http.MethodPost, LeasePath(key)+"/release", nil, leaseBody{Owner: owner, Token: token}, nil)
	return err
}

// CheckLease tells who holds the lease on key.
func (c *Client) CheckLease(ctx context.Context, key string) (LeaseState, error) {
	var s LeaseState
	_, err := c.do(ctx, http.MethodGet, LeasePath(key), nil, nil, &s)
	return s, err
}

// DeadLetters lists dead letters with a sequence above after, oldest
// first (limit 0: the server's default, 100). Admin tokens only.
func (c *Client) DeadLetters(ctx context.Context, after uint64, limit int) (DeadLetterList, error) {
	q := url.Values{}
	if after > 0 {
		q.Set("after", strconv.FormatUint(after, 10))
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out DeadLetterList
	_, err := c.do(ctx, http.MethodGet, "/v1/dlq", q, nil, &out)
	return out, err
}

// ReplayDeadLetter puts the operation of the dead letter at seq back into
// the queue. Admin tokens only.
func (c *Client) ReplayDeadLetter(ctx context.Context, seq uint64) (DeadLetter, error) {
	var dl DeadLetter
	_, err := c.do(ctx, http.MethodPost, "/v1/dlq/"+strconv.FormatUint(seq, 10)+"/replay", nil, nil, &dl)
	return dl, err
}

// Health returns nil if the server is alive.
func (c *Client) Health(ctx context.Context) error {
	_, err := c.do(ctx, http.MethodGet, "/healthz", nil, nil, nil)
	return err
}

// Ready returns the server's readiness; an unready server is an *Error
// (HTTP 503) besides the checks.
func (c *Client) Ready(ctx context.Context) (Readiness, error) {
	var r Readiness
	req, err := c.newRequest(ctx, http.MethodGet, "/readyz", nil, nil)
	if err != nil {
		return r, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return r, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		return r, err
	}
	if err := redirectError(resp); err != nil {
		return r, err
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return r, &Error{Status: resp.StatusCode, Message: "readiness answer is not JSON"}
	}
	if resp.StatusCode != http.StatusOK {
		return r, &Error{Status: resp.StatusCode, Message: "not ready"}
	}
	return r, nil
}

// OpenAPI returns the server's OpenAPI description.
func (c *Client) OpenAPI(ctx context.Context) (json.RawMessage, error) {
	var doc json.RawMessage
	_, err := c.do(ctx, http.MethodGet, "/v1/openapi.json", nil, nil, &doc)
	return doc, err
}

// newRequest builds a request of the route at path with body (nil: none),
// already encoded (do encodes once and sends the same bytes on every try).
func (c *Client) newRequest(ctx context.Context, method, path string, q url.Values, body []byte) (*http.Request, error) {
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", c.userAgent)
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	return req, nil
}

// retrySafe reports whether a request may be sent again after a passing
// failure: the reads, and submissions (their idempotency key resolves a
// repeat to the operation the first one made).
func retrySafe(method, path string) bool {
	return method == http.MethodGet || (method == http.MethodPost && path == "/v1/operations")
}

// do sends a request and decodes a 2xx answer into out (unless nil). A
// request safe to repeat is sent again after a passing failure (see
// WithRetries).
func (c *Client) do(ctx context.Context, method, path string, q url.Values, in, out any) (int, error) {
	status, _, err := c.doTries(ctx, method, path, q, in, out)
	return status, err
}

// doTries is do, and also returns how many times the request was sent.
func (c *Client) doTries(ctx context.Context, method, path string, q url.Values, in, out any) (int, int, error) {
	var body []byte
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return 0, 0, fmt.Errorf("client: encode request: %w", err)
		}
		body = b
	}
	retries := 0
	if retrySafe(method, path) {
		retries = c.retries
	}
	for try := 0; ; try++ {
		status, again, err := c.once(ctx, method, path, q, body, out)
		if err == nil || try >= retries || again < 0 || ctx.Err() != nil {
			return status, try + 1, err
		}
		d := retryMaxDelay
		if try < 8 {
			d = min(retryBaseDelay<<try, retryMaxDelay)
		}
		d = d/2 + rand.N(d/2+1) // jitter: clients failed together do not come back together
		if sleep(ctx, max(d, again)) != nil {
			return status, try + 1, err
		}
	}
}

// once sends a request once. again says whether it may be sent again: -1
// no, otherwise after at least that long (the answer's Retry-After, or 0).
func (c *Client) once(ctx context.Context, method, path string, q url.Values, body []byte, out any) (status int, again time.Duration, _ error) {
	req, err := c.newRequest(ctx, method, path, q, body)
	if err != nil {
		return 0, -1, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if permanent(err) {
			return 0, -1, err
		}
		return 0, 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		return resp.StatusCode, 0, fmt.Errorf("client: read answer of %s %s: %w", method, path, err)
	}
	if err := redirectError(resp); err != nil {
		return resp.StatusCode, -1, err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		again = -1
		switch resp.StatusCode {
		case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
			again = retryAfter(resp.Header.Get("Retry-After"), time.Now())
		}
		return resp.StatusCode, again, decodeError(resp, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return resp.StatusCode, -1, fmt.Errorf("client: decode answer of %s %s: %w", method, path, err)
		}
	}
	c.answered.Store(true)
	return resp.StatusCode, -1, nil
}

// permanent reports whether an error of the transport is one that trying
// again cannot mend: the server's certificate is not one the client
// trusts (an unknown authority, another host's name, expired). Such
// errors are reported at once rather than after the retries of a passing
// failure. (A header value a request may not carry, a control character
// in the token, is refused by New.)
func permanent(err error) bool {
	var (
		verify    *tls.CertificateVerificationError
		authority x509.UnknownAuthorityError
		host      x509.HostnameError
		invalid   x509.CertificateInvalidError
		roots     x509.SystemRootsError
	)
	return errors.As(err, &verify) || errors.As(err, &authority) || errors.As(err, &host) ||
		errors.As(err, &invalid) || errors.As(err, &roots)
}

// retryAfter reads a Retry-After header (seconds or an HTTP date): 0 when
// it is absent or unreadable, -1 when it asks for more than maxRetryAfter.
func retryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	var d time.Duration
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n > int64(maxRetryAfter/time.Second) {
			return -1
		}
		d = time.Duration(n) * time.Second
	} else if t, err := http.ParseTime(v); err == nil {
		d = t.Sub(now)
	} else {
		return 0
	}
	switch {
	case d > maxRetryAfter:
		return -1
	case d < 0:
		return 0
	}
	return d
}

func decodeError(resp *http.Response, body []byte) error {
	var eb struct {
		Error struct {
			Code    string         `json:"code"`
			Message string         `json:"message"`
			Details map[string]any `json:"details"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &eb); err == nil && eb.Error.Code != "" {
		return &Error{Status: resp.StatusCode, Code: eb.Error.Code, Message: eb.Error.Message, Details: eb.Error.Details}
	}
	msg := strings.TrimSpace(string(body))
	if len(msg) > 200 {
		msg = msg[:200] + "…"
	}
	if msg == "" {
		msg = http.StatusText(resp.StatusCode)
	}
	return &Error{Status: resp.StatusCode, Message: msg}
}
