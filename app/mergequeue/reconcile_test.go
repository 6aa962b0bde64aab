package mergequeue_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/app"
	"github.com/baton-dev/baton/app/ghsim"
	"github.com/baton-dev/baton/app/mergequeue"
	"github.com/baton-dev/baton/coordinator"
	"github.com/baton-dev/baton/internal/sqlite"
	"github.com/baton-dev/baton/schema"
)

// A process killed mid-event leaves a lease nobody renews and a queue that
// no longer matches GitHub; one reconcile repairs both.
func TestReconcileRepairsWhatACrashLeft(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStack(t, stackOptions{fakeClock: true, noWebhooks: true})
	const repo = "crash"
	s.repo(t, repo, 6, []string{"ci"})
	sha := map[int]string{}
	for n := 1; n <= 6; n++ {
		sha[n] = s.pull(t, repo, n).HeadSHA
	}
	// GitHub as it stands (baton heard none of it): #1, #2, #3, #6
	// labeled, #2 pushed to, #5 labeled then closed, #4 never labeled; #6
	// merged by the crashed process's merge operation.
	for _, n := range []int{1, 2, 3, 5, 6} {
		if err := s.sim.AddLabel("octo", repo, n, "baton:queue", "monalisa"); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.sim.ClosePull("octo", repo, 5, true, "monalisa"); err != nil {
		t.Fatal(err)
	}
	newSHA2, err := s.sim.PushPull("octo", repo, 2, "", "monalisa")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ sha, status, conclusion string }{
		{sha[1], "completed", "success"}, {newSHA2, "completed", "success"}, {sha[3], "in_progress", ""}, {sha[6], "completed", "success"},
	} {
		if _, err := s.sim.AddCheckRun("octo", repo, ghsim.NewCheckRun{Name: "ci", HeadSHA: c.sha, Status: c.status, Conclusion: c.conclusion}); err != nil {
			t.Fatal(err)
		}
	}
	payload, _ := json.Marshal(schema.MergePayload{SHA: sha[6], Method: "merge"})
	merge6, _, err := s.exec.Submit(ctx, "github:1", schema.Submission{IdempotencyKey: mergequeue.MergeKey("octo", repo, 6, sha[6], s.clock.Now(), 1),
		Action: schema.ActionMerge, Resource: schema.Resource{Type: "pull_request", ID: "octo/" + repo + "#6"}, Payload: payload, InstallationID: 1})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "#6 merged by the crashed process's operation, and its outcome applied", func() bool {
		// The queue learns of the merge (OnOperationFinished) and, having
		// no state for the repository, changes nothing.
		h, err := s.coord.History(ctx, mergequeue.LeaseKey("octo", repo))
		return err == nil && s.pull(t, repo, 6).Merged && slices.ContainsFunc(h, func(e coordinator.Event) bool {
			return e.Kind == coordinator.EventReleased && strings.HasPrefix(e.Owner, "mergequeue:operation:"+merge6.OperationID)
		})
	})
	if st, _ := s.q.Entries(ctx, "octo", repo); st.InstallationID != 0 {
		t.Fatalf("state written for a repository without a queue: %+v", st)
	}

	// The queue as the crash left it: #6 at the head, its merge submitted
	// but not recorded; #2 at its old head; #4, whose label is gone; #5
	// bounced; nothing of #1 and #3.
	now := s.clock.Now().UnixMicro()
	err = s.db.Write(ctx, func(tx *sqlite.Tx) error {
		if _, err := tx.Exec(`INSERT INTO mergequeue_repos (name_key, full_name, installation_id, created_at, updated_at) VALUES ('octo/crash', 'octo/crash', 1, ?, ?)`, now, now); err != nil {
			return err
		}
		for _, e := range []struct {
			n      int
			sha    string
			status string
		}{{6, sha[6], "gate_passed"}, {2, sha[2], "evaluating"}, {4, sha[4], "queued"}, {5, sha[5], "bounced"}} {
			if _, err := tx.Exec(`INSERT INTO mergequeue_entries (repo_id, pr_number, pr_sha, base_ref, status, queued_at)
				SELECT id, ?, ?, 'main', ?, ? FROM mergequeue_repos WHERE name_key = 'octo/crash'`, e.n, e.sha, e.status, now); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The crashed holder's lease, dead for two minutes.
	if _, err := s.coord.Acquire(ctx, mergequeue.LeaseKey("octo", repo), "mergequeue:delivery:crashed", 30*time.Second); err != nil {
		t.Fatal(err)
	}
	s.clock.Advance(30*time.Second + 2*time.Minute)

	rep, err := s.q.Reconcile(ctx, 1, "octo", repo)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Skipped || rep.StaleLease == nil || rep.StaleLease.Owner != "mergequeue:delivery:crashed" || !rep.StaleLease.Dead {
		t.Fatalf("report: %+v (stale lease %+v)", rep, rep.StaleLease)
	}
	if !slices.Equal(rep.Joined, []int{1, 3}) || !slices.Equal(rep.Left, []int{4}) || !slices.Equal(rep.Merged, []int{6}) ||
		!slices.Equal(rep.Reevaluated, []int{2}) || !slices.Equal(rep.BouncedCleared, []int{5}) || rep.Entries != 3 {
		t.Errorf("report: %+v", rep)
	}
	if got := s.queueOrder(t, repo); !slices.Equal(got, []int{2, 1, 3}) {
		t.Errorf("queue after the reconcile: %v", got)
	}
	if e, _ := s.entryOf(t, repo, 2); e.PRSHA != newSHA2 {
		t.Errorf("#2 at %s, not its head %s", e.PRSHA, newSHA2)
	}
	h, err := s.coord.History(ctx, mergequeue.LeaseKey("octo", repo))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(h, func(e coordinator.Event) bool {
		return e.Kind == coordinator.EventPreempted && e.PreviousOwner == "mergequeue:delivery:crashed"
	}) {
		t.Errorf("lease history: %+v", h)
	}

	// The repaired queue runs on: #2 and #1 merge (their checks passed),
	// in queue order; #3 waits for its check.
	waitFor(t, 30*time.Second, "#2 then #1 merged", func() bool {
		return s.pull(t, repo, 2).Merged && s.pull(t, repo, 1).Merged && slices.Equal(s.queueOrder(t, repo), []int{3})
	})
	if got := prsOf(auditOf(s.audit(t, repo), mergequeue.AuditMerge)); !slices.Equal(got, []int{6, 2, 1}) {
		t.Errorf("merges audited: %v", got)
	}
	if m := s.mergeOp(t, repo, 6, sha[6]); m.OperationID != merge6.OperationID {
		t.Errorf("a second merge operation for #6")
	}
	// A second reconcile finds nothing to repair (once the last merge's
	// outcome, applied under the same lease, is done).
	waitFor(t, 30*time.Second, "a second reconcile", func() bool {
		if rep, err = s.q.Reconcile(ctx, 1, "octo", repo); err != nil {
			t.Fatal(err)
		}
		return !rep.Skipped
	})
	if rep.StaleLease != nil || len(rep.Joined)+len(rep.Left)+len(rep.Merged)+len(rep.Reevaluated)+len(rep.BouncedCleared)+len(rep.Bounced) != 0 || rep.Entries != 1 {
		t.Errorf("second reconcile: %+v", rep)
	}
}

// A webhook and a reconcile arriving together serialize on the repository
// lease: whichever comes second waits (the webhook) or skips (the
// reconcile), and the lease is never held twice.
func TestWebhookAndReconcileSerialize(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStack(t, stackOptions{})
	const repo = "serial"
	s.repo(t, repo, 2, []string{"ci"})
	if err := s.sim.AddLabel("octo", repo, 1, "baton:queue", "monalisa"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "#1 queued", func() bool { return slices.Equal(s.queueOrder(t, repo), []int{1}) })

	// The webhook first: #2's join reads the pull request slowly, holding
	// the lease; a reconcile meanwhile skips, naming the holder. Slowly
	// enough (5 s) that the test, seeing the lease held, still finds it
	// held when it reconciles on a loaded machine: with 1 s, a stall of
	// the test's goroutine had the join end first.
	if _, err := s.sim.SetFault(ghsim.Fault{Route: "GET /repos/octo/" + repo + "/pulls/2", Kind: ghsim.FaultLatency, Latency: 5 * time.Second, Count: 1}); err != nil {
		t.Fatal(err)
	}
	if err := s.sim.AddLabel("octo", repo, 2, "baton:queue", "monalisa"); err != nil {
		t.Fatal(err)
	}
	// The lease held by that label's delivery, not by another delivery
	// of the repository (a status baton posted, say) that ends at once and
	// lets the reconcile in.
	var labeled string
	waitFor(t, 30*time.Second, "#2's label delivered", func() bool {
		for _, d := range s.sim.Deliveries() {
			if d.Event == "pull_request" && d.Action == "labeled" && strings.Contains(string(d.Payload), `"full_name":"octo/`+repo+`"`) &&
				strings.Contains(string(d.Payload), `"number":2,`) {
				labeled = d.GUID
			}
		}
		return labeled != ""
	})
	waitFor(t, 30*time.Second, "#2's label delivery holds the lease", func() bool {
		st, err := s.coord.Check(ctx, mergequeue.LeaseKey("octo", repo))
		return err == nil && st.Owner == "mergequeue:delivery:"+labeled
	})
	skipped, err := s.q.Reconcile(ctx, 1, "octo", repo)
	if err != nil {
		t.Fatal(err)
	}
	if !skipped.Skipped || !strings.HasPrefix(skipped.LeaseOwner, "mergequeue:delivery:") || !strings.Contains(skipped.SkipReason, "held by") {
		t.Errorf("reconcile while the webhook holds the lease: %+v", skipped)
	}
	waitFor(t, 30*time.Second, "#2 queued", func() bool { return slices.Equal(s.queueOrder(t, repo), []int{1, 2}) })

	// The reconcile first: it lists the pull requests slowly, holding the
	// lease; a push to #1 meanwhile waits for it (the dispatcher hands the
	// delivery over again), and is then applied.
	if _, err := s.sim.SetFault(ghsim.Fault{Route: "GET /repos/octo/" + repo + "/pulls", Kind: ghsim.FaultLatency, Latency: 5 * time.Second, Count: 1}); err != nil {
		t.Fatal(err)
	}
	done := make(chan mergequeue.Report, 1)
	go func() {
		for {
			// The lease may still be held by #2's join a moment longer.
			rep, err := s.q.Reconcile(ctx, 1, "octo", repo)
			if err != nil {
				t.Error(err)
			}
			if err != nil || !rep.Skipped {
				done <- rep
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	waitFor(t, 30*time.Second, "the reconcile holds the lease", func() bool {
		st, err := s.coord.Check(ctx, mergequeue.LeaseKey("octo", repo))
		return err == nil && strings.HasPrefix(st.Owner, "mergequeue:reconcile:")
	})
	newSHA, err := s.sim.PushPull("octo", repo, 1, "", "monalisa")
	if err != nil {
		t.Fatal(err)
	}
	var push string
	waitFor(t, 30*time.Second, "the push delivered", func() bool {
		for _, d := range s.sim.Deliveries() {
			if d.Event == "pull_request" && d.Action == "synchronize" && strings.Contains(string(d.Payload), `"full_name":"octo/`+repo+`"`) {
				push = d.GUID
			}
		}
		return push != ""
	})
	rep := <-done
	if rep.Skipped {
		t.Fatalf("reconcile skipped: %+v", rep)
	}
	waitFor(t, 30*time.Second, "the push handled, #1 at its new head", func() bool {
		rec, err := s.ledger.Get(ctx, push)
		e, _ := s.entryOf(t, repo, 1)
		return err == nil && rec.State == "handled" && e.PRSHA == newSHA
	})

	// The lease's history: every holding ends before the next begins.
	h, err := s.coord.History(ctx, mergequeue.LeaseKey("octo", repo))
	if err != nil {
		t.Fatal(err)
	}
	var owners []string
	for i := 0; i < len(h); i += 2 {
		if h[i].Kind != coordinator.EventAcquired || i+1 >= len(h) || h[i+1].Kind != coordinator.EventReleased || h[i+1].Token != h[i].Token {
			t.Fatalf("lease history interleaves at %d: %+v", i, h)
		}
		owners = append(owners, h[i].Owner)
	}
	reconciled := slices.IndexFunc(owners, func(o string) bool { return strings.HasPrefix(o, "mergequeue:reconcile:") })
	pushed := slices.Index(owners, "mergequeue:delivery:"+push)
	if reconciled < 0 || pushed < reconciled {
		t.Errorf("holders in order %v: the push's (%d) should follow the reconcile's (%d)", owners, pushed, reconciled)
	}
}

// A queue started again (baton restarted) reconciles at once, not only
// ReconcileInterval later: what changed on GitHub while it was stopped
// (here a label removed whose delivery never came) must not be shown,
// nor acted on, for minutes.
func TestStartReconcilesAtOnce(t *testing.T) {
	s := newStack(t, stackOptions{fakeClock: true, mq: func(c *mergequeue.Config) { c.ReconcileInterval = 5 * time.Minute }})
	const repo = "restart"
	prs := stoppedThenUnlabelled(t, s, repo)
	s.restartQueue(t)
	// The fake clock does not move: only a pass at Start can see it.
	waitFor(t, 20*time.Second, "the unlabelled pull request out of the queue after the start", func() bool {
		return slices.Equal(s.queueOrder(t, repo), prs[1:])
	})
}

// A start after a crash finds the repository lease of the crashed handler
// still live: the pass at start skips the repository, and the queue
// reconciles it again once that lease has expired, not an interval later.
func TestStartReconcileSkippedForALeaseIsTriedAgainSoon(t *testing.T) {
	s := newStack(t, stackOptions{fakeClock: true, mq: func(c *mergequeue.Config) { c.ReconcileInterval = 5 * time.Minute }})
	ctx := context.Background()
	const repo = "crashed"
	prs := stoppedThenUnlabelled(t, s, repo)
	// The crashed process's handler held the repository.
	if _, err := s.coord.Acquire(ctx, mergequeue.LeaseKey("octo", repo), "mergequeue:delivery:crashed", 30*time.Second); err != nil {
		t.Fatal(err)
	}

	start := s.clock.Now()
	s.restartQueue(t)
	wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	retry := start.Add(time.Minute)
	if err := s.clock.WaitTimers(wctx, func(w []time.Time) bool {
		return slices.ContainsFunc(w, func(at time.Time) bool { return at.After(start) && !at.After(retry) })
	}); err != nil {
		t.Fatalf("no pass within a minute of the start: %v (armed: %v)", err, s.clock.Timers())
	}
	if got := s.queueOrder(t, repo); !slices.Equal(got, prs) {
		t.Fatalf("the pass at start went past the live lease: %v", got)
	}
	s.clock.Set(retry)
	waitFor(t, 20*time.Second, "the unlabelled pull request out of the queue once the lease expired", func() bool {
		return slices.Equal(s.queueOrder(t, repo), prs[1:])
	})
}

// stoppedThenUnlabelled queues two pull requests of a new repository,
// stops the queue once everything is handled (its webhooks off, as for a
// stopped baton), and takes the first one's label off on GitHub, a change
// whose delivery baton never gets. It returns the pull requests.
func stoppedThenUnlabelled(t *testing.T, s *stack, repo string) []int {
	t.Helper()
	ctx := context.Background()
	prs := s.repo(t, repo, 2, []string{"ci"})
	s.labelAll(t, repo, prs...)
	s.sim.SetWebhook("", "")
	waitFor(t, 30*time.Second, "nothing left to handle", func() bool {
		pending, err := s.ledger.List(ctx, app.DeliveryFilter{State: app.DeliveryPending})
		return err == nil && len(pending) == 0
	})
	s.waitIdle(t)
	if err := s.q.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.sim.RemoveLabel("octo", repo, prs[0], "baton:queue", "monalisa"); err != nil {
		t.Fatal(err)
	}
	return prs
}

// restartQueue starts a new queue on the stack's config in place of the
// stopped one, as baton's next start does.
func (s *stack) restartQueue(t *testing.T) {
	t.Helper()
	q, err := mergequeue.New(s.mqCfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = q.Stop(context.Background()) })
	s.q = q
}
