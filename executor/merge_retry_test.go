package executor

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-github/v62/github"

	"github.com/baton-dev/baton/app/ghsim"
	"github.com/baton-dev/baton/schema"
)

// GitHub refuses a merge with a 405 that a later attempt gets past in two
// cases: just after its base branch moved (the merge queue submits the next
// merge right after the previous one landed), "Base branch was modified.
// Review and try the merge again."; and while an earlier merge of the pull
// request is still being carried out, "Merge already in progress". Neither
// merge was applied: the operation tries again after the usual wait instead
// of failing as a refusal. A merge in progress may be landing: the pull
// request is probed before the next attempt.
func TestMergeRetriedAfterPassingRefusal(t *testing.T) {
	t.Parallel()
	for i, tc := range []struct {
		kind   ghsim.FaultKind
		probes int
	}{{ghsim.FaultBaseModified, 0}, {ghsim.FaultMergeInProgress, 1}} {
		kind := tc.kind
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
			if calls != 2 || probes != tc.probes {
				t.Errorf("calls=%d probes=%d, want 2 and %d", calls, probes, tc.probes)
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

// "Merge already in progress" on the last attempt: an earlier merge of the
// pull request may be landing (here it has: a merge made before, standing
// for our own earlier attempt whose answer was lost). The operation is
// probed before it is given up, and recorded succeeded since the pull
// request is merged at its sha.
func TestMergeInProgressOnLastAttemptProbed(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	head := ghsim.DemoHeadSHA(3)
	cl := installationClient(t, s.gh)
	if _, _, err := cl.PullRequests.Merge(context.Background(), "octo", "demo", 3, "", &github.PullRequestOptions{SHA: head}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.sim.SetFault(ghsim.Fault{Route: "PUT /repos/{owner}/{repo}/pulls/{number}/merge", Kind: ghsim.FaultMergeInProgress, Count: 1}); err != nil {
		t.Fatal(err)
	}
	rec := s.submit(t, "in-progress-last", schema.ActionMerge, schema.Resource{Type: "pull_request", ID: "octo/demo#3"}, `{"sha":"`+head+`"}`,
		func(sub *schema.Submission) { sub.MaxAttempts = 1 })
	got := s.await(t, rec.OperationID, 20*time.Second)
	if got.Status != schema.StatusSucceeded || got.Attempts != 1 {
		t.Fatalf("status=%s attempts=%d category=%s %s log=%+v", got.Status, got.Attempts, got.LastErrorCategory, got.LastErrorMessage, got.AttemptLog)
	}
	if calls, probes := callsAndProbes(got); calls != 1 || probes != 1 {
		t.Errorf("calls=%d probes=%d, want 1 and 1", calls, probes)
	}
}
