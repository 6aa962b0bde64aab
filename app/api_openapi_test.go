package app

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/executor"
	"github.com/baton-dev/baton/schema"
)

// apiTestView is a well-formed status view, as JSON.
func apiTestView(t *testing.T, mod func(map[string]any)) []byte {
	t.Helper()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	v := schema.View{
		OperationID: strings.Repeat("ab", 32), IdempotencyKey: "k", IdempotencyHash: strings.Repeat("cd", 32),
		Actor: "alice", Action: schema.ActionComment, Resource: schema.Resource{Type: "issue", ID: "octo/demo#10"},
		ResourceKey: "issue:octo/demo#10", Payload: json.RawMessage(`{"body":"hi"}`), Status: schema.StatusQueued,
		MaxAttempts: 3, CreatedAt: now, UpdatedAt: now, Result: json.RawMessage(`{}`),
		AttemptLog: []schema.Attempt{{Number: 1, StartedAt: now, EndedAt: now, ErrorCategory: executor.CategoryNetwork}},
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if mod != nil {
		mod(m)
	}
	if b, err = json.Marshal(m); err != nil {
		t.Fatal(err)
	}
	return b
}

// The validation of the tests' exchanges notices an answer without a
// header the API always sends with it, and a field of an operation the
// description does not know (a renamed field, say): both would otherwise
// pass unnoticed.
func TestOpenAPIValidationIsStrict(t *testing.T) {
	t.Parallel()
	spec := loadAPISpec(t)
	jsonHeader := func(kv ...string) http.Header {
		h := http.Header{"Content-Type": {"application/json"}}
		for i := 0; i+1 < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return h
	}
	errBody := func(code string) []byte {
		return []byte(`{"error":{"code":"` + code + `","message":"m"}}`)
	}
	id := strings.Repeat("ab", 32)
	submit := []byte(`{"idempotencyKey":"k","action":"github.issues.comment","resource":{"type":"issue","id":"octo/demo#10"},"payload":{"body":"hi"}}`)
	for _, c := range []struct {
		name, method, path string
		reqBody            []byte
		status             int
		header             http.Header
		body               []byte
		ok                 bool
	}{
		{"submit with Location", "POST", "/v1/operations", submit, 201, jsonHeader("Location", "/v1/operations/"+id), apiTestView(t, nil), true},
		{"submit without Location", "POST", "/v1/operations", submit, 201, jsonHeader(), apiTestView(t, nil), false},
		{"existing without Location", "POST", "/v1/operations", submit, 200, jsonHeader(), apiTestView(t, nil), false},
		{"get", "GET", "/v1/operations/" + id, nil, 200, jsonHeader(), apiTestView(t, nil), true},
		{"an unknown field", "GET", "/v1/operations/" + id, nil, 200, jsonHeader(),
			apiTestView(t, func(m map[string]any) { m["started_at"] = "2030-01-01T00:00:00Z" }), false},
		{"an unknown field of an attempt", "GET", "/v1/operations/" + id, nil, 200, jsonHeader(),
			apiTestView(t, func(m map[string]any) { m["attemptLog"].([]any)[0].(map[string]any)["status"] = 500 }), false},
		{"an unknown error category", "GET", "/v1/operations/" + id, nil, 200, jsonHeader(),
			apiTestView(t, func(m map[string]any) { m["lastErrorCategory"] = "weather" }), false},
		{"queue away with Retry-After", "GET", "/v1/dlq", nil, 503, jsonHeader("Retry-After", "5"), errBody("internal"), true},
		{"queue away without Retry-After", "GET", "/v1/dlq", nil, 503, jsonHeader(), errBody("internal"), false},
		{"401 with WWW-Authenticate", "GET", "/v1/operations", nil, 401, jsonHeader("WWW-Authenticate", `Bearer realm="baton"`), errBody("unauthorized"), true},
		{"401 without WWW-Authenticate", "GET", "/v1/operations", nil, 401, jsonHeader(), errBody("unauthorized"), false},
		{"405 with Allow", "DELETE", "/v1/operations", nil, 405, jsonHeader("Allow", "POST, GET, HEAD"), errBody("invalid_request"), true},
		{"405 without Allow", "DELETE", "/v1/operations", nil, 405, jsonHeader(), errBody("invalid_request"), false},
		{"readiness with an unknown field", "GET", "/readyz", nil, 200, jsonHeader(), []byte(`{"status":"ready","checks":{},"version":"1"}`), false},
	} {
		req, err := http.NewRequest(c.method, "http://baton.test"+c.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if c.reqBody != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		err = spec.check(req, c.reqBody, c.status, c.header, c.body)
		if c.ok && err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
		if !c.ok && err == nil {
			t.Errorf("%s: passes the validation", c.name)
		}
	}
}

// The error categories the description lists are the executor's.
func TestOpenAPIErrorCategories(t *testing.T) {
	t.Parallel()
	spec := loadAPISpec(t)
	categories := []string{
		executor.CategoryNetwork, executor.CategoryTimeout, executor.CategoryServerError, executor.CategoryRateLimited,
		executor.CategorySecondaryRateLimit, executor.CategoryPrimaryRateLimit, executor.CategoryValidation,
		executor.CategoryNotFound, executor.CategoryUnauthorized, executor.CategoryForbidden, executor.CategoryConflict,
		executor.CategoryInstallationUnavailable, executor.CategoryCancelled, executor.CategoryInternal,
	}
	slices.Sort(categories)
	for _, f := range []struct{ schema, field string }{{"Operation", "lastErrorCategory"}, {"Attempt", "errorCategory"}} {
		var enum []string
		for _, v := range spec.doc.Components.Schemas[f.schema].Value.Properties[f.field].Value.Enum {
			enum = append(enum, v.(string))
		}
		slices.Sort(enum)
		if !slices.Equal(enum, categories) {
			t.Errorf("%s.%s lists %v, the executor has %v", f.schema, f.field, enum, categories)
		}
	}
}

// A body over the limit is refused with 413 on every route, as described,
// those that take no body included, whether its length is announced
// (Content-Length) or not (chunked).
func TestAPIBodyTooLargeEverywhere(t *testing.T) {
	t.Parallel()
	env := newAPIEnv(t)
	big := strings.Repeat(" ", DefaultMaxBodyBytes+1)
	for _, rt := range env.api.routeList() {
		path := strings.NewReplacer("{id}", strings.Repeat("ab", 32), "{key}", "issue%3Aocto%2Fdemo%2310", "{seq}", "1").Replace(rt.Path)
		r := env.do(rt.Method, path, env.admin, big)
		if r.status != http.StatusRequestEntityTooLarge || r.errorCode() != "payload_too_large" {
			t.Errorf("%s with a body over the limit: %d %s", rt, r.status, apiTruncate(string(r.body), 200))
		}
		r = env.do(rt.Method, path, env.admin, struct{ io.Reader }{strings.NewReader(big)})
		if r.status != http.StatusRequestEntityTooLarge || r.errorCode() != "payload_too_large" {
			t.Errorf("%s with a chunked body over the limit: %d %s", rt, r.status, apiTruncate(string(r.body), 200))
		}
	}
}
