package mergequeue_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/baton-dev/baton/app/ghsim"
	"github.com/baton-dev/baton/app/mergequeue"
	"github.com/baton-dev/baton/executor"
	"github.com/baton-dev/baton/schema"
)

// dyingRun is the executor, except that the first commit status asked for
// on each commit fails: the run that asks for it ends with an error after
// what it submitted before (a merge, a bounce comment) and before it
// commits, as a run does that is killed there, loses its lease or meets a
// database error.
type dyingRun struct {
	mergequeue.Operations
	died sync.Map // resource IDs
}

func (d *dyingRun) Submit(ctx context.Context, actor string, sub schema.Submission) (schema.Record, bool, error) {
	if sub.Action == schema.ActionCreateStatus {
		if _, again := d.died.LoadOrStore(sub.Resource.ID, true); !again {
			return schema.Record{}, false, errors.New("the run dies before it commits")
		}
	}
	return d.Operations.Submit(ctx, actor, sub)
}

// issueOps returns the operations of one action on pull request n's issue.
func (s *stack) issueOps(t tester, repo string, n int, action string) []schema.Record {
	t.Helper()
	recs, _, err := s.exec.List(context.Background(), executor.ListFilter{Action: action,
		ResourceType: schema.ResourceIssue, ResourceID: fmt.Sprintf("octo/%s#%d", repo, n), Limit: 500})
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// A join whose run died after it submitted the merge (its gate had
// passed) or the bounce comment (its gate had failed), handled again later
// (the delivery handed over again, the next reconcile), is the same join:
// it finds that merge or that comment, and makes no second one. A second
// merge would be one that a later leave does not cancel, and that merges
// anyway.
func TestJoinHandledTwiceKeepsItsMergeAndBounce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// No workers: the operations stay as submitted.
	s := newStack(t, stackOptions{fakeClock: true, noWebhooks: true, noWorkers: true,
		mq: func(c *mergequeue.Config) { c.Operations = &dyingRun{Operations: c.Operations} }})

	for _, tc := range []struct {
		name       string
		conclusion string
		reconcile  bool // joined by a reconcile, not a delivery
	}{{"merge", "success", false}, {"bounce", "failure", false}, {"reconcile", "success", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			repo := "twice-" + tc.name
			s.repo(t, repo, 1, []string{"ci"})
			head := s.pull(t, repo, 1).HeadSHA
			if _, err := s.sim.AddCheckRun("octo", repo, ghsim.NewCheckRun{Name: "ci", HeadSHA: head, Status: "completed", Conclusion: tc.conclusion}); err != nil {
				t.Fatal(err)
			}
			if err := s.sim.AddLabel("octo", repo, 1, "baton:queue", "monalisa"); err != nil {
				t.Fatal(err)
			}
			handle := func() error {
				if tc.reconcile {
					_, err := s.q.Reconcile(ctx, 1, "octo", repo)
					return err
				}
				return s.q.HandleEvent(ctx, labelEvent(repo, 1, "labeled", repo+"-labeled"))
			}
			if err := handle(); err == nil {
				t.Fatal("the first run did not fail")
			}
			if st, err := s.q.Entries(ctx, "octo", repo); err != nil || st.ReconciledAt != nil {
				t.Errorf("a reconcile that failed is recorded as done: %+v, %v", st, err)
			}
			// Handled again, later.
			s.clock.Advance(time.Second)
			if err := handle(); err != nil {
				t.Fatal(err)
			}
			if st, err := s.q.Entries(ctx, "octo", repo); err != nil || tc.reconcile != (st.ReconciledAt != nil) {
				t.Errorf("reconciled at %v after the second run: %v", st.ReconciledAt, err)
			}

			if tc.conclusion == "failure" {
				if c := s.issueOps(t, repo, 1, schema.ActionComment); len(c) != 1 {
					t.Errorf("%d bounce comments for one join", len(c))
				}
				if e, in := s.entryOf(t, repo, 1); !in || e.Status != mergequeue.StatusBounced {
					t.Errorf("entry of #1: %+v (in the queue %v)", e, in)
				}
				return
			}
			ops := s.mergeOps(t, repo, 1)
			if len(ops) != 1 {
				t.Errorf("%d merge operations for one join", len(ops))
			}
			if e, in := s.entryOf(t, repo, 1); !in || e.Status != mergequeue.StatusGatePassed {
				t.Errorf("entry of #1: %+v (in the queue %v)", e, in)
			}
			// It leaves: no merge of it is left to run.
			if err := s.sim.RemoveLabel("octo", repo, 1, "baton:queue", "monalisa"); err != nil {
				t.Fatal(err)
			}
			if err := s.q.HandleEvent(ctx, labelEvent(repo, 1, "unlabeled", repo+"-unlabeled")); err != nil {
				t.Fatal(err)
			}
			if _, in := s.entryOf(t, repo, 1); in {
				t.Error("#1 still in the queue")
			}
			for _, op := range s.mergeOps(t, repo, 1) {
				if op.Status != schema.StatusCancelled {
					t.Errorf("merge operation %s of #1, which left the queue: %s", op.OperationID, op.Status)
				}
			}
		})
	}
}
