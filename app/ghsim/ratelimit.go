package ghsim

import (
	"cmp"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Limits are the simulator's rate limits, as GitHub applies them to an App.
type Limits struct {
	// PrimaryLimit is each installation's request budget per PrimaryWindow
	// (the App's own JWT requests have a budget of the same size). A
	// negative value means unlimited (the headers still count). Defaults
	// to 5000.
	PrimaryLimit int `json:"primaryLimit"`
	// PrimaryWindow is the length of the primary budget's window, which
	// starts at the first request and resets at its end (x-ratelimit-reset).
	// Defaults to 1h.
	PrimaryWindow time.Duration `json:"-"`
	// PrimaryStatus is the status of a request over the primary budget: 403
	// or 429 (GitHub uses both). Defaults to 403.
	PrimaryStatus int `json:"primaryStatus"`

	// SecondaryLimit is the number of content-creating requests (comments,
	// labels, statuses, merges, branch updates, ref writes) an installation
	// may make in any SecondaryWindow; the next one is refused with 403 and
	// GitHub's secondary-rate-limit message. Zero turns the limit off (the
	// default).
	SecondaryLimit int `json:"secondaryLimit"`
	// SecondaryWindow is the sliding window of the secondary limit.
	// Defaults to 1m.
	SecondaryWindow time.Duration `json:"-"`
	// SecondaryRetryAfter is the Retry-After sent with a secondary-limit
	// refusal: zero sends none (GitHub sometimes does not), RetryAfterAuto
	// sends the seconds until the window has room again, and a positive
	// duration sends that many seconds (rounded up).
	SecondaryRetryAfter time.Duration `json:"-"`
}

// RetryAfterAuto makes a secondary-limit refusal carry the time until the
// window has room again.
const RetryAfterAuto time.Duration = -1

func (l Limits) withDefaults() (Limits, error) {
	l.PrimaryLimit = cmp.Or(l.PrimaryLimit, 5000)
	l.PrimaryWindow = cmp.Or(l.PrimaryWindow, time.Hour)
	l.PrimaryStatus = cmp.Or(l.PrimaryStatus, http.StatusForbidden)
	l.SecondaryWindow = cmp.Or(l.SecondaryWindow, time.Minute)
	switch {
	case l.PrimaryStatus != http.StatusForbidden && l.PrimaryStatus != http.StatusTooManyRequests:
		return l, fmt.Errorf("ghsim: PrimaryStatus %d is neither 403 nor 429: %w", l.PrimaryStatus, ErrInvalid)
	case l.PrimaryWindow < 0 || l.SecondaryWindow < 0:
		return l, fmt.Errorf("ghsim: rate-limit windows must be positive: %w", ErrInvalid)
	case l.SecondaryLimit < 0:
		return l, fmt.Errorf("ghsim: SecondaryLimit %d is negative: %w", l.SecondaryLimit, ErrInvalid)
	case l.SecondaryRetryAfter < 0 && l.SecondaryRetryAfter != RetryAfterAuto:
		return l, fmt.Errorf("ghsim: SecondaryRetryAfter %v: %w", l.SecondaryRetryAfter, ErrInvalid)
	}
	return l, nil
}

// limiter keeps the budgets. Its lock is held for a few arithmetic
// operations only.
type limiter struct {
	mu      sync.Mutex
	cfg     Limits
	primary map[string]*budget
	recent  map[int64][]time.Time // installation → recent content-creating requests
}

type budget struct {
	start time.Time
	used  int
}

// rate is one budget's state, as the x-ratelimit headers report it.
type rate struct {
	limit, remaining, used int
	reset                  time.Time
	ok                     bool
}

func (l *limiter) init(cfg Limits) {
	l.cfg = cfg
	l.primary = map[string]*budget{}
	l.recent = map[int64][]time.Time{}
}

// SetLimits replaces the rate limits. Zero fields take their defaults, so
// SetLimits(Limits{}) restores them. Budgets already spent are kept.
func (s *Sim) SetLimits(l Limits) error {
	l, err := l.withDefaults()
	if err != nil {
		return err
	}
	s.limits.mu.Lock()
	defer s.limits.mu.Unlock()
	s.limits.cfg = l
	return nil
}

// Limits returns the rate limits in force.
func (s *Sim) Limits() Limits {
	s.limits.mu.Lock()
	defer s.limits.mu.Unlock()
	return s.limits.cfg
}

// ResetRateLimits forgets every budget spent.
func (s *Sim) ResetRateLimits() {
	s.limits.mu.Lock()
	defer s.limits.mu.Unlock()
	clear(s.limits.primary)
	clear(s.limits.recent)
}

// take spends one request of the budget key.
func (l *limiter) take(key string, now time.Time) rate {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.budgetLocked(key, now)
	limit := l.cfg.PrimaryLimit
	if limit >= 0 && b.used >= limit {
		return l.rateLocked(b, false)
	}
	b.used++
	return l.rateLocked(b, true)
}

// peek reports the budget key without spending it.
func (l *limiter) peek(key string, now time.Time) rate {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rateLocked(l.budgetLocked(key, now), true)
}

func (l *limiter) budgetLocked(key string, now time.Time) *budget {
	b := l.primary[key]
	if b == nil {
		b = &budget{start: now}
		l.primary[key] = b
	}
	if !now.Before(b.start.Add(l.cfg.PrimaryWindow)) {
		b.start, b.used = now, 0
	}
	return b
}

func (l *limiter) rateLocked(b *budget, ok bool) rate {
	limit := l.cfg.PrimaryLimit
	if limit < 0 {
		limit = math.MaxInt32
	}
	return rate{limit: limit, remaining: max(0, limit-b.used), used: b.used, reset: b.start.Add(l.cfg.PrimaryWindow), ok: ok}
}

// anonymousHeaders sets the headers of an unauthenticated request.
func (l *limiter) anonymousHeaders(h http.Header, now time.Time) {
	r := l.peek("anonymous", now)
	setRateHeaders(h, rate{limit: 60, remaining: 60, reset: r.reset})
}

// secondary records a content-creating request of installation inst and
// reports whether it is within the limit; when it is not, wait is how long
// until the window has room.
func (l *limiter) takeSecondary(inst int64, now time.Time) (ok bool, retryAfter time.Duration, send bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	limit, window := l.cfg.SecondaryLimit, l.cfg.SecondaryWindow
	if limit <= 0 {
		return true, 0, false
	}
	recent := l.recent[inst]
	cut := 0
	for cut < len(recent) && !recent[cut].After(now.Add(-window)) {
		cut++
	}
	recent = recent[cut:]
	if len(recent) >= limit {
		l.recent[inst] = recent
		switch ra := l.cfg.SecondaryRetryAfter; {
		case ra == RetryAfterAuto:
			return false, recent[0].Add(window).Sub(now), true
		case ra > 0:
			return false, ra, true
		default:
			return false, 0, false
		}
	}
	l.recent[inst] = append(recent, now)
	return true, 0, false
}

// setRateHeaders sets GitHub's x-ratelimit-* headers. Their names are
// spelt as net/http canonicalises (and sends) them, which spares Set
// canonicalising each one anew, an allocation per header per request.
func setRateHeaders(h http.Header, r rate) {
	h.Set("X-Ratelimit-Limit", strconv.Itoa(r.limit))
	h.Set("X-Ratelimit-Remaining", strconv.Itoa(r.remaining))
	h.Set("X-Ratelimit-Used", strconv.Itoa(r.used))
	h.Set("X-Ratelimit-Reset", strconv.FormatInt(r.reset.Unix(), 10))
	h.Set("X-Ratelimit-Resource", "core")
}

// bucket names the primary budget a call spends.
func (c *call) bucket() string {
	switch {
	case c.tok != nil:
		return "installation:" + strconv.FormatInt(c.instN, 10)
	case c.app != nil:
		return "app:" + strconv.FormatInt(c.app.id, 10)
	default:
		return "anonymous"
	}
}

// primaryLimit spends one request of the call's budget and sets the
// x-ratelimit headers.
func (s *Sim) primaryLimit(c *call) (response, bool) {
	now := s.now()
	var r rate
	if c.rt.pattern == "/rate_limit" {
		r = s.limits.peek(c.bucket(), now) // GitHub does not count it
	} else {
		r = s.limits.take(c.bucket(), now)
	}
	if c.rt.auth == authNone {
		r = rate{limit: 60, remaining: 59, used: 1, reset: r.reset, ok: true}
	}
	setRateHeaders(c.w.Header(), r)
	if r.ok {
		return response{}, true
	}
	msg := "API rate limit exceeded for installation ID " + strconv.FormatInt(c.instN, 10) + "."
	if c.tok == nil {
		msg = "API rate limit exceeded for app ID " + strconv.FormatInt(c.app.id, 10) + "."
	}
	msg += " If you reach out to GitHub Support for help, please include the request ID " + c.requestID + "."
	s.limits.mu.Lock()
	status := s.limits.cfg.PrimaryStatus
	s.limits.mu.Unlock()
	return errResponse(status, msg, "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api"), false
}

// secondaryLimit applies the secondary limit to a content-creating call.
func (s *Sim) secondaryLimit(c *call) (response, bool) {
	if c.tok == nil {
		return response{}, true
	}
	ok, wait, send := s.limits.takeSecondary(c.instN, s.now())
	if ok {
		return response{}, true
	}
	resp := errResponse(http.StatusForbidden,
		"You have exceeded a secondary rate limit. Please wait a few minutes before you try again. If you reach out to GitHub Support for help, please include the request ID "+c.requestID+".",
		"https://docs.github.com/free-pro-team@latest/rest/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits")
	if send {
		resp.header = http.Header{"Retry-After": {strconv.Itoa(int(math.Ceil(max(wait, time.Second).Seconds())))}}
	}
	return resp, false
}
