package mergequeue_test

import (
	"context"
	"testing"
	"time"

	"github.com/baton-dev/baton/app"
	"github.com/baton-dev/baton/app/ghsim"
	"github.com/baton-dev/baton/app/mergequeue"
)

// A pull request's label removed while a reconcile that read it labelled
// is still at work (it joins the pull requests it found labelled one
// after another, reading GitHub for each): the unlabeled delivery handled
// meanwhile finds nothing of the pull request in the queue's state yet,
// and must not be dropped for that, or the reconcile queues the pull
// request without its label and it may merge before the next reconcile.
func TestLabelRemovedDuringAReconcileTakesThePullOut(t *testing.T) {
	s := newStack(t, stackOptions{})
	const repo = "reconcile-race"
	s.repo(t, repo, 2, []string{"ci"})
	hook := s.sim.WebhookURL()

	// Both labelled while no delivery reaches baton: the reconcile finds
	// them.
	s.sim.SetWebhook("", "")
	for _, n := range []int{1, 2} {
		if err := s.sim.AddLabel("octo", repo, n, "baton:queue", "monalisa"); err != nil {
			t.Fatal(err)
		}
	}
	s.sim.SetWebhook(hook, "")

	// The reconcile is slow on #1's checks: it has read the open pull
	// requests (#2 labelled) and saved #1's join when the label goes.
	if _, err := s.sim.SetFault(ghsim.Fault{Route: "GET /repos/octo/" + repo + "/commits/" + s.pull(t, repo, 1).HeadSHA + "/check-runs",
		Kind: ghsim.FaultLatency, Latency: 3 * time.Second, Count: 1}); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.reconciled(t, repo)
	}()
	waitFor(t, 10*time.Second, "#1's join saved by the reconcile", func() bool {
		_, ok := s.entryOf(t, repo, 1)
		return ok
	})
	if err := s.sim.RemoveLabel("octo", repo, 2, "baton:queue", "monalisa"); err != nil {
		t.Fatal(err)
	}
	var guid string
	waitFor(t, 10*time.Second, "the unlabeled delivery of #2 recorded", func() bool {
		for _, d := range s.sim.Deliveries() {
			if d.Event == "pull_request" && d.Action == "unlabeled" && d.OK() {
				guid = d.GUID
				return true
			}
		}
		return false
	})
	<-done
	waitFor(t, 10*time.Second, "the unlabeled delivery handled", func() bool {
		rec, err := s.ledger.Get(context.Background(), guid)
		if err != nil {
			t.Fatal(err)
		}
		return rec.State == app.DeliveryHandled
	})
	if e, ok := s.entryOf(t, repo, 2); ok {
		t.Errorf("#2, its label removed, is in the queue: %+v", e)
	}
	if _, ok := s.entryOf(t, repo, 1); !ok {
		t.Error("#1, labelled, is not in the queue")
	}
}

// A check completing on a head a reconcile is moving an entry to (the
// push's delivery missed), its delivery handled before the reconcile saved
// the move (it reads the checks of its other entries meanwhile): the
// reconcile read the head's checks before the check completed, and the
// delivery must not be dropped as being about no head in the queue, or the
// entry waits for its gate until the next reconcile.
func TestCheckCompletingDuringAReconcileThatMovesTheHeadIsRead(t *testing.T) {
	s := newStack(t, stackOptions{})
	const repo = "reconcile-move"
	s.repo(t, repo, 2, []string{"ci"})
	for _, n := range []int{1, 2} {
		if err := s.sim.AddLabel("octo", repo, n, "baton:queue", "monalisa"); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 10*time.Second, "#1 and #2 waiting for their checks", func() bool {
		e1, ok1 := s.entryOf(t, repo, 1)
		e2, ok2 := s.entryOf(t, repo, 2)
		return ok1 && ok2 && e1.GateResult == "pending" && e2.GateResult == "pending"
	})

	// #1 pushed to while no delivery reaches baton: the reconcile moves it.
	hook := s.sim.WebhookURL()
	s.sim.SetWebhook("", "")
	head, err := s.sim.PushPull("octo", repo, 1, "", "monalisa")
	if err != nil {
		t.Fatal(err)
	}
	s.sim.SetWebhook(hook, "")

	// The reconcile is slow on #2's checks, after it moved #1 and read
	// its new head's checks.
	fid, err := s.sim.SetFault(ghsim.Fault{Route: "GET /repos/octo/" + repo + "/commits/" + s.pull(t, repo, 2).HeadSHA + "/check-runs",
		Kind: ghsim.FaultLatency, Latency: 3 * time.Second, Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.reconciled(t, repo)
	}()
	waitFor(t, 10*time.Second, "the reconcile reading #2's checks", func() bool {
		for _, f := range s.sim.Faults() {
			if f.ID == fid {
				return f.Fired > 0
			}
		}
		return true // fired, and gone
	})
	if _, err := s.sim.AddCheckRun("octo", repo, ghsim.NewCheckRun{Name: "ci", HeadSHA: head, Status: "completed", Conclusion: "success"}); err != nil {
		t.Fatal(err)
	}
	<-done
	waitFor(t, 15*time.Second, "#1 merged at its new head", func() bool {
		p := s.pull(t, repo, 1)
		return p.Merged && p.HeadSHA == head
	})
}

// A pull request closed while a reconcile lists the open ones page by page
// shifts the pages after it: an open pull request in the queue may be on
// none of the pages the reconcile read. It is still open, so it stays in
// the queue, in its place, rather than being taken out as closed.
func TestReconcileKeepsAQueuedPullMissingFromTheListedPages(t *testing.T) {
	s := newStack(t, stackOptions{})
	const repo = "reconcile-pages"
	prs := s.repo(t, repo, 101, []string{"ci"}) // a page of 100 and one more
	first, closing := prs[0], prs[50]
	if err := s.sim.AddLabel("octo", repo, first, "baton:queue", "monalisa"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the first pull request waiting for its checks", func() bool {
		e, ok := s.entryOf(t, repo, first)
		return ok && e.GateResult == "pending"
	})

	// Every listing of the open pull requests is slow: the second page is
	// read after one on the first was closed.
	fid, err := s.sim.SetFault(ghsim.Fault{Route: "GET /repos/octo/" + repo + "/pulls", Kind: ghsim.FaultLatency, Latency: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		rep mergequeue.Report
		err error
	}
	done := make(chan result, 1)
	go func() {
		// A reconcile that finds the repository's lease held (the first
		// pull request's run may still have it on a loaded machine) is
		// skipped at once, listing nothing: ask again until one runs.
		deadline := time.Now().Add(30 * time.Second)
		for {
			rep, err := s.q.Reconcile(context.Background(), 1, "octo", repo)
			if err == nil && rep.Skipped && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			done <- result{rep, err}
			return
		}
	}()
	waitFor(t, 40*time.Second, "the reconcile asking for the second page", func() bool {
		for _, f := range s.sim.Faults() {
			if f.ID == fid {
				return f.Fired >= 2
			}
		}
		return false
	})
	if err := s.sim.ClosePull("octo", repo, closing, true, "monalisa"); err != nil {
		t.Fatal(err)
	}
	res := <-done
	s.sim.ClearFault(fid)
	if res.err != nil || res.rep.Skipped {
		t.Fatalf("reconcile: %+v, %v", res.rep, res.err)
	}
	rep := res.rep
	if e, ok := s.entryOf(t, repo, first); !ok || e.Position != 1 {
		t.Errorf("#%d, open and labelled, after the reconcile: in the queue %v, %+v; report %+v", first, ok, e, rep)
	}
	if a := auditOf(s.audit(t, repo), mergequeue.AuditLeave); len(a) != 0 {
		t.Errorf("leaves: %+v", a)
	}
}
