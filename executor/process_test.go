package executor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-dev/baton/app/ghsim"
	"github.com/baton-dev/baton/queue"
	"github.com/baton-dev/baton/schema"
)

func TestEachActionSucceeds(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	// The ref update goes to a branch of its own: merging #1 moves main.
	base, _ := s.sim.Ref("octo", "demo", "heads/main")
	if err := s.sim.SetRef("octo", "demo", "heads/release", base, ""); err != nil {
		t.Fatal(err)
	}
	next, _ := s.sim.AddCommit("octo", "demo", ghsim.Commit{Parents: []string{base}})
	head1 := ghsim.DemoHeadSHA(1)
	cases := []struct {
		action  string
		res     schema.Resource
		payload string
	}{
		{schema.ActionComment, issue(10), `{"body":"hello"}`},
		{schema.ActionAddLabels, issue(11), `{"labels":["a","b"]}`},
		{schema.ActionRemoveLabel, issue(12), `{"label":"absent"}`},
		{schema.ActionMerge, schema.Resource{Type: "pull_request", ID: "octo/demo#1"}, `{"sha":"` + head1 + `"}`},
		{schema.ActionUpdateBranch, schema.Resource{Type: "pull_request", ID: "octo/demo#2"}, `{"expectedHeadSha":"` + ghsim.DemoHeadSHA(2) + `"}`},
		{schema.ActionUpdateRef, schema.Resource{Type: "ref", ID: "octo/demo:heads/release"}, `{"sha":"` + next + `"}`},
		{schema.ActionCreateStatus, schema.Resource{Type: "commit", ID: "octo/demo@" + ghsim.DemoHeadSHA(3)}, `{"state":"success","context":"ci"}`},
	}
	ids := make([]string, len(cases))
	for i, c := range cases {
		ids[i] = s.submit(t, "each-"+c.action, c.action, c.res, c.payload).OperationID
	}
	for i, c := range cases {
		rec := s.await(t, ids[i], 20*time.Second)
		if rec.Status != schema.StatusSucceeded || rec.Attempts != 1 || len(rec.Result) == 0 {
			t.Errorf("%s: status=%s attempts=%d result=%s err=%s %s", c.action, rec.Status, rec.Attempts, rec.Result,
				rec.LastErrorCategory, rec.LastErrorMessage)
		}
		if len(rec.AttemptLog) != 1 || rec.AttemptLog[0].RequestID == "" || rec.AttemptLog[0].HTTPStatus == 0 {
			t.Errorf("%s: attempt log %+v", c.action, rec.AttemptLog)
		}
	}
	pr, _ := s.sim.Pull("octo", "demo", 1)
	if !pr.Merged {
		t.Error("pull request #1 not merged")
	}
	if ref, _ := s.sim.Ref("octo", "demo", "heads/release"); ref != next {
		t.Error("release not updated")
	}
	// Nothing holds a lease once everything is terminal.
	for _, c := range cases {
		st, err := s.coord.Check(context.Background(), c.res.Key())
		if err != nil || st.Locked {
			t.Errorf("%s still locked: %+v %v", c.res.Key(), st, err)
		}
	}
}

func TestStaleMergeFailsWithConflictAfterOneAttempt(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	rec := s.submit(t, "stale", schema.ActionMerge, schema.Resource{Type: "pull_request", ID: "octo/demo#1"},
		`{"sha":"`+strings.Repeat("a", 40)+`"}`)
	got := s.await(t, rec.OperationID, 20*time.Second)
	if got.Status != schema.StatusFailed || got.Attempts != 1 || got.LastErrorCategory != CategoryConflict {
		t.Fatalf("status=%s attempts=%d category=%s", got.Status, got.Attempts, got.LastErrorCategory)
	}
	if pr, _ := s.sim.Pull("octo", "demo", 1); pr.Merged {
		t.Error("merged despite a stale sha")
	}
}

// A connection dropped after GitHub applied the comment: the probe finds
// the comment by its marker, the operation succeeds, and GitHub saw one
// comment.
func TestDroppedAfterEffectIsProbed(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	if _, err := s.sim.SetFault(ghsim.Fault{Route: "POST /repos/{owner}/{repo}/issues/{number}/comments", Kind: ghsim.FaultDropAfter, Count: 1}); err != nil {
		t.Fatal(err)
	}
	rec := s.submit(t, "dropped", schema.ActionComment, issue(10), `{"body":"once"}`)
	got := s.await(t, rec.OperationID, 20*time.Second)
	if got.Status != schema.StatusSucceeded {
		t.Fatalf("status=%s %s %s", got.Status, got.LastErrorCategory, got.LastErrorMessage)
	}
	var probes int
	for _, a := range got.AttemptLog {
		if a.Probe {
			probes++
		}
	}
	if got.Attempts != 1 || probes != 1 {
		t.Errorf("attempts=%d probes=%d log=%+v", got.Attempts, probes, got.AttemptLog)
	}
	n := 0
	for _, e := range s.sim.Effects() {
		if e.Method == "POST" && strings.HasSuffix(e.Path, "/issues/10/comments") {
			n++
		}
	}
	if n != 1 {
		t.Errorf("effects log shows %d comments", n)
	}
	is, _ := s.sim.Issue("octo", "demo", 10)
	if len(is.Comments) != 1 {
		t.Errorf("issue has %d comments", len(is.Comments))
	}
}

func TestServerErrorThenSuccess(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	if _, err := s.sim.SetFault(ghsim.Fault{Route: "POST /repos/{owner}/{repo}/issues/{number}/labels", Kind: ghsim.FaultStatus, Status: 500, Count: 1}); err != nil {
		t.Fatal(err)
	}
	rec := s.submit(t, "500", schema.ActionAddLabels, issue(11), `{"labels":["x"]}`)
	got := s.await(t, rec.OperationID, 20*time.Second)
	if got.Status != schema.StatusSucceeded || got.Attempts != 2 {
		t.Fatalf("status=%s attempts=%d log=%+v", got.Status, got.Attempts, got.AttemptLog)
	}
	if first := got.AttemptLog[0]; first.HTTPStatus != 500 || first.ErrorCategory != CategoryServerError || first.WaitMillis <= 0 {
		t.Errorf("first attempt %+v", first)
	}
}

func TestTooManyRequestsWaitsRetryAfter(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	if _, err := s.sim.SetFault(ghsim.Fault{Route: "POST /repos/{owner}/{repo}/issues/{number}/comments", Kind: ghsim.FaultTooManyRequests,
		RetryAfter: 2 * time.Second, Count: 1}); err != nil {
		t.Fatal(err)
	}
	rec := s.submit(t, "429", schema.ActionComment, issue(10), `{"body":"patient"}`)
	got := s.await(t, rec.OperationID, 20*time.Second)
	var attempts []schema.Attempt
	for _, a := range got.AttemptLog {
		if !a.Probe {
			attempts = append(attempts, a)
		}
	}
	if got.Status != schema.StatusSucceeded || len(attempts) != 2 {
		t.Fatalf("status=%s log=%+v", got.Status, got.AttemptLog)
	}
	if gap := attempts[1].StartedAt.Sub(attempts[0].EndedAt); gap < 2*time.Second {
		t.Errorf("second attempt came %v after a 429 with Retry-After: 2", gap)
	}
	if attempts[0].HTTPStatus != 429 || attempts[0].ErrorCategory != CategoryRateLimited {
		t.Errorf("first attempt %+v", attempts[0])
	}
}

// A secondary limit asking for 90 s sends the operation back to the queue
// without spending an attempt, and the installation's other operations
// wait too.
func TestLongSecondaryLimitRequeues(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	if err := s.sim.SetLimits(ghsim.Limits{PrimaryLimit: -1, SecondaryLimit: 1, SecondaryRetryAfter: 90 * time.Second}); err != nil {
		t.Fatal(err)
	}
	first := s.submit(t, "sec-1", schema.ActionComment, issue(10), `{"body":"one"}`)
	if got := s.await(t, first.OperationID, 20*time.Second); got.Status != schema.StatusSucceeded {
		t.Fatalf("first: %s", got.Status)
	}
	second := s.submit(t, "sec-2", schema.ActionComment, issue(11), `{"body":"two"}`)
	// The second is refused with Retry-After: 90 and requeued.
	deadline := time.Now().Add(20 * time.Second)
	var rec schema.Record
	for {
		rec, _ = s.store.Get(context.Background(), second.OperationID)
		if rec.NextAttemptAt != nil && len(rec.AttemptLog) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("never requeued: %+v", rec)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if rec.Status != schema.StatusRunning || rec.Attempts != 0 || rec.NextAttemptAt.Sub(rec.UpdatedAt) < 85*time.Second {
		t.Errorf("after the refusal: status=%s attempts=%d next=%v updated=%v", rec.Status, rec.Attempts, rec.NextAttemptAt, rec.UpdatedAt)
	}
	if a := rec.AttemptLog[0]; a.HTTPStatus != 403 || a.ErrorCategory != CategorySecondaryRateLimit {
		t.Errorf("attempt %+v", a)
	}
	// A third operation of the same installation waits without calling.
	before := len(s.sim.Effects())
	third := s.submit(t, "sec-3", schema.ActionComment, issue(12), `{"body":"three"}`)
	time.Sleep(1500 * time.Millisecond) // give it every chance to run
	rec3, _ := s.store.Get(context.Background(), third.OperationID)
	if rec3.Status != schema.StatusQueued || len(rec3.AttemptLog) != 0 || len(s.sim.Effects()) != before {
		t.Errorf("third operation ran during the pause: %s %+v", rec3.Status, rec3.AttemptLog)
	}
}

func TestCancelDuringWait(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{exec: Config{BaseBackoff: 20 * time.Second, MaxBackoff: 20 * time.Second}})
	cancelDuringWait(t, s, "cancel", func(id string) error {
		_, err := s.exec.Cancel(context.Background(), id)
		return err
	})
}

// cancelDuringWait submits a comment GitHub answers 502, waits until its
// operation waits out a backoff (20 s in the callers' configurations),
// cancels it with cancel, and checks that the cancellation ends the wait
// within 5 s.
func cancelDuringWait(t *testing.T, s *stack, key string, cancel func(operationID string) error) {
	t.Helper()
	if _, err := s.sim.SetFault(ghsim.Fault{Route: "POST /repos/{owner}/{repo}/issues/{number}/comments", Kind: ghsim.FaultStatus, Status: 502}); err != nil {
		t.Fatal(err)
	}
	rec := s.submit(t, key, schema.ActionComment, issue(10), `{"body":"never"}`)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if cur, _ := s.store.Get(context.Background(), rec.OperationID); cur.NextAttemptAt != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("never waited")
		}
	}
	asked := time.Now()
	if err := cancel(rec.OperationID); err != nil {
		t.Fatal(err)
	}
	got := s.await(t, rec.OperationID, 15*time.Second)
	if got.Status != schema.StatusCancelled || !got.CancellationRequested || got.Attempts != 1 {
		t.Fatalf("status=%s attempts=%d", got.Status, got.Attempts)
	}
	if took := got.CompletedAt.Sub(asked); took > 5*time.Second {
		t.Errorf("cancellation took %v to be observed during a 20 s wait", took)
	}
}

func TestManyOperationsNeverOverlapOnAResource(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{concurrency: 32})
	var ids []string
	for i := 0; i < 200; i++ {
		r := issue(100 + i%10)
		if i < 10 {
			if _, err := s.sim.AddIssue("octo", "demo", ghsim.NewIssue{Number: 100 + i, Title: "t"}); err != nil {
				t.Fatal(err)
			}
		}
		ids = append(ids, s.submit(t, "many-"+itoa(i), schema.ActionComment, r, `{"body":"n`+itoa(i)+`"}`).OperationID)
	}
	for _, id := range ids {
		if got := s.await(t, id, 60*time.Second); got.Status != schema.StatusSucceeded {
			t.Errorf("%s: %s", id, got.Status)
		}
	}
	byResource := map[string][]ghsim.Effect{}
	for _, e := range s.sim.Effects() {
		byResource[e.Resource] = append(byResource[e.Resource], e)
	}
	for res, effs := range byResource {
		for i := 1; i < len(effs); i++ {
			if effs[i].StartedAt.Before(effs[i-1].EndedAt) {
				t.Errorf("%s: calls overlap: %v–%v and %v–%v", res, effs[i-1].StartedAt, effs[i-1].EndedAt, effs[i].StartedAt, effs[i].EndedAt)
			}
		}
	}
	if n := len(s.sim.Effects()); n != 200 {
		t.Errorf("%d effects for 200 operations", n)
	}
	// Per resource, the comments landed in the order the operations were
	// created.
	for k := 0; k < 10; k++ {
		is, _ := s.sim.Issue("octo", "demo", 100+k)
		last := -1
		for _, c := range is.Comments {
			var n int
			if _, err := fmtSscan(c.Body, &n); err != nil {
				t.Fatal(err)
			}
			if n < last {
				t.Errorf("issue %d: comment %d after %d", 100+k, n, last)
			}
			last = n
		}
	}
}

func TestLastAttemptAmbiguous(t *testing.T) {
	t.Parallel()
	now := time.Now()
	ended := func(cat string) schema.Attempt {
		return schema.Attempt{StartedAt: now, EndedAt: now, ErrorCategory: cat}
	}
	probe := func(cat string) schema.Attempt {
		a := ended(cat)
		a.Probe = true
		return a
	}
	cases := []struct {
		name string
		log  []schema.Attempt
		want bool
	}{
		{"none", nil, false},
		{"never ended", []schema.Attempt{{StartedAt: now}}, true},
		{"server error", []schema.Attempt{ended(CategoryServerError)}, true},
		{"timeout", []schema.Attempt{ended(CategoryTimeout)}, true},
		{"network", []schema.Attempt{ended(CategoryNetwork)}, true},
		{"rate limited (refused, not applied)", []schema.Attempt{ended(CategoryRateLimited)}, false},
		{"validation", []schema.Attempt{ended(CategoryValidation)}, false},
		{"probed after", []schema.Attempt{ended(CategoryServerError), probe("")}, false},
		{"failed probe settles nothing", []schema.Attempt{ended(CategoryServerError), probe(CategoryServerError)}, true},
		{"failed probe after a clean failure", []schema.Attempt{ended(CategoryRateLimited), probe(CategoryServerError)}, false},
	}
	for _, c := range cases {
		if got := lastAttemptAmbiguous(&schema.Record{AttemptLog: c.log}); got != c.want {
			t.Errorf("%s: %v", c.name, got)
		}
	}
}

// failingDispatcher stands in for a queue that is down when operations
// are submitted.
type failingDispatcher struct{}

func (failingDispatcher) Dispatch(context.Context, string) error { return errors.New("queue down") }

// An operation whose dispatch failed is found by the reconciler (through
// DispatchCandidates) and carried out.
func TestReconcilerPublishesUndispatched(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	down, err := New(Config{Store: s.store, Dispatcher: failingDispatcher{}})
	if err != nil {
		t.Fatal(err)
	}
	rec, _, err := down.Submit(context.Background(), "tester", schema.Submission{IdempotencyKey: "lost", Action: schema.ActionComment,
		Resource: issue(12), Payload: json.RawMessage(`{"body":"found"}`), InstallationID: 1})
	if err != nil {
		t.Fatalf("a failed dispatch must not fail the submission: %v", err)
	}
	r, err := queue.NewReconciler(s.broker, queue.ReconcilerConfig{
		Candidates: s.exec.DispatchCandidates, MarkDispatched: s.exec.MarkDispatched,
		MinAge: time.Nanosecond, Interval: time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	report, err := r.RunOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got := s.await(t, rec.OperationID, 20*time.Second); got.Status != schema.StatusSucceeded {
		t.Fatalf("status %s after reconcile %+v", got.Status, report)
	}
}

// A worker's handoff chain ends after HandoffLimit operations; the
// resource's next operation must not then wait out its message's
// OrderDelay, but carry on at once.
func TestChainLimitDoesNotStallTheResource(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{concurrency: 4, exec: Config{HandoffLimit: 2, OrderDelay: time.Hour}})
	if _, err := s.sim.AddIssue("octo", "demo", ghsim.NewIssue{Number: 100, Title: "t"}); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := 0; i < 30; i++ {
		ids = append(ids, s.submit(t, "chain-"+itoa(i), schema.ActionComment, issue(100), `{"body":"n`+itoa(i)+`"}`).OperationID)
	}
	for _, id := range ids {
		if got := s.await(t, id, 30*time.Second); got.Status != schema.StatusSucceeded {
			t.Fatalf("%s: %s", id, got.Status)
		}
	}
}

// An operation sent back to the queue for a long wait (here a secondary
// limit with Retry-After: 90) is cancelled at once when asked, not when
// the wait ends.
func TestCancelWhileWaitingInTheQueue(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	if err := s.sim.SetLimits(ghsim.Limits{PrimaryLimit: -1, SecondaryLimit: 1, SecondaryRetryAfter: 90 * time.Second}); err != nil {
		t.Fatal(err)
	}
	first := s.submit(t, "qc-1", schema.ActionComment, issue(10), `{"body":"one"}`)
	if got := s.await(t, first.OperationID, 20*time.Second); got.Status != schema.StatusSucceeded {
		t.Fatalf("first: %s", got.Status)
	}
	second := s.submit(t, "qc-2", schema.ActionComment, issue(11), `{"body":"two"}`)
	deadline := time.Now().Add(20 * time.Second)
	for {
		rec, _ := s.store.Get(context.Background(), second.OperationID)
		if rec.NextAttemptAt != nil && len(rec.AttemptLog) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("never requeued: %+v", rec)
		}
		time.Sleep(20 * time.Millisecond)
	}
	asked := time.Now()
	if _, err := s.exec.Cancel(context.Background(), second.OperationID); err != nil {
		t.Fatal(err)
	}
	got := s.await(t, second.OperationID, 5*time.Second)
	if got.Status != schema.StatusCancelled || !got.CancellationRequested || got.Attempts != 0 {
		t.Fatalf("status=%s attempts=%d", got.Status, got.Attempts)
	}
	if took := got.CompletedAt.Sub(asked); took > 2*time.Second {
		t.Errorf("cancellation took %v", took)
	}
}

// retryAfterProxy stands in front of the simulator and adds Retry-After to
// its 503 answers (the simulator's status faults send none).
func retryAfterProxy(t testing.TB, target, retryAfter string) string {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.ModifyResponse = func(r *http.Response) error {
		if r.StatusCode == http.StatusServiceUnavailable {
			r.Header.Set("Retry-After", retryAfter)
		}
		return nil
	}
	srv := httptest.NewServer(rp)
	t.Cleanup(srv.Close)
	return srv.URL
}

// A 5xx may have been applied: when its Retry-After is longer than
// MaxInlineWait, the operation goes back to the queue but the attempt
// still counts, so the operation ends after MaxAttempts.
func TestLongServerErrorWaitSpendsAttempts(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{exec: Config{MaxInlineWait: time.Second},
		front: func(t testing.TB, simURL string) string { return retryAfterProxy(t, simURL, "2") }})
	if _, err := s.sim.SetFault(ghsim.Fault{Route: "POST /repos/{owner}/{repo}/issues/{number}/comments", Kind: ghsim.FaultStatus, Status: 503}); err != nil {
		t.Fatal(err)
	}
	rec := s.submit(t, "503", schema.ActionComment, issue(10), `{"body":"never"}`)
	got := s.await(t, rec.OperationID, 20*time.Second)
	if got.Status != schema.StatusFailed || got.Attempts != 3 || got.LastErrorCategory != CategoryServerError {
		t.Fatalf("status=%s attempts=%d category=%s", got.Status, got.Attempts, got.LastErrorCategory)
	}
	var calls, probes int
	for _, a := range got.AttemptLog {
		if a.Probe {
			probes++
			continue
		}
		calls++
		if a.HTTPStatus != 503 || a.WaitMillis < 2000 && a.Number < 3 {
			t.Errorf("attempt %+v", a)
		}
	}
	if calls != 3 || probes < 2 {
		t.Errorf("calls=%d probes=%d log=%+v", calls, probes, got.AttemptLog)
	}
}

// When GitHub's last answer spent the primary budget, go-github refuses
// the next request itself, until the reset, with a made-up 403: nothing
// was sent, so no attempt is spent; it is a rate-limit wait.
func TestClientSideRefusalSpendsNoAttempt(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{sim: ghsim.Config{Limits: ghsim.Limits{PrimaryLimit: 1, PrimaryWindow: 3 * time.Second}}})
	first := s.submit(t, "budget-1", schema.ActionComment, issue(10), `{"body":"one"}`)
	if got := s.await(t, first.OperationID, 20*time.Second); got.Status != schema.StatusSucceeded {
		t.Fatalf("first: %s %s", got.Status, got.LastErrorMessage)
	}
	// (GitHub's reset is in whole seconds: a real refusal or two may
	// follow the client's own, and those do count.)
	second := s.submit(t, "budget-2", schema.ActionComment, issue(11), `{"body":"two"}`,
		func(s *schema.Submission) { s.MaxAttempts = 10 })
	got := s.await(t, second.OperationID, 20*time.Second)
	if got.Status != schema.StatusSucceeded {
		t.Fatalf("second: %s %s", got.Status, got.LastErrorMessage)
	}
	var sent, refused int
	for _, a := range got.AttemptLog {
		switch {
		case a.Probe:
		case a.HTTPStatus == 0 && a.ErrorCategory == CategoryPrimaryRateLimit && a.RequestID == "":
			refused++
		default:
			sent++
		}
	}
	if refused == 0 || got.Attempts != sent {
		t.Errorf("attempts=%d sent=%d refused=%d log=%+v", got.Attempts, sent, refused, got.AttemptLog)
	}
}

// A 422 from update_ref is a conflict only when the update is not a fast
// forward; a missing object is a validation failure.
func TestUpdateRefMissingObjectIsNotAConflict(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	rec := s.submit(t, "ref-missing", schema.ActionUpdateRef, schema.Resource{Type: "ref", ID: "octo/demo:heads/main"},
		`{"sha":"`+strings.Repeat("9", 40)+`"}`)
	got := s.await(t, rec.OperationID, 20*time.Second)
	if got.Status != schema.StatusFailed || got.Attempts != 1 || got.LastErrorCategory != CategoryValidation ||
		!strings.Contains(got.LastErrorMessage, "Object does not exist") {
		t.Fatalf("status=%s attempts=%d category=%s message=%s", got.Status, got.Attempts, got.LastErrorCategory, got.LastErrorMessage)
	}
}

// update_ref with expectedSha reads the ref, then updates it: the lease is
// checked again immediately before the update, and a lost lease stops it.
func TestUpdateRefChecksTheLeaseBeforeUpdating(t *testing.T) {
	t.Parallel()
	sim, gh := newSim(t, ghsim.Config{})
	c := installationClient(t, gh)
	base, _ := sim.Ref("octo", "demo", "heads/main")
	next, err := sim.AddCommit("octo", "demo", ghsim.Commit{Parents: []string{base}})
	if err != nil {
		t.Fatal(err)
	}
	rec, tg, p := actionRecord(t, schema.ActionUpdateRef, schema.Resource{Type: "ref", ID: "octo/demo:heads/main"},
		`{"sha":"`+next+`","expectedSha":"`+base+`"}`)
	checks := 0
	lost := errors.New("lease lost")
	ctx := withGuard(context.Background(), func() error { checks++; return lost })
	_, _, err = actions[rec.Action].do(ctx, c, rec, tg, p)
	var ge *guardError
	if !errors.As(err, &ge) || !errors.Is(err, lost) || checks != 1 {
		t.Fatalf("err=%v checks=%d", err, checks)
	}
	if ref, _ := sim.Ref("octo", "demo", "heads/main"); ref != base {
		t.Error("ref updated without the lease")
	}
	for _, e := range sim.Effects() {
		if e.Method == "PATCH" {
			t.Errorf("update sent: %+v", e)
		}
	}
}

type installationsFunc func(ctx context.Context, owner, repo string) (int64, error)

func (f installationsFunc) InstallationOf(ctx context.Context, owner, repo string) (int64, error) {
	return f(ctx, owner, repo)
}

// An installation baton may no longer use fails the operation with
// installation_unavailable: suspended on GitHub (the token exchange is
// refused), or no longer covering the repository.
func TestInstallationUnavailable(t *testing.T) {
	t.Parallel()
	t.Run("suspended", func(t *testing.T) {
		t.Parallel()
		s := newStack(t, stackOptions{})
		if err := s.sim.SuspendInstallation(1, true); err != nil {
			t.Fatal(err)
		}
		rec := s.submit(t, "suspended", schema.ActionComment, issue(10), `{"body":"never"}`)
		got := s.await(t, rec.OperationID, 20*time.Second)
		if got.Status != schema.StatusFailed || got.LastErrorCategory != CategoryInstallationUnavailable || got.Attempts != 1 {
			t.Fatalf("status=%s attempts=%d category=%s", got.Status, got.Attempts, got.LastErrorCategory)
		}
		if n := len(s.sim.Effects()); n != 0 {
			t.Errorf("%d effects", n)
		}
	})
	t.Run("resolver", func(t *testing.T) {
		t.Parallel()
		s := newStack(t, stackOptions{exec: Config{Installations: installationsFunc(func(_ context.Context, owner, repo string) (int64, error) {
			return 0, schema.Errorf(schema.CodeForbidden, "baton is not installed on %s/%s", owner, repo)
		})}})
		rec := s.submit(t, "uninstalled", schema.ActionComment, issue(10), `{"body":"never"}`)
		got := s.await(t, rec.OperationID, 20*time.Second)
		if got.Status != schema.StatusFailed || got.LastErrorCategory != CategoryInstallationUnavailable || got.Attempts != 0 {
			t.Fatalf("status=%s attempts=%d category=%s", got.Status, got.Attempts, got.LastErrorCategory)
		}
		if n := len(s.sim.Effects()); n != 0 {
			t.Errorf("%d effects", n)
		}
	})
}

// A cancellation that comes while the operation waits inline for its
// installation's pace ends the wait: the call is not made.
func TestCancelDuringPaceWait(t *testing.T) {
	t.Parallel()
	// The second operation waits in memory for the rest of 8 s after the
	// first's call: long enough that, on a loaded machine, it is still
	// waiting when the test sees it running and cancels it (at 4 s it once
	// was not).
	s := newStack(t, stackOptions{exec: Config{Pacing: PacingConfig{MinInterval: 8 * time.Second, MaxInlineWait: 10 * time.Second}}})
	first := s.submit(t, "pace-1", schema.ActionComment, issue(10), `{"body":"one"}`)
	if got := s.await(t, first.OperationID, 20*time.Second); got.Status != schema.StatusSucceeded {
		t.Fatalf("first: %s", got.Status)
	}
	second := s.submit(t, "pace-2", schema.ActionComment, issue(11), `{"body":"two"}`)
	deadline := time.Now().Add(10 * time.Second)
	for {
		rec, _ := s.store.Get(context.Background(), second.OperationID)
		if rec.Status == schema.StatusRunning {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("never running: %+v", rec)
		}
		time.Sleep(10 * time.Millisecond)
	}
	asked := time.Now()
	if _, err := s.exec.Cancel(context.Background(), second.OperationID); err != nil {
		t.Fatal(err)
	}
	got := s.await(t, second.OperationID, 10*time.Second)
	if got.Status != schema.StatusCancelled || got.Attempts != 0 {
		t.Fatalf("status=%s attempts=%d log=%+v", got.Status, got.Attempts, got.AttemptLog)
	}
	if took := got.CompletedAt.Sub(asked); took > time.Second {
		t.Errorf("cancellation took %v during a pace wait", took)
	}
	if is, _ := s.sim.Issue("octo", "demo", 11); len(is.Comments) != 0 {
		t.Errorf("comment posted after the cancellation")
	}
}

// nudgeRecorder is a dispatcher that delivers nothing and records nudges,
// so that a test drives Process itself.
type nudgeRecorder struct {
	mu     sync.Mutex
	nudged []string
}

func (*nudgeRecorder) Dispatch(context.Context, string) error { return nil }

func (n *nudgeRecorder) Nudge(_ context.Context, id string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.nudged = append(n.nudged, id)
	return nil
}

func (n *nudgeRecorder) got() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.nudged)
}

// A worker that stops (its context ends) just as it finishes an operation
// hands the resource's next operation to the queue; so does every worker
// when HandoffLimit is negative.
func TestHandoffNudgesTheNextWhenStoppingOrOff(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	for _, c := range []struct {
		name  string
		limit int
	}{{"stopping", 0}, {"off", -1}} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			rec := &nudgeRecorder{}
			cfg := Config{Store: s.store, Dispatcher: rec, Leases: s.coord, GitHub: s.gh, HandoffLimit: c.limit}
			if c.limit == 0 {
				cfg.OnFinished = func(schema.Record) { cancel() }
			}
			e, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for i := range 2 {
				r, _, err := e.Submit(context.Background(), "tester", schema.Submission{IdempotencyKey: "handoff-" + c.name + itoa(i),
					Action: schema.ActionComment, Resource: issue(12), Payload: json.RawMessage(`{"body":"x"}`), InstallationID: 1})
				if err != nil {
					t.Fatal(err)
				}
				ids = append(ids, r.OperationID)
			}
			if r := e.Process(ctx, ids[0]); r.Kind != ResultDone {
				t.Fatalf("Process = %v %v", r, r.Err)
			}
			if got := rec.got(); !slices.Equal(got, ids[1:]) {
				t.Errorf("nudged %v, want %v", got, ids[1:])
			}
			if next, _ := s.store.Get(context.Background(), ids[1]); next.Status != schema.StatusQueued {
				t.Errorf("next operation %s, want it left to the queue", next.Status)
			}
			// Finish it, for the next subtest's resource order.
			if r := e.Process(context.Background(), ids[1]); r.Kind != ResultDone {
				t.Fatalf("Process = %v %v", r, r.Err)
			}
		})
	}
}

// frontProxy stands in front of the simulator and lets a test step in:
// hook sees each request first and may answer it itself (true).
func frontProxy(hook func(w http.ResponseWriter, r *http.Request, next http.Handler) bool) func(testing.TB, string) string {
	return func(t testing.TB, target string) string {
		t.Helper()
		u, err := url.Parse(target)
		if err != nil {
			t.Fatal(err)
		}
		rp := httputil.NewSingleHostReverseProxy(u)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !hook(w, r, rp) {
				rp.ServeHTTP(w, r)
			}
		}))
		t.Cleanup(srv.Close)
		return srv.URL
	}
}

// A forced update_ref whose first attempt was applied but answered with a
// 502, after which someone pushed on top: the retry must not force the
// ref back over that push.
func TestForcedUpdateRefRetryKeepsALaterPush(t *testing.T) {
	t.Parallel()
	var (
		simP   atomic.Pointer[ghsim.Sim]
		pushed atomic.Value // the sha pushed on top
		once   sync.Once
	)
	s := newStack(t, stackOptions{front: frontProxy(func(w http.ResponseWriter, r *http.Request, next http.Handler) bool {
		if r.Method != http.MethodPatch || !strings.HasSuffix(r.URL.Path, "/git/refs/heads/release") {
			return false
		}
		hit := false
		once.Do(func() { hit = true })
		if !hit {
			return false
		}
		// Applied on GitHub; then someone pushes on top; the caller sees
		// a 502.
		rec := httptest.NewRecorder()
		next.ServeHTTP(rec, r)
		sim := simP.Load()
		applied, _ := sim.Ref("octo", "demo", "heads/release")
		top, err := sim.AddCommit("octo", "demo", ghsim.Commit{Parents: []string{applied}, Message: "pushed on top"})
		if err == nil {
			err = sim.SetRef("octo", "demo", "heads/release", top, "")
		}
		if err != nil {
			t.Error(err)
		}
		pushed.Store(top)
		w.WriteHeader(http.StatusBadGateway)
		return true
	})})
	simP.Store(s.sim)
	base, _ := s.sim.Ref("octo", "demo", "heads/main")
	if err := s.sim.SetRef("octo", "demo", "heads/release", base, ""); err != nil {
		t.Fatal(err)
	}
	next, _ := s.sim.AddCommit("octo", "demo", ghsim.Commit{Parents: []string{base}, Message: "ours"})
	rec := s.submit(t, "forced", schema.ActionUpdateRef, schema.Resource{Type: "ref", ID: "octo/demo:heads/release"},
		`{"sha":"`+next+`","force":true}`)
	got := s.await(t, rec.OperationID, 20*time.Second)
	top, _ := pushed.Load().(string)
	if top == "" {
		t.Fatal("the proxy saw no forced update")
	}
	if ref, _ := s.sim.Ref("octo", "demo", "heads/release"); ref != top {
		t.Errorf("release = %s: the push on top (%s) was undone (ours %s)", ref, top, next)
	}
	if got.Status != schema.StatusFailed || got.LastErrorCategory != CategoryConflict {
		t.Errorf("status=%s category=%s %s", got.Status, got.LastErrorCategory, got.LastErrorMessage)
	}
	if got.RefBeforeSHA != base {
		t.Errorf("refBeforeSha = %q, want %s", got.RefBeforeSHA, base)
	}
}

// lateMerge, in front of the simulator, holds the first merge of pull
// request #1 (its caller gets 502, as if GitHub were still working on it)
// and passes it on right after the next read of the pull request: the
// probe sees it still open, and the merge lands just after. onMerge, if
// set, is called (under mu) for each later merge request, which then goes
// on to the simulator.
type lateMerge struct {
	t       *testing.T
	onMerge func()
	mu      sync.Mutex
	held    *http.Request // the first merge, not yet passed on
	body    []byte
	landed  bool
}

func (m *lateMerge) serve(w http.ResponseWriter, r *http.Request, next http.Handler) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	isMerge := r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, "/pulls/1/merge")
	switch {
	case isMerge && m.held == nil && !m.landed:
		b, _ := io.ReadAll(r.Body)
		m.held, m.body = r.Clone(context.WithoutCancel(r.Context())), b
		w.WriteHeader(http.StatusBadGateway)
		return true
	case r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/pulls/1") && m.held != nil:
		next.ServeHTTP(w, r)
		m.held.Body = io.NopCloser(bytes.NewReader(m.body))
		rec := httptest.NewRecorder()
		next.ServeHTTP(rec, m.held)
		if rec.Code != http.StatusOK {
			m.t.Errorf("held merge: %d %s", rec.Code, rec.Body)
		}
		m.held, m.landed = nil, true
		return true
	case isMerge && m.landed && m.onMerge != nil:
		m.onMerge()
	}
	return false
}

// hasLanded reports whether the held merge was passed on.
func (m *lateMerge) hasLanded() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.landed
}

// A merge whose call failed ambiguously and that GitHub carried out after
// the probe had looked: the next attempt is refused (405, already merged),
// and the operation must still be recorded as the success it is.
func TestRefusalAfterAmbiguousAttemptIsProbed(t *testing.T) {
	t.Parallel()
	late := &lateMerge{t: t}
	s := newStack(t, stackOptions{front: frontProxy(late.serve)})
	head := ghsim.DemoHeadSHA(1)
	rec := s.submit(t, "late-merge", schema.ActionMerge, schema.Resource{Type: "pull_request", ID: "octo/demo#1"}, `{"sha":"`+head+`"}`)
	got := s.await(t, rec.OperationID, 20*time.Second)
	if !late.hasLanded() {
		t.Fatal("the held merge never landed")
	}
	if pr, _ := s.sim.Pull("octo", "demo", 1); !pr.Merged {
		t.Fatal("pull request not merged")
	}
	if got.Status != schema.StatusSucceeded {
		t.Fatalf("status=%s %s %s log=%+v", got.Status, got.LastErrorCategory, got.LastErrorMessage, got.AttemptLog)
	}
	var probes int
	for _, a := range got.AttemptLog {
		if a.Probe {
			probes++
		}
	}
	if got.Attempts != 2 || probes != 2 {
		t.Errorf("attempts=%d probes=%d log=%+v", got.Attempts, probes, got.AttemptLog)
	}
}
