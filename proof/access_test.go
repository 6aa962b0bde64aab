package proof

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/app"
	"github.com/baton-dev/baton/app/client"
	"github.com/baton-dev/baton/schema"
)

// The callers of the access matrix.
const (
	noToken  = "no token"
	revoked  = "revoked token" // the owner's actor, revoked
	other    = "other actor"   // bob, on the same installation
	outsider = "other install" // carol, bound to installation 2 only
	owner    = "owner"         // alice, who owns the operations and leases tried
	admin    = "admin"         // an admin token
)

var principals = []string{noToken, revoked, other, outsider, owner, admin}

// want is the documented answer: a status and, for errors, the code.
type want struct {
	status int
	code   string
}

func (w want) String() string {
	if w.code == "" {
		return fmt.Sprint(w.status)
	}
	return fmt.Sprintf("%d %s", w.status, w.code)
}

var (
	ok200        = want{status: 200}
	created201   = want{status: 201}
	unauthorized = want{401, "unauthorized"}
	forbidden    = want{403, "forbidden"}
	notFound     = want{404, "not_found"}
	leaseLost    = want{409, "lease_lost"}
	everybody200 = map[string]want{noToken: ok200, revoked: ok200, other: ok200, outsider: ok200, owner: ok200, admin: ok200}
)

// accessEnv is the server of the matrix and what each caller is tried on.
type accessEnv struct {
	p      *inProcess
	tokens map[string]string // principal → token ("" for none)
	owner  *client.Client
	// ops are the owner's operations, one per caller (each cancel tries
	// its own), kept queued by a lease the owner holds on their issue.
	ops map[string]string
	// leases are the owner's leases, one per caller and route.
	leases map[string]client.LeaseGrant
	// missingGet and missingCancel are what reading and cancelling
	// another actor's operation must answer: the answers for an operation
	// that does not exist.
	missingGet, missingCancel []byte
	// freeKeys counts the free lease keys handed out to acquire.
	freeKeys int
}

func newAccessEnv(t *testing.T) *accessEnv {
	ctx := context.Background()
	p := newInProcess(t)
	e := &accessEnv{p: p, ops: map[string]string{}, leases: map[string]client.LeaseGrant{}}
	e.tokens = map[string]string{
		noToken:  "",
		owner:    p.token(t, app.TokenSpec{Actor: "alice", Installations: []int64{1}}),
		other:    p.token(t, app.TokenSpec{Actor: "bob", Installations: []int64{1}}),
		outsider: p.token(t, app.TokenSpec{Actor: "carol", Installations: []int64{2}}),
		admin:    p.token(t, app.TokenSpec{Actor: "root", Admin: true}),
	}
	tok, desc, err := p.tokens.CreateToken(ctx, app.TokenSpec{Actor: "alice", Installations: []int64{1}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.tokens.RevokeToken(ctx, desc.ID); err != nil {
		t.Fatal(err)
	}
	e.tokens[revoked] = tok
	e.owner = p.client(t, e.tokens[owner])
	// Operations on octo/demo#12 wait while the owner holds its lease.
	if _, err := e.owner.AcquireLease(ctx, "issue:octo/demo#12", "hold", 15*time.Minute); err != nil {
		t.Fatal(err)
	}
	for i, pr := range principals {
		op, _, err := e.owner.Submit(ctx, client.SubmitRequest{
			IdempotencyKey: "matrix-" + strings.ReplaceAll(pr, " ", "-"), Action: schema.ActionComment,
			Resource: client.Resource{Type: schema.ResourceIssue, ID: "octo/demo#12"},
			Payload:  json.RawMessage(fmt.Sprintf(`{"body":"access matrix %d"}`, i)),
		})
		if err != nil {
			t.Fatal(err)
		}
		e.ops[pr] = op.OperationID
		for j, route := range []string{"renew", "release", "check"} {
			g, err := e.owner.AcquireLease(ctx, fmt.Sprintf("issue:octo/demo#%d", 100+10*i+j), "job", 15*time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			e.leases[pr+"/"+route] = g
		}
	}
	missing := strings.Repeat("0", 64)
	e.missingGet = e.do(t, other, "GET", "/v1/operations/"+missing, nil).body
	e.missingCancel = e.do(t, other, "POST", "/v1/operations/"+missing+"/cancel", nil).body
	return e
}

type answer struct {
	status int
	body   []byte
}

func (a answer) code() string {
	var eb app.APIErrorBody
	_ = json.Unmarshal(a.body, &eb)
	return string(eb.Error.Code)
}

// do sends one request as a principal.
func (e *accessEnv) do(t *testing.T, pr, method, path string, body any) answer {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, e.p.srv.URL()+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if tok := e.tokens[pr]; tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{status: resp.StatusCode, body: b}
}

// opStatus reads an operation's status as an admin.
func (e *accessEnv) opStatus(t *testing.T, id string) schema.Status {
	t.Helper()
	v, err := e.p.client(t, e.tokens[admin]).Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return v.Status
}

// accessRoute is one row of the matrix: the route as the OpenAPI
// description names it, the request each caller sends, the documented
// answer for each, and what else must hold afterwards.
type accessRoute struct {
	method, path string
	want         map[string]want
	request      func(e *accessEnv, pr string) (path string, body any)
	check        func(t *testing.T, e *accessEnv, pr string, a answer)
}

func accessRoutes() []accessRoute {
	authed := func(w map[string]want) map[string]want {
		w[noToken], w[revoked] = unauthorized, unauthorized
		return w
	}
	fixed := func(path string) func(*accessEnv, string) (string, any) {
		return func(*accessEnv, string) (string, any) { return path, nil }
	}
	leaseOf := func(route string) func(*accessEnv, string) (string, any) {
		return func(e *accessEnv, pr string) (string, any) {
			g := e.leases[pr+"/"+route]
			path := client.LeasePath(g.Key)
			switch route {
			case "renew":
				return path + "/renew", map[string]any{"owner": g.Owner, "token": g.Token, "ttlSeconds": 600}
			case "release":
				return path + "/release", map[string]any{"owner": g.Owner, "token": g.Token}
			}
			return path, nil
		}
	}
	// leaseStillOwners: a refused renew or release leaves the owner's
	// lease as it was.
	leaseStillOwners := func(route string) func(*testing.T, *accessEnv, string, answer) {
		return func(t *testing.T, e *accessEnv, pr string, a answer) {
			if a.status == 200 {
				return
			}
			g := e.leases[pr+"/"+route]
			st, err := e.owner.CheckLease(context.Background(), g.Key)
			if err != nil {
				t.Fatal(err)
			}
			if !st.Locked || st.Owner != "alice/job" || st.Token != g.Token {
				t.Errorf("after a refused %s the lease is %+v, want alice/job's with token %d", route, st, g.Token)
			}
		}
	}
	return []accessRoute{
		{method: "GET", path: "/healthz", want: everybody200, request: fixed("/healthz")},
		{method: "GET", path: "/readyz", want: everybody200, request: fixed("/readyz")},
		{method: "GET", path: "/metrics", want: everybody200, request: fixed("/metrics")},
		{method: "GET", path: "/v1/openapi.json", want: everybody200, request: fixed("/v1/openapi.json")},
		{
			// The webhook receiver takes no token: with any of them and no
			// signature, it refuses.
			method: "POST", path: "/webhooks/github",
			want: authed(map[string]want{other: unauthorized, outsider: unauthorized, owner: unauthorized, admin: unauthorized}),
			request: func(*accessEnv, string) (string, any) {
				return "/webhooks/github", map[string]any{"zen": "hello"}
			},
		},
		{
			method: "POST", path: "/v1/operations",
			want: authed(map[string]want{other: created201, outsider: forbidden, owner: created201, admin: created201}),
			request: func(_ *accessEnv, pr string) (string, any) {
				return "/v1/operations", map[string]any{
					"idempotencyKey": "matrix-submit-" + strings.ReplaceAll(pr, " ", "-"), "action": schema.ActionComment,
					"resource": map[string]any{"type": "issue", "id": "octo/demo#12"},
					"payload":  map[string]any{"body": "submitted by " + pr},
				}
			},
		},
		{
			method: "GET", path: "/v1/operations",
			want:    authed(map[string]want{other: ok200, outsider: ok200, owner: ok200, admin: ok200}),
			request: fixed("/v1/operations?limit=500"),
			check: func(t *testing.T, e *accessEnv, pr string, a answer) {
				if a.status != 200 {
					return
				}
				var l app.OperationList
				if err := json.Unmarshal(a.body, &l); err != nil {
					t.Fatal(err)
				}
				sees := false
				for _, v := range l.Operations {
					if v.OperationID == e.ops[owner] {
						sees = true
					}
					if pr != admin && v.Actor != actorOf(pr) {
						t.Errorf("%s sees %s's operation %s", pr, v.Actor, v.OperationID)
					}
				}
				if wantSees := pr == owner || pr == admin; sees != wantSees {
					t.Errorf("%s sees the owner's operation: %v, want %v", pr, sees, wantSees)
				}
			},
		},
		{
			method: "GET", path: "/v1/operations/{id}",
			want: authed(map[string]want{other: notFound, outsider: notFound, owner: ok200, admin: ok200}),
			request: func(e *accessEnv, pr string) (string, any) {
				return "/v1/operations/" + e.ops[pr], nil
			},
			check: func(t *testing.T, e *accessEnv, pr string, a answer) {
				if a.status == 404 && !bytes.Equal(a.body, e.missingGet) {
					t.Errorf("another actor's operation answers %s, a missing one %s: they must be the same", a.body, e.missingGet)
				}
			},
		},
		{
			method: "POST", path: "/v1/operations/{id}/cancel",
			want: authed(map[string]want{other: notFound, outsider: notFound, owner: ok200, admin: ok200}),
			request: func(e *accessEnv, pr string) (string, any) {
				return "/v1/operations/" + e.ops[pr] + "/cancel", nil
			},
			check: func(t *testing.T, e *accessEnv, pr string, a answer) {
				if a.status == 404 && !bytes.Equal(a.body, e.missingCancel) {
					t.Errorf("cancelling another actor's operation answers %s, a missing one %s: they must be the same", a.body, e.missingCancel)
				}
				wantStatus := schema.StatusQueued
				if a.status == 200 {
					wantStatus = schema.StatusCancelled
				}
				if st := e.opStatus(t, e.ops[pr]); st != wantStatus {
					t.Errorf("after the cancel the operation is %s, want %s", st, wantStatus)
				}
			},
		},
		{
			method: "POST", path: "/v1/leases/{key}/acquire",
			want: authed(map[string]want{other: ok200, outsider: forbidden, owner: ok200, admin: ok200}),
			request: func(e *accessEnv, _ string) (string, any) {
				e.freeKeys++
				return client.LeasePath(fmt.Sprintf("issue:octo/demo#%d", 900+e.freeKeys)) + "/acquire", map[string]any{"owner": "matrix", "ttlSeconds": 60}
			},
		},
		{
			method: "POST", path: "/v1/leases/{key}/renew",
			want:    authed(map[string]want{other: leaseLost, outsider: forbidden, owner: ok200, admin: leaseLost}),
			request: leaseOf("renew"), check: leaseStillOwners("renew"),
		},
		{
			method: "POST", path: "/v1/leases/{key}/release",
			want:    authed(map[string]want{other: leaseLost, outsider: forbidden, owner: ok200, admin: leaseLost}),
			request: leaseOf("release"), check: leaseStillOwners("release"),
		},
		{
			method: "GET", path: "/v1/leases/{key}",
			want:    authed(map[string]want{other: ok200, outsider: forbidden, owner: ok200, admin: ok200}),
			request: leaseOf("check"),
		},
		{
			method: "GET", path: "/v1/dlq",
			want:    authed(map[string]want{other: forbidden, outsider: forbidden, owner: forbidden, admin: ok200}),
			request: fixed("/v1/dlq"),
		},
		{
			// No dead letter exists: the admin passes the check and is
			// told so; nobody else learns whether one does.
			method: "POST", path: "/v1/dlq/{seq}/replay",
			want:    authed(map[string]want{other: forbidden, outsider: forbidden, owner: forbidden, admin: notFound}),
			request: fixed("/v1/dlq/1/replay"),
		},
		// The merge queue of a repository: any token that may act on its
		// installation reads it and may reconcile it; others are refused.
		{
			method: "GET", path: "/v1/repos/{owner}/{repo}/queue",
			want:    authed(map[string]want{other: ok200, outsider: forbidden, owner: ok200, admin: ok200}),
			request: fixed("/v1/repos/octo/demo/queue"),
		},
		{
			method: "GET", path: "/v1/repos/{owner}/{repo}/queue/events",
			want:    authed(map[string]want{other: ok200, outsider: forbidden, owner: ok200, admin: ok200}),
			request: fixed("/v1/repos/octo/demo/queue/events"),
		},
		{
			method: "GET", path: "/v1/repos/{owner}/{repo}/queue/audit",
			want:    authed(map[string]want{other: ok200, outsider: forbidden, owner: ok200, admin: ok200}),
			request: fixed("/v1/repos/octo/demo/queue/audit"),
		},
		{
			method: "POST", path: "/v1/repos/{owner}/{repo}/queue/reconcile",
			want:    authed(map[string]want{other: ok200, outsider: forbidden, owner: ok200, admin: ok200}),
			request: fixed("/v1/repos/octo/demo/queue/reconcile"),
		},
		{
			method: "GET", path: "/v1/installations",
			want:    authed(map[string]want{other: ok200, outsider: ok200, owner: ok200, admin: ok200}),
			request: fixed("/v1/installations"),
			check: func(t *testing.T, _ *accessEnv, pr string, a answer) {
				if a.status != 200 {
					return
				}
				var l app.InstallationList
				if err := json.Unmarshal(a.body, &l); err != nil {
					t.Fatal(err)
				}
				if wantN := map[bool]int{true: 0, false: 1}[pr == outsider]; len(l.Installations) != wantN {
					t.Errorf("%s sees %d installations, want %d (only those its token is bound to)", pr, len(l.Installations), wantN)
				}
			},
		},
	}
}

func actorOf(pr string) string {
	return map[string]string{owner: "alice", other: "bob", outsider: "carol", admin: "root"}[pr]
}

// TestAccessMatrix tries every route of the API (every operation of
// GET /v1/openapi.json) with no token, a revoked token, another actor's
// token, a token bound to another installation, the owner's token and an
// admin token, and checks the documented answer and that a refusal
// changed nothing.
func TestAccessMatrix(t *testing.T) {
	t.Parallel()
	e := newAccessEnv(t)
	routes := accessRoutes()

	// The matrix covers every route the API describes.
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(app.OpenAPIDocument(), &doc); err != nil {
		t.Fatal(err)
	}
	for path, item := range doc.Paths {
		for method := range item {
			m := strings.ToUpper(method)
			if !slices.Contains([]string{"GET", "POST", "PUT", "PATCH", "DELETE"}, m) {
				continue
			}
			if !slices.ContainsFunc(routes, func(r accessRoute) bool { return r.method == m && r.path == path }) {
				t.Errorf("the API describes %s %s, which the access matrix does not try", m, path)
			}
		}
	}

	var table strings.Builder
	fmt.Fprintf(&table, "%-46s", "route")
	for _, pr := range principals {
		fmt.Fprintf(&table, " | %-16s", pr)
	}
	table.WriteString("\n")
	for _, r := range routes {
		fmt.Fprintf(&table, "%-46s", r.method+" "+r.path)
		for _, pr := range principals {
			w := r.want[pr]
			t.Run(r.method+" "+r.path+"/"+pr, func(t *testing.T) {
				path, body := r.request(e, pr)
				a := e.do(t, pr, r.method, path, body)
				if a.status != w.status || (w.code != "" && a.code() != w.code) {
					t.Errorf("%s %s as %s: %d %s, want %s\n%s", r.method, path, pr, a.status, a.code(), w, a.body)
				}
				if r.check != nil {
					r.check(t, e, pr, a)
				}
			})
			fmt.Fprintf(&table, " | %-16s", w)
		}
		table.WriteString("\n")
	}
	t.Logf("access matrix (documented answers, all checked):\n%s", table.String())
}
