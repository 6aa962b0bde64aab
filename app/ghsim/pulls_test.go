package ghsim

import (
	"errors"
	"net/http"
	"testing"

	"github.com/google/go-github/v62/github"
)

func TestPullsGetAndList(t *testing.T) {
	t.Parallel()
	e := seeded(t, Config{})
	c := ctx(t)
	cl := e.client(1)
	pr, _, err := cl.PullRequests.Get(c, "octo", "demo", 2)
	if err != nil || pr.GetHead().GetSHA() != DemoHeadSHA(2) || pr.GetBase().GetRef() != "main" || pr.GetState() != "open" || !pr.GetMergeable() {
		t.Fatalf("GET pull 2 = %+v, %v", pr, err)
	}
	_, _, err = cl.PullRequests.Get(c, "octo", "demo", 10) // an issue, not a pull request
	wantStatus(t, err, http.StatusNotFound)

	if err := e.sim.ClosePull("octo", "demo", 3, true, ""); err != nil {
		t.Fatal(err)
	}
	for state, want := range map[string]int{"open": 2, "closed": 1, "all": 3} {
		list, _, err := cl.PullRequests.List(c, "octo", "demo", &github.PullRequestListOptions{State: state})
		if err != nil || len(list) != want {
			t.Errorf("list %s = %d pulls, %v; want %d", state, len(list), err, want)
		}
	}
	list, resp, err := cl.PullRequests.List(c, "octo", "demo", &github.PullRequestListOptions{State: "all", ListOptions: github.ListOptions{PerPage: 2}})
	if err != nil || len(list) != 2 || resp.NextPage != 2 || list[0].GetNumber() != 3 {
		t.Fatalf("page 1 = %d pulls, next %d, %v", len(list), resp.NextPage, err)
	}
}

func TestMerge(t *testing.T) {
	t.Parallel()
	e := seeded(t, Config{})
	c := ctx(t)
	cl := e.client(1)
	mainBefore, _ := e.sim.Ref("octo", "demo", "heads/main")

	merged, _, err := cl.PullRequests.IsMerged(c, "octo", "demo", 1)
	if err != nil || merged {
		t.Fatalf("IsMerged before = %v, %v", merged, err)
	}
	_, _, err = cl.PullRequests.Merge(c, "octo", "demo", 1, "", &github.PullRequestOptions{SHA: DemoHeadSHA(2)})
	wantStatus(t, err, http.StatusConflict)
	var er *github.ErrorResponse
	if !errors.As(err, &er) || er.Message != "Head branch was modified. Review and try the merge again." {
		t.Errorf("409 message = %v", err)
	}

	res, resp, err := cl.PullRequests.Merge(c, "octo", "demo", 1, "", &github.PullRequestOptions{SHA: DemoHeadSHA(1)})
	if err != nil || resp.StatusCode != http.StatusOK || !res.GetMerged() || len(res.GetSHA()) != 40 {
		t.Fatalf("merge = %v, %v", res, err)
	}
	mainAfter, _ := e.sim.Ref("octo", "demo", "heads/main")
	if mainAfter != res.GetSHA() {
		t.Errorf("main = %s, want the merge commit %s", mainAfter, res.GetSHA())
	}
	mc, _ := e.sim.GetCommit("octo", "demo", mainAfter)
	if len(mc.Parents) != 2 || mc.Parents[0] != mainBefore || mc.Parents[1] != DemoHeadSHA(1) {
		t.Errorf("merge commit parents = %v", mc.Parents)
	}
	p, _ := e.sim.Pull("octo", "demo", 1)
	if p.State != "closed" || !p.Merged || p.MergeCommitSHA != res.GetSHA() || p.MergedBy != "baton-sim[bot]" {
		t.Errorf("pull after merge = %+v", p)
	}
	merged, _, err = cl.PullRequests.IsMerged(c, "octo", "demo", 1)
	if err != nil || !merged {
		t.Fatalf("IsMerged after = %v, %v", merged, err)
	}
	_, _, err = cl.PullRequests.Merge(c, "octo", "demo", 1, "", &github.PullRequestOptions{SHA: DemoHeadSHA(1)})
	wantStatus(t, err, http.StatusMethodNotAllowed)

	if err := e.sim.SetMergeable("octo", "demo", 2, false); err != nil {
		t.Fatal(err)
	}
	_, _, err = cl.PullRequests.Merge(c, "octo", "demo", 2, "", nil)
	wantStatus(t, err, http.StatusMethodNotAllowed)

	res, _, err = cl.PullRequests.Merge(c, "octo", "demo", 3, "", &github.PullRequestOptions{MergeMethod: "squash"})
	if err != nil || !res.GetMerged() {
		t.Fatalf("squash merge = %v, %v", res, err)
	}
	sq, _ := e.sim.GetCommit("octo", "demo", res.GetSHA())
	if len(sq.Parents) != 1 || sq.Parents[0] != mainAfter {
		t.Errorf("squash commit parents = %v, want [%s]", sq.Parents, mainAfter)
	}
	if n := len(e.sim.Effects()); n != 2 {
		t.Errorf("%d effects, want 2 (the two merges)", n)
	}
}

func TestMergeRequiresChecks(t *testing.T) {
	t.Parallel()
	e := seeded(t, Config{})
	c := ctx(t)
	cl := e.client(1)
	if err := e.sim.SetRequiredChecks("octo", "demo", "main", []string{"ci/test", "lint"}, true); err != nil {
		t.Fatal(err)
	}
	_, _, err := cl.PullRequests.Merge(c, "octo", "demo", 1, "", nil)
	wantStatus(t, err, http.StatusMethodNotAllowed)
	if err := e.sim.SetStatus("octo", "demo", DemoHeadSHA(1), NewStatus{State: "success", Context: "ci/test"}); err != nil {
		t.Fatal(err)
	}
	id, err := e.sim.AddCheckRun("octo", "demo", NewCheckRun{Name: "lint", HeadSHA: DemoHeadSHA(1)})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = cl.PullRequests.Merge(c, "octo", "demo", 1, "", nil)
	wantStatus(t, err, http.StatusMethodNotAllowed)
	if err := e.sim.CompleteCheckRun("octo", "demo", id, "success"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := cl.PullRequests.Merge(c, "octo", "demo", 1, "", nil); err != nil {
		t.Fatal(err)
	}
}

func TestUpdateBranch(t *testing.T) {
	t.Parallel()
	e := seeded(t, Config{})
	c := ctx(t)
	cl := e.client(1)
	_, _, err := cl.PullRequests.UpdateBranch(c, "octo", "demo", 2, &github.PullRequestBranchUpdateOptions{ExpectedHeadSHA: ptr(DemoHeadSHA(1))})
	wantStatus(t, err, http.StatusUnprocessableEntity)

	// The head has every commit of main: GitHub has nothing to merge.
	_, _, err = cl.PullRequests.UpdateBranch(c, "octo", "demo", 2, &github.PullRequestBranchUpdateOptions{ExpectedHeadSHA: ptr(DemoHeadSHA(2))})
	wantStatus(t, err, http.StatusUnprocessableEntity)
	var ere *github.ErrorResponse
	if !errors.As(err, &ere) || ere.Message != "There are no new commits on the base branch." {
		t.Fatalf("up-to-date update-branch = %v", err)
	}
	if p, _ := e.sim.Pull("octo", "demo", 2); p.HeadSHA != DemoHeadSHA(2) {
		t.Fatal("head moved although the base brought nothing")
	}
	base, _ := e.sim.Ref("octo", "demo", "heads/main")
	moved, err := e.sim.AddCommit("octo", "demo", Commit{Parents: []string{base}, Message: "on main"})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.sim.SetRef("octo", "demo", "heads/main", moved, ""); err != nil {
		t.Fatal(err)
	}

	res, resp, err := cl.PullRequests.UpdateBranch(c, "octo", "demo", 2, &github.PullRequestBranchUpdateOptions{ExpectedHeadSHA: ptr(DemoHeadSHA(2))})
	var accepted *github.AcceptedError
	if !errors.As(err, &accepted) || resp.StatusCode != http.StatusAccepted {
		t.Fatalf("update-branch = %v, %v, %v (go-github reports 202 as AcceptedError)", res, resp, err)
	}
	p, _ := e.sim.Pull("octo", "demo", 2)
	if p.HeadSHA == DemoHeadSHA(2) {
		t.Fatal("head did not move")
	}
	head, _ := e.sim.GetCommit("octo", "demo", p.HeadSHA)
	main, _ := e.sim.Ref("octo", "demo", "heads/main")
	if len(head.Parents) != 2 || head.Parents[0] != DemoHeadSHA(2) || head.Parents[1] != main {
		t.Errorf("new head parents = %v", head.Parents)
	}
	pr, _, err := cl.PullRequests.Get(c, "octo", "demo", 2)
	if err != nil || pr.GetHead().GetSHA() != p.HeadSHA {
		t.Fatalf("GET after update = %v, %v", pr.GetHead().GetSHA(), err)
	}
	// A stale expectation is refused now.
	_, _, err = cl.PullRequests.UpdateBranch(c, "octo", "demo", 2, &github.PullRequestBranchUpdateOptions{ExpectedHeadSHA: ptr(DemoHeadSHA(2))})
	wantStatus(t, err, http.StatusUnprocessableEntity)
}
