package mergequeue_test

import (
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/baton-dev/baton/app/ghsim"
	"github.com/baton-dev/baton/app/mergequeue"
)

// A base whose protection requires the queue's own status context is named
// to the operator once, with the context: GitHub refuses every merge while
// that status is pending on the head, so every pull request bounces.
func TestProtectionRequiringOwnStatusWarned(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zap.WarnLevel)
	s := newStack(t, stackOptions{mq: func(c *mergequeue.Config) { c.Logger = zap.New(core) }})
	const repo = "ownstatus"
	s.repo(t, repo, 2, []string{"ci", mergequeue.DefaultStatusContext})
	for n := 1; n <= 2; n++ {
		sha := s.pull(t, repo, n).HeadSHA
		if _, err := s.sim.AddCheckRun("octo", repo, ghsim.NewCheckRun{Name: "ci", HeadSHA: sha, Status: "completed", Conclusion: "success"}); err != nil {
			t.Fatal(err)
		}
		if err := s.sim.AddLabel("octo", repo, n, "baton:queue", "monalisa"); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 20*time.Second, "#1 and #2 bounced", func() bool {
		return len(auditOf(s.audit(t, repo), mergequeue.AuditBounce)) == 2
	})
	if s.pull(t, repo, 1).Merged || s.pull(t, repo, 2).Merged {
		t.Fatal("merged although GitHub requires the queue's pending status")
	}
	warned := logs.FilterField(zap.String("event", "mergequeue.protection_own_status"))
	if warned.Len() != 1 {
		t.Fatalf("the protection requiring %s was logged %d times, want once", mergequeue.DefaultStatusContext, warned.Len())
	}
	if got := warned.All()[0].ContextMap()["context"]; got != mergequeue.DefaultStatusContext {
		t.Errorf("warning names context %v", got)
	}
}
