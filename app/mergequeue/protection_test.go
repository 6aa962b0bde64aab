package mergequeue_test

import (
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/baton-dev/baton/app/ghsim"
	"github.com/baton-dev/baton/app/mergequeue"
)

// An installation that does not grant administration:read cannot read
// branch protection: the gate then waits for every check reported on the
// head, not only the required one, and merges once they all pass.
func TestGateWithoutProtectionAccess(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zap.WarnLevel)
	s := newStack(t, stackOptions{permissions: map[string]string{"checks": "read", "contents": "write", "issues": "write",
		"metadata": "read", "pull_requests": "write", "statuses": "write"},
		mq: func(c *mergequeue.Config) { c.Logger = zap.New(core) }})
	const repo = "noadmin"
	s.repo(t, repo, 1, []string{"ci"})
	sha := s.pull(t, repo, 1).HeadSHA
	if _, err := s.sim.AddCheckRun("octo", repo, ghsim.NewCheckRun{Name: "ci", HeadSHA: sha, Status: "completed", Conclusion: "success"}); err != nil {
		t.Fatal(err)
	}
	lint, err := s.sim.AddCheckRun("octo", repo, ghsim.NewCheckRun{Name: "lint", HeadSHA: sha, Status: "in_progress"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.sim.AddLabel("octo", repo, 1, "baton:queue", "monalisa"); err != nil {
		t.Fatal(err)
	}
	// With protection readable, "ci" alone would let #1 merge now.
	waitFor(t, 30*time.Second, "#1 waiting for lint", func() bool {
		e, ok := s.entryOf(t, repo, 1)
		return ok && e.GateResult == mergequeue.GatePending && strings.Contains(e.GateDetail, "lint")
	})
	if p := s.pull(t, repo, 1); p.Merged {
		t.Fatal("#1 merged while lint ran")
	}
	if err := s.sim.CompleteCheckRun("octo", repo, lint, "success"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "#1 merged", func() bool { return s.mergedAndOut(t, repo, 1) })
	if m := s.mergeEffects(repo); len(m) != 1 {
		t.Errorf("merges: %+v", m)
	}
	// Every run read the protection again and was refused; the operator
	// is told once.
	if n := logs.FilterMessageSnippet("cannot read branch protection").Len(); n != 1 {
		t.Errorf("the refused protection read was logged %d times, want once", n)
	}
}

// A base whose protection requires up-to-date branches is named to the
// operator once: the queue does not update branches.
func TestStrictProtectionWarned(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zap.WarnLevel)
	s := newStack(t, stackOptions{mq: func(c *mergequeue.Config) { c.Logger = zap.New(core) }})
	const repo = "strict"
	s.repo(t, repo, 2, []string{"ci"})
	if err := s.sim.SetRequiredChecks("octo", repo, "main", []string{"ci"}, true); err != nil {
		t.Fatal(err)
	}
	for n := 1; n <= 2; n++ {
		sha := s.pull(t, repo, n).HeadSHA
		if _, err := s.sim.AddCheckRun("octo", repo, ghsim.NewCheckRun{Name: "ci", HeadSHA: sha, Status: "completed", Conclusion: "success"}); err != nil {
			t.Fatal(err)
		}
		if err := s.sim.AddLabel("octo", repo, n, "baton:queue", "monalisa"); err != nil {
			t.Fatal(err)
		}
	}
	// (The simulator merges heads behind their base.)
	waitFor(t, 30*time.Second, "#1 and #2 merged", func() bool { return s.mergedAndOut(t, repo, 1) && s.mergedAndOut(t, repo, 2) })
	if n := logs.FilterField(zap.String("event", "mergequeue.protection_strict")).Len(); n != 1 {
		t.Errorf("the strict protection was logged %d times, want once", n)
	}
}

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
	waitFor(t, 30*time.Second, "#1 and #2 bounced", func() bool {
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
