package mergequeue_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/app/ghsim"
	"github.com/baton-dev/baton/app/mergequeue"
)

// A merge GitHub refuses (the pull request cannot be merged) bounces the
// head with a comment saying why, and the next pull request merges.
func TestRefusedMergeBounces(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	const repo = "refused"
	s.repo(t, repo, 2, []string{"ci"})
	if err := s.sim.SetMergeable("octo", repo, 1, false); err != nil {
		t.Fatal(err)
	}
	for n := 1; n <= 2; n++ {
		if _, err := s.sim.AddCheckRun("octo", repo, ghsim.NewCheckRun{Name: "ci", HeadSHA: s.pull(t, repo, n).HeadSHA, Status: "completed", Conclusion: "success"}); err != nil {
			t.Fatal(err)
		}
		if err := s.sim.AddLabel("octo", repo, n, "baton:queue", "monalisa"); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 30*time.Second, "#1 bounced, #2 merged", func() bool {
		p1 := s.pull(t, repo, 1)
		bounced := slices.ContainsFunc(p1.Comments, func(c ghsim.CommentInfo) bool {
			return c.ByApp && strings.Contains(c.Body, "GitHub refused the merge") && strings.Contains(c.Body, "not mergeable")
		})
		merged := slices.Equal(prsOf(auditOf(s.audit(t, repo), mergequeue.AuditMerge)), []int{2})
		return bounced && !p1.Merged && !slices.Contains(p1.Labels, "baton:queue") && s.pull(t, repo, 2).Merged && merged
	})
	a := s.audit(t, repo)
	if b := auditOf(a, mergequeue.AuditBounce); len(b) != 1 || b[0].PRNumber != 1 {
		t.Errorf("bounces: %+v", b)
	}
	if rec := s.mergeOp(t, repo, 1, s.pull(t, repo, 1).HeadSHA); rec.Status != "failed" {
		t.Errorf("merge of #1: %s", rec.Status)
	}
}

// A closed pull request leaves the queue; reopened with its label, it
// joins again, at the end.
func TestClosedAndReopened(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	const repo = "reopened"
	s.repo(t, repo, 2, []string{"ci"})
	for n := 1; n <= 2; n++ {
		if err := s.sim.AddLabel("octo", repo, n, "baton:queue", "monalisa"); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 30*time.Second, "both queued", func() bool { return slices.Equal(s.queueOrder(t, repo), []int{1, 2}) })
	if err := s.sim.ClosePull("octo", repo, 1, true, "monalisa"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "#1 out", func() bool { return slices.Equal(s.queueOrder(t, repo), []int{2}) })
	if err := s.sim.ClosePull("octo", repo, 1, false, "monalisa"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "#1 back, at the end", func() bool { return slices.Equal(s.queueOrder(t, repo), []int{2, 1}) })
	got := []string{}
	for _, r := range s.audit(t, repo) {
		got = append(got, r.Action)
	}
	if !slices.Equal(got, []string{"join", "join", "leave", "join"}) {
		t.Errorf("audit: %v", got)
	}
}
