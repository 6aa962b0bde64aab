package mergequeue_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/app/ghsim"
	"github.com/baton-dev/baton/app/mergequeue"
	"github.com/baton-dev/baton/schema"
)

// botComments returns the comments baton left on pull request n that
// contain text.
func (s *stack) botComments(t tester, repo string, n int, text string) []string {
	t.Helper()
	var out []string
	for _, c := range s.pull(t, repo, n).Comments {
		if c.ByApp && strings.Contains(c.Body, text) {
			out = append(out, c.Body)
		}
	}
	return out
}

// queueReady creates repo with one pull request whose required check
// passed.
func (s *stack) queueReady(t *testing.T, repo string) {
	t.Helper()
	s.repo(t, repo, 1, []string{"ci"})
	if _, err := s.sim.AddCheckRun("octo", repo, ghsim.NewCheckRun{Name: "ci", HeadSHA: s.pull(t, repo, 1).HeadSHA, Status: "completed", Conclusion: "success"}); err != nil {
		t.Fatal(err)
	}
}

// A merge that fails for a while (GitHub answers 500) is tried again with
// a fresh operation: it is not GitHub refusing the merge.
func TestTransientMergeFailureRetried(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	const repo = "flaky"
	s.queueReady(t, repo)
	// Four 500s: more than one operation's attempts, fewer than the
	// queue's tries.
	if _, err := s.sim.SetFault(ghsim.Fault{Route: "PUT /repos/octo/" + repo + "/pulls/{number}/merge", Kind: ghsim.FaultStatus, Status: 500, Count: 4}); err != nil {
		t.Fatal(err)
	}
	if err := s.sim.AddLabel("octo", repo, 1, "baton:queue", "monalisa"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "#1 merged, and out of the queue", func() bool { return s.mergedAndOut(t, repo, 1) })
	if c := s.botComments(t, repo, 1, "removed this pull request"); len(c) != 0 {
		t.Errorf("bounced: %q", c)
	}
	if a := s.audit(t, repo); len(auditOf(a, mergequeue.AuditBounce)) != 0 || !slices.Equal(prsOf(auditOf(a, mergequeue.AuditMerge)), []int{1}) {
		t.Errorf("audit: %+v", a)
	}
	if n := len(s.mergeEffects(repo)); n != 1 {
		t.Errorf("%d merges applied", n)
	}
	// Two tries: the first ran out of attempts on the 500s.
	if ops := s.settledMergeOps(t, repo, 1); len(ops) != 2 || ops[1].Status != "failed" || ops[1].LastErrorCategory != "server_error" || ops[0].Status != "succeeded" {
		t.Errorf("merge operations: %d", len(ops))
	}
}

// A merge GitHub keeps failing (500s past the queue's tries) bounces with
// a message saying so, not that GitHub refused it; the label added again
// once GitHub is well gives the pull request a fresh merge.
func TestPersistentMergeFailureBouncesThenRequeues(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	const repo = "down"
	s.queueReady(t, repo)
	fault, err := s.sim.SetFault(ghsim.Fault{Route: "PUT /repos/octo/" + repo + "/pulls/{number}/merge", Kind: ghsim.FaultStatus, Status: 500, Count: 30})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.sim.AddLabel("octo", repo, 1, "baton:queue", "monalisa"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "#1 bounced, its label gone", func() bool {
		p := s.pull(t, repo, 1)
		return len(s.botComments(t, repo, 1, "removed this pull request")) == 1 && !slices.Contains(p.Labels, "baton:queue")
	})
	if c := s.botComments(t, repo, 1, "removed this pull request"); !strings.Contains(c[0], "GitHub kept failing") || strings.Contains(c[0], "refused") {
		t.Errorf("bounce comment: %q", c[0])
	}
	s.sim.ClearFault(fault)
	// The bounced entry is cleared when the label goes; wait for it, so
	// the label added again is a join.
	waitFor(t, 30*time.Second, "#1 out of the queue", func() bool { _, ok := s.entryOf(t, repo, 1); return !ok })
	if err := s.sim.AddLabel("octo", repo, 1, "baton:queue", "monalisa"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "#1 merged after joining again", func() bool { return s.pull(t, repo, 1).Merged })
	if c := s.botComments(t, repo, 1, "removed this pull request"); len(c) != 1 {
		t.Errorf("%d bounce comments", len(c))
	}
	// Three tries for the first join, all failed on the 500s; one for the
	// second (its record is saved just after GitHub merged).
	ops := s.settledMergeOps(t, repo, 1)
	var states []string
	for _, op := range ops {
		states = append(states, string(op.Status)+"/"+op.LastErrorCategory)
	}
	if !slices.Equal(states, []string{"succeeded/", "failed/server_error", "failed/server_error", "failed/server_error"}) {
		t.Errorf("merge operations, newest first: %v", states)
	}
}

// A pull request bounced because GitHub refused the merge (not mergeable)
// gets a new merge when its label is added again: the bounce comment's
// advice works without a new commit.
func TestRefusedMergeRequeuedGetsNewMerge(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	const repo = "requeued"
	s.queueReady(t, repo)
	if err := s.sim.SetMergeable("octo", repo, 1, false); err != nil {
		t.Fatal(err)
	}
	if err := s.sim.AddLabel("octo", repo, 1, "baton:queue", "monalisa"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "#1 bounced, its label gone", func() bool {
		p := s.pull(t, repo, 1)
		return len(s.botComments(t, repo, 1, "GitHub refused the merge")) == 1 && !slices.Contains(p.Labels, "baton:queue")
	})
	waitFor(t, 30*time.Second, "#1 out of the queue", func() bool { _, ok := s.entryOf(t, repo, 1); return !ok })
	if err := s.sim.SetMergeable("octo", repo, 1, true); err != nil {
		t.Fatal(err)
	}
	if err := s.sim.AddLabel("octo", repo, 1, "baton:queue", "monalisa"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "#1 merged after joining again, and out of the queue", func() bool { return s.mergedAndOut(t, repo, 1) })
	if c := s.botComments(t, repo, 1, "removed this pull request"); len(c) != 1 {
		t.Errorf("%d bounce comments", len(c))
	}
	if ops := s.settledMergeOps(t, repo, 1); len(ops) != 2 || ops[1].Status != "failed" || ops[0].Status != "succeeded" {
		t.Errorf("merge operations: %d", len(ops))
	}
	got := []string{}
	for _, r := range s.audit(t, repo) {
		got = append(got, r.Action)
	}
	if !slices.Equal(got, []string{"join", "gate_success", "bounce", "join", "gate_success", "merge"}) {
		t.Errorf("audit: %v", got)
	}
}

// One bounce of one join at one head is one comment, whichever trigger
// bounces it: a run that submitted the comment and ended before it
// recorded the bounce leaves the comment the next run finds.
func TestBounceCommentOncePerJoin(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{fakeClock: true, noWebhooks: true})
	ctx := context.Background()
	const repo = "onecomment"
	s.repo(t, repo, 1, []string{"ci"})
	head := s.pull(t, repo, 1).HeadSHA
	if _, err := s.sim.AddCheckRun("octo", repo, ghsim.NewCheckRun{Name: "ci", HeadSHA: head, Status: "completed", Conclusion: "failure"}); err != nil {
		t.Fatal(err)
	}
	if err := s.sim.AddLabel("octo", repo, 1, "baton:queue", "monalisa"); err != nil {
		t.Fatal(err)
	}
	// The comment of a run that joined #1 now (the clock stands still),
	// bounced it, and crashed.
	body, _ := json.Marshal(schema.CommentPayload{Body: "baton removed this pull request from the merge queue: (a run that crashed)."})
	if _, _, err := s.exec.Submit(ctx, "github:1", schema.Submission{IdempotencyKey: mergequeue.BounceKey("octo", repo, 1, head, s.clock.Now()),
		Action: schema.ActionComment, Resource: schema.Resource{Type: schema.ResourceIssue, ID: "octo/" + repo + "#1"}, Payload: body, InstallationID: 1}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the crashed run's comment posted", func() bool { return len(s.botComments(t, repo, 1, "a run that crashed")) == 1 })
	rep, err := s.q.Reconcile(ctx, 1, "octo", repo)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rep.Joined, []int{1}) || !slices.Equal(rep.Bounced, []int{1}) {
		t.Fatalf("report: %+v", rep)
	}
	waitFor(t, 30*time.Second, "#1's label removed", func() bool { return !slices.Contains(s.pull(t, repo, 1).Labels, "baton:queue") })
	if c := s.botComments(t, repo, 1, "removed this pull request"); len(c) != 1 {
		t.Errorf("%d bounce comments: %q", len(c), c)
	}
}

// mergedAndOut reports whether pull request n is merged and its entry has
// left the queue with a merge audited. The pull request and the entry
// alone do not tell: GitHub merges before the queue hears of it, and an
// entry may be absent for other reasons (it left, or, for a moment, a run
// has not saved its join yet). The newest audit row of n saying merge does
// tell, as it is written in the transaction that removes the entry.
func (s *stack) mergedAndOut(t tester, repo string, n int) bool {
	if !s.pull(t, repo, n).Merged {
		return false
	}
	last := ""
	for _, r := range s.audit(t, repo) {
		if r.PRNumber == n {
			last = r.Action
		}
	}
	if last != mergequeue.AuditMerge {
		return false
	}
	_, queued := s.entryOf(t, repo, n)
	return !queued
}

// settledMergeOps is mergeOps once the newest is terminal: GitHub merges
// (and the closed webhook arrives) a moment before the executor saves the
// operation's outcome.
func (s *stack) settledMergeOps(t *testing.T, repo string, n int) []schema.Record {
	t.Helper()
	var ops []schema.Record
	waitFor(t, 30*time.Second, "the newest merge operation terminal", func() bool {
		ops = s.mergeOps(t, repo, n)
		return len(ops) > 0 && ops[0].Terminal()
	})
	return ops
}
