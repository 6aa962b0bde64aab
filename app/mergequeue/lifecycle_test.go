package mergequeue_test

import (
	"context"
	"testing"
	"time"

	"github.com/baton-dev/baton/app/ghsim"
	"github.com/baton-dev/baton/app/mergequeue"
	"github.com/baton-dev/baton/executor"
	"github.com/baton-dev/baton/schema"
)

// A merge that failed because the installation was suspended is tried
// again once GitHub answers for the installation again: the suspension
// said nothing about the pull request, so it does not bounce ("GitHub
// refused the merge") and need not be queued again by hand.
func TestMergeFailedWhileSuspendedIsTriedAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStack(t, stackOptions{noWorkers: true})
	const repo = "suspended"
	s.repo(t, repo, 1, []string{"ci"})
	head := s.pull(t, repo, 1).HeadSHA
	if _, err := s.sim.AddCheckRun("octo", repo, ghsim.NewCheckRun{Name: "ci", HeadSHA: head, Status: "completed", Conclusion: "success"}); err != nil {
		t.Fatal(err)
	}
	if err := s.sim.AddLabel("octo", repo, 1, "baton:queue", "monalisa"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, "merge submitted", func() bool { return len(s.mergeOps(t, repo, 1)) == 1 })
	first := s.mergeOps(t, repo, 1)[0]

	if err := s.sim.SuspendInstallation(ghsim.DemoInstallationID, true); err != nil {
		t.Fatal(err)
	}
	s.exec.Process(ctx, first.OperationID)
	rec, err := s.exec.Get(ctx, first.OperationID)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Status != schema.StatusFailed || rec.LastErrorCategory != executor.CategoryInstallationUnavailable {
		t.Fatalf("merge while suspended: status=%s category=%s message=%s", rec.Status, rec.LastErrorCategory, rec.LastErrorMessage)
	}
	if err := s.sim.SuspendInstallation(ghsim.DemoInstallationID, false); err != nil {
		t.Fatal(err)
	}

	// The outcome is applied by the queue as soon as it can read the pull
	// request again (here: the reconcile that follows the unsuspension).
	var next schema.Record
	waitFor(t, 15*time.Second, "a new try of the merge", func() bool {
		if rep, err := s.q.Reconcile(ctx, ghsim.DemoInstallationID, "octo", repo); err != nil || rep.Skipped {
			return false
		}
		for _, r := range s.mergeOps(t, repo, 1) {
			if r.OperationID != first.OperationID {
				next = r
				return true
			}
		}
		return len(auditOf(s.audit(t, repo), mergequeue.AuditBounce)) > 0
	})
	if b := auditOf(s.audit(t, repo), mergequeue.AuditBounce); len(b) != 0 {
		t.Fatalf("bounced: %+v", b)
	}
	s.exec.Process(ctx, next.OperationID)
	waitFor(t, 15*time.Second, "#1 merged by the queue", func() bool {
		return s.pull(t, repo, 1).Merged && len(auditOf(s.audit(t, repo), mergequeue.AuditMerge)) == 1
	})
}
