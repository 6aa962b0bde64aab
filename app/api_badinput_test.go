package app

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/schema"
)

// apiState is everything a request could change: operation records,
// leases and their token counter, API tokens, and the queue's counters.
type apiState struct {
	Operations []string
	Leases     []string
	LastToken  int64
	Tokens     []string
	Dispatched uint64
	DeadLetter int
}

func (e *apiEnv) state() apiState {
	e.t.Helper()
	ctx := context.Background()
	var s apiState
	rows := func(q string, scan func() []any, add func()) {
		r, err := e.db.Query(ctx, q)
		if err != nil {
			e.t.Fatal(err)
		}
		defer r.Close()
		for r.Next() {
			if err := r.Scan(scan()...); err != nil {
				e.t.Fatal(err)
			}
			add()
		}
		if err := r.Err(); err != nil {
			e.t.Fatal(err)
		}
	}
	var a, b, c string
	var n, m int64
	rows(`SELECT operation_id, status || ' ' || updated_at || ' ' || cancellation_requested, hex(body) FROM operations ORDER BY seq`,
		func() []any { return []any{&a, &b, &c} }, func() { s.Operations = append(s.Operations, a+" "+b+" "+c) })
	rows(`SELECT key, owner, token, expires_at FROM leases ORDER BY key`,
		func() []any { return []any{&a, &b, &n, &m} }, func() { s.Leases = append(s.Leases, fmt.Sprint(a, b, n, m)) })
	if err := e.db.QueryRow(ctx, `SELECT last FROM lease_tokens`).Scan(&s.LastToken); err != nil {
		e.t.Fatal(err)
	}
	rows(`SELECT id, actor, COALESCE(revoked_at, 0) FROM api_tokens ORDER BY id`,
		func() []any { return []any{&n, &a, &m} }, func() { s.Tokens = append(s.Tokens, fmt.Sprint(n, a, m)) })
	s.Dispatched = e.broker.Stats().Dispatched
	dls, err := e.broker.DeadLetters(ctx, 0, 0)
	if err != nil {
		e.t.Fatal(err)
	}
	s.DeadLetter = len(dls)
	return s
}

// Every bad request gets its documented 4xx and changes nothing.
func TestAPIBadInput(t *testing.T) {
	t.Parallel()
	env := newAPIEnv(t)
	ctx := context.Background()

	// What the cases run against: a queued operation of alice, a terminal
	// one, a lease alice holds, a revoked token.
	queued := env.submit(env.alice, "queued", 10)
	done := env.submit(env.alice, "done", 11)
	env.finish(done.OperationID)
	const leaseKey = "issue:octo/demo#12"
	grant, err := env.client(env.alice).AcquireLease(ctx, leaseKey, "ci", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	revoked := env.newToken(TokenSpec{Actor: "mallory", Installations: []int64{1}})
	tokens, _ := env.tokens.ListTokens(ctx)
	if _, err := env.tokens.RevokeToken(ctx, tokens[len(tokens)-1].ID); err != nil {
		t.Fatal(err)
	}

	valid := func(mod func(m map[string]any)) map[string]any {
		m := apiSubmission("bad-input", 10, "hi")
		mod(m)
		return m
	}
	js := func(v any) string {
		b, _ := json.Marshal(v)
		return string(b)
	}
	ok := js(apiSubmission("bad-input", 10, "hi"))
	lease := apiLeasePath(leaseKey, "")
	op := "/v1/operations/" + queued.OperationID

	cases := []struct {
		name   string
		method string
		path   string
		token  string
		body   any
		status int
		code   string
	}{
		// Submissions: the body.
		{"malformed JSON", "POST", "/v1/operations", env.alice, `{"idempotencyKey":`, 400, "invalid_request"},
		{"not JSON", "POST", "/v1/operations", env.alice, `hello`, 400, "invalid_request"},
		{"empty body", "POST", "/v1/operations", env.alice, ``, 400, "invalid_request"},
		{"JSON array", "POST", "/v1/operations", env.alice, `[]`, 400, "invalid_request"},
		{"JSON string", "POST", "/v1/operations", env.alice, `"submit"`, 400, "invalid_request"},
		{"JSON null", "POST", "/v1/operations", env.alice, `null`, 400, "invalid_request"},
		{"unknown field", "POST", "/v1/operations", env.alice, valid(func(m map[string]any) { m["actor"] = "root" }), 400, "invalid_request"},
		{"unknown field in resource", "POST", "/v1/operations", env.alice, valid(func(m map[string]any) {
			m["resource"] = map[string]any{"type": "issue", "id": "octo/demo#10", "owner": "x"}
		}), 400, "invalid_request"},
		{"two objects", "POST", "/v1/operations", env.alice, ok + ok, 400, "invalid_request"},
		{"trailing garbage", "POST", "/v1/operations", env.alice, ok + " x", 400, "invalid_request"},
		{"idempotencyKey a number", "POST", "/v1/operations", env.alice, valid(func(m map[string]any) { m["idempotencyKey"] = 7 }), 400, "invalid_request"},
		{"maxAttempts a string", "POST", "/v1/operations", env.alice, valid(func(m map[string]any) { m["maxAttempts"] = "3" }), 400, "invalid_request"},
		{"resource a string", "POST", "/v1/operations", env.alice, valid(func(m map[string]any) { m["resource"] = "issue:octo/demo#10" }), 400, "invalid_request"},
		{"installationId a string", "POST", "/v1/operations", env.alice, valid(func(m map[string]any) { m["installationId"] = "1" }), 400, "invalid_request"},
		{"installationId fractional", "POST", "/v1/operations", env.alice, valid(func(m map[string]any) { m["installationId"] = 1.5 }), 400, "invalid_request"},
		{"installationId negative", "POST", "/v1/operations", env.alice, valid(func(m map[string]any) { m["installationId"] = -1 }), 400, "invalid_request"},
		{"installationId of another installation", "POST", "/v1/operations", env.alice, valid(func(m map[string]any) { m["installationId"] = 2 }), 400, "invalid_request"},
		{"missing idempotencyKey", "POST", "/v1/operations", env.alice, valid(func(m map[string]any) { delete(m, "idempotencyKey") }), 400, "invalid_request"},
		{"idempotencyKey too long", "POST", "/v1/operations", env.alice, valid(func(m map[string]any) { m["idempotencyKey"] = strings.Repeat("k", 256) }), 400, "invalid_request"},
		{"idempotencyKey with a control character", "POST", "/v1/operations", env.alice, valid(func(m map[string]any) { m["idempotencyKey"] = "a\x00b" }), 400, "invalid_request"},
		{"unknown action", "POST", "/v1/operations", env.alice, valid(func(m map[string]any) { m["action"] = "github.repos.delete" }), 400, "invalid_request"},
		{"missing action", "POST", "/v1/operations", env.alice, valid(func(m map[string]any) { delete(m, "action") }), 400, "invalid_request"},
		{"resource that does not fit the action", "POST", "/v1/operations", env.alice, valid(func(m map[string]any) {
			m["resource"] = map[string]any{"type": "pull_request", "id": "octo/demo#10"}
		}), 400, "invalid_request"},
		{"malformed resource id", "POST", "/v1/operations", env.alice, valid(func(m map[string]any) {
			m["resource"] = map[string]any{"type": "issue", "id": "octo/demo"}
		}), 400, "invalid_request"},
		{"missing payload", "POST", "/v1/operations", env.alice, valid(func(m map[string]any) { delete(m, "payload") }), 400, "invalid_request"},
		{"payload an array", "POST", "/v1/operations", env.alice, valid(func(m map[string]any) { m["payload"] = []int{1} }), 400, "invalid_request"},
		{"payload with a field the action does not take", "POST", "/v1/operations", env.alice, valid(func(m map[string]any) {
			m["payload"] = map[string]any{"body": "x", "title": "y"}
		}), 400, "invalid_request"},
		// Strict JSON: names match exactly, once, in valid UTF-8.
		{"field name in another case", "POST", "/v1/operations", env.alice, valid(func(m map[string]any) {
			m["IdempotencyKey"] = m["idempotencyKey"]
			delete(m, "idempotencyKey")
		}), 400, "invalid_request"},
		{"resource field names in another case", "POST", "/v1/operations", env.alice, valid(func(m map[string]any) {
			m["resource"] = map[string]any{"Type": "issue", "ID": "octo/demo#10"}
		}), 400, "invalid_request"},
		{"idempotencyKey twice", "POST", "/v1/operations", env.alice, `{"idempotencyKey":"k8","idempotencyKey":"k9",` + ok[1:], 400, "invalid_request"},
		{"idempotencyKey twice, the same", "POST", "/v1/operations", env.alice, `{"idempotencyKey":"queued",` + js(apiSubmission("queued", 10, "hello queued"))[1:], 400, "invalid_request"},
		{"invalid UTF-8 in idempotencyKey", "POST", "/v1/operations", env.alice, strings.Replace(ok, `"bad-input"`, "\"bad-\xffinput\"", 1), 400, "invalid_request"},
		{"idempotencyKey a lone surrogate", "POST", "/v1/operations", env.alice, strings.Replace(ok, `"bad-input"`, `"bad-\ud800"`, 1), 400, "invalid_request"},
		{"invalid UTF-8 in a field name", "POST", "/v1/operations", env.alice, strings.Replace(ok, `"action"`, "\"act\xffion\"", 1), 400, "invalid_request"},
		{"payload field in another case", "POST", "/v1/operations", env.alice, valid(func(m map[string]any) {
			m["payload"] = map[string]any{"Body": "a"}
		}), 400, "invalid_request"},
		{"payload field in two cases", "POST", "/v1/operations", env.alice, valid(func(m map[string]any) {
			m["payload"] = map[string]any{"body": "x", "Body": "y"}
		}), 400, "invalid_request"},
		{"payload field twice", "POST", "/v1/operations", env.alice, strings.Replace(ok, `"payload":{"body":"hi"}`, `"payload":{"body":"x","body":"hi"}`, 1), 400, "invalid_request"},
		{"payload with a name twice deep inside", "POST", "/v1/operations", env.alice, strings.Replace(ok, `"payload":{"body":"hi"}`, `"payload":{"body":"hi","x":[{"a":1,"a":2}]}`, 1), 400, "invalid_request"},
		{"invalid UTF-8 in the payload", "POST", "/v1/operations", env.alice, strings.Replace(ok, `"payload":{"body":"hi"}`, "\"payload\":{\"body\":\"h\xffi\"}", 1), 400, "invalid_request"},
		{"NUL in the comment body", "POST", "/v1/operations", env.alice, valid(func(m map[string]any) { m["payload"] = map[string]any{"body": "a\x00b"} }), 400, "invalid_request"},
		{"NUL in a status description", "POST", "/v1/operations", env.alice, valid(func(m map[string]any) {
			m["action"], m["resource"] = schema.ActionCreateStatus, map[string]any{"type": "commit", "id": "octo/demo@" + strings.Repeat("a", 40)}
			m["payload"] = map[string]any{"state": "success", "context": "ci", "description": "ok\x00"}
		}), 400, "invalid_request"},
		{"invalid UTF-8 in the action", "POST", "/v1/operations", env.alice, strings.Replace(ok, schema.ActionComment, "github.issues.comm\xffent", 1), 400, "invalid_request"},
		{"maxAttempts over 10", "POST", "/v1/operations", env.alice, valid(func(m map[string]any) { m["maxAttempts"] = 11 }), 400, "invalid_request"},
		{"correlationId too long", "POST", "/v1/operations", env.alice, valid(func(m map[string]any) { m["correlationId"] = strings.Repeat("c", 129) }), 400, "invalid_request"},
		{"query parameter on submit", "POST", "/v1/operations?dryRun=1", env.alice, ok, 400, "invalid_request"},
		{"body over 1 MiB", "POST", "/v1/operations", env.alice, `{"idempotencyKey":"` + strings.Repeat("x", 1<<20) + `"}`, 413, "payload_too_large"},
		{"payload over 256 KiB", "POST", "/v1/operations", env.alice, valid(func(m map[string]any) {
			m["payload"] = map[string]any{"body": strings.Repeat("b", 300<<10)}
		}), 413, "payload_too_large"},
		{"idempotency key reused with another payload", "POST", "/v1/operations", env.alice, apiSubmission("queued", 10, "other"), 422, "idempotency_conflict"},
		// Submissions: who asks.
		{"repository of another installation", "POST", "/v1/operations", env.alice, valid(func(m map[string]any) {
			m["resource"] = map[string]any{"type": "issue", "id": "acme/site#1"}
		}), 403, "forbidden"},
		{"repository baton is not installed on", "POST", "/v1/operations", env.alice, valid(func(m map[string]any) {
			m["resource"] = map[string]any{"type": "issue", "id": "nobody/thing#1"}
		}), 403, "forbidden"},
		{"suspended installation", "POST", "/v1/operations", env.dave, valid(func(m map[string]any) {
			m["resource"] = map[string]any{"type": "issue", "id": "frozen/app#1"}
		}), 403, "forbidden"},
		{"no token", "POST", "/v1/operations", "", ok, 401, "unauthorized"},
		{"malformed token", "POST", "/v1/operations", "hunter2", ok, 401, "unauthorized"},
		{"unknown token", "POST", "/v1/operations", TokenPrefix + strings.Repeat("Z", 43), ok, 401, "unauthorized"},
		{"revoked token", "POST", "/v1/operations", revoked, ok, 401, "unauthorized"},
		// Reading and cancelling.
		{"another actor's operation", "GET", op, env.bob, nil, 404, "not_found"},
		{"missing operation", "GET", "/v1/operations/" + strings.Repeat("0", 64), env.alice, nil, 404, "not_found"},
		{"malformed operation ID", "GET", "/v1/operations/..%2F..%2Fetc", env.alice, nil, 404, "not_found"},
		{"wait not a duration", "GET", op + "?wait=soon", env.alice, nil, 400, "invalid_request"},
		{"negative wait", "GET", op + "?wait=-1s", env.alice, nil, 400, "invalid_request"},
		{"wait given twice", "GET", op + "?wait=1s&wait=2s", env.alice, nil, 400, "invalid_request"},
		{"unknown query parameter", "GET", op + "?verbose=1", env.alice, nil, 400, "invalid_request"},
		{"revoked token reads", "GET", op, revoked, nil, 401, "unauthorized"},
		{"cancel another actor's operation", "POST", op + "/cancel", env.bob, nil, 404, "not_found"},
		{"cancel a terminal operation", "POST", "/v1/operations/" + done.OperationID + "/cancel", env.alice, nil, 409, "already_terminal"},
		{"cancel a missing operation", "POST", "/v1/operations/" + strings.Repeat("f", 64) + "/cancel", env.admin, nil, 404, "not_found"},
		// Listing.
		{"bad cursor", "GET", "/v1/operations?cursor=bm9wZQ", env.alice, nil, 400, "invalid_request"},
		{"limit 0", "GET", "/v1/operations?limit=0", env.alice, nil, 400, "invalid_request"},
		{"limit over 500", "GET", "/v1/operations?limit=501", env.alice, nil, 400, "invalid_request"},
		{"limit not a number", "GET", "/v1/operations?limit=ten", env.alice, nil, 400, "invalid_request"},
		{"unknown status", "GET", "/v1/operations?status=done", env.alice, nil, 400, "invalid_request"},
		{"unknown action filter", "GET", "/v1/operations?action=github.nope", env.alice, nil, 400, "invalid_request"},
		{"unknown resourceType filter", "GET", "/v1/operations?resourceType=repo2", env.alice, nil, 400, "invalid_request"},
		{"another actor's list", "GET", "/v1/operations?actor=bob", env.alice, nil, 403, "forbidden"},
		{"malformed query string", "GET", "/v1/operations?status=%zz", env.alice, nil, 400, "invalid_request"},
		// Leases.
		{"renew with a wrong token", "POST", apiLeasePath(leaseKey, "renew"), env.alice, map[string]any{"owner": "ci", "token": grant.Token + 1}, 409, "lease_lost"},
		{"renew by another actor", "POST", apiLeasePath(leaseKey, "renew"), env.bob, map[string]any{"owner": "ci", "token": grant.Token}, 409, "lease_lost"},
		{"release with a wrong owner", "POST", apiLeasePath(leaseKey, "release"), env.alice, map[string]any{"owner": "cd", "token": grant.Token}, 409, "lease_lost"},
		{"acquire a held lease", "POST", apiLeasePath(leaseKey, "acquire"), env.bob, map[string]any{"owner": "ci"}, 409, "lease_held"},
		{"acquire a held lease spelled in another case", "POST", apiLeasePath("issue:octo/DEMO#12", "acquire"), env.bob, map[string]any{"owner": "ci"}, 409, "lease_held"},
		{"acquire a held lease spelled in another case, owner too", "POST", apiLeasePath("issue:Octo/Demo#12", "acquire"), env.bob, map[string]any{"owner": "ci"}, 409, "lease_held"},
		{"lease owner field in another case", "POST", apiLeasePath("issue:octo/demo#13", "acquire"), env.alice, map[string]any{"Owner": "ci"}, 400, "invalid_request"},
		{"lease owner twice", "POST", apiLeasePath("issue:octo/demo#13", "acquire"), env.alice, `{"owner":"ci","owner":"cd"}`, 400, "invalid_request"},
		{"lease ttl twice", "POST", apiLeasePath("issue:octo/demo#13", "acquire"), env.alice, `{"owner":"ci","ttlSeconds":60,"ttlSeconds":60}`, 400, "invalid_request"},
		{"lease key not encoded as one segment", "POST", "/v1/leases/issue:octo/demo%2312/acquire", env.alice, map[string]any{"owner": "ci"}, 404, "not_found"},
		{"lease key without a type", "GET", "/v1/leases/octo%2Fdemo%2312", env.alice, nil, 400, "invalid_request"},
		{"lease key of an unknown type", "GET", apiLeasePath("widget:octo/demo#12", ""), env.alice, nil, 400, "invalid_request"},
		{"lease key with a bad number", "GET", apiLeasePath("issue:octo/demo#012", ""), env.alice, nil, 400, "invalid_request"},
		{"lease key too long", "GET", apiLeasePath("issue:octo/"+strings.Repeat("r", 600)+"#1", ""), env.alice, nil, 400, "invalid_request"},
		{"ttl 0", "POST", apiLeasePath("issue:octo/demo#13", "acquire"), env.alice, map[string]any{"owner": "ci", "ttlSeconds": 0}, 400, "invalid_request"},
		{"ttl over 15 minutes", "POST", apiLeasePath("issue:octo/demo#13", "acquire"), env.alice, map[string]any{"owner": "ci", "ttlSeconds": 901}, 400, "invalid_request"},
		{"ttl a string", "POST", apiLeasePath("issue:octo/demo#13", "acquire"), env.alice, map[string]any{"owner": "ci", "ttlSeconds": "60"}, 400, "invalid_request"},
		{"renew ttl out of range", "POST", apiLeasePath(leaseKey, "renew"), env.alice, map[string]any{"owner": "ci", "token": grant.Token, "ttlSeconds": 100000}, 400, "invalid_request"},
		{"missing owner", "POST", apiLeasePath("issue:octo/demo#13", "acquire"), env.alice, map[string]any{"ttlSeconds": 60}, 400, "invalid_request"},
		{"owner with a slash", "POST", apiLeasePath("issue:octo/demo#13", "acquire"), env.alice, map[string]any{"owner": "bob/ci"}, 400, "invalid_request"},
		{"owner of spaces only", "POST", apiLeasePath("issue:octo/demo#13", "acquire"), env.alice, map[string]any{"owner": "   "}, 400, "invalid_request"},
		{"owner ending with a space", "POST", apiLeasePath("issue:octo/demo#13", "acquire"), env.alice, map[string]any{"owner": "ci "}, 400, "invalid_request"},
		{"owner too long", "POST", apiLeasePath("issue:octo/demo#13", "acquire"), env.alice, map[string]any{"owner": strings.Repeat("o", 101)}, 400, "invalid_request"},
		{"renew without a token", "POST", apiLeasePath(leaseKey, "renew"), env.alice, map[string]any{"owner": "ci"}, 400, "invalid_request"},
		{"release with token 0", "POST", apiLeasePath(leaseKey, "release"), env.alice, map[string]any{"owner": "ci", "token": 0}, 400, "invalid_request"},
		{"acquire with a token field", "POST", apiLeasePath("issue:octo/demo#13", "acquire"), env.alice, map[string]any{"owner": "ci", "token": 1}, 400, "invalid_request"},
		{"lease without a body", "POST", apiLeasePath("issue:octo/demo#13", "acquire"), env.alice, nil, 400, "invalid_request"},
		{"lease on another installation", "POST", apiLeasePath("issue:acme/site#1", "acquire"), env.alice, map[string]any{"owner": "ci"}, 403, "forbidden"},
		{"lease without a token", "GET", lease, "", nil, 401, "unauthorized"},
		{"lease with a revoked token", "POST", apiLeasePath(leaseKey, "release"), revoked, map[string]any{"owner": "ci", "token": grant.Token}, 401, "unauthorized"},
		// Dead letters.
		{"dead letters for a non-admin", "GET", "/v1/dlq", env.alice, nil, 403, "forbidden"},
		{"replay for a non-admin", "POST", "/v1/dlq/1/replay", env.dave, nil, 403, "forbidden"},
		{"replay of a sequence that is not a number", "POST", "/v1/dlq/first/replay", env.admin, nil, 400, "invalid_request"},
		{"replay of a missing dead letter", "POST", "/v1/dlq/999/replay", env.admin, nil, 404, "not_found"},
		{"dead letters after -1", "GET", "/v1/dlq?after=-1", env.admin, nil, 400, "invalid_request"},
		// Routes and methods.
		{"DELETE an operation", "DELETE", op, env.alice, nil, 405, "invalid_request"},
		{"PUT a lease", "PUT", apiLeasePath(leaseKey, "acquire"), env.alice, `{}`, 405, "invalid_request"},
		{"unknown route", "GET", "/v1/nothing", env.alice, nil, 404, "not_found"},
		{"unknown route without a token", "POST", "/admin", "", nil, 404, "not_found"},
	}
	if len(cases) < 40 {
		t.Fatalf("only %d cases", len(cases))
	}
	before := env.state()
	for _, tc := range cases {
		r := env.do(tc.method, tc.path, tc.token, tc.body)
		if r.status != tc.status || r.errorCode() != tc.code {
			t.Errorf("%s: %d %s, want %d %s", tc.name, r.status, r.body, tc.status, tc.code)
		}
		var eb APIErrorBody
		if err := json.Unmarshal(r.body, &eb); err != nil || eb.Error.Message == "" {
			t.Errorf("%s: the error body has no message: %s", tc.name, r.body)
		}
		if tc.status == 405 && r.header.Get("Allow") == "" {
			t.Errorf("%s: 405 without Allow", tc.name)
		}
		if after := env.state(); !reflect.DeepEqual(before, after) {
			t.Errorf("%s changed the state:\nbefore %+v\nafter  %+v", tc.name, before, after)
			before = after
		}
	}
	if rec, err := env.store.Get(ctx, queued.OperationID); err != nil || rec.Status != schema.StatusQueued {
		t.Errorf("alice's queued operation: %s, %v", rec.Status, err)
	}
	if r := env.do("GET", op, env.alice, nil); r.status != http.StatusOK {
		t.Errorf("alice reads her operation afterwards: %d", r.status)
	}
}

// GitHub's owner and repository names are case-insensitive: every spelling
// of one is one resource, with one lease (an outside holder of
// issue:octo/demo#11 holds issue:Octo/Demo#11 too) and one place for the
// operations on it.
func TestAPIRepositoryNameCase(t *testing.T) {
	t.Parallel()
	env := newAPIEnv(t)
	ctx := context.Background()
	const canonical = "issue:octo/demo#11"

	r := env.do("POST", apiLeasePath(canonical, "acquire"), env.alice, map[string]any{"owner": "ci"})
	if r.status != http.StatusOK {
		t.Fatalf("acquire %s: %d %s", canonical, r.status, r.body)
	}
	for _, key := range []string{"issue:Octo/Demo#11", "issue:OCTO/DEMO#11", "issue:octo/Demo#11"} {
		r := env.do("POST", apiLeasePath(key, "acquire"), env.bob, map[string]any{"owner": "ci"})
		if r.status != http.StatusConflict || r.errorCode() != "lease_held" {
			t.Errorf("acquire %s while %s is held: %d %s, want 409 lease_held", key, canonical, r.status, r.body)
		}
		var st LeaseStateBody
		r = env.do("GET", apiLeasePath(key, ""), env.bob, nil)
		r.decode(t, &st)
		if st.Key != canonical || !st.Locked || st.Owner != "alice/ci" {
			t.Errorf("check %s = %+v, want %s held by alice/ci", key, st, canonical)
		}
	}
	if cs, err := env.coord.Check(ctx, "issue:Octo/Demo#11"); err != nil || cs.Locked {
		t.Errorf("the coordinator holds a lease under a non-canonical key: %+v, %v", cs, err)
	}

	// Submissions on two spellings land on one resource.
	sub := func(key, id string) map[string]any {
		m := apiSubmission(key, 11, "hello")
		m["resource"] = map[string]any{"type": "issue", "id": id}
		return m
	}
	var upper, lower schema.View
	r = env.do("POST", "/v1/operations", env.alice, sub("case-upper", "octo/Demo#11"))
	if r.status != http.StatusCreated {
		t.Fatalf("submit on octo/Demo#11: %d %s", r.status, r.body)
	}
	r.decode(t, &upper)
	r = env.do("POST", "/v1/operations", env.alice, sub("case-lower", "octo/demo#11"))
	if r.status != http.StatusCreated {
		t.Fatalf("submit on octo/demo#11: %d %s", r.status, r.body)
	}
	r.decode(t, &lower)
	want := schema.Resource{Type: "issue", ID: "octo/demo#11"}
	for _, v := range []schema.View{upper, lower} {
		rec, err := env.store.Get(ctx, v.OperationID)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Resource != want || v.Resource != want || v.ResourceKey != canonical {
			t.Errorf("operation %s: stored resource %+v, view %+v %q; want %+v", v.OperationID, rec.Resource, v.Resource, v.ResourceKey, want)
		}
	}
	// A retry of the first under another spelling is the same request:
	// the existing operation, not an idempotency conflict.
	for _, id := range []string{"octo/demo#11", "OCTO/DEMO#11"} {
		r = env.do("POST", "/v1/operations", env.alice, sub("case-upper", id))
		var again schema.View
		if r.status != http.StatusOK {
			t.Errorf("retry on %s: %d %s, want 200", id, r.status, r.body)
			continue
		}
		r.decode(t, &again)
		if again.OperationID != upper.OperationID {
			t.Errorf("retry on %s gave operation %s, want %s", id, again.OperationID, upper.OperationID)
		}
	}
	// Listing by resource finds both, whatever the spelling asked for.
	for _, q := range []string{"resourceType=issue&resourceId=octo%2Fdemo%2311", "resourceType=issue&resourceId=Octo%2FDEMO%2311", "resourceId=OCTO%2Fdemo%2311"} {
		r = env.do("GET", "/v1/operations?"+q, env.alice, nil)
		var list OperationList
		r.decode(t, &list)
		if len(list.Operations) != 2 {
			t.Errorf("operations on %s (?%s): %d, want 2: %s", canonical, q, len(list.Operations), r.body)
		}
	}
}
