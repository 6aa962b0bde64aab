package executor

import (
	"fmt"
	"testing"
	"time"

	"github.com/baton-dev/baton/app/ghsim"
	"github.com/baton-dev/baton/schema"
)

// GitHub refuses a merge with a 405 that a later attempt gets past in two
// cases: just after its base branch moved (the merge queue submits the next
// merge right after the previous one landed), "Base branch was modified.
// Review and try the merge again."; and while an earlier merge of the pull
// request is still being carried out, "Merge already in progress". Neither
// merge was applied: the operation tries again after the usual wait instead
// of failing as a refusal.
func TestMergeRetriedAfterPassingRefusal(t *testing.T) {
	t.Parallel()
	for i, kind := range []ghsim.FaultKind{ghsim.FaultBaseModified, ghsim.FaultMergeInProgress} {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			s := newStack(t, stackOptions{})
			if _, err := s.sim.SetFault(ghsim.Fault{Route: "PUT /repos/{owner}/{repo}/pulls/{number}/merge", Kind: kind, Count: 1}); err != nil {
				t.Fatal(err)
			}
			number := i + 1
			head := ghsim.DemoHeadSHA(number)
			rec := s.submit(t, "refused-for-now", schema.ActionMerge, schema.Resource{Type: "pull_request", ID: fmt.Sprintf("octo/demo#%d", number)}, `{"sha":"`+head+`"}`)
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
			if pr, _ := s.sim.Pull("octo", "demo", number); !pr.Merged {
				t.Error("pull request not merged")
			}
		})
	}
}
