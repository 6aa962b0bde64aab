package app

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
)

// apiFuzzServe sends one request straight to the handler and fails on a 5xx
// or an answer the description does not allow.
func apiFuzzServe(t *testing.T, env *apiEnv, spec *apiSpec, method, target, token string, body []byte) {
	req, err := http.NewRequest(method, "http://baton.test"+target, bytes.NewReader(body))
	if err != nil {
		return // not a request a client could send
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if len(body) > 0 {
		req.Header.Set("Content-Type", "application/json")
	}
	rec := httptest.NewRecorder()
	env.api.ServeHTTP(rec, req)
	if rec.Code >= 500 {
		t.Fatalf("%s %s with %q: %d %s", method, target, body, rec.Code, rec.Body.Bytes())
	}
	if err := spec.check(req, body, rec.Code, rec.Header(), rec.Body.Bytes()); err != nil {
		t.Fatalf("%s %s with %q: %v", method, target, body, err)
	}
}

// Random submission bodies never give a 5xx, and every answer is one the
// description allows. Seeds: testdata/fuzz/FuzzSubmitRequest.
func FuzzSubmitRequest(f *testing.F) {
	env := newAPIEnv(f)
	spec := loadAPISpec(f)
	for _, s := range []string{
		`{"idempotencyKey":"k1","action":"github.issues.comment","resource":{"type":"issue","id":"octo/demo#10"},"payload":{"body":"hi"}}`,
		`{"idempotencyKey":"k2","action":"github.pulls.merge","resource":{"type":"pull_request","id":"octo/demo#1"},"payload":{"sha":"0123456789abcdef0123456789abcdef01234567","method":"squash"},"maxAttempts":5,"correlationId":"c"}`,
		`{"idempotencyKey":"k3","action":"github.git.update_ref","resource":{"type":"ref","id":"octo/demo:heads/main"},"payload":{"sha":"0123456789abcdef0123456789abcdef01234567","force":false},"installationId":1}`,
		`{"idempotencyKey":"k4","action":"github.repos.create_status","resource":{"type":"commit","id":"acme/x@0123456789abcdef0123456789abcdef01234567"},"payload":{"state":"success","context":"ci"}}`,
		`{"idempotencyKey":"k5","action":"github.issues.add_labels","resource":{"type":"issue","id":"octo/demo#11"},"payload":{"labels":["a","b"]}}`,
		`{"idempotencyKey":1}`, `[]`, `{"a":`, "{\"idempotencyKey\":\"\xff\"}", `{"payload":{"body":"\ud800"}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		apiFuzzServe(t, env, spec, "POST", "/v1/operations", env.alice, body)
	})
}

// Random lease keys and bodies on every lease route never give a 5xx.
// Seeds: testdata/fuzz/FuzzLeaseRoutes.
func FuzzLeaseRoutes(f *testing.F) {
	env := newAPIEnv(f)
	spec := loadAPISpec(f)
	f.Add(uint8(0), "issue:octo/demo#10", true, []byte(`{"owner":"ci","ttlSeconds":30}`))
	f.Add(uint8(1), "pull_request:octo/app#42", true, []byte(`{"owner":"ci","token":1,"ttlSeconds":30}`))
	f.Add(uint8(2), "ref:octo/demo:heads/main", true, []byte(`{"owner":"ci","token":2}`))
	f.Add(uint8(3), "commit:octo/demo@0123456789abcdef0123456789abcdef01234567", true, []byte(nil))
	f.Add(uint8(0), "issue:octo/demo#10", false, []byte(`{"owner":"a/b"}`))
	f.Add(uint8(1), "%zz", false, []byte(`{"owner":"ci","token":-1}`))
	f.Add(uint8(0), "repo:octo/demo", true, []byte(`{"owner":"ci","ttlSeconds":1e9}`))
	f.Fuzz(func(t *testing.T, route uint8, key string, escape bool, body []byte) {
		seg := key
		if escape {
			seg = url.PathEscape(key)
		}
		method, suffix := "POST", ""
		switch route % 4 {
		case 0:
			suffix = "/acquire"
		case 1:
			suffix = "/renew"
		case 2:
			suffix = "/release"
		default:
			method = "GET"
		}
		apiFuzzServe(t, env, spec, method, "/v1/leases/"+seg+suffix, env.alice, body)
	})
}
