package ghsim

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
)

// GitHub's published OpenAPI description (@octokit/openapi), trimmed to the
// operations the simulator serves and the webhook payloads it sends by
// testdata/trim. Every response the tests receive, and every webhook they
// are sent, is validated against it.
const specFile = "testdata/api.github.com.trimmed.json"

type apiSpec struct {
	doc    *openapi3.T
	ops    []specOp
	hooks  map[string]string // webhook name ("pull-request-closed") → schema name
	basic  *openapi3.Schema
	loaded error
}

type specOp struct {
	method   string
	template string
	segs     []string
	route    *routers.Route
}

var (
	specOnce sync.Once
	spec     apiSpec
)

func loadSpec(t testing.TB) *apiSpec {
	t.Helper()
	specOnce.Do(func() {
		loader := openapi3.NewLoader()
		doc, err := loader.LoadFromFile(specFile)
		if err != nil {
			spec.loaded = err
			return
		}
		spec.doc = doc
		for path, item := range doc.Paths.Map() {
			for method, op := range item.Operations() {
				spec.ops = append(spec.ops, specOp{
					method: method, template: path, segs: strings.Split(strings.TrimPrefix(path, "/"), "/"),
					route: &routers.Route{Spec: doc, Path: path, PathItem: item, Method: method, Operation: op},
				})
			}
		}
		raw, _ := doc.Extensions["x-ghsim-webhooks"].(map[string]any)
		spec.hooks = map[string]string{}
		for name, ref := range raw {
			spec.hooks[name] = strings.TrimPrefix(ref.(string), "#/components/schemas/")
		}
		spec.basic = doc.Components.Schemas["basic-error"].Value
	})
	if spec.loaded != nil {
		t.Fatalf("load %s: %v", specFile, spec.loaded)
	}
	return &spec
}

// find matches a request to an operation of the description: literal
// segments must match, {param} segments match one segment, and a trailing
// {ref} matches the rest of the path (git refs contain slashes). The most
// literal match wins.
func (s *apiSpec) find(method, path string) (*routers.Route, map[string]string) {
	segs := strings.Split(strings.TrimPrefix(path, "/"), "/")
	var best *specOp
	var bestParams map[string]string
	bestLiterals := -1
	for i := range s.ops {
		op := &s.ops[i]
		if op.method != method {
			continue
		}
		params, literals, ok := matchTemplate(op.segs, segs)
		if ok && literals > bestLiterals {
			best, bestParams, bestLiterals = op, params, literals
		}
	}
	if best == nil {
		return nil, nil
	}
	return best.route, bestParams
}

func matchTemplate(tmpl, segs []string) (map[string]string, int, bool) {
	params := map[string]string{}
	literals := 0
	for i, p := range tmpl {
		if i >= len(segs) {
			return nil, 0, false
		}
		if strings.HasPrefix(p, "{") {
			name := strings.Trim(p, "{}")
			if name == "ref" && i == len(tmpl)-1 {
				params[name] = strings.Join(segs[i:], "/")
				return params, literals, true
			}
			params[name] = segs[i]
			continue
		}
		if p != segs[i] {
			return nil, 0, false
		}
		literals++
	}
	return params, literals, len(tmpl) == len(segs)
}

// genericStatuses are answers GitHub's REST documentation says any
// operation can give though its description does not list them for each:
// bad credentials (401), rate limits (403 and 429, "Rate limits for the
// REST API"), a resource the token cannot see (404) and server errors.
// Their bodies must be GitHub's basic error with its message.
func genericStatus(code int) bool {
	switch code {
	case 401, 403, 404, 429:
		return true
	}
	return code >= 500 && code <= 599
}

// validate checks one response against the description.
func (s *apiSpec) validate(req *http.Request, status int, header http.Header, body []byte) error {
	path := strings.TrimPrefix(req.URL.Path, "/api/v3")
	route, params := s.find(req.Method, path)
	if route == nil {
		return fmt.Errorf("%s %s: no such operation in GitHub's description", req.Method, path)
	}
	if route.Operation.Responses.Status(status) == nil && genericStatus(status) {
		var v any
		if err := json.Unmarshal(body, &v); err != nil {
			return fmt.Errorf("%s %s: %d body is not JSON: %v", req.Method, path, status, err)
		}
		if err := s.basic.VisitJSON(v, openapi3.DisableSchemaErrorDetails()); err != nil {
			return fmt.Errorf("%s %s: %d body is not a basic-error: %v", req.Method, path, status, err)
		}
		// basic-error requires nothing; GitHub's errors always say why.
		if m, ok := v.(map[string]any); !ok || m["message"] == nil || m["message"] == "" {
			return fmt.Errorf("%s %s: %d body has no message: %s", req.Method, path, status, body)
		}
		return nil
	}
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route}
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in, Status: status, Header: header,
		Body:    io.NopCloser(bytes.NewReader(body)),
		Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true, SchemaValidationOptions: []openapi3.SchemaValidationOption{openapi3.DisableSchemaErrorDetails()}},
	}
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		msg := err.Error()
		if len(msg) > 3000 {
			msg = msg[:3000] + "…"
		}
		return fmt.Errorf("%s %s (%s): %d: %s", req.Method, path, route.Path, status, msg)
	}
	return nil
}

// validateWebhook checks a webhook payload against its event's schema.
func (s *apiSpec) validateWebhook(event, action string, body []byte) error {
	name := strings.ReplaceAll(event, "_", "-")
	if action != "" {
		name += "-" + action
	}
	schemaName, ok := s.hooks[name]
	if !ok {
		return fmt.Errorf("webhook %s: no schema kept for it (add it to testdata/trim)", name)
	}
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		return fmt.Errorf("webhook %s: %v", name, err)
	}
	if err := s.doc.Components.Schemas[schemaName].Value.VisitJSON(v, openapi3.MultiErrors(), openapi3.DisableSchemaErrorDetails()); err != nil {
		msg := err.Error()
		if len(msg) > 3000 {
			msg = msg[:3000] + "…"
		}
		return fmt.Errorf("webhook %s: %s", name, msg)
	}
	return nil
}

// validatingTransport validates every response that passes through it
// against GitHub's description, failing the test on a mismatch.
type validatingTransport struct {
	t     testing.TB
	base  http.RoundTripper
	spec  *apiSpec
	count *atomic.Int64
}

func (v *validatingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := v.base.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if err := v.spec.validate(req, resp.StatusCode, resp.Header, body); err != nil {
		v.t.Errorf("response does not match GitHub's description: %v", err)
	}
	if resp.Header.Get("X-GitHub-Request-Id") == "" {
		v.t.Errorf("%s %s: no X-GitHub-Request-Id", req.Method, req.URL.Path)
	}
	if resp.Header.Get("X-RateLimit-Limit") == "" || resp.Header.Get("X-RateLimit-Resource") == "" {
		v.t.Errorf("%s %s: no x-ratelimit headers", req.Method, req.URL.Path)
	}
	v.count.Add(1)
	return resp, nil
}

func TestSpecMatchesRoutes(t *testing.T) {
	t.Parallel()
	sp := loadSpec(t)
	for _, tc := range []struct{ method, path, want string }{
		{"GET", "/repos/octo/demo/git/ref/heads/feature/x", "/repos/{owner}/{repo}/git/ref/{ref}"},
		{"PATCH", "/repos/octo/demo/git/refs/heads/main", "/repos/{owner}/{repo}/git/refs/{ref}"},
		{"GET", "/repos/octo/demo/commits/main/status", "/repos/{owner}/{repo}/commits/{ref}/status"},
		{"PUT", "/repos/octo/demo/pulls/1/merge", "/repos/{owner}/{repo}/pulls/{pull_number}/merge"},
		{"GET", "/app/hook/deliveries/12", "/app/hook/deliveries/{delivery_id}"},
	} {
		route, _ := sp.find(tc.method, tc.path)
		if route == nil || route.Path != tc.want {
			t.Errorf("%s %s matched %v, want %s", tc.method, tc.path, route, tc.want)
		}
	}
	// The validator must catch a wrong body, or it proves nothing.
	req, _ := http.NewRequest("GET", "http://x/repos/o/r/git/ref/heads/main", nil)
	if err := sp.validate(req, 200, http.Header{"Content-Type": {"application/json"}}, []byte(`{"ref":1}`)); err == nil {
		t.Error("a malformed git-ref validated")
	}
	if err := sp.validate(req, 418, http.Header{"Content-Type": {"application/json"}}, []byte(`{}`)); err == nil {
		t.Error("an unlisted status validated")
	}
	if err := sp.validateWebhook("pull_request", "closed", []byte(`{"action":"closed"}`)); err == nil {
		t.Error("a malformed webhook validated")
	}
}
