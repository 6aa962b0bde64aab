package mergequeue_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/app/ghsim"
	"github.com/baton-dev/baton/app/mergequeue"
	"github.com/baton-dev/baton/executor"
	"github.com/baton-dev/baton/schema"
)

const testGateTimeout = 10 * time.Minute

// newTimeoutStack is a stack on a fake clock whose queue times gates out
// after testGateTimeout and reconciles every 5 minutes (the default), and
// the fake time it started at.
func newTimeoutStack(t *testing.T) (*stack, time.Time) {
	t.Helper()
	s := newStack(t, stackOptions{fakeClock: true, mq: func(c *mergequeue.Config) {
		c.GateTimeout = testGateTimeout
		c.ReconcileInterval = 5 * time.Minute
	}})
	return s, s.clock.Now()
}

// reconcilePass moves the fake clock to at, where the queue's reconcile
// loop is due, once nothing runs (an operation holding a lease on the
// fake clock would lose it), and waits until the pass is over: the loop
// has armed its next timer.
func (s *stack) reconcilePass(t *testing.T, at time.Time) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := s.clock.WaitTimers(ctx, func(w []time.Time) bool { return slices.Contains(w, at) }); err != nil {
		t.Fatalf("the reconcile loop's timer at %s: %v (armed: %v)", at, err, s.clock.Timers())
	}
	s.waitIdle(t)
	s.clock.Set(at)
	next := at.Add(5 * time.Minute)
	if err := s.clock.WaitTimers(ctx, func(w []time.Time) bool { return slices.Contains(w, next) }); err != nil {
		t.Fatalf("the reconcile pass at %s did not end: %v", at, err)
	}
}

// waitIdle waits until no operation is queued or running.
func (s *stack) waitIdle(t *testing.T) {
	t.Helper()
	waitFor(t, 30*time.Second, "no operation unfinished", func() bool {
		for _, st := range []schema.Status{schema.StatusQueued, schema.StatusRunning} {
			recs, _, err := s.exec.List(context.Background(), executor.ListFilter{Status: st, Limit: 1})
			if err != nil || len(recs) > 0 {
				return false
			}
		}
		return true
	})
}

// labelAll labels the pull requests, in order, and waits until they are
// queued in that order with their gates read.
func (s *stack) labelAll(t *testing.T, repo string, prs ...int) {
	t.Helper()
	for _, n := range prs {
		if err := s.sim.AddLabel("octo", repo, n, "baton:queue", "monalisa"); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 30*time.Second, "a pull request queued", func() bool { _, ok := s.entryOf(t, repo, n); return ok })
	}
	waitFor(t, 30*time.Second, "the pull requests queued, their gates read", func() bool {
		return slices.Equal(s.queueOrder(t, repo), prs) && !slices.ContainsFunc(s.entries(t, repo), func(e mergequeue.Entry) bool {
			return e.Status == mergequeue.StatusQueued
		})
	})
}

func bounceComments(p ghsim.Pull) []string {
	var out []string
	for _, c := range p.Comments {
		if c.ByApp && strings.Contains(c.Body, "removed this pull request from the merge queue") {
			out = append(out, c.Body)
		}
	}
	return out
}

// A required check that never reports on the head of the queue (GitHub
// keeps a required workflow skipped by a paths filter "Pending") no
// longer stalls the queue: once the gate timeout has passed, the periodic
// reconcile, with no event to prompt it, bounces the head saying which
// checks it waited for, and the pull request behind it, whose checks
// passed, merges. A pending entry further back times out too.
func TestGateTimeoutBouncesAStalledHead(t *testing.T) {
	t.Parallel()
	s, t0 := newTimeoutStack(t)
	const repo = "stalled"
	s.repo(t, repo, 3, []string{"ci"})
	sha := map[int]string{}
	for n := 1; n <= 3; n++ {
		sha[n] = s.pull(t, repo, n).HeadSHA
	}
	// #1: ci never reports; #2: ci passed; #3: ci started and never ends.
	if _, err := s.sim.AddCheckRun("octo", repo, ghsim.NewCheckRun{Name: "ci", HeadSHA: sha[2], Status: "completed", Conclusion: "success"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.sim.AddCheckRun("octo", repo, ghsim.NewCheckRun{Name: "ci", HeadSHA: sha[3], Status: "in_progress"}); err != nil {
		t.Fatal(err)
	}
	s.labelAll(t, repo, 1, 2, 3)
	if e, _ := s.entryOf(t, repo, 2); e.Status != mergequeue.StatusGatePassed {
		t.Fatalf("#2: %+v", e)
	}

	// Halfway to the timeout, a reconcile pass changes nothing: #2 waits
	// behind #1, as only the head merges.
	s.reconcilePass(t, t0.Add(5*time.Minute))
	if got := s.queueOrder(t, repo); !slices.Equal(got, []int{1, 2, 3}) || s.pull(t, repo, 2).Merged {
		t.Fatalf("before the timeout: queue %v, #2 merged %v", got, s.pull(t, repo, 2).Merged)
	}
	if b := auditOf(s.audit(t, repo), mergequeue.AuditBounce); len(b) != 0 {
		t.Fatalf("bounced before the timeout: %+v", b)
	}

	// At the timeout, the next pass bounces #1 and #3, and #2 merges.
	s.reconcilePass(t, t0.Add(testGateTimeout))
	waitFor(t, 30*time.Second, "#1 and #3 bounced, #2 merged", func() bool {
		p1, p3 := s.pull(t, repo, 1), s.pull(t, repo, 3)
		return len(bounceComments(p1)) == 1 && len(bounceComments(p3)) == 1 &&
			!slices.Contains(p1.Labels, "baton:queue") && !slices.Contains(p3.Labels, "baton:queue") &&
			s.pull(t, repo, 2).Merged && len(s.queueOrder(t, repo)) == 0
	})
	for n, waiting := range map[int]string{1: "waiting for: ci (not reported)", 3: "waiting for: ci"} {
		body := bounceComments(s.pull(t, repo, n))[0]
		want := "`the checks on " + sha[n][:7] + " did not pass within the gate timeout (10m); " + waiting + "`."
		if !strings.Contains(body, want) || !strings.Contains(body, "paths filter") {
			t.Errorf("#%d's comment does not say %q:\n%s", n, want, body)
		}
		if p := s.pull(t, repo, n); p.Merged {
			t.Errorf("#%d merged", n)
		}
		if !hasStatus(s, repo, sha[n], "Bounced from the merge queue: the checks on "+sha[n][:7]+" did not pass within the gate timeout (10m); "+waiting) {
			t.Errorf("#%d: no failing status naming the timeout", n)
		}
	}
	a := s.audit(t, repo)
	if got := prsOf(auditOf(a, mergequeue.AuditBounce)); !slices.Equal(got, []int{1, 3}) {
		t.Errorf("bounces: %v", got)
	}
	if got := prsOf(auditOf(a, mergequeue.AuditMerge)); !slices.Equal(got, []int{2}) {
		t.Errorf("merges: %v", got)
	}
	if m := s.mergeEffects(repo); len(m) != 1 || !strings.Contains(m[0].Path, "/pulls/2/") {
		t.Errorf("merges on GitHub: %+v", m)
	}
}

// A check that reports just before the gate timeout passes the gate: the
// pull request merges, nothing bounces, and a reconcile after the timeout
// finds nothing to do.
func TestGateTimeoutNotReachedWhenTheCheckReportsInTime(t *testing.T) {
	t.Parallel()
	s, t0 := newTimeoutStack(t)
	const repo = "intime"
	s.repo(t, repo, 2, []string{"ci"})
	sha1, sha2 := s.pull(t, repo, 1).HeadSHA, s.pull(t, repo, 2).HeadSHA
	if _, err := s.sim.AddCheckRun("octo", repo, ghsim.NewCheckRun{Name: "ci", HeadSHA: sha2, Status: "completed", Conclusion: "success"}); err != nil {
		t.Fatal(err)
	}
	s.labelAll(t, repo, 1, 2)
	s.reconcilePass(t, t0.Add(5*time.Minute))

	s.waitIdle(t)
	s.clock.Set(t0.Add(testGateTimeout - time.Second))
	if _, err := s.sim.AddCheckRun("octo", repo, ghsim.NewCheckRun{Name: "ci", HeadSHA: sha1, Status: "completed", Conclusion: "success"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "#1 then #2 merged", func() bool {
		return s.pull(t, repo, 1).Merged && s.pull(t, repo, 2).Merged && len(s.queueOrder(t, repo)) == 0
	})
	s.reconcilePass(t, t0.Add(testGateTimeout))
	a := s.audit(t, repo)
	if b := auditOf(a, mergequeue.AuditBounce); len(b) != 0 {
		t.Errorf("bounced: %+v", b)
	}
	if got := prsOf(auditOf(a, mergequeue.AuditMerge)); !slices.Equal(got, []int{1, 2}) {
		t.Errorf("merges: %v", got)
	}
	if c := bounceComments(s.pull(t, repo, 1)); len(c) != 0 {
		t.Errorf("bounce comments on #1: %q", c)
	}
}

// A gate timeout outside 1m–24h is refused at construction; 0 is the
// default.
func TestGateTimeoutConfig(t *testing.T) {
	t.Parallel()
	base := minimalConfig(t) // one database: opening seven took seconds on a loaded machine
	for _, d := range []time.Duration{-time.Minute, time.Second, 25 * time.Hour} {
		c := base
		c.GateTimeout = d
		if _, err := mergequeue.New(c); err == nil || !strings.Contains(err.Error(), "GateTimeout") {
			t.Errorf("GateTimeout %s: %v", d, err)
		}
		if err := mergequeue.CheckGateTimeout(d); err == nil {
			t.Errorf("CheckGateTimeout(%s) accepted it", d)
		}
	}
	for _, d := range []time.Duration{0, time.Minute, time.Hour, 24 * time.Hour} {
		c := base
		c.GateTimeout = d
		if _, err := mergequeue.New(c); err != nil {
			t.Errorf("GateTimeout %s: %v", d, err)
		}
	}
}
