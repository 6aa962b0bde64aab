package executor

import (
	"testing"
	"time"

	"github.com/baton-dev/baton/app/ghsim"
	"github.com/baton-dev/baton/schema"
)

// With this machine's clock ahead of GitHub's by more than the comment
// probe's margin (baton learns GitHub's clock and works on), the probe
// after a comment that was posted but whose answer was lost must still
// find it: the comment is GitHub's, dated by GitHub's clock.
func TestCommentProbeOnGitHubClock(t *testing.T) {
	t.Parallel()
	github := func() time.Time { return time.Now().Add(-30 * time.Minute) }
	s := newStack(t, stackOptions{sim: ghsim.Config{Now: github, JWTNow: github}})
	if _, err := s.sim.SetFault(ghsim.Fault{Route: "POST /repos/{owner}/{repo}/issues/{number}/comments", Kind: ghsim.FaultDropAfter, Count: 1}); err != nil {
		t.Fatal(err)
	}
	rec := s.submit(t, "k", schema.ActionComment, issue(10), `{"body":"once"}`)
	got := s.await(t, rec.OperationID, 30*time.Second)
	is, err := s.sim.Issue("octo", "demo", 10)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != schema.StatusSucceeded || len(is.Comments) != 1 {
		t.Fatalf("status=%s attempts=%d, %d comments posted, want 1", got.Status, got.Attempts, len(is.Comments))
	}
}
