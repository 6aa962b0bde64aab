package mergequeue_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/baton-dev/baton/app/mergequeue"
)

// A delivery that arrives late (GitHub does not keep deliveries in order,
// and missed-delivery recovery redelivers up to days later) is applied to
// the pull request as it stands on GitHub, not as the delivery says: a
// labeled delivery whose label was removed since queues nothing; an
// unlabeled one whose label was added again, or a closed one whose pull
// request was reopened, takes nothing out.
func TestLateDeliveryActsOnCurrentState(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStack(t, stackOptions{noWebhooks: true}) // the deliveries are sent below, in the order the test says
	handle := func(t *testing.T, repo, action, id string) {
		t.Helper()
		if err := s.q.HandleEvent(ctx, labelEvent(repo, 1, action, id)); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
	}
	label := func(t *testing.T, repo string, on bool) {
		t.Helper()
		f := s.sim.RemoveLabel
		if on {
			f = s.sim.AddLabel
		}
		if err := f("octo", repo, 1, "baton:queue", "monalisa"); err != nil {
			t.Fatal(err)
		}
	}
	noted := func(t *testing.T, repo, id, text string) bool {
		return slices.ContainsFunc(s.events(t, repo), func(e mergequeue.EventRecord) bool {
			return e.DeliveryID == id && strings.Contains(e.Details, text)
		})
	}

	t.Run("labeled after the label was removed", func(t *testing.T) {
		t.Parallel()
		const repo = "late-labeled"
		s.queueReady(t, repo) // its check passed: it would merge at once
		label(t, repo, true)
		label(t, repo, false)
		// The unlabeled delivery is handled first (nothing to take out);
		// the labeled one comes after.
		handle(t, repo, "unlabeled", "late-labeled-2")
		handle(t, repo, "labeled", "late-labeled-1")
		if e, in := s.entryOf(t, repo, 1); in {
			t.Errorf("#1 queued without its label: %+v", e)
		}
		if ops := s.mergeOps(t, repo, 1); len(ops) != 0 {
			t.Errorf("%d merge operations of #1, whose label is gone", len(ops))
		}
		if a := s.audit(t, repo); len(a) != 0 {
			t.Errorf("audit: %+v", a)
		}
		if !noted(t, repo, "late-labeled-1", "#1 no longer carries the label; not queued") {
			t.Errorf("events: %+v", s.events(t, repo))
		}
	})

	t.Run("unlabeled after the label was added again", func(t *testing.T) {
		t.Parallel()
		const repo = "late-unlabeled"
		s.repo(t, repo, 1, []string{"ci"}) // no check yet: it waits in the queue
		label(t, repo, true)
		handle(t, repo, "labeled", "late-unlabeled-1")
		label(t, repo, false)
		label(t, repo, true)
		handle(t, repo, "labeled", "late-unlabeled-3") // already queued
		handle(t, repo, "unlabeled", "late-unlabeled-2")
		if e, in := s.entryOf(t, repo, 1); !in || e.Position != 1 || e.Status != mergequeue.StatusEvaluating {
			t.Errorf("#1, which carries the label, after the late unlabeled delivery: %+v (queued %v)", e, in)
		}
		if l := auditOf(s.audit(t, repo), mergequeue.AuditLeave); len(l) != 0 {
			t.Errorf("leaves: %+v", l)
		}
		if !noted(t, repo, "late-unlabeled-2", "#1 carries the label again; stays queued") {
			t.Errorf("events: %+v", s.events(t, repo))
		}
	})

	t.Run("closed after the pull request was reopened", func(t *testing.T) {
		t.Parallel()
		const repo = "late-closed"
		s.repo(t, repo, 1, []string{"ci"})
		label(t, repo, true)
		handle(t, repo, "labeled", "late-closed-1")
		for _, closed := range []bool{true, false} {
			if err := s.sim.ClosePull("octo", repo, 1, closed, "monalisa"); err != nil {
				t.Fatal(err)
			}
		}
		handle(t, repo, "closed", "late-closed-2")
		if e, in := s.entryOf(t, repo, 1); !in || e.Position != 1 || e.Status != mergequeue.StatusEvaluating {
			t.Errorf("#1, open again, after the late closed delivery: %+v (queued %v)", e, in)
		}
		if l := auditOf(s.audit(t, repo), mergequeue.AuditLeave); len(l) != 0 {
			t.Errorf("leaves: %+v", l)
		}
		if !noted(t, repo, "late-closed-2", "#1 is open again; stays queued") {
			t.Errorf("events: %+v", s.events(t, repo))
		}
	})
}
