package mergequeue_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/app/ghsim"
	"github.com/baton-dev/baton/app/mergequeue"
	"github.com/baton-dev/baton/schema"
)

// A pull request that leaves the queue (its label removed) or moves to a
// new head while its merge is submitted but has not run: the merge is
// cancelled, never runs, and nothing merges once it could have run.
func TestLeavingCancelsMerge(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	for _, tc := range []struct {
		name   string
		leave  func(t *testing.T, repo string)
		action string // the audit row that says the merge was cancelled
	}{
		{"unlabeled", func(t *testing.T, repo string) {
			if err := s.sim.RemoveLabel("octo", repo, 1, "baton:queue", "monalisa"); err != nil {
				t.Fatal(err)
			}
		}, mergequeue.AuditLeave},
		{"pushed", func(t *testing.T, repo string) {
			if _, err := s.sim.PushPull("octo", repo, 1, "", "monalisa"); err != nil {
				t.Fatal(err)
			}
		}, mergequeue.AuditReevaluate},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			repo := "cancel-" + tc.name
			s.repo(t, repo, 1, []string{"ci"})
			sha := s.pull(t, repo, 1).HeadSHA

			// The pull request's resource lease, held: its merge operation
			// stays queued.
			res := schema.Resource{Type: schema.ResourcePullRequest, ID: "octo/" + repo + "#1"}
			lease, err := s.coord.Acquire(ctx, res.Key(), "test-holds-the-merge", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			keep, stop := s.coord.KeepAlive(ctx, lease)
			defer stop()

			if _, err := s.sim.AddCheckRun("octo", repo, ghsim.NewCheckRun{Name: "ci", HeadSHA: sha, Status: "completed", Conclusion: "success"}); err != nil {
				t.Fatal(err)
			}
			if err := s.sim.AddLabel("octo", repo, 1, "baton:queue", "monalisa"); err != nil {
				t.Fatal(err)
			}
			waitFor(t, 30*time.Second, "the merge of #1 submitted", func() bool { return len(s.mergeOps(t, repo, 1)) == 1 })
			if rec := s.mergeOps(t, repo, 1)[0]; rec.Status != schema.StatusQueued {
				t.Fatalf("merge of #1 before it left: %s", rec.Status)
			}

			tc.leave(t, repo)
			// The run cancels the merge before it saves the queue's state
			// (and its audit row) at its end: wait for both.
			waitFor(t, 30*time.Second, "the merge of #1 cancelled, and the change audited", func() bool {
				return s.mergeOps(t, repo, 1)[0].Status == schema.StatusCancelled && len(auditOf(s.audit(t, repo), tc.action)) > 0
			})
			if keep.Err() != nil {
				t.Fatalf("the lease holding the merge was lost: %v", context.Cause(keep))
			}
			stop()
			if err := s.coord.Release(ctx, lease); err != nil {
				t.Fatal(err)
			}

			// The merge could run now (the executor retries every 50 ms):
			// it does not.
			time.Sleep(time.Second)
			ops := s.mergeOps(t, repo, 1)
			if len(ops) != 1 || ops[0].Status != schema.StatusCancelled || len(ops[0].AttemptLog) != 0 {
				t.Errorf("merge operations of #1: %+v", ops)
			}
			if p := s.pull(t, repo, 1); p.Merged || p.State != "open" {
				t.Errorf("#1 merged (%v) or closed (%s)", p.Merged, p.State)
			}
			if m := s.mergeEffects(repo); len(m) != 0 {
				t.Errorf("merges: %+v", m)
			}
			a := s.audit(t, repo)
			if m := auditOf(a, mergequeue.AuditMerge); len(m) != 0 {
				t.Errorf("merge audited: %+v", m)
			}
			rows := auditOf(a, tc.action)
			if len(rows) != 1 || !strings.Contains(rows[0].Detail, "was cancelled") {
				t.Errorf("%s audit rows: %+v", tc.action, rows)
			}
			// After a push the row carries the new head, so its detail
			// names the head the cancelled merge was for.
			if want := "its merge at " + sha[:7] + " was cancelled"; tc.name == "pushed" && len(rows) == 1 && !strings.Contains(rows[0].Detail, want) {
				t.Errorf("%s audit detail %q lacks %q", tc.action, rows[0].Detail, want)
			}
			if tc.name == "pushed" {
				if e, ok := s.entryOf(t, repo, 1); !ok || e.PRSHA == sha || e.Status == mergequeue.StatusGatePassed {
					t.Errorf("entry of #1 after the push: %+v (in queue %v)", e, ok)
				}
			} else if _, ok := s.entryOf(t, repo, 1); ok {
				t.Errorf("#1 still in the queue")
			}
		})
	}
}

// A pull request that leaves the queue while its merge's call to GitHub is
// in flight: the merge is asked to stop, but the call is not interrupted
// and GitHub merges. The audit log then says both: that it left, with its
// running merge asked to stop, and that baton merged it after all.
func TestLeavingWhileMergeRuns(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	const repo = "leave-running"
	s.repo(t, repo, 1, []string{"ci"})
	sha := s.pull(t, repo, 1).HeadSHA
	// GitHub takes 5 s to answer the merge; the label goes meanwhile.
	if _, err := s.sim.SetFault(ghsim.Fault{Route: "PUT /repos/octo/" + repo + "/pulls/{number}/merge",
		Kind: ghsim.FaultLatency, Latency: 5 * time.Second, Count: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.sim.AddCheckRun("octo", repo, ghsim.NewCheckRun{Name: "ci", HeadSHA: sha, Status: "completed", Conclusion: "success"}); err != nil {
		t.Fatal(err)
	}
	if err := s.sim.AddLabel("octo", repo, 1, "baton:queue", "monalisa"); err != nil {
		t.Fatal(err)
	}
	// The fault goes once it fired: the merge's call has reached GitHub.
	waitFor(t, 30*time.Second, "the merge's call in flight", func() bool { return len(s.sim.Faults()) == 0 })
	if err := s.sim.RemoveLabel("octo", repo, 1, "baton:queue", "monalisa"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "#1 out of the queue", func() bool {
		_, in := s.entryOf(t, repo, 1)
		return !in && len(auditOf(s.audit(t, repo), mergequeue.AuditLeave)) == 1
	})
	ops := s.mergeOps(t, repo, 1)
	if len(ops) != 1 || !ops[0].CancellationRequested {
		t.Fatalf("merge operations of #1 when it left: %+v", ops)
	}
	if p := s.pull(t, repo, 1); p.Merged {
		t.Fatal("#1 merged before it left: the call was not in flight")
	}

	rec := s.mergeOp(t, repo, 1, sha)
	if rec.Status != schema.StatusSucceeded {
		t.Fatalf("merge of #1: %s %s", rec.Status, rec.LastErrorCategory)
	}
	if p := s.pull(t, repo, 1); !p.Merged {
		t.Fatal("#1 not merged")
	}
	if m := s.mergeEffects(repo); len(m) != 1 {
		t.Errorf("merges: %+v", m)
	}
	waitFor(t, 30*time.Second, "the merge audited", func() bool {
		return len(auditOf(s.audit(t, repo), mergequeue.AuditMerge)) == 1
	})
	a := s.audit(t, repo)
	if l := auditOf(a, mergequeue.AuditLeave); len(l) != 1 || !strings.Contains(l[0].Detail, "asked to stop") {
		t.Errorf("leave audit rows: %+v", l)
	}
	if m := auditOf(a, mergequeue.AuditMerge); len(m) != 1 || m[0].SHA != sha || !strings.Contains(m[0].Detail, "already running when it left") {
		t.Errorf("merge audit rows: %+v", m)
	}
	if _, in := s.entryOf(t, repo, 1); in {
		t.Error("#1 back in the queue")
	}
}
