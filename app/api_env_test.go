package app

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/baton-dev/baton/app/client"
	"github.com/baton-dev/baton/coordinator"
	"github.com/baton-dev/baton/executor"
	"github.com/baton-dev/baton/internal/sqlite"
	"github.com/baton-dev/baton/queue"
	"github.com/baton-dev/baton/schema"
)

// apiEnv is a running API on real parts: SQLite in a temporary directory,
// the embedded NATS broker, the executor and its store, the lease
// coordinator, the token store. Every answer that passes through env.http
// is validated against the OpenAPI description.
type apiEnv struct {
	t        testing.TB
	URL      string
	api      *API
	db       *sqlite.DB
	store    *executor.SQLiteStore
	exec     *executor.Executor
	broker   *queue.Broker
	coord    *coordinator.Coordinator
	clock    *coordinator.FakeClock // nil unless apiEnvOptions.fakeClock
	tokens   *TokenStore
	registry *prometheus.Registry
	http     *http.Client

	// Tokens: admin; alice and bob on installation 1; carol on
	// installation 2; dave on every installation.
	admin, alice, bob, carol, dave string
}

type apiEnvOptions struct {
	fakeClock bool
	ops       Operations // replaces the executor (panics, internal errors)
	readiness []ReadinessCheck
	logger    *zap.Logger
}

// The installations of the tests: octo/* is installation 1, acme/* 2,
// frozen/* is installation 3, suspended, anything else is not installed.
var apiTestInstallations = apiInstallationsFunc(func(_ context.Context, owner, repo string) (int64, error) {
	switch owner {
	case "octo":
		return 1, nil
	case "acme":
		return 2, nil
	case "frozen":
		// As the registry answers it (Installations.InstallationOf).
		return 0, &schema.Error{Code: schema.CodeForbidden, Message: "installation 3 is suspended",
			Err: &InstallationUnavailableError{ID: 3, Reason: "suspended"}}
	}
	return 0, schema.Errorf(schema.CodeForbidden, "baton is not installed on %s/%s", owner, repo)
})

// apiInstallationsFunc is the seam RepositoryInstallations as a function.
type apiInstallationsFunc func(ctx context.Context, owner, repo string) (int64, error)

func (f apiInstallationsFunc) InstallationOf(ctx context.Context, owner, repo string) (int64, error) {
	return f(ctx, owner, repo)
}

func newAPIEnv(t testing.TB, mods ...func(*apiEnvOptions)) *apiEnv {
	t.Helper()
	var o apiEnvOptions
	for _, m := range mods {
		m(&o)
	}
	ctx := context.Background()
	dir := t.TempDir()
	db, err := sqlite.Open(ctx, filepath.Join(dir, "baton.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	env := &apiEnv{t: t, db: db, registry: prometheus.NewRegistry()}

	env.broker, err = queue.New(queue.Config{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := env.broker.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := env.broker.Stop(ctx); err != nil {
			t.Errorf("broker stop: %v", err)
		}
	})
	env.store = executor.NewSQLiteStore(db, nil)
	env.exec, err = executor.New(executor.Config{Store: env.store, Dispatcher: env.broker})
	if err != nil {
		t.Fatal(err)
	}
	if err := env.exec.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.exec.Stop(context.Background()) })

	ccfg := coordinator.Config{DB: db}
	if o.fakeClock {
		env.clock = coordinator.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
		ccfg.Clock = env.clock
	}
	env.coord, err = coordinator.New(ccfg)
	if err != nil {
		t.Fatal(err)
	}
	leases, err := NewCoordinatorLeases(env.coord)
	if err != nil {
		t.Fatal(err)
	}
	env.tokens, err = NewTokenStore(db, TokenStoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	env.admin = env.newToken(TokenSpec{Actor: "root", Admin: true})
	env.alice = env.newToken(TokenSpec{Actor: "alice", Installations: []int64{1}})
	env.bob = env.newToken(TokenSpec{Actor: "bob", Installations: []int64{1}})
	env.carol = env.newToken(TokenSpec{Actor: "carol", Installations: []int64{2}})
	env.dave = env.newToken(TokenSpec{Actor: "dave", AllInstallations: true})

	var ops Operations = env.exec
	if o.ops != nil {
		ops = o.ops
	}
	logger := o.logger
	if logger == nil {
		logger = zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
	}
	env.api, err = NewAPI(APIConfig{
		Operations:       ops,
		Leases:           leases,
		DeadLetters:      env.broker,
		Installations:    apiTestInstallations,
		Tokens:           env.tokens,
		Readiness:        o.readiness,
		Gatherer:         env.registry,
		Registerer:       env.registry,
		Logger:           logger,
		WaitPollInterval: 10 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(env.api)
	t.Cleanup(srv.Close)
	env.URL = srv.URL
	env.http = &http.Client{Transport: &apiSpecTransport{t: t, base: srv.Client().Transport, spec: loadAPISpec(t)}}
	return env
}

func (e *apiEnv) newToken(spec TokenSpec) string {
	e.t.Helper()
	tok, _, err := e.tokens.CreateToken(context.Background(), spec)
	if err != nil {
		e.t.Fatal(err)
	}
	return tok
}

// client returns an API client with token whose answers are validated.
func (e *apiEnv) client(token string) *client.Client {
	e.t.Helper()
	c, err := client.New(e.URL, client.WithToken(token), client.WithHTTPClient(e.http))
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

// apiResponse is an answer as a test sees it.
type apiResponse struct {
	status int
	header http.Header
	body   []byte
}

// errorCode returns the code of an error body ("" if it is not one).
func (r apiResponse) errorCode() string {
	var eb APIErrorBody
	_ = json.Unmarshal(r.body, &eb)
	return string(eb.Error.Code)
}

func (r apiResponse) decode(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("decode %s: %v", r.body, err)
	}
}

// do sends a request: body is a string or []byte (sent as is) or any other
// value (sent as JSON); path is already escaped.
func (e *apiEnv) do(method, path, token string, body any) apiResponse {
	e.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	case io.Reader: // of no length known beforehand: sent chunked
		rd = b
	default:
		j, err := json.Marshal(b)
		if err != nil {
			e.t.Fatal(err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, e.URL+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := e.http.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return apiResponse{status: resp.StatusCode, header: resp.Header, body: b}
}

// apiSubmission is a valid comment submission on octo/demo#n.
func apiSubmission(key string, n int, body string) map[string]any {
	return map[string]any{
		"idempotencyKey": key,
		"action":         schema.ActionComment,
		"resource":       map[string]any{"type": "issue", "id": fmt.Sprintf("octo/demo#%d", n)},
		"payload":        map[string]any{"body": body},
	}
}

// submit submits a comment as token and returns the operation.
func (e *apiEnv) submit(token, key string, n int) schema.View {
	e.t.Helper()
	r := e.do("POST", "/v1/operations", token, apiSubmission(key, n, "hello "+key))
	if r.status != http.StatusCreated {
		e.t.Fatalf("submit %s: %d %s", key, r.status, r.body)
	}
	var v schema.View
	r.decode(e.t, &v)
	return v
}

// finish moves a queued operation to succeeded through the store, the way
// the executor would.
func (e *apiEnv) finish(id string) {
	e.t.Helper()
	ctx := context.Background()
	rec, err := e.store.Get(ctx, id)
	if err != nil {
		e.t.Fatal(err)
	}
	now := time.Now().UTC()
	rec.Status, rec.StartedAt, rec.UpdatedAt = schema.StatusRunning, &now, now
	if err := e.store.Save(ctx, &rec); err != nil {
		e.t.Fatal(err)
	}
	done := now.Add(time.Millisecond)
	rec.Status, rec.Outcome, rec.CompletedAt, rec.UpdatedAt, rec.Attempts = schema.StatusSucceeded, schema.OutcomeSucceeded, &done, done, 1
	rec.Result = json.RawMessage(`{"commentId":1}`)
	if err := e.store.Save(ctx, &rec); err != nil {
		e.t.Fatal(err)
	}
}

// apiLeasePath is the path of a lease route for key.
func apiLeasePath(key, verb string) string {
	p := client.LeasePath(key)
	if verb != "" {
		p += "/" + verb
	}
	return p
}

// The OpenAPI description, loaded once for all tests.

type apiSpec struct {
	doc    *openapi3.T
	routes []apiSpecRoute
	errors *openapi3.Schema
}

type apiSpecRoute struct {
	method string
	segs   []string
	route  *routers.Route
}

var (
	apiSpecOnce sync.Once
	apiSpecVal  *apiSpec
	apiSpecErr  error
)

func loadAPISpec(t testing.TB) *apiSpec {
	t.Helper()
	apiSpecOnce.Do(func() {
		loader := openapi3.NewLoader()
		doc, err := loader.LoadFromData(OpenAPIDocument())
		if err != nil {
			apiSpecErr = err
			return
		}
		if err := doc.Validate(context.Background()); err != nil {
			apiSpecErr = fmt.Errorf("the description is not valid OpenAPI: %w", err)
			return
		}
		s := &apiSpec{doc: doc, errors: doc.Components.Schemas["Error"].Value}
		for path, item := range doc.Paths.Map() {
			for method, op := range item.Operations() {
				s.routes = append(s.routes, apiSpecRoute{
					method: method,
					segs:   strings.Split(strings.TrimPrefix(path, "/"), "/"),
					route:  &routers.Route{Spec: doc, Path: path, PathItem: item, Method: method, Operation: op},
				})
			}
		}
		apiSpecVal = s
	})
	if apiSpecErr != nil {
		t.Fatal(apiSpecErr)
	}
	return apiSpecVal
}

// find matches a request path (escaped) to a described operation. known
// says whether some operation has this path, whatever its method.
func (s *apiSpec) find(method, escapedPath string) (route *routers.Route, params map[string]string, known bool) {
	raw := strings.Split(strings.TrimPrefix(escapedPath, "/"), "/")
	segs := make([]string, len(raw))
	for i, r := range raw {
		u, err := url.PathUnescape(r)
		if err != nil {
			return nil, nil, false
		}
		segs[i] = u
	}
	for _, sr := range s.routes {
		if len(sr.segs) != len(segs) {
			continue
		}
		p := map[string]string{}
		ok := true
		for i, tmpl := range sr.segs {
			if strings.HasPrefix(tmpl, "{") {
				if segs[i] == "" {
					ok = false
					break
				}
				p[strings.Trim(tmpl, "{}")] = segs[i]
			} else if tmpl != segs[i] {
				ok = false
				break
			}
		}
		if !ok {
			continue
		}
		known = true
		if sr.method == method {
			return sr.route, p, true
		}
	}
	return nil, nil, known
}

// check validates one exchange: the answer always, the request when the
// answer is a success (failures are often about bad requests on purpose).
func (s *apiSpec) check(req *http.Request, reqBody []byte, status int, header http.Header, body []byte) error {
	if req.Method == http.MethodHead {
		return nil
	}
	if (status == http.StatusMovedPermanently || status == http.StatusTemporaryRedirect || status == http.StatusPermanentRedirect) &&
		path.Clean(req.URL.Path) != req.URL.Path {
		return nil // the router sends unclean paths to their clean form
	}
	route, params, known := s.find(req.Method, req.URL.EscapedPath())
	if route == nil {
		if known && status == http.StatusMethodNotAllowed && header.Get("Allow") == "" {
			// The description's MethodNotAllowed answer requires it.
			return fmt.Errorf("%s %s answered 405 without Allow", req.Method, req.URL.EscapedPath())
		}
		if (!known && status == http.StatusNotFound) || (known && status == http.StatusMethodNotAllowed) {
			return s.checkErrorBody(body)
		}
		return fmt.Errorf("%s %s answered %d and is not described", req.Method, req.URL.EscapedPath(), status)
	}
	opts := &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true, AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: opts}
	if status >= 200 && status < 300 {
		r2 := req.Clone(context.Background())
		r2.Body = io.NopCloser(bytes.NewReader(reqBody))
		in.Request = r2
		if err := openapi3filter.ValidateRequest(context.Background(), in); err != nil {
			return fmt.Errorf("request %s %s: %v", req.Method, req.URL.EscapedPath(), err)
		}
	}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: status, Header: header,
		Body: io.NopCloser(bytes.NewReader(body)), Options: opts}
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		return fmt.Errorf("answer %d to %s %s: %v\n%s", status, req.Method, req.URL.EscapedPath(), err, body)
	}
	return nil
}

func (s *apiSpec) checkErrorBody(body []byte) error {
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		return fmt.Errorf("error answer is not JSON: %q", body)
	}
	return s.errors.VisitJSON(v)
}

// apiSpecTransport validates every exchange against the description
// and fails the test on a mismatch.
type apiSpecTransport struct {
	t    testing.TB
	base http.RoundTripper
	spec *apiSpec
}

func (v *apiSpecTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	var reqBody []byte
	if req.Body != nil {
		var err error
		if reqBody, err = io.ReadAll(req.Body); err != nil {
			return nil, err
		}
		req.Body.Close()
		req = req.Clone(req.Context())
		req.Body = io.NopCloser(bytes.NewReader(reqBody))
	}
	resp, err := v.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if err := v.spec.check(req, reqBody, resp.StatusCode, resp.Header, body); err != nil {
		v.t.Errorf("OpenAPI: %v", err)
	}
	return resp, nil
}
