package app

// The HTTP API
//
// NewAPI builds baton's JSON API (DESIGN.md, "HTTP API"): operations
// (submit, get with ?wait=, list, cancel), leases for outside holders
// (acquire, renew, release, check), dead letters (list, replay), its own
// OpenAPI description, and /healthz, /readyz and /metrics. The wiring
// mounts other handlers beside these (the webhook receiver, the
// installations list) with API.Handle, API.HandleAuthenticated and
// API.HandleAuthenticatedRoutes.
//
// # Access
//
// Every /v1 route but /v1/openapi.json needs an API token
// (Authorization: Bearer baton_…, in one Authorization header; see
// tokens.go). The actor of a request is
// its token's actor, never a field of the request. A non-admin token sees,
// waits on and cancels only its actor's operations (another actor's
// operation is 404 not_found, exactly like a missing one) and lists only
// them; an admin token sees every actor's. A token has at most
// APIConfig.MaxWaitsPerToken ?wait= requests waiting at once; the others
// are answered at once. A waiting request checks its token again every
// second, and ends with 401 unauthorized once the token is revoked. A
// token acts only on
// repositories of the installations it is bound to (admin tokens: all):
// an operation or a lease elsewhere is 403 forbidden. Dead letters are for
// admin tokens only (403 otherwise): they name any actor's operations.
// /healthz, /readyz, /metrics and /v1/openapi.json need no token.
//
// # Leases of outside holders
//
// A lease taken over the API is held in the coordinator under the owner
// "ACTOR/OWNER", where OWNER is the caller's owner string (1–100 printable
// characters, no '/'). Responses to the caller echo OWNER; the holder other
// callers see (check, lease_held) is the full "ACTOR/OWNER", or an
// operation ID for a lease an operation holds. So no token can renew or
// release another actor's lease, nor an operation's.
//
// # Errors
//
// Errors are {"error": {"code", "message", "details"}}; schema.HTTPStatus
// is the one table from codes to HTTP statuses. Anything without a code is
// internal: logged once, shown as "internal error". Bodies are limited to
// APIConfig.MaxBodyBytes (413 payload_too_large) and decoded strictly:
// unknown fields, trailing data and wrong types are invalid_request.
// Unknown routes are 404 not_found and known routes asked with another
// method are 405 (code invalid_request), both in the same JSON shape.
// What net/http's server answers itself, before any handler runs (a
// request it cannot parse: 400; headers over MaxHeaderBytes: 431), is
// its plain text; ServeMux redirects a path it cleans (// or dot
// segments) with a 307.

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/baton-dev/baton/executor"
	"github.com/baton-dev/baton/queue"
	"github.com/baton-dev/baton/schema"
)

// Recommended timeouts of the http.Server that serves the API (see
// SetAPIServerTimeouts). APIWriteTimeout leaves room for the longest
// ?wait= (MaxOperationWait) and a slow client reading the answer.
const (
	APIReadHeaderTimeout = 10 * time.Second
	APIReadTimeout       = 60 * time.Second
	APIWriteTimeout      = MaxOperationWait + 30*time.Second
	APIIdleTimeout       = 120 * time.Second
	APIMaxHeaderBytes    = 64 << 10
)

// MaxOperationWait is the longest GET /v1/operations/{id}?wait= blocks;
// longer waits are cut to it.
const MaxOperationWait = 60 * time.Second

// DefaultMaxBodyBytes is the size limit of API request bodies.
const DefaultMaxBodyBytes = 1 << 20

// SetAPIServerTimeouts sets the recommended timeouts and header limit on s
// where s has none.
func SetAPIServerTimeouts(s *http.Server) {
	s.ReadHeaderTimeout = cmp.Or(s.ReadHeaderTimeout, APIReadHeaderTimeout)
	s.ReadTimeout = cmp.Or(s.ReadTimeout, APIReadTimeout)
	s.WriteTimeout = cmp.Or(s.WriteTimeout, APIWriteTimeout)
	s.IdleTimeout = cmp.Or(s.IdleTimeout, APIIdleTimeout)
	s.MaxHeaderBytes = cmp.Or(s.MaxHeaderBytes, APIMaxHeaderBytes)
}

// Operations is what the API needs of the executor (*executor.Executor).
type Operations interface {
	Submit(ctx context.Context, actor string, s schema.Submission) (rec schema.Record, created bool, err error)
	Get(ctx context.Context, operationID string) (schema.Record, error)
	List(ctx context.Context, f executor.ListFilter) (recs []schema.Record, next string, err error)
	Cancel(ctx context.Context, operationID string) (schema.Record, error)
}

// DeadLetters is what the API needs of the queue (*queue.Broker). Ready
// says whether the queue is reachable: a dead-letter route that failed
// while it is not answers 503.
type DeadLetters interface {
	DeadLetters(ctx context.Context, after uint64, limit int) ([]queue.DeadLetter, error)
	DeadLetter(ctx context.Context, seq uint64) (queue.DeadLetter, error)
	ReplayDeadLetter(ctx context.Context, seq uint64) (queue.DeadLetter, error)
	RemoveDeadLetter(ctx context.Context, seq uint64) error
	DeadLetterOf(ctx context.Context, operationID string) (queue.DeadLetter, error)
	Ready() error
}

// LeaseService is what the API needs of the lease coordinator
// (NewCoordinatorLeases adapts a *coordinator.Coordinator). Its errors
// carry codes through an ErrorCode method: "lease_held" (with ErrorDetails
// "owner" and "expiresIn" in seconds), "lease_lost", "invalid_request".
type LeaseService interface {
	Acquire(ctx context.Context, key, owner string, ttl time.Duration) (LeaseGrant, error)
	Renew(ctx context.Context, key, owner string, token int64, ttl time.Duration) (LeaseGrant, error)
	Release(ctx context.Context, key, owner string, token int64) error
	Check(ctx context.Context, key string) (LeaseState, error)
}

// LeaseGrant is a lease acquired or renewed.
type LeaseGrant struct {
	Key       string
	Owner     string
	Token     int64
	ExpiresAt time.Time
}

// LeaseState is what Check tells of a key: free, or who holds it.
type LeaseState struct {
	Key       string
	Locked    bool
	Owner     string
	Token     int64
	ExpiresIn time.Duration
}

// RepositoryInstallations finds the installation that covers a repository
// (the installations registry implements it). InstallationOf returns its
// ID, or an error with code forbidden when baton is not installed on the
// repository or the installation is suspended.
type RepositoryInstallations interface {
	InstallationOf(ctx context.Context, owner, repo string) (int64, error)
}

// Authenticator turns an API token into a principal (*TokenStore). A token
// it refuses is an error with code unauthorized.
type Authenticator interface {
	Authenticate(ctx context.Context, token string) (Principal, error)
}

// ReadinessCheck is one thing /readyz asks: nil means ready.
type ReadinessCheck struct {
	Name  string
	Check func(ctx context.Context) error
}

// APIConfig configures the API.
type APIConfig struct {
	// Operations submits, reads, lists and cancels operations. Required.
	Operations Operations
	// Leases serves the lease routes. Required.
	Leases LeaseService
	// DeadLetters serves the dead-letter routes. Required.
	DeadLetters DeadLetters
	// Installations resolves the installation of a repository. Required.
	Installations RepositoryInstallations
	// Tokens authenticates API tokens. Required.
	Tokens Authenticator

	// Readiness is what /readyz checks, in order (store, queue,
	// consumers…). None: always ready.
	Readiness []ReadinessCheck
	// ReadinessTimeout bounds all of /readyz's checks. Defaults to 2s.
	ReadinessTimeout time.Duration
	// Gatherer is what /metrics serves. Defaults to
	// prometheus.DefaultGatherer.
	Gatherer prometheus.Gatherer
	// Registerer receives the API's own metrics (baton_api_*). nil
	// registers none.
	Registerer prometheus.Registerer
	// Logger receives internal errors and recovered panics (never tokens
	// or payloads). Defaults to zap.NewNop().
	Logger *zap.Logger

	// MaxBodyBytes limits request bodies. Defaults to DefaultMaxBodyBytes
	// (1 MiB).
	MaxBodyBytes int64
	// MaxWait caps ?wait=. Defaults to MaxOperationWait (60s).
	MaxWait time.Duration
	// WaitPollInterval is how often a ?wait= request reads the operation
	// again. Defaults to 100ms.
	WaitPollInterval time.Duration
	// MaxWaitsPerToken bounds the ?wait= requests of one API token that
	// wait at once; the token's further ones are answered at once, with
	// the operation as it stands, as a wait that ran out. Each wait reads
	// the store every WaitPollInterval: without a bound, one client
	// holding idle connections open would keep the store busy. Defaults
	// to DefaultMaxWaitsPerToken (64).
	MaxWaitsPerToken int
}

// DefaultMaxWaitsPerToken is the default of APIConfig.MaxWaitsPerToken.
const DefaultMaxWaitsPerToken = 64

// API is baton's HTTP API. It is an http.Handler.
type API struct {
	ops           Operations
	leases        LeaseService
	deadLetters   DeadLetters
	installations RepositoryInstallations
	tokens        Authenticator
	readiness     []ReadinessCheck
	readyTimeout  time.Duration
	gatherer      prometheus.Gatherer
	log           *zap.Logger
	maxBody       int64
	maxWait       time.Duration
	pollEvery     time.Duration
	maxWaits      int

	waitsMu sync.Mutex
	waits   map[int64]int // token ID → its ?wait= requests waiting now

	mux     *http.ServeMux
	metrics *apiMetrics
	routes  []apiRoute

	closing     chan struct{} // closed by EndWaits
	closingOnce sync.Once
}

// apiHandlerFunc is one route's handler: it writes a success itself and
// returns an error for the API to write.
type apiHandlerFunc func(w http.ResponseWriter, r *http.Request, p *Principal) error

// apiRoute is one route of the API.
type apiRoute struct {
	Method string
	Path   string // ServeMux pattern path: /v1/operations/{id}
	Name   string // metric label, OpenAPI operationId
	Auth   bool
	h      apiHandlerFunc
}

// NewAPI validates cfg and returns the API.
func NewAPI(cfg APIConfig) (*API, error) {
	switch {
	case cfg.Operations == nil:
		return nil, errors.New("app: APIConfig.Operations is required")
	case cfg.Leases == nil:
		return nil, errors.New("app: APIConfig.Leases is required")
	case cfg.DeadLetters == nil:
		return nil, errors.New("app: APIConfig.DeadLetters is required")
	case cfg.Installations == nil:
		return nil, errors.New("app: APIConfig.Installations is required")
	case cfg.Tokens == nil:
		return nil, errors.New("app: APIConfig.Tokens is required")
	}
	for _, c := range cfg.Readiness {
		if c.Name == "" || c.Check == nil {
			return nil, errors.New("app: every APIConfig.Readiness check needs a Name and a Check")
		}
	}
	if cfg.MaxBodyBytes < 0 || cfg.MaxWait < 0 || cfg.WaitPollInterval < 0 || cfg.ReadinessTimeout < 0 || cfg.MaxWaitsPerToken < 0 {
		return nil, errors.New("app: APIConfig limits must not be negative")
	}
	a := &API{
		ops:           cfg.Operations,
		leases:        cfg.Leases,
		deadLetters:   cfg.DeadLetters,
		installations: cfg.Installations,
		tokens:        cfg.Tokens,
		readiness:     cfg.Readiness,
		readyTimeout:  cmp.Or(cfg.ReadinessTimeout, 2*time.Second),
		gatherer:      cmp.Or[prometheus.Gatherer](cfg.Gatherer, prometheus.DefaultGatherer),
		log:           cmp.Or(cfg.Logger, zap.NewNop()).With(zap.String("subsystem", "api")),
		maxBody:       cmp.Or(cfg.MaxBodyBytes, DefaultMaxBodyBytes),
		maxWait:       cmp.Or(cfg.MaxWait, MaxOperationWait),
		pollEvery:     cmp.Or(cfg.WaitPollInterval, 100*time.Millisecond),
		maxWaits:      cmp.Or(cfg.MaxWaitsPerToken, DefaultMaxWaitsPerToken),
		waits:         map[int64]int{},
		mux:           http.NewServeMux(),
		closing:       make(chan struct{}),
	}
	if _, err := openAPIDocument(); err != nil {
		return nil, err
	}
	a.routes = []apiRoute{
		{"GET", "/healthz", "healthz", false, a.healthz},
		{"GET", "/readyz", "readyz", false, a.readyz},
		{"GET", "/v1/openapi.json", "openapi", false, a.openAPI},
		{"POST", "/v1/operations", "submitOperation", true, a.submitOperation},
		{"GET", "/v1/operations", "listOperations", true, a.listOperations},
		{"GET", "/v1/operations/{id}", "getOperation", true, a.getOperation},
		{"POST", "/v1/operations/{id}/cancel", "cancelOperation", true, a.cancelOperation},
		{"POST", "/v1/leases/{key}/acquire", "acquireLease", true, a.acquireLease},
		{"POST", "/v1/leases/{key}/renew", "renewLease", true, a.renewLease},
		{"POST", "/v1/leases/{key}/release", "releaseLease", true, a.releaseLease},
		{"GET", "/v1/leases/{key}", "checkLease", true, a.checkLease},
		{"GET", "/v1/dlq", "listDeadLetters", true, a.listDeadLetters},
		{"POST", "/v1/dlq/{seq}/replay", "replayDeadLetter", true, a.replayDeadLetter},
		{"GET", "/v1/installations", "listInstallations", true, a.listInstallations},
	}
	names := []string{"metrics", "unknown"}
	for _, rt := range a.routes {
		names = append(names, rt.Name)
	}
	m, err := newAPIMetrics(cfg.Registerer, names)
	if err != nil {
		return nil, err
	}
	a.metrics = m

	methods := map[string][]string{} // path → methods, for 405
	var paths []string
	for _, rt := range a.routes {
		a.mux.Handle(rt.Method+" "+rt.Path, a.wrap(rt.Name, rt.Auth, rt.h))
		if methods[rt.Path] == nil {
			paths = append(paths, rt.Path)
		}
		methods[rt.Path] = append(methods[rt.Path], rt.Method)
	}
	metrics := promhttp.HandlerFor(a.gatherer, promhttp.HandlerOpts{ErrorLog: zap.NewStdLog(a.log)})
	a.mux.Handle("GET /metrics", a.instrument("metrics", a.recoverer(metrics)))
	paths = append(paths, "/metrics")
	methods["/metrics"] = []string{"GET"}
	for _, p := range paths {
		a.mux.Handle(p, a.methodNotAllowed(methods[p]))
	}
	a.mux.Handle("/v1/leases/", a.wrap("unknown", false, func(w http.ResponseWriter, r *http.Request, _ *Principal) error {
		return schema.Errorf(schema.CodeNotFound, "no such route; a lease key travels as one percent-encoded path segment, e.g. /v1/leases/issue%%3Aocto%%2Fapp%%2342")
	}))
	a.mux.Handle("/", a.wrap("unknown", false, func(w http.ResponseWriter, r *http.Request, _ *Principal) error {
		return schema.Errorf(schema.CodeNotFound, "no such route")
	}))
	return a, nil
}

// EndWaits ends every GET /v1/operations/{id}?wait= in progress (each
// answers with the operation as it stands) and makes later ones answer at
// once. Call it when the server shuts down, before http.Server.Shutdown,
// so that long waits do not hold the shutdown up. Safe to call twice.
func (a *API) EndWaits() { a.closingOnce.Do(func() { close(a.closing) }) }

// ServeHTTP serves the API and the handlers mounted on it.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) { a.mux.ServeHTTP(w, r) }

// Handle mounts h on pattern (a ServeMux pattern such as
// "POST /webhooks/github") beside the API's routes, with no token check:
// for handlers that authenticate otherwise. Panics in h are recovered and
// logged. Call it before serving.
func (a *API) Handle(pattern string, h http.Handler) {
	a.mux.Handle(pattern, a.recoverer(h))
}

// HandleAuthenticated mounts h on pattern behind the API's token check:
// a request without a valid token gets 401 unauthorized and h is not
// called; h finds the request's principal with PrincipalFromContext. The
// body is held to the API's limit as on the API's routes (413
// payload_too_large); other errors are h's own business (WriteAPIError
// writes errors the way the API does). Call it before serving.
func (a *API) HandleAuthenticated(pattern string, h http.Handler) {
	a.mux.Handle(pattern, a.authenticated(h))
}

// authenticated is h behind the token check and the body limit.
func (a *API) authenticated(h http.Handler) http.Handler {
	return a.recoverer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, err := a.authenticate(r)
		if err != nil {
			a.writeError(w, r, err)
			return
		}
		if err := a.limitBody(w, r); err != nil {
			a.writeError(w, r, err)
			return
		}
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), apiPrincipalKey{}, p)))
	}))
}

// HandleAuthenticatedRoutes mounts h behind the API's token check, as
// HandleAuthenticated does, on each of routes ("METHOD pattern"; a GET
// route serves HEAD too), and answers the rest of prefix as the API
// answers beside its own routes, before any token is asked for: a
// route's path asked with another method is 405 (with Allow), any other
// path under prefix 404 not_found. Call it before serving.
func (a *API) HandleAuthenticatedRoutes(prefix string, routes []string, h http.Handler) {
	methods := map[string][]string{} // pattern → methods, for 405
	var patterns []string
	for _, rt := range routes {
		method, pattern, ok := strings.Cut(rt, " ")
		if !ok {
			panic("app: HandleAuthenticatedRoutes: route " + rt + " has no method")
		}
		// Counted and timed in the API's metrics as its own routes are,
		// under the route's OpenAPI operationId.
		name := openAPIOperationID(method, pattern)
		a.metrics.add(name)
		a.mux.Handle(rt, a.instrument(name, a.authenticated(h)))
		if methods[pattern] == nil {
			patterns = append(patterns, pattern)
		}
		methods[pattern] = append(methods[pattern], method)
	}
	for _, p := range patterns {
		a.mux.Handle(p, a.methodNotAllowed(methods[p]))
	}
	a.mux.Handle(prefix, a.wrap("unknown", false, func(w http.ResponseWriter, r *http.Request, _ *Principal) error {
		return schema.Errorf(schema.CodeNotFound, "no such route")
	}))
}

// methodNotAllowed answers a route's path asked with a method other than
// methods (GET serving HEAD too): 405 invalid_request, with Allow.
func (a *API) methodNotAllowed(methods []string) http.Handler {
	ms := slices.Clone(methods)
	if slices.Contains(ms, "GET") && !slices.Contains(ms, "HEAD") {
		ms = append(ms, "HEAD")
	}
	allow := strings.Join(ms, ", ")
	return a.wrap("unknown", false, func(w http.ResponseWriter, r *http.Request, _ *Principal) error {
		w.Header().Set("Allow", allow)
		return &apiStatusError{status: http.StatusMethodNotAllowed, err: schema.Invalidf("method %s is not allowed here; allowed: %s", apiTruncate(r.Method, 20), allow)}
	})
}

type apiPrincipalKey struct{}

// PrincipalFromContext returns the principal of a request served by a
// handler mounted with HandleAuthenticated.
func PrincipalFromContext(ctx context.Context) (*Principal, bool) {
	p, ok := ctx.Value(apiPrincipalKey{}).(*Principal)
	return p, ok
}

// wrap turns a route's handler into an http.Handler: metrics, panic
// recovery, the token check, the body limit and the error body.
func (a *API) wrap(name string, auth bool, h apiHandlerFunc) http.Handler {
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var p *Principal
		if auth {
			var err error
			if p, err = a.authenticate(r); err != nil {
				a.writeError(w, r, err)
				return
			}
		}
		if err := a.limitBody(w, r); err != nil {
			a.writeError(w, r, err)
			return
		}
		if err := h(w, r, p); err != nil {
			a.writeError(w, r, err)
		}
	})
	return a.instrument(name, a.recoverer(inner))
}

// limitBody holds a request's body to the API's limit: a body announced
// over it is refused at once, one of no announced length (chunked) is
// read before the route runs, so that one over the limit is refused as one
// announced over it is, on the routes that take no body too (such a route,
// a cancel say, must not act on a request it would refuse with a
// Content-Length). Reading past the limit later is a *http.MaxBytesError.
func (a *API) limitBody(w http.ResponseWriter, r *http.Request) error {
	if r.Body == nil || r.Body == http.NoBody {
		return nil
	}
	if r.ContentLength > a.maxBody {
		return a.tooLarge()
	}
	r.Body = http.MaxBytesReader(w, r.Body, a.maxBody)
	if r.ContentLength >= 0 {
		return nil
	}
	b, err := io.ReadAll(r.Body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return a.tooLarge()
		}
		return schema.Invalidf("request body could not be read")
	}
	r.Body = io.NopCloser(bytes.NewReader(b))
	return nil
}

func (a *API) tooLarge() error {
	return schema.Errorf(schema.CodePayloadTooLarge, "request body is larger than %s", apiByteSize(a.maxBody))
}

func apiByteSize(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return strconv.FormatInt(n>>20, 10) + " MiB"
	case n >= 1<<10 && n%(1<<10) == 0:
		return strconv.FormatInt(n>>10, 10) + " KiB"
	}
	return strconv.FormatInt(n, 10) + " bytes"
}

// authenticate checks the request's bearer token. A request with more
// than one Authorization header is refused, whatever they hold: which of
// them counts would otherwise be baton's choice, and a proxy in front of
// it (checking or logging the token) may have made the other.
func (a *API) authenticate(r *http.Request) (*Principal, error) {
	if len(r.Header.Values("Authorization")) > 1 {
		return nil, errManyAPITokens
	}
	h := r.Header.Get("Authorization")
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return nil, errNoAPIToken
	}
	token = strings.TrimSpace(token)
	if token == "" {
		return nil, errNoAPIToken
	}
	p, err := a.tokens.Authenticate(r.Context(), token)
	if err != nil {
		return nil, err
	}
	return &p, nil
}

var errNoAPIToken = &schema.Error{Code: schema.CodeUnauthorized, Message: "an API token is required: Authorization: Bearer <token>"}

var errManyAPITokens = &schema.Error{Code: schema.CodeUnauthorized, Message: "give one Authorization header, not several"}

// recoverer turns a panic into a 500 internal error, logged once. A panic
// is a bug: bad input must never get here.
func (a *API) recoverer(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if v == http.ErrAbortHandler { //nolint:errorlint // a sentinel value, not a wrapped error
				panic(v)
			}
			a.log.Error("panic serving request", zap.String("event", "api_panic"),
				zap.String("method", r.Method), zap.String("path", r.URL.Path), zap.Any("panic", v), zap.StackSkip("stack", 2))
			if sr, ok := w.(*apiStatusRecorder); !ok || sr.status == 0 {
				a.writeErrorBody(w, http.StatusInternalServerError, schema.CodeInternal, "internal error", nil)
			}
		}()
		h.ServeHTTP(w, r)
	})
}

// healthz answers while the process serves HTTP.
func (a *API) healthz(w http.ResponseWriter, r *http.Request, _ *Principal) error {
	a.writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	return nil
}

// readyz runs the readiness checks: 200 when all pass, 503 otherwise.
func (a *API) readyz(w http.ResponseWriter, r *http.Request, _ *Principal) error {
	ctx, cancel := context.WithTimeout(r.Context(), a.readyTimeout)
	defer cancel()
	status, code := "ready", http.StatusOK
	checks := make(map[string]string, len(a.readiness))
	for _, c := range a.readiness {
		if err := c.Check(ctx); err != nil {
			checks[c.Name] = err.Error()
			status, code = "unavailable", http.StatusServiceUnavailable
			continue
		}
		checks[c.Name] = "ok"
	}
	a.writeJSON(w, code, struct {
		Status string            `json:"status"`
		Checks map[string]string `json:"checks"`
	}{status, checks})
	return nil
}

// openAPI serves the API's description.
func (a *API) openAPI(w http.ResponseWriter, r *http.Request, _ *Principal) error {
	if _, err := apiQuery(r); err != nil {
		return err
	}
	doc, err := openAPIDocument()
	if err != nil {
		return err
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(doc)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(doc)
	return nil
}

// writeJSON writes v as the JSON body of a response.
func (a *API) writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		a.log.Error("encode response", zap.String("event", "api_encode_failed"), zap.Error(err))
		a.writeErrorBody(w, http.StatusInternalServerError, schema.CodeInternal, "internal error", nil)
		return
	}
	body = append(body, '\n')
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// Route metric labels of every route, for tests and the description.
func (a *API) routeList() []apiRoute { return a.routes }

// String helps the logs name a route.
func (rt apiRoute) String() string { return fmt.Sprintf("%s %s", rt.Method, rt.Path) }
