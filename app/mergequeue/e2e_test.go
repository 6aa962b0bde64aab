package mergequeue_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/app/ghsim"
	"github.com/baton-dev/baton/app/mergequeue"
)

// scenarioOptions shapes one run of the merge queue scenario.
type scenarioOptions struct {
	// afterLabels runs once the labels are on, before the queue is
	// expected to hold them.
	afterLabels func()
	// within bounds each wait.
	within time.Duration
	// poll is the longest wait between polls. Defaults to 100ms.
	poll time.Duration
}

// scenario is the merge queue's whole story on octo/<repo>, through
// signed webhooks: five pull requests join, their checks pass in another
// order, they merge one at a time in queue order at the heads they were
// tested at; a push re-evaluates one; a failing check bounces a sixth with
// a comment; a duplicated delivery joins nothing twice.
func scenario(t tester, s *stack, repo string, o scenarioOptions) {
	t.Helper()
	within := o.within
	if within == 0 {
		within = 30 * time.Second
	}
	poll := o.poll
	if poll == 0 {
		poll = 100 * time.Millisecond
	}
	waitFor := func(t tester, within time.Duration, what string, cond func() bool) {
		t.Helper()
		pollFor(t, within, poll, what, cond)
	}
	prs := s.repo(t, repo, 6, []string{"ci"})
	sha := map[int]string{}
	run := map[int]int64{}
	for _, n := range prs {
		sha[n] = s.pull(t, repo, n).HeadSHA
		id, err := s.sim.AddCheckRun("octo", repo, ghsim.NewCheckRun{Name: "ci", HeadSHA: sha[n], Status: "in_progress"})
		if err != nil {
			t.Fatal(err)
		}
		run[n] = id
	}
	for _, n := range prs {
		if err := s.sim.AddLabel("octo", repo, n, "baton:queue", "monalisa"); err != nil {
			t.Fatal(err)
		}
	}
	if o.afterLabels != nil {
		o.afterLabels()
	}
	// A join is saved before its gate is read: wait for the gates too.
	waitFor(t, within, repo+": six pull requests in the queue, in label order, their gates read", func() bool {
		return slices.Equal(s.queueOrder(t, repo), prs) && !slices.ContainsFunc(s.entries(t, repo), func(e mergequeue.Entry) bool {
			return e.Status == mergequeue.StatusQueued
		})
	})
	for i, n := range prs {
		if e, _ := s.entryOf(t, repo, n); e.PRSHA != sha[n] || e.Status != mergequeue.StatusEvaluating || e.Position != i+1 {
			t.Errorf("%s: entry of #%d: %+v", repo, n, e)
		}
	}
	waitFor(t, within, repo+": position statuses on the heads", func() bool {
		return hasStatus(s, repo, sha[1], "1st in queue") && hasStatus(s, repo, sha[5], "5th in queue")
	})

	// The labeled delivery of #2, again: GitHub's redelivery is answered
	// 200 by the ledger, and the queue itself handles it as already_queued.
	var dup ghsim.Delivery
	for _, d := range s.sim.Deliveries() {
		var p struct {
			Number     int `json:"number"`
			Repository struct {
				FullName string `json:"full_name"`
			} `json:"repository"`
		}
		_ = json.Unmarshal(d.Payload, &p)
		if d.Event == "pull_request" && d.Action == "labeled" && p.Number == 2 && p.Repository.FullName == "octo/"+repo {
			dup = d
		}
	}
	if dup.GUID == "" {
		t.Fatalf("%s: no labeled delivery of #2", repo)
	}
	if err := s.sim.Redeliver(dup.ID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, within, repo+": the redelivery answered", func() bool {
		for _, d := range s.sim.Deliveries() {
			if d.GUID == dup.GUID && d.Redelivery {
				return d.StatusCode == 200
			}
		}
		return false
	})
	ev := mergequeue.Event{DeliveryID: dup.GUID, Name: "pull_request", Action: "labeled", InstallationID: 1,
		Repository: "octo/" + repo, Payload: dup.Payload}
	waitFor(t, within, repo+": the duplicate handled", func() bool {
		err := s.q.HandleEvent(context.Background(), ev)
		var re *mergequeue.RetryError
		if err != nil && !errors.As(err, &re) {
			t.Fatal(err)
		}
		return err == nil
	})
	if !slices.ContainsFunc(s.events(t, repo), func(e mergequeue.EventRecord) bool {
		return e.DeliveryID == dup.GUID && strings.Contains(e.Details, "#2 already_queued")
	}) {
		t.Errorf("%s: no already_queued for the duplicate: %+v", repo, s.events(t, repo))
	}

	// #6 fails its check: it bounces, with a comment, and loses the label.
	if err := s.sim.CompleteCheckRun("octo", repo, run[6], "failure"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, within, repo+": #6 bounced with a comment and without its label", func() bool {
		p := s.pull(t, repo, 6)
		commented := slices.ContainsFunc(p.Comments, func(c ghsim.CommentInfo) bool {
			return c.ByApp && strings.Contains(c.Body, "removed this pull request from the merge queue") && strings.Contains(c.Body, "ci (failure)")
		})
		_, queued := s.entryOf(t, repo, 6)
		return commented && !slices.Contains(p.Labels, "baton:queue") && !queued
	})

	// #3 passes first: it waits for #1 and #2.
	if err := s.sim.CompleteCheckRun("octo", repo, run[3], "success"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, within, repo+": #3's gate passed", func() bool {
		e, _ := s.entryOf(t, repo, 3)
		return e.Status == mergequeue.StatusGatePassed
	})
	if m := s.mergeEffects(repo); len(m) != 0 {
		t.Fatalf("%s: merged before the head passed: %+v", repo, m)
	}
	// #1 passes: it merges.
	if err := s.sim.CompleteCheckRun("octo", repo, run[1], "success"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, within, repo+": #1 merged", func() bool { return s.pull(t, repo, 1).Merged })

	// A push to #4 re-evaluates it at its new head; the old head's check
	// passing no longer counts.
	newSHA, err := s.sim.PushPull("octo", repo, 4, "", "monalisa")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, within, repo+": #4 re-evaluated at its new head", func() bool {
		e, _ := s.entryOf(t, repo, 4)
		return e.PRSHA == newSHA && e.ReevaluatedAt != nil && e.Status == mergequeue.StatusEvaluating
	})
	if err := s.sim.CompleteCheckRun("octo", repo, run[4], "success"); err != nil {
		t.Fatal(err)
	}
	// #5 passes; then #2, and #2, #3 merge, in that order.
	if err := s.sim.CompleteCheckRun("octo", repo, run[5], "success"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, within, repo+": #5's gate passed", func() bool {
		e, _ := s.entryOf(t, repo, 5)
		return e.Status == mergequeue.StatusGatePassed
	})
	if e, _ := s.entryOf(t, repo, 4); e.Status != mergequeue.StatusEvaluating || e.PRSHA != newSHA {
		t.Errorf("%s: #4 after its old head passed: %+v", repo, e)
	}
	if err := s.sim.CompleteCheckRun("octo", repo, run[2], "success"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, within, repo+": #2 and #3 merged", func() bool { return s.pull(t, repo, 2).Merged && s.pull(t, repo, 3).Merged })
	if s.pull(t, repo, 5).Merged {
		t.Fatalf("%s: #5 merged before #4", repo)
	}
	if _, err := s.sim.AddCheckRun("octo", repo, ghsim.NewCheckRun{Name: "ci", HeadSHA: newSHA, Status: "completed", Conclusion: "success"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, within, repo+": #4 and #5 merged, the queue empty", func() bool {
		return s.pull(t, repo, 4).Merged && s.pull(t, repo, 5).Merged && len(s.entries(t, repo)) == 0
	})

	// One at a time, in queue order, each at the head it was tested at.
	tested := map[int]string{1: sha[1], 2: sha[2], 3: sha[3], 4: newSHA, 5: sha[5]}
	effects := s.mergeEffects(repo)
	var order []int
	for i, e := range effects {
		var n int
		_, _ = fmtSscanPath(e.Path, &n)
		order = append(order, n)
		if i > 0 && e.StartedAt.Before(effects[i-1].EndedAt) {
			t.Errorf("%s: merge of #%d started before the previous one ended", repo, n)
		}
	}
	if !slices.Equal(order, []int{1, 2, 3, 4, 5}) {
		t.Errorf("%s: merges in order %v", repo, order)
	}
	var prevDone time.Time
	for n := 1; n <= 5; n++ {
		p := s.pull(t, repo, n)
		if !p.Merged || p.HeadSHA != tested[n] {
			t.Errorf("%s: #%d merged %v at head %s, tested at %s", repo, n, p.Merged, p.HeadSHA, tested[n])
		}
		rec := s.mergeOp(t, repo, n, tested[n])
		if got := payloadSHA(t, rec); got != tested[n] || rec.Status != "succeeded" {
			t.Errorf("%s: merge operation of #%d: sha %s, status %s", repo, n, got, rec.Status)
		}
		if rec.CreatedAt.Before(prevDone) {
			t.Errorf("%s: merge of #%d submitted before the previous merge finished", repo, n)
		}
		prevDone = *rec.CompletedAt
	}
	if s.pull(t, repo, 6).Merged {
		t.Errorf("%s: the bounced #6 merged", repo)
	}

	// The audit log tells the story.
	a := s.audit(t, repo)
	joins := auditOf(a, mergequeue.AuditJoin)
	if !slices.Equal(prsOf(joins), prs) {
		t.Errorf("%s: joins %v", repo, prsOf(joins))
	}
	if got := prsOf(auditOf(a, mergequeue.AuditMerge)); !slices.Equal(got, []int{1, 2, 3, 4, 5}) {
		t.Errorf("%s: audited merges %v", repo, got)
	}
	for _, m := range auditOf(a, mergequeue.AuditMerge) {
		if m.SHA != tested[m.PRNumber] {
			t.Errorf("%s: audited merge of #%d at %s", repo, m.PRNumber, m.SHA)
		}
	}
	re := auditOf(a, mergequeue.AuditReevaluate)
	if len(re) != 1 || re[0].PRNumber != 4 || re[0].SHA != newSHA {
		t.Errorf("%s: re-evaluations %+v", repo, re)
	}
	if b := auditOf(a, mergequeue.AuditBounce); len(b) != 1 || b[0].PRNumber != 6 || len(auditOf(a, mergequeue.AuditGateFailure)) != 1 {
		t.Errorf("%s: bounces %+v", repo, b)
	}
	if hs := hasStatus(s, repo, sha[5], "5th in queue") && hasStatus(s, repo, sha[5], "1st in queue, merging"); !hs {
		t.Errorf("%s: #5's position statuses did not follow the queue", repo)
	}
}

func fmtSscanPath(path string, n *int) (int, error) {
	i := strings.Index(path, "/pulls/")
	rest := strings.TrimSuffix(path[i+len("/pulls/"):], "/merge")
	return fmtSscan(rest, n)
}

// TestScenario runs the scenario on one repository. Not parallel: it is a
// chain of waits on webhooks and operations, which the twenty-repository
// test would slow down several times over on two cores.
func TestScenario(t *testing.T) {
	s := newStack(t, stackOptions{})
	scenario(t, s, "scenario", scenarioOptions{})
}
