package executor

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-dev/baton/app/ghsim"
	"github.com/baton-dev/baton/schema"
)

// update_branch's first attempt fails ambiguously (a 502, not applied)
// and the pull request's author pushes before the probe: the head moved,
// but not by the update. The operation must not be recorded succeeded
// (the branch was never updated with its base): the head is no longer
// expectedHeadSha, a conflict, as the design has it.
func TestUpdateBranchProbeIsNotFooledByAPush(t *testing.T) {
	t.Parallel()
	var (
		sim    atomic.Pointer[ghsim.Sim]
		pushed atomic.Bool
	)
	s := newStack(t, stackOptions{transport: func(next http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			resp, err := next.RoundTrip(req)
			if err == nil && resp.StatusCode == http.StatusBadGateway && strings.HasSuffix(req.URL.Path, "/update-branch") && !pushed.Swap(true) {
				if _, perr := sim.Load().PushPull("octo", "demo", 2, "", "monalisa"); perr != nil {
					t.Error(perr)
				}
			}
			return resp, err
		})
	}})
	sim.Store(s.sim)
	// main moves on: the update has something to bring in.
	moveDemoMain(t, s.sim)
	if _, err := s.sim.SetFault(ghsim.Fault{Route: "PUT /repos/{owner}/{repo}/pulls/{number}/update-branch", Kind: ghsim.FaultStatus, Status: 502, Count: 1}); err != nil {
		t.Fatal(err)
	}
	rec := s.submit(t, "k", schema.ActionUpdateBranch, schema.Resource{Type: "pull_request", ID: "octo/demo#2"},
		`{"expectedHeadSha":"`+ghsim.DemoHeadSHA(2)+`"}`)
	got := s.await(t, rec.OperationID, 30*time.Second)
	if !pushed.Load() {
		t.Fatal("the push was not made")
	}
	if got.Status != schema.StatusFailed || got.LastErrorCategory != CategoryConflict {
		t.Fatalf("status=%s category=%s result=%s, want failed with conflict", got.Status, got.LastErrorCategory, got.Result)
	}
}

// An update applied whose answer was lost is found by the probe: the
// head is GitHub's merge of the base into the expected head.
func TestUpdateBranchProbeFindsTheUpdate(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	moveDemoMain(t, s.sim)
	if _, err := s.sim.SetFault(ghsim.Fault{Route: "PUT /repos/{owner}/{repo}/pulls/{number}/update-branch", Kind: ghsim.FaultDropAfter, Count: 1}); err != nil {
		t.Fatal(err)
	}
	rec := s.submit(t, "k", schema.ActionUpdateBranch, schema.Resource{Type: "pull_request", ID: "octo/demo#2"},
		`{"expectedHeadSha":"`+ghsim.DemoHeadSHA(2)+`"}`)
	got := s.await(t, rec.OperationID, 30*time.Second)
	if got.Status != schema.StatusSucceeded || !strings.Contains(string(got.Result), `"probed":true`) {
		t.Fatalf("status=%s category=%s result=%s, want succeeded by the probe", got.Status, got.LastErrorCategory, got.Result)
	}
}

// moveDemoMain adds a commit on octo/demo's main, so that an update of a
// pull request's branch has something to bring in.
func moveDemoMain(t *testing.T, sim *ghsim.Sim) {
	t.Helper()
	base, err := sim.Ref("octo", "demo", "heads/main")
	if err != nil {
		t.Fatal(err)
	}
	moved, err := sim.AddCommit("octo", "demo", ghsim.Commit{Parents: []string{base}, Message: "on main"})
	if err != nil {
		t.Fatal(err)
	}
	if err := sim.SetRef("octo", "demo", "heads/main", moved, ""); err != nil {
		t.Fatal(err)
	}
}
