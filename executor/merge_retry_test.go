package executor

import (
	"testing"
	"time"

	"github.com/baton-dev/baton/app/ghsim"
	"github.com/baton-dev/baton/schema"
)

// GitHub refuses a merge that comes just after its base branch moved (the
// merge queue submits the next merge right after the previous one landed)
// with 405 "Base branch was modified. Review and try the merge again.". The
// merge was not applied and a retry works: the operation tries again after
// the usual wait instead of failing as a refusal.
func TestMergeRetriedAfterBaseModified(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	if _, err := s.sim.SetFault(ghsim.Fault{Route: "PUT /repos/{owner}/{repo}/pulls/{number}/merge", Kind: ghsim.FaultBaseModified, Count: 1}); err != nil {
		t.Fatal(err)
	}
	head := ghsim.DemoHeadSHA(1)
	rec := s.submit(t, "base-moved", schema.ActionMerge, schema.Resource{Type: "pull_request", ID: "octo/demo#1"}, `{"sha":"`+head+`"}`)
	got := s.await(t, rec.OperationID, 20*time.Second)
	if got.Status != schema.StatusSucceeded || got.Attempts != 2 {
		t.Fatalf("status=%s attempts=%d category=%s %s log=%+v", got.Status, got.Attempts, got.LastErrorCategory, got.LastErrorMessage, got.AttemptLog)
	}
	calls, probes := callsAndProbes(got)
	if calls != 2 || probes != 0 {
		t.Errorf("calls=%d probes=%d (the refused merge was not applied: nothing to probe)", calls, probes)
	}
	if a := got.AttemptLog[0]; a.HTTPStatus != 405 || a.ErrorCategory != CategoryConflict {
		t.Errorf("first attempt %+v", a)
	}
	if pr, _ := s.sim.Pull("octo", "demo", 1); !pr.Merged {
		t.Error("pull request not merged")
	}
}
