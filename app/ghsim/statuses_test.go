package ghsim

import (
	"net/http"
	"testing"

	"github.com/google/go-github/v62/github"
)

func TestStatuses(t *testing.T) {
	t.Parallel()
	e := seeded(t, Config{})
	c := ctx(t)
	cl := e.client(1)
	sha := DemoHeadSHA(1)
	st, resp, err := cl.Repositories.CreateStatus(c, "octo", "demo", sha, &github.RepoStatus{State: ptr("pending"), Context: ptr("baton/queue"), Description: ptr("1st in queue")})
	if err != nil || resp.StatusCode != http.StatusCreated || st.GetState() != "pending" {
		t.Fatalf("create status = %v, %v", st, err)
	}
	if _, _, err := cl.Repositories.CreateStatus(c, "octo", "demo", sha, &github.RepoStatus{State: ptr("success"), Context: ptr("ci")}); err != nil {
		t.Fatal(err)
	}
	comb, _, err := cl.Repositories.GetCombinedStatus(c, "octo", "demo", "pr-1", nil)
	if err != nil || comb.GetState() != "pending" || comb.GetTotalCount() != 2 || comb.GetSHA() != sha {
		t.Fatalf("combined = %v, %v", comb, err)
	}
	if _, _, err := cl.Repositories.CreateStatus(c, "octo", "demo", sha, &github.RepoStatus{State: ptr("success"), Context: ptr("baton/queue")}); err != nil {
		t.Fatal(err)
	}
	if comb, _, err = cl.Repositories.GetCombinedStatus(c, "octo", "demo", sha, nil); err != nil || comb.GetState() != "success" || comb.GetTotalCount() != 2 {
		t.Fatalf("combined = %v, %v", comb, err)
	}
	if err := e.sim.SetStatus("octo", "demo", sha, NewStatus{State: "failure", Context: "ci"}); err != nil {
		t.Fatal(err)
	}
	if comb, _, err = cl.Repositories.GetCombinedStatus(c, "octo", "demo", sha, nil); err != nil || comb.GetState() != "failure" {
		t.Fatalf("combined = %v, %v", comb, err)
	}
	_, _, err = cl.Repositories.GetCombinedStatus(c, "octo", "demo", "nope", nil)
	wantStatus(t, err, http.StatusNotFound)
	list, _, err := cl.Repositories.ListStatuses(c, "octo", "demo", sha, nil)
	if err != nil || len(list) != 4 || list[0].GetState() != "failure" {
		t.Fatalf("list statuses = %v, %v", list, err)
	}
	// A context is case-insensitive: "CI" is the latest of "ci".
	if err := e.sim.SetStatus("octo", "demo", sha, NewStatus{State: "success", Context: "CI"}); err != nil {
		t.Fatal(err)
	}
	if comb, _, err = cl.Repositories.GetCombinedStatus(c, "octo", "demo", sha, nil); err != nil || comb.GetState() != "success" || comb.GetTotalCount() != 2 {
		t.Fatalf("combined after CI = %v, %v", comb, err)
	}
}

func TestChecksProtectionPermissions(t *testing.T) {
	t.Parallel()
	e := seeded(t, Config{})
	c := ctx(t)
	cl := e.client(1)
	sha := DemoHeadSHA(2)
	id, err := e.sim.AddCheckRun("octo", "demo", NewCheckRun{Name: "test", HeadSHA: sha})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.sim.AddCheckRun("octo", "demo", NewCheckRun{Name: "lint", HeadSHA: sha, Status: "completed", Conclusion: "success"}); err != nil {
		t.Fatal(err)
	}
	runs, _, err := cl.Checks.ListCheckRunsForRef(c, "octo", "demo", sha, nil)
	if err != nil || runs.GetTotal() != 2 || runs.CheckRuns[0].GetStatus() != "in_progress" || len(runs.CheckRuns[0].PullRequests) != 1 {
		t.Fatalf("check runs = %v, %v", runs, err)
	}
	suites, _, err := cl.Checks.ListCheckSuitesForRef(c, "octo", "demo", "pr-2", nil)
	if err != nil || suites.GetTotal() != 1 || suites.CheckSuites[0].GetStatus() != "in_progress" {
		t.Fatalf("check suites = %v, %v", suites, err)
	}
	if err := e.sim.CompleteCheckRun("octo", "demo", id, "failure"); err != nil {
		t.Fatal(err)
	}
	suites, _, err = cl.Checks.ListCheckSuitesForRef(c, "octo", "demo", sha, nil)
	if err != nil || suites.CheckSuites[0].GetConclusion() != "failure" {
		t.Fatalf("check suites = %v, %v", suites, err)
	}
	if runs, _, err = cl.Checks.ListCheckRunsForRef(c, "octo", "demo", "main", nil); err != nil || runs.GetTotal() != 0 {
		t.Fatalf("no check runs on main = %v, %v", runs, err)
	}

	_, _, err = cl.Repositories.GetRequiredStatusChecks(c, "octo", "demo", "main")
	wantStatus(t, err, http.StatusNotFound)
	if err := e.sim.SetRequiredChecks("octo", "demo", "main", []string{"test"}, true); err != nil {
		t.Fatal(err)
	}
	rsc, _, err := cl.Repositories.GetRequiredStatusChecks(c, "octo", "demo", "main")
	if err != nil || !rsc.Strict || len(rsc.GetChecks()) != 1 || rsc.GetChecks()[0].Context != "test" {
		t.Fatalf("required checks = %+v, %v", rsc, err)
	}

	if err := e.sim.SetPermission("octo", "demo", "bob", "admin"); err != nil {
		t.Fatal(err)
	}
	if err := e.sim.SetPermission("octo", "demo", "alice", "maintain"); err != nil {
		t.Fatal(err)
	}
	e.sim.user("mallory")
	for login, want := range map[string]string{"alice": "write", "monalisa": "write", "bob": "admin", "mallory": "read"} {
		perm, _, err := cl.Repositories.GetPermissionLevel(c, "octo", "demo", login)
		if err != nil || perm.GetPermission() != want {
			t.Errorf("permission of %s = %v, %v; want %s", login, perm.GetPermission(), err, want)
		}
	}
	_, _, err = cl.Repositories.GetPermissionLevel(c, "octo", "demo", "nobody-at-all")
	wantStatus(t, err, http.StatusNotFound)
}

// A required name reported both as a check run and as a status needs both
// (GitHub: "both the check and the status are required"): a successful
// status does not cover a failed or running check run of the same name.
func TestMergeRequiresRunAndStatusOfTheSameName(t *testing.T) {
	t.Parallel()
	e := seeded(t, Config{})
	c := ctx(t)
	cl := e.client(1)
	if err := e.sim.SetRequiredChecks("octo", "demo", "main", []string{"ci"}, false); err != nil {
		t.Fatal(err)
	}
	for n, conclusion := range map[int]string{1: "failure", 2: ""} {
		sha := DemoHeadSHA(n)
		run := NewCheckRun{Name: "ci", HeadSHA: sha, Status: "completed", Conclusion: conclusion}
		if conclusion == "" {
			run.Status = "in_progress"
		}
		id, err := e.sim.AddCheckRun("octo", "demo", run)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.sim.SetStatus("octo", "demo", sha, NewStatus{State: "success", Context: "ci"}); err != nil {
			t.Fatal(err)
		}
		_, _, err = cl.PullRequests.Merge(c, "octo", "demo", n, "", nil)
		wantStatus(t, err, http.StatusMethodNotAllowed)
		if conclusion == "" {
			if err := e.sim.CompleteCheckRun("octo", "demo", id, "success"); err != nil {
				t.Fatal(err)
			}
			if _, _, err := cl.PullRequests.Merge(c, "octo", "demo", n, "", nil); err != nil {
				t.Fatalf("#%d with both passed: %v", n, err)
			}
		}
	}
}
