package ghsim

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-github/v62/github"
)

// TestAdminAPI shapes "GitHub" over HTTP, as scripts do.
func TestAdminAPI(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	var repo Repo
	if st := e.admin("POST", "/_ghsim/repos", map[string]any{"owner": "octo", "name": "app", "installationId": 7}, &repo); st != 201 || repo.InstallationID != 7 {
		t.Fatalf("create repo = %d %+v", st, repo)
	}
	var num struct{ Number int }
	if st := e.admin("POST", "/_ghsim/repos/octo/app/issues", map[string]any{"title": "bug", "number": 5}, &num); st != 201 || num.Number != 5 {
		t.Fatalf("create issue = %d %+v", st, num)
	}
	var pull Pull
	head := "1111111111111111111111111111111111111111"
	if st := e.admin("POST", "/_ghsim/repos/octo/app/pulls", map[string]any{"headSha": head, "base": "main", "mergeable": false}, &pull); st != 201 || pull.Number != 6 || pull.HeadSHA != head || pull.Mergeable {
		t.Fatalf("create pull = %d %+v", st, pull)
	}
	if st := e.admin("POST", "/_ghsim/repos/octo/app/pulls", map[string]any{"number": 5}, nil); st != http.StatusConflict {
		t.Errorf("duplicate number = %d", st)
	}
	if st := e.admin("POST", "/_ghsim/repos/octo/nope/pulls", map[string]any{}, nil); st != http.StatusNotFound {
		t.Errorf("unknown repo = %d", st)
	}
	if st := e.admin("PATCH", "/_ghsim/repos/octo/app/pulls/6", map[string]any{"mergeable": true}, &pull); st != 200 || !pull.Mergeable {
		t.Fatalf("patch pull = %d %+v", st, pull)
	}
	e.admin("POST", "/_ghsim/repos/octo/app/issues/6/labels", map[string]any{"labels": []string{"baton:queue"}, "user": "alice"}, nil)
	e.admin("POST", "/_ghsim/repos/octo/app/issues/6/comments", map[string]any{"body": "/baton queue", "user": "alice"}, nil)
	var pushed struct{ SHA string }
	if st := e.admin("POST", "/_ghsim/repos/octo/app/pulls/6/push", map[string]any{}, &pushed); st != 201 || len(pushed.SHA) != 40 {
		t.Fatalf("push = %d %+v", st, pushed)
	}
	if st := e.admin("GET", "/_ghsim/repos/octo/app/pulls/6", nil, &pull); st != 200 || pull.HeadSHA != pushed.SHA || !slices.Equal(pull.Labels, []string{"baton:queue"}) || len(pull.Comments) != 1 || pull.Comments[0].User != "alice" {
		t.Fatalf("get pull = %d %+v", st, pull)
	}
	var refs map[string]string
	if st := e.admin("GET", "/_ghsim/repos/octo/app/refs", nil, &refs); st != 200 || refs["heads/pr-6"] != pushed.SHA || refs["heads/main"] == "" {
		t.Fatalf("refs = %d %v", st, refs)
	}
	var commit struct{ SHA string }
	if st := e.admin("POST", "/_ghsim/repos/octo/app/commits", map[string]any{"parents": []string{refs["heads/main"]}, "message": "m"}, &commit); st != 201 {
		t.Fatalf("commit = %d", st)
	}
	if st := e.admin("PUT", "/_ghsim/repos/octo/app/refs/heads/main", map[string]any{"sha": commit.SHA}, nil); st != 200 {
		t.Fatalf("set ref = %d", st)
	}
	if sha, _ := e.sim.Ref("octo", "app", "heads/main"); sha != commit.SHA {
		t.Errorf("main = %s", sha)
	}
	if st := e.admin("POST", "/_ghsim/repos/octo/app/statuses/"+commit.SHA, map[string]any{"state": "success", "context": "ci"}, nil); st != 201 {
		t.Errorf("status = %d", st)
	}
	if st := e.admin("POST", "/_ghsim/repos/octo/app/statuses/"+commit.SHA, map[string]any{"state": "great"}, nil); st != 422 {
		t.Errorf("bad status = %d", st)
	}
	var run struct{ ID int64 }
	if st := e.admin("POST", "/_ghsim/repos/octo/app/check-runs", map[string]any{"name": "t", "headSha": pushed.SHA}, &run); st != 201 {
		t.Fatalf("check run = %d", st)
	}
	if st := e.admin("POST", "/_ghsim/repos/octo/app/check-runs/"+strconv.FormatInt(run.ID, 10)+"/complete", map[string]any{"conclusion": "success"}, nil); st != 204 {
		t.Errorf("complete = %d", st)
	}
	if st := e.admin("PUT", "/_ghsim/repos/octo/app/branches/main/protection", map[string]any{"contexts": []string{"t"}}, nil); st != 204 {
		t.Errorf("protection = %d", st)
	}
	if st := e.admin("PUT", "/_ghsim/repos/octo/app/collaborators/carol", map[string]any{"permission": "write"}, nil); st != 204 {
		t.Errorf("collaborator = %d", st)
	}

	// Faults and limits.
	var fault struct{ ID string }
	if st := e.admin("POST", "/_ghsim/faults", map[string]any{"route": "PUT /repos/{o}/{r}/pulls/{n}/merge", "kind": "too_many_requests", "retryAfterSeconds": 3, "count": 2}, &fault); st != 201 || fault.ID == "" {
		t.Fatalf("set fault = %d", st)
	}
	var faults []FaultState
	if e.admin("GET", "/_ghsim/faults", nil, &faults); len(faults) != 1 || faults[0].RetryAfterSeconds != 3 || faults[0].Remaining != 2 {
		t.Fatalf("faults = %+v", faults)
	}
	c := ctx(t)
	_, resp, err := e.client(7).PullRequests.Merge(c, "octo", "app", 6, "", &github.PullRequestOptions{SHA: pushed.SHA})
	wantStatus(t, err, http.StatusTooManyRequests)
	if resp.Header.Get("Retry-After") != "3" {
		t.Errorf("Retry-After %q", resp.Header.Get("Retry-After"))
	}
	if st := e.admin("DELETE", "/_ghsim/faults/"+fault.ID, nil, nil); st != 204 {
		t.Errorf("clear fault = %d", st)
	}
	if st := e.admin("POST", "/_ghsim/faults", map[string]any{"route": "nonsense"}, nil); st != 422 {
		t.Errorf("bad fault = %d", st)
	}
	var lim limitsJSON
	if st := e.admin("PUT", "/_ghsim/limits", map[string]any{"secondaryLimit": 1, "secondaryWindowSeconds": 60, "secondaryRetryAfter": 30}, &lim); st != 200 || lim.SecondaryLimit != 1 || lim.SecondaryRetryAfter != float64(30) || lim.PrimaryLimit != 5000 {
		t.Fatalf("limits = %d %+v", st, lim)
	}
	cl := e.client(7)
	if _, _, err := cl.PullRequests.Merge(c, "octo", "app", 6, "", &github.PullRequestOptions{SHA: pushed.SHA}); err != nil {
		t.Fatal(err)
	}
	_, resp, err = cl.Issues.CreateComment(c, "octo", "app", 5, &github.IssueComment{Body: ptr("x")})
	wantStatus(t, err, http.StatusForbidden)
	if resp.Header.Get("Retry-After") != "30" {
		t.Errorf("Retry-After %q", resp.Header.Get("Retry-After"))
	}
	if st := e.admin("PUT", "/_ghsim/limits", map[string]any{"secondaryRetryAfter": "sometimes"}, nil); st != 422 {
		t.Errorf("bad limits = %d", st)
	}

	var effects []Effect
	if st := e.admin("GET", "/_ghsim/effects", nil, &effects); st != 200 || len(effects) != 1 || effects[0].Resource != "pull_request:octo/app#6" || effects[0].RequestID == "" {
		t.Fatalf("effects = %d %+v", st, effects)
	}
	if st := e.admin("GET", "/_ghsim/effects?since=1", nil, &effects); st != 200 || len(effects) != 0 {
		t.Errorf("effects since 1 = %+v", effects)
	}

	// Installations.
	if st := e.admin("POST", "/_ghsim/installations/7/suspend", nil, nil); st != 204 {
		t.Errorf("suspend = %d", st)
	}
	var insts []Installation
	if e.admin("GET", "/_ghsim/installations", nil, &insts); len(insts) != 1 || !insts[0].Suspended || insts[0].Repositories[0] != "octo/app" {
		t.Errorf("installations = %+v", insts)
	}
	if st := e.admin("DELETE", "/_ghsim/installations/7", nil, nil); st != 204 {
		t.Errorf("delete installation = %d", st)
	}
	if st := e.admin("GET", "/_ghsim/nothing", nil, nil); st != 404 {
		t.Errorf("unknown admin route = %d", st)
	}
	if st := e.admin("GET", "/nothing/at/all", nil, nil); st != 404 {
		t.Errorf("unknown route = %d", st)
	}
	if st := e.admin("POST", "/_ghsim/seed", nil, nil); st != 204 {
		t.Errorf("seed = %d", st)
	}
}

func TestAdminLoopbackOnly(t *testing.T) {
	t.Parallel()
	for remote, want := range map[string]bool{"127.0.0.1:5": true, "[::1]:5": true, "10.0.0.1:5": false, "garbage": false} {
		if got := isLoopbackRemote(remote); got != want {
			t.Errorf("isLoopbackRemote(%q) = %v", remote, got)
		}
	}
	if _, err := New(Config{Addr: "0.0.0.0:0", PrivateKey: sharedKey(t)}); err == nil {
		t.Error("New listened on a non-loopback address")
	}
}

func TestSeedDemo(t *testing.T) {
	t.Parallel()
	e := seeded(t, Config{})
	for n := 1; n <= 3; n++ {
		p, err := e.sim.Pull(DemoOwner, DemoRepo, n)
		if err != nil || p.State != "open" || p.HeadSHA != DemoHeadSHA(n) || !p.Mergeable {
			t.Errorf("pull %d = %+v, %v", n, p, err)
		}
	}
	for n := 10; n <= 12; n++ {
		if is, err := e.sim.Issue(DemoOwner, DemoRepo, n); err != nil || is.IsPull {
			t.Errorf("issue %d = %+v, %v", n, is, err)
		}
	}
	if _, err := e.sim.Ref(DemoOwner, DemoRepo, "heads/main"); err != nil {
		t.Error(err)
	}
	if insts := e.sim.Installations(); len(insts) != 1 || insts[0].ID != DemoInstallationID {
		t.Errorf("installations = %+v", insts)
	}
	if err := e.sim.SeedDemo(); err == nil {
		t.Error("seeding twice succeeded")
	}
}

func TestStopIsSafe(t *testing.T) {
	t.Parallel()
	s, err := New(Config{PrivateKey: sharedKey(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil { // before Start
		t.Fatal(err)
	}
	if err := s.Close(); err != nil { // twice
		t.Fatal(err)
	}
	if err := s.Start(ctx(t)); err == nil {
		t.Error("Start after Stop succeeded")
	}
}

// POST /_ghsim/repos answers 201 for a new repository, 200 when it moves
// one to another installation, and 409 with a message for a repository
// already in that installation, as the package documentation says.
func TestAdminAddRepoExisting(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	add := `{"owner": "octo", "name": "app", "installationId": 7}`
	if st, body := e.adminRaw("POST", "/_ghsim/repos", add); st != http.StatusCreated {
		t.Fatalf("create repo = %d %s", st, body)
	}
	st, body := e.adminRaw("POST", "/_ghsim/repos", add)
	if st != http.StatusConflict || !strings.Contains(body, `"error":"ghsim: repository octo/app is in installation 7 already`) {
		t.Errorf("create it again = %d %s", st, body)
	}
	st, body = e.adminRaw("POST", "/_ghsim/repos", `{"owner": "octo", "name": "app", "installationId": 8}`)
	if st != http.StatusOK || !strings.Contains(body, `"installationId":8`) {
		t.Errorf("move it = %d %s", st, body)
	}
	if r, err := e.sim.AddRepo("octo", "app", 8); err != nil || r.InstallationID != 8 {
		t.Errorf("the Go API's AddRepo of a repository in place = %+v, %v (it does nothing)", r, err)
	}
}

// primaryLimit 0 over the admin API is refused with a message, rather
// than quietly becoming the default; an omitted primaryLimit is the
// default, -1 unlimited.
func TestAdminLimitsPrimaryZero(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{Limits: Limits{PrimaryLimit: 10}})
	st, body := e.adminRaw("PUT", "/_ghsim/limits", `{"primaryLimit": 0}`)
	if st != http.StatusUnprocessableEntity || !strings.Contains(body, "primaryLimit 0") {
		t.Errorf("primaryLimit 0 = %d %s", st, body)
	}
	if l := e.sim.Limits(); l.PrimaryLimit != 10 {
		t.Errorf("a refused PUT changed the limit to %d", l.PrimaryLimit)
	}
	var lim limitsJSON
	if st := e.admin("PUT", "/_ghsim/limits", map[string]any{"primaryLimit": -1}, &lim); st != 200 || lim.PrimaryLimit != -1 {
		t.Errorf("primaryLimit -1 = %d %+v", st, lim)
	}
	if st := e.admin("PUT", "/_ghsim/limits", map[string]any{"secondaryLimit": 2}, &lim); st != 200 || lim.PrimaryLimit != 5000 || lim.SecondaryLimit != 2 {
		t.Errorf("primaryLimit omitted = %d %+v", st, lim)
	}
}
