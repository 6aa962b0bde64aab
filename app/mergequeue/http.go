package mergequeue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/baton-dev/baton/executor"
	"github.com/baton-dev/baton/internal/sqlite"
	"github.com/baton-dev/baton/schema"
)

// EventLogBody is the answer of GET …/queue/events.
type EventLogBody struct {
	Repository string        `json:"repository"`
	Events     []EventRecord `json:"events"`
}

// AuditLogBody is the answer of GET …/queue/audit.
type AuditLogBody struct {
	Repository string        `json:"repository"`
	Audit      []AuditRecord `json:"audit"`
}

// NewHandler returns the HTTP handler of the merge queue's routes:
//
//	GET  /v1/repos/{owner}/{repo}/queue            State: the entries, with positions
//	GET  /v1/repos/{owner}/{repo}/queue/events     EventLogBody, oldest first
//	GET  /v1/repos/{owner}/{repo}/queue/audit      AuditLogBody, oldest first
//	POST /v1/repos/{owner}/{repo}/queue/reconcile  Report; 409 lease_held when the lease is held;
//	                                               429 rate_limited within ReconcileSpacing of the
//	                                               same caller's last reconcile of the repository;
//	                                               503/502 (code internal) when GitHub fails its reads
//
// Every route answers 503 with Retry-After (code internal) when the store
// cannot keep a write for want of storage, as the API's routes do.
// The routes take no query parameters (a query string is invalid_request).
// Mount it behind the API's authentication on each of Routes() (app's
// API.HandleAuthenticatedRoutes, so that a wrong method or an unknown path
// under /v1/repos/ is answered before the token is asked for). authorize is
// called for every request with a well-formed repository, before anything
// is read: it returns who asks (the API token, as the reconcile spacing
// tells callers apart) to allow the request, or an error carrying a code
// (schema's unauthorized, forbidden or not_found) to refuse it; an error
// without a code is answered 500. Errors are baton's API errors:
// {"error": {"code", "message", "details"?}}.
func NewHandler(q *Queue, authorize Authorize) http.Handler {
	h := &handler{q: q, authorize: authorize, turns: map[string]time.Time{}}
	mux := http.NewServeMux()
	for _, rt := range h.routes() {
		mux.HandleFunc(rt.pattern, h.route(rt.method, rt.fn))
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		h.fail(w, r, schema.Errorf(schema.CodeNotFound, "no such route: %s %s", r.Method, r.URL.Path))
	})
	return mux
}

// Routes lists the routes NewHandler serves, as "METHOD pattern" (GET
// routes answer HEAD too).
func Routes() []string {
	var out []string
	for _, rt := range (&handler{}).routes() {
		out = append(out, rt.method+" "+rt.pattern)
	}
	return out
}

// Authorize allows or refuses a request of NewHandler's routes on
// owner/repo; allowed, it names the caller (see NewHandler).
type Authorize func(r *http.Request, owner, repo string) (caller string, err error)

type handler struct {
	q         *Queue
	authorize Authorize

	turnsMu sync.Mutex
	turns   map[string]time.Time // caller and repository → its last reconcile's start
}

type repoHandler func(w http.ResponseWriter, r *http.Request, owner, repo string)

type repoRoute struct {
	method, pattern string
	fn              repoHandler
}

// routes are the routes of NewHandler and Routes.
func (h *handler) routes() []repoRoute {
	return []repoRoute{
		{http.MethodGet, "/v1/repos/{owner}/{repo}/queue", h.entries},
		{http.MethodGet, "/v1/repos/{owner}/{repo}/queue/events", h.events},
		{http.MethodGet, "/v1/repos/{owner}/{repo}/queue/audit", h.audit},
		{http.MethodPost, "/v1/repos/{owner}/{repo}/queue/reconcile", h.reconcile},
	}
}

func (h *handler) route(method string, fn repoHandler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != method && (method != http.MethodGet || r.Method != http.MethodHead) {
			allow := method
			if method == http.MethodGet {
				allow += ", " + http.MethodHead // served too
			}
			w.Header().Set("Allow", allow)
			h.write(w, http.StatusMethodNotAllowed, errorBody(schema.CodeInvalidRequest, "method "+r.Method+" not allowed; use "+method, nil))
			return
		}
		if r.URL.RawQuery != "" {
			// As every route of the API: a parameter these routes do not
			// take (a misspelt filter, say) is refused, not ignored.
			h.fail(w, r, schema.Invalidf("this route takes no query parameters"))
			return
		}
		owner, repo := r.PathValue("owner"), r.PathValue("repo")
		if !schema.ValidRepository(owner, repo) {
			h.fail(w, r, schema.Invalidf("%q is not a repository (OWNER/REPO)", owner+"/"+repo))
			return
		}
		if h.authorize == nil {
			h.fail(w, r, errors.New("mergequeue: no authorize function"))
			return
		}
		caller, err := h.authorize(r, owner, repo)
		if err != nil {
			h.fail(w, r, err)
			return
		}
		fn(w, r.WithContext(context.WithValue(r.Context(), callerKey{}, caller)), owner, repo)
	}
}

func (h *handler) entries(w http.ResponseWriter, r *http.Request, owner, repo string) {
	s, err := h.q.Entries(r.Context(), owner, repo)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.write(w, http.StatusOK, s)
}

func (h *handler) events(w http.ResponseWriter, r *http.Request, owner, repo string) {
	ev, err := h.q.EventLog(r.Context(), owner, repo)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.write(w, http.StatusOK, EventLogBody{Repository: owner + "/" + repo, Events: ev})
}

func (h *handler) audit(w http.ResponseWriter, r *http.Request, owner, repo string) {
	a, err := h.q.AuditLog(r.Context(), owner, repo)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.write(w, http.StatusOK, AuditLogBody{Repository: owner + "/" + repo, Audit: a})
}

// reconcileTurnWait is how long POST …/reconcile waits for the repository's
// lease before answering lease_held.
const reconcileTurnWait = 5 * time.Second

// callerKey is the request context's key of the caller authorize named.
type callerKey struct{}

// ReconcileSpacing is the least time between two reconciles of a repository
// asked for over HTTP by one caller (an API token, as authorize names it): a
// reconcile reads the repository's open pull requests and the gates of its
// entries from GitHub, on the installation's hourly budget, which one
// client asking again and again would spend in a minute, and every
// operation of the installation would then wait for the budget's reset.
// A reconcile asked for sooner is answered 429 rate_limited, with
// Retry-After.
const ReconcileSpacing = time.Minute

// takeTurn reserves the caller's reconcile of the repository now.
// It returns the time left before one may be asked for (nothing is
// reserved then), or a function that gives the turn back (for a
// reconcile that did not run).
func (h *handler) takeTurn(r *http.Request, owner, repo string) (time.Duration, func()) {
	caller, _ := r.Context().Value(callerKey{}).(string)
	key := caller + " " + nameKey(owner, repo)
	now := h.q.cfg.Clock.Now()
	h.turnsMu.Lock()
	defer h.turnsMu.Unlock()
	last, had := h.turns[key]
	if had && now.Sub(last) < ReconcileSpacing {
		return ReconcileSpacing - now.Sub(last), nil
	}
	if len(h.turns) >= 1024 {
		for k, t := range h.turns {
			if now.Sub(t) >= ReconcileSpacing {
				delete(h.turns, k)
			}
		}
	}
	h.turns[key] = now
	return 0, func() {
		h.turnsMu.Lock()
		defer h.turnsMu.Unlock()
		if h.turns[key].Equal(now) {
			if had {
				h.turns[key] = last
			} else {
				delete(h.turns, key)
			}
		}
	}
}

func (h *handler) reconcile(w http.ResponseWriter, r *http.Request, owner, repo string) {
	inst, err := h.q.installationOf(r.Context(), owner, repo)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if inst == 0 {
		h.fail(w, r, schema.Errorf(schema.CodeNotFound, "baton has no merge queue for %s/%s and no installation covers it", owner, repo))
		return
	}
	// Webhook processing holds the repository's lease for moments at a
	// time: an operator's reconcile waits for a turn a little while
	// before answering lease_held.
	// While the lease is held, the answer is lease_held whenever the last
	// reconcile was; only a reconcile about to run takes a turn
	// (ReconcileSpacing), given back if it did not run after all.
	var rep Report
	for wait := time.Now().Add(reconcileTurnWait); ; {
		var giveBack func()
		if st, err := h.q.cfg.Leases.Check(r.Context(), LeaseKey(owner, repo)); err == nil && !st.Locked {
			left, back := h.takeTurn(r, owner, repo)
			if back == nil {
				secs := int64((left + time.Second - 1) / time.Second)
				w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
				h.fail(w, r, &schema.Error{Code: schema.CodeRateLimited,
					Message: fmt.Sprintf("%s/%s was reconciled less than %s ago with this token; ask again in %ds (the queue also reconciles itself every few minutes)",
						owner, repo, ReconcileSpacing, secs),
					Details: map[string]any{"retryAfter": secs}})
				return
			}
			giveBack = back
		}
		rep, err = h.q.reconcile(r.Context(), inst, owner, repo, false)
		if giveBack != nil && err == nil && rep.Skipped {
			giveBack() // the lease was taken since it was checked: nothing ran
		}
		if err != nil {
			if giveBack != nil && !executor.Classify(err, time.Now()).PauseInstallation {
				// It did not run through: a try again (the client's own, after
				// a 503) may run. A rate limit GitHub imposed keeps the turn.
				giveBack()
			}
			if h.githubFailed(w, r, owner, repo, err) {
				return
			}
			h.fail(w, r, err)
			return
		}
		if !rep.Skipped || time.Now().After(wait) || r.Context().Err() != nil {
			break
		}
		select {
		case <-time.After(100 * time.Millisecond):
		case <-r.Context().Done():
		}
	}
	if rep.Skipped {
		h.fail(w, r, &schema.Error{Code: schema.CodeLeaseHeld, Message: rep.SkipReason, Details: map[string]any{
			"owner": rep.LeaseOwner, "expiresIn": rep.LeaseExpiresInSeconds,
		}})
		return
	}
	h.write(w, http.StatusOK, rep)
}

// githubFailed answers a reconcile that failed because GitHub did not
// answer its reads, and reports whether err was such a failure. It is
// GitHub's failure, not baton's, so it is not the 500 of a bug: 503 with
// Retry-After (GitHub's own wait when it named one) while GitHub is away,
// errs or limits baton, and 502 when GitHub refuses the App (its access to
// the repository gone, its credentials refused). The code is internal, the
// API's code for a failure that is not the caller's; the message is
// baton's words with GitHub's status and Classify's short account of
// GitHub's answer (free of secrets).
func (h *handler) githubFailed(w http.ResponseWriter, r *http.Request, owner, repo string, err error) bool {
	c := executor.Classify(err, time.Now())
	var wait time.Duration
	if re := (*RetryError)(nil); errors.As(err, &re) {
		wait = re.After
	}
	switch c.Category {
	case executor.CategoryInternal, executor.CategoryCancelled, "":
		return false
	}
	what := c.Message
	if c.Status != 0 && !strings.Contains(what, strconv.Itoa(c.Status)) {
		what = fmt.Sprintf("%s (HTTP %d)", what, c.Status)
	}
	status := http.StatusBadGateway
	if c.Retryable {
		status = http.StatusServiceUnavailable
		wait = max(wait, c.Wait, time.Second)
		w.Header().Set("Retry-After", strconv.FormatInt(int64((wait+time.Second-1)/time.Second), 10))
	}
	h.q.log.Warn("merge queue reconcile: GitHub failed", zap.String(logEvent, "mergequeue.api_github_failed"),
		zap.String("route", r.Pattern), zap.String("errorCategory", c.Category), zap.Int("status", c.Status))
	h.write(w, status, errorBody(schema.CodeInternal,
		fmt.Sprintf("GitHub failed the reconcile's reads of %s/%s: %s", owner, repo, what), map[string]any{"category": c.Category}))
	return true
}

func errorBody(code schema.Code, msg string, details map[string]any) map[string]any {
	e := map[string]any{"code": code, "message": msg}
	if len(details) > 0 {
		e["details"] = details
	}
	return map[string]any{"error": e}
}

// fail answers err with its code's status (schema.HTTPStatus, as the API
// does); an error without a code, or an internal one, is logged and
// answered as internal. A write the store could not keep for want of
// storage (a full disk, an I/O error) is answered as the API answers it:
// 503 with Retry-After, in baton's own words, as the same request
// succeeds once there is room.
func (h *handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	code := schema.ErrorCode(err)
	if code == schema.CodeInternal && sqlite.IsStorageError(err) {
		h.q.log.Warn("merge queue request refused: the store cannot write", zap.String(logEvent, "mergequeue.api_storage_unavailable"),
			zap.String("method", r.Method), zap.String("route", r.Pattern), zap.Error(err))
		w.Header().Set("Retry-After", "5")
		h.write(w, http.StatusServiceUnavailable, errorBody(schema.CodeInternal,
			"baton cannot store writes at the moment (its storage is full or failing); try again later", nil))
		return
	}
	status, ok := schema.HTTPStatus(code)
	if !ok || code == schema.CodeInternal {
		h.q.log.Error("merge queue API error", zap.String(logEvent, "mergequeue.api_error"),
			zap.String("method", r.Method), zap.String("route", r.Pattern), zap.Error(err))
		h.write(w, http.StatusInternalServerError, errorBody(schema.CodeInternal, "internal error", nil))
		return
	}
	h.write(w, status, errorBody(code, schema.PublicMessage(err), schema.ErrorDetails(err)))
}

func (h *handler) write(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		status, body = http.StatusInternalServerError, []byte(`{"error":{"code":"internal","message":"internal error"}}`)
	}
	body = append(body, '\n')
	hd := w.Header()
	hd.Set("Content-Type", "application/json")
	hd.Set("Content-Length", strconv.Itoa(len(body)))
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
