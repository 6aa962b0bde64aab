package mergequeue_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/baton-dev/baton/app"
	"github.com/baton-dev/baton/app/ghsim"
	"github.com/baton-dev/baton/app/mergequeue"
	"github.com/baton-dev/baton/schema"
)

// authorizeBearer allows "Bearer good" on every repository and "Bearer
// other" on none, the way the API's token check answers.
func authorizeBearer(r *http.Request, owner, repo string) (string, error) {
	switch r.Header.Get("Authorization") {
	case "Bearer good":
		return "good", nil
	case "Bearer other":
		return "", schema.Errorf(schema.CodeForbidden, "the token may not act on %s/%s", owner, repo)
	}
	return "", schema.ErrUnauthorized
}

// authorizeGoodPrefix allows every "Bearer good…" token, so that a test
// can use many tokens (the reconcile spacing is per token).
func authorizeGoodPrefix(r *http.Request, owner, repo string) (string, error) {
	// As the API reads it: the scheme in any case, blanks aside; the
	// caller is the token.
	f := strings.Fields(r.Header.Get("Authorization"))
	if len(f) == 2 && strings.EqualFold(f[0], "Bearer") && strings.HasPrefix(f[1], "good") {
		return f[1], nil
	}
	return "", schema.ErrUnauthorized
}

// labelQueued labels pull requests 1..n of repo for the queue and hands
// the queue their labeled events (the stacks here send no webhooks).
func labelQueued(t *testing.T, s *stack, repo string, n int) {
	t.Helper()
	for i := 1; i <= n; i++ {
		if err := s.sim.AddLabel("octo", repo, i, "baton:queue", "monalisa"); err != nil {
			t.Fatal(err)
		}
		if err := s.q.HandleEvent(context.Background(), labelEvent(repo, i, "labeled", fmt.Sprintf("%s-%d", repo, i))); err != nil {
			t.Fatal(err)
		}
	}
}

type apiAnswer struct {
	status int
	body   map[string]any
	raw    string
}

func call(t *testing.T, srv *httptest.Server, method, path, token string) apiAnswer {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	a := apiAnswer{status: resp.StatusCode, raw: string(b)}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s %s: Content-Type %q", method, path, ct)
	}
	if err := json.Unmarshal(b, &a.body); err != nil {
		t.Fatalf("%s %s: %v: %s", method, path, err, b)
	}
	return a
}

func errorCode(a apiAnswer) string {
	e, _ := a.body["error"].(map[string]any)
	c, _ := e["code"].(string)
	return c
}

func TestHTTPRoutes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStack(t, stackOptions{noWebhooks: true})
	const repo = "api"
	s.repo(t, repo, 2, []string{"ci"})
	labelQueued(t, s, repo, 2)
	srv := httptest.NewServer(mergequeue.NewHandler(s.q, authorizeBearer))
	t.Cleanup(srv.Close)
	base := "/v1/repos/octo/" + repo + "/queue"

	a := call(t, srv, "GET", base, "good")
	var st mergequeue.State
	if err := json.Unmarshal([]byte(a.raw), &st); err != nil || a.status != 200 {
		t.Fatalf("GET queue: %d %s", a.status, a.raw)
	}
	if st.Repository != "octo/"+repo || st.InstallationID != 1 || len(st.Entries) != 2 ||
		st.Entries[0].Position != 1 || st.Entries[0].PRNumber != 1 || st.Entries[1].Position != 2 ||
		st.Entries[1].Status != mergequeue.StatusEvaluating || !schema.ValidSHA(st.Entries[1].PRSHA) {
		t.Errorf("GET queue: %s", a.raw)
	}
	if a := call(t, srv, "GET", base+"/events", "good"); a.status != 200 || len(a.body["events"].([]any)) != 2 {
		t.Errorf("GET events: %d %s", a.status, a.raw)
	}
	if a := call(t, srv, "GET", base+"/audit", "good"); a.status != 200 || len(a.body["audit"].([]any)) != 2 {
		t.Errorf("GET audit: %d %s", a.status, a.raw)
	}
	a = call(t, srv, "POST", base+"/reconcile", "good")
	if a.status != 200 || a.body["skipped"] != false || a.body["entries"] != float64(2) {
		t.Errorf("POST reconcile: %d %s", a.status, a.raw)
	}
	if st, _ := s.q.Entries(ctx, "octo", repo); st.ReconciledAt == nil {
		t.Error("reconciledAt not set")
	}

	// A reconcile that finds the lease held: 409 lease_held, naming the
	// holder.
	l, err := s.coord.Acquire(ctx, mergequeue.LeaseKey("octo", repo), "someone-else", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	a = call(t, srv, "POST", base+"/reconcile", "good")
	if d, _ := a.body["error"].(map[string]any)["details"].(map[string]any); a.status != 409 || errorCode(a) != "lease_held" || d["owner"] != "someone-else" {
		t.Errorf("POST reconcile, lease held: %d %s", a.status, a.raw)
	}
	if err := s.coord.Release(ctx, l); err != nil {
		t.Fatal(err)
	}
	// Held for a moment only (as webhook processing holds it), the
	// reconcile waits for its turn. (A handler of its own: this one
	// reconciled the repository with this token less than
	// ReconcileSpacing ago.)
	fresh := httptest.NewServer(mergequeue.NewHandler(s.q, authorizeBearer))
	t.Cleanup(fresh.Close)
	if l, err = s.coord.Acquire(ctx, mergequeue.LeaseKey("octo", repo), "briefly", time.Minute); err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(500*time.Millisecond, func() { _ = s.coord.Release(context.Background(), l) })
	if a = call(t, fresh, "POST", base+"/reconcile", "good"); a.status != 200 || a.body["skipped"] != false {
		t.Errorf("POST reconcile while the lease is held for a moment: %d %s", a.status, a.raw)
	}

	for _, c := range []struct {
		method, path, token string
		status              int
		code                string
	}{
		{"GET", base, "", 401, "unauthorized"},
		{"GET", base, "other", 403, "forbidden"},
		{"POST", base + "/reconcile", "other", 403, "forbidden"},
		{"POST", base, "good", 405, "invalid_request"},
		{"GET", base + "/reconcile", "good", 405, "invalid_request"},
		{"GET", "/v1/repos/-octo/" + repo + "/queue", "good", 400, "invalid_request"},
		{"GET", "/v1/repos/octo/" + strings.Repeat("r", 101) + "/queue", "good", 400, "invalid_request"},
		{"GET", base + "/nope", "good", 404, "not_found"},
		{"GET", base + "?limit=5", "good", 400, "invalid_request"},
		{"GET", base + "/events?after=3", "good", 400, "invalid_request"},
		{"POST", base + "/reconcile?force=1", "good", 400, "invalid_request"},
		{"POST", "/v1/repos/octo/unknown/queue/reconcile", "good", 404, "not_found"},
	} {
		if a := call(t, srv, c.method, c.path, c.token); a.status != c.status || errorCode(a) != c.code {
			t.Errorf("%s %s (%s): %d %s, want %d %s", c.method, c.path, c.token, a.status, a.raw, c.status, c.code)
		}
	}
	// A repository without a queue has an empty one.
	if a := call(t, srv, "GET", "/v1/repos/octo/unknown/queue", "good"); a.status != 200 || len(a.body["entries"].([]any)) != 0 {
		t.Errorf("GET an unknown queue: %d %s", a.status, a.raw)
	}
}

// A reconcile that cannot read GitHub is GitHub's failure, not baton's: 503
// with Retry-After while GitHub is away or limits baton (GitHub's own wait
// when it names one), 502 when GitHub refuses, each naming GitHub's answer;
// never the 500 of a bug. The queue is left as it was.
func TestHTTPReconcileWhenGitHubFails(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStack(t, stackOptions{noWebhooks: true})
	const repo = "ghfail"
	s.repo(t, repo, 1, []string{"ci"})
	labelQueued(t, s, repo, 1)
	// Each case with its own token ("good-N"): one token reconciles a
	// repository at most once a minute (TestHTTPReconcileSpacing), unless
	// the reconcile did not run through.
	srv := httptest.NewServer(mergequeue.NewHandler(s.q, authorizeGoodPrefix))
	t.Cleanup(srv.Close)
	path := "/v1/repos/octo/" + repo + "/queue/reconcile"
	for i, c := range []struct {
		name       string
		fault      ghsim.Fault
		status     int
		retryAfter int // at least; 0: no header
		says       string
	}{
		{"GitHub erring", ghsim.Fault{Route: "GET *", Kind: ghsim.FaultStatus, Status: 502}, 503, 1, "502"},
		// The same token at once: the failed reconcile took no turn.
		{"GitHub erring (asked again)", ghsim.Fault{Route: "GET *", Kind: ghsim.FaultStatus, Status: 502}, 503, 1, "502"},
		{"GitHub limiting", ghsim.Fault{Route: "GET *", Kind: ghsim.FaultTooManyRequests, RetryAfter: 7 * time.Second}, 503, 7, "429"},
		{"GitHub not taking the token", ghsim.Fault{Route: "GET *", Kind: ghsim.FaultUnauthorized}, 503, 1, "401"},
		{"GitHub refusing (installation suspended)", ghsim.Fault{}, 502, 0, "403"},
	} {
		token := "good-" + strconv.Itoa(max(i-1, 0)) // the first two share one
		id := ""
		if c.fault.Kind == "" {
			if err := s.sim.SuspendInstallation(1, true); err != nil {
				t.Fatal(err)
			}
		} else {
			var err error
			if id, err = s.sim.SetFault(c.fault); err != nil {
				t.Fatal(err)
			}
		}
		req, _ := http.NewRequest("POST", srv.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		s.sim.ClearFault(id)
		if err := s.sim.SuspendInstallation(1, false); err != nil {
			t.Fatal(err)
		}
		var body struct {
			Error struct{ Code, Message string }
		}
		_ = json.Unmarshal(b, &body)
		if err := describedAnswer(http.MethodPost, "/v1/repos/{owner}/{repo}/queue/reconcile", resp.StatusCode, resp.Header, b); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
		ra, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
		if resp.StatusCode != c.status || body.Error.Code != "internal" || !strings.Contains(body.Error.Message, "GitHub") ||
			!strings.Contains(body.Error.Message, c.says) || ra < c.retryAfter || (c.retryAfter == 0) != (resp.Header.Get("Retry-After") == "") {
			t.Errorf("%s: %d Retry-After %q %s, want %d (Retry-After ≥ %d) naming GitHub's %s", c.name, resp.StatusCode,
				resp.Header.Get("Retry-After"), b, c.status, c.retryAfter, c.says)
		}
	}
	if st, _ := s.q.Entries(ctx, "octo", repo); len(st.Entries) != 1 {
		t.Errorf("entries after the failed reconciles = %+v, want the one queued", st.Entries)
	}
	if a := call(t, srv, "POST", path, "good-back"); a.status != 200 {
		t.Errorf("POST reconcile with GitHub back: %d %s", a.status, a.raw)
	}
}

// describedAnswer checks an answer against baton's OpenAPI description of
// the route: the status is described, its required headers are there and
// the body validates against its schema.
func describedAnswer(method, route string, status int, h http.Header, body []byte) error {
	doc, err := openapi3.NewLoader().LoadFromData(app.OpenAPIDocument())
	if err != nil {
		return err
	}
	item := doc.Paths.Find(route)
	if item == nil || item.GetOperation(method) == nil {
		return fmt.Errorf("%s %s is not described", method, route)
	}
	ans := item.GetOperation(method).Responses.Status(status)
	if ans == nil || ans.Value == nil {
		return fmt.Errorf("%s %s: %d is not described", method, route, status)
	}
	for name, hd := range ans.Value.Headers {
		if hd.Value.Required && h.Get(name) == "" {
			return fmt.Errorf("%s %s: %d without its %s", method, route, status, name)
		}
	}
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		return err
	}
	return ans.Value.Content.Get("application/json").Schema.Value.VisitJSON(v)
}

// One token reconciles a repository at most once per ReconcileSpacing: a
// reconcile reads from GitHub on the installation's budget, which a client
// asking in a loop would spend. The next is 429 rate_limited with
// Retry-After, another token or repository is not held back, a lease held
// is still lease_held, and once the spacing has passed it runs again.
func TestHTTPReconcileSpacing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStack(t, stackOptions{noWebhooks: true, fakeClock: true})
	for _, repo := range []string{"spaced", "other"} { // queues baton knows
		s.repo(t, repo, 1, []string{"ci"})
		labelQueued(t, s, repo, 1)
	}
	srv := httptest.NewServer(mergequeue.NewHandler(s.q, authorizeGoodPrefix))
	t.Cleanup(srv.Close)
	path := "/v1/repos/octo/spaced/queue/reconcile"
	if a := call(t, srv, "POST", path, "good"); a.status != 200 || a.body["skipped"] != false {
		t.Fatalf("first reconcile: %d %s", a.status, a.raw)
	}
	req, _ := http.NewRequest("POST", srv.URL+path, nil)
	req.Header.Set("Authorization", "Bearer good")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "60" {
		t.Errorf("second reconcile at once: %d, Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if a := call(t, srv, "POST", path, "good"); errorCode(a) != "rate_limited" || !strings.Contains(a.raw, "retryAfter") {
		t.Errorf("third reconcile at once: %d %s", a.status, a.raw)
	}
	// The same token spelled another way is the same token.
	for _, auth := range []string{"bearer good", "BEARER good", "Bearer  good", " Bearer good "} {
		req, _ := http.NewRequest("POST", srv.URL+path, nil)
		req.Header.Set("Authorization", auth)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusTooManyRequests {
			t.Errorf("reconcile at once with Authorization %q: %d, want 429", auth, resp.StatusCode)
		}
	}
	if a := call(t, srv, "POST", path, "good-2"); a.status != 200 {
		t.Errorf("another token's reconcile: %d %s", a.status, a.raw)
	}
	if a := call(t, srv, "POST", "/v1/repos/octo/other/queue/reconcile", "good"); a.status != 200 {
		t.Errorf("another repository's reconcile: %d %s", a.status, a.raw)
	}
	// The lease held by someone else: lease_held, as ever, however
	// recent the last reconcile.
	l, err := s.coord.Acquire(ctx, mergequeue.LeaseKey("octo", "spaced"), "someone-else", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if a := call(t, srv, "POST", path, "good"); a.status != 409 || errorCode(a) != "lease_held" {
		t.Errorf("reconcile, lease held: %d %s", a.status, a.raw)
	}
	if err := s.coord.Release(ctx, l); err != nil {
		t.Fatal(err)
	}
	s.clock.Advance(time.Minute) // mergequeue.ReconcileSpacing
	if a := call(t, srv, "POST", path, "good"); a.status != 200 || a.body["skipped"] != false {
		t.Errorf("reconcile once the spacing has passed: %d %s", a.status, a.raw)
	}
}
