package executor

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-github/v62/github"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/baton-dev/baton/app/ghsim"
	"github.com/baton-dev/baton/coordinator"
	"github.com/baton-dev/baton/internal/sqlite"
	"github.com/baton-dev/baton/queue"
	"github.com/baton-dev/baton/schema"
)

// waitForNextAttempt polls until the operation has saved when its next
// attempt is due (it waits out a backoff, or is back in the queue).
func waitForNextAttempt(t *testing.T, s *stack, id string) schema.Record {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		cur, err := s.store.Get(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if cur.NextAttemptAt != nil {
			return cur
		}
		if time.Now().After(deadline) {
			t.Fatalf("never waited: %+v", cur)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// calls and probes count the attempt log's calls and probes.
func callsAndProbes(rec schema.Record) (calls, probes int) {
	for _, a := range rec.AttemptLog {
		if a.Probe {
			probes++
		} else {
			calls++
		}
	}
	return calls, probes
}

// A cancellation that comes while an operation waits after an ambiguous
// failure does not make the record say cancelled before the probe has
// looked: the comment was posted (the connection dropped after GitHub
// applied it), so the operation succeeded, with its cancellation
// requested, and at once rather than after the 20 s backoff. Where the
// effect did not happen (the connection dropped before), the probe finds
// nothing and the operation is cancelled.
func TestCancelAfterAmbiguousFailureProbesFirst(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name     string
		fault    ghsim.FaultKind
		status   schema.Status
		comments int
	}{
		{"applied", ghsim.FaultDropAfter, schema.StatusSucceeded, 1},
		{"not applied", ghsim.FaultDropBefore, schema.StatusCancelled, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := newStack(t, stackOptions{exec: Config{BaseBackoff: 20 * time.Second, MaxBackoff: 20 * time.Second}})
			if _, err := s.sim.SetFault(ghsim.Fault{Route: "POST /repos/{owner}/{repo}/issues/{number}/comments", Kind: c.fault, Count: 1}); err != nil {
				t.Fatal(err)
			}
			rec := s.submit(t, "cancel-ambiguous", schema.ActionComment, issue(10), `{"body":"maybe"}`)
			waitForNextAttempt(t, s, rec.OperationID)
			asked := time.Now()
			if _, err := s.exec.Cancel(context.Background(), rec.OperationID); err != nil {
				t.Fatal(err)
			}
			got := s.await(t, rec.OperationID, 10*time.Second)
			calls, probes := callsAndProbes(got)
			if got.Status != c.status || !got.CancellationRequested || got.Attempts != 1 || calls != 1 || probes != 1 {
				t.Fatalf("status=%s (want %s) cancellationRequested=%v attempts=%d calls=%d probes=%d log=%+v",
					got.Status, c.status, got.CancellationRequested, got.Attempts, calls, probes, got.AttemptLog)
			}
			if took := got.CompletedAt.Sub(asked); took > 5*time.Second {
				t.Errorf("took %v after the cancellation during a 20 s backoff", took)
			}
			if is, _ := s.sim.Issue("octo", "demo", 10); len(is.Comments) != c.comments {
				t.Errorf("issue has %d comments, want %d", len(is.Comments), c.comments)
			}
			if c.status == schema.StatusSucceeded {
				var res commentResult
				if err := json.Unmarshal(got.Result, &res); err != nil || !res.Probed || res.CommentID == 0 {
					t.Errorf("result %s (%v)", got.Result, err)
				}
			}
		})
	}
}

// The same when the cancellation is found as the operation is picked up
// (here: it waits in the queue after a 5xx with a long Retry-After, and
// Cancel gives it a fresh message): an attempt that may have been applied
// is probed before the operation is recorded cancelled.
func TestCancelPickedUpAfterAmbiguousFailureProbesFirst(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{exec: Config{MaxInlineWait: time.Second},
		front: func(t testing.TB, simURL string) string { return retryAfterProxy(t, simURL, "120") }})
	if _, err := s.sim.SetFault(ghsim.Fault{Route: "POST /repos/{owner}/{repo}/issues/{number}/comments", Kind: ghsim.FaultStatus, Status: 503, Count: 1}); err != nil {
		t.Fatal(err)
	}
	rec := s.submit(t, "cancel-requeued", schema.ActionComment, issue(10), `{"body":"maybe"}`)
	waitForNextAttempt(t, s, rec.OperationID)
	// The 503 did not apply the comment, but GitHub can apply a request and
	// still answer 5xx: put the operation's comment there, as if it had
	// (posted by the App: the probe trusts no one else's).
	c := installationClient(t, s.gh)
	body := "maybe\n\n" + CommentMarker(rec.OperationID)
	if _, _, err := c.Issues.CreateComment(context.Background(), "octo", "demo", 10, &github.IssueComment{Body: &body}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.exec.Cancel(context.Background(), rec.OperationID); err != nil {
		t.Fatal(err)
	}
	got := s.await(t, rec.OperationID, 10*time.Second)
	calls, probes := callsAndProbes(got)
	if got.Status != schema.StatusSucceeded || !got.CancellationRequested || got.Attempts != 1 || calls != 1 || probes != 1 {
		t.Fatalf("status=%s cancellationRequested=%v attempts=%d calls=%d probes=%d log=%+v",
			got.Status, got.CancellationRequested, got.Attempts, calls, probes, got.AttemptLog)
	}
}

// An operation left running with no message (dead-lettered after failures
// that came once it was marked running) is still cancelled when asked: its
// record must not say running for ever, blocking its resource.
func TestCancelRunningOperationWithoutMessage(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	ctx := context.Background()
	rec, err := NewRecord("tester", schema.Submission{IdempotencyKey: "orphan", Action: schema.ActionComment, Resource: issue(10),
		Payload: json.RawMessage(`{"body":"never"}`), InstallationID: 1}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	stored, _, err := s.store.Create(ctx, rec)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	stored.Status, stored.StartedAt, stored.UpdatedAt = schema.StatusRunning, &now, now
	if err := s.store.Save(ctx, &stored); err != nil {
		t.Fatal(err)
	}
	// The resource's next operation waits for it.
	next := s.submit(t, "after-orphan", schema.ActionComment, issue(10), `{"body":"next"}`)
	if _, err := s.exec.Cancel(ctx, stored.OperationID); err != nil {
		t.Fatal(err)
	}
	got := s.await(t, stored.OperationID, 5*time.Second)
	if got.Status != schema.StatusCancelled || got.Attempts != 0 {
		t.Fatalf("status=%s attempts=%d", got.Status, got.Attempts)
	}
	if got := s.await(t, next.OperationID, 10*time.Second); got.Status != schema.StatusSucceeded {
		t.Fatalf("next: %s", got.Status)
	}
	if is, _ := s.sim.Issue("octo", "demo", 10); len(is.Comments) != 1 || !strings.HasPrefix(is.Comments[0].Body, "next") {
		t.Errorf("comments %+v", is.Comments)
	}
}

// A 5xx whose Retry-After is longer than MaxInlineWait sends the operation
// back to the queue until then. A delivery before that (here the nudge a
// cancelled operation of the same resource gives the next one) does not
// run it early and spends no attempt.
func TestLongServerErrorWaitHoldsAgainstEarlyDelivery(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{exec: Config{MaxInlineWait: time.Second},
		front: func(t testing.TB, simURL string) string { return retryAfterProxy(t, simURL, "120") }})
	if _, err := s.sim.SetFault(ghsim.Fault{Route: "POST /repos/{owner}/{repo}/issues/{number}/comments", Kind: ghsim.FaultStatus, Status: 503}); err != nil {
		t.Fatal(err)
	}
	rec := s.submit(t, "long-503", schema.ActionComment, issue(10), `{"body":"later"}`)
	waitForNextAttempt(t, s, rec.OperationID)
	other := s.submit(t, "long-503-next", schema.ActionComment, issue(10), `{"body":"after"}`)
	if got, err := s.exec.Cancel(context.Background(), other.OperationID); err != nil || got.Status != schema.StatusCancelled {
		t.Fatalf("cancel the next one: %s %v", got.Status, err)
	}
	// The nudge is delivered within milliseconds; give it every chance.
	time.Sleep(1500 * time.Millisecond)
	got, err := s.store.Get(context.Background(), rec.OperationID)
	if err != nil {
		t.Fatal(err)
	}
	calls, probes := callsAndProbes(got)
	if got.Status != schema.StatusRunning || got.Attempts != 1 || calls != 1 || probes != 0 || got.NextAttemptAt == nil {
		t.Errorf("status=%s attempts=%d calls=%d probes=%d next=%v log=%+v", got.Status, got.Attempts, calls, probes, got.NextAttemptAt, got.AttemptLog)
	}
}

// The first holder's deferred leave, coming after its release and after
// the next holder entered, must not end the next holder's turn: waiters for
// that one would fall back to the busy retry instead of waking.
func TestTurnstileLeaveEndsOnlyItsOwnTurn(t *testing.T) {
	t.Parallel()
	var ts turnstile
	first := ts.enter("k")
	first() // released
	second := ts.enter("k")
	first() // its deferred leave
	// A waiter arriving now finds the second holder's turn...
	turn, held := ts.held.lookup("k")
	if !held {
		t.Fatal("the first holder's deferred leave ended the second holder's turn")
	}
	select {
	case <-turn:
		t.Fatal("the first holder's deferred leave woke the second holder's waiters")
	default:
	}
	// ...and is woken when the second holder leaves.
	second()
	select {
	case <-turn:
	default:
		t.Fatal("the waiter was not woken when the second holder left")
	}
}

// Cancelling a queued operation makes it terminal without Process: it is
// counted among the finished operations (baton_executor_operations_finished_total,
// outcome cancelled), and the OnFinished hook hears of it, as it does of
// every other terminal operation, so that a feature waiting on the outcome
// (the merge queue on its merge) is not left waiting for its next event.
func TestCancelQueuedCountsAsFinished(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	finished := make(chan schema.Record, 4)
	s := newStack(t, stackOptions{exec: Config{Registerer: reg, OnFinished: func(r schema.Record) { finished <- r }}})
	ctx := context.Background()
	// Someone else holds the issue: the operation stays queued.
	if _, err := s.coord.Acquire(ctx, issue(10).Key(), "someone-else", time.Minute); err != nil {
		t.Fatal(err)
	}
	rec := s.submit(t, "cancel-queued", schema.ActionComment, issue(10), `{"body":"never"}`)
	got, err := s.exec.Cancel(ctx, rec.OperationID)
	if err != nil || got.Status != schema.StatusCancelled {
		t.Fatalf("cancel: %+v %v", got, err)
	}
	select {
	case r := <-finished:
		if r.OperationID != rec.OperationID || r.Status != schema.StatusCancelled {
			t.Errorf("OnFinished got %s %s", r.OperationID, r.Status)
		}
	case <-time.After(5 * time.Second):
		t.Error("OnFinished never heard of the cancelled operation")
	}
	if n := finishedCount(t, reg, schema.ActionComment, "cancelled"); n != 1 {
		t.Errorf("operations finished (cancelled) = %v, want 1", n)
	}
	// Cancelling it again changes nothing and counts nothing.
	if _, err := s.exec.Cancel(ctx, rec.OperationID); !errors.Is(err, schema.ErrAlreadyTerminal) {
		t.Errorf("second cancel: %v", err)
	}
	if n := finishedCount(t, reg, schema.ActionComment, "cancelled"); n != 1 {
		t.Errorf("after a second cancel: operations finished (cancelled) = %v, want 1", n)
	}
	select {
	case r := <-finished:
		t.Errorf("OnFinished heard of %s again", r.OperationID)
	default:
	}
}

// finishedCount reads baton_executor_operations_finished_total{action, outcome}
// from reg (0 when absent).
func finishedCount(t *testing.T, reg *prometheus.Registry, action, outcome string) float64 {
	t.Helper()
	return counterValue(t, reg, "baton_executor_operations_finished_total", map[string]string{"action": action, "outcome": outcome})
}

// counterValue reads the counter name{labels} from reg (0 when absent).
func counterValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue metric
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// hookedLeases is the real coordinator with functions run once a lease
// is taken and before Process goes on (KeepAlive is called right after),
// and before each fenced save.
type hookedLeases struct {
	*coordinator.Coordinator
	onKeepAlive func(l *coordinator.Lease)
	onFenced    func(l *coordinator.Lease)
}

func (h hookedLeases) KeepAlive(ctx context.Context, l *coordinator.Lease) (context.Context, func()) {
	if h.onKeepAlive != nil {
		h.onKeepAlive(l)
	}
	return h.Coordinator.KeepAlive(ctx, l)
}

func (h hookedLeases) Fenced(ctx context.Context, l *coordinator.Lease, fn func(*sqlite.Tx) error) error {
	if h.onFenced != nil {
		h.onFenced(l)
	}
	return h.Coordinator.Fenced(ctx, l, fn)
}

// A cancellation accepted right after a worker marked the operation
// running, before it made any call, stops it at the boundary before the
// first call: the answer said running with its cancellation requested, and
// nothing was in flight to let through. The operation is cancelled and
// GitHub never sees the comment.
func TestCancelJustAfterMarkedRunningMakesNoCall(t *testing.T) {
	t.Parallel()
	var (
		exec   atomic.Pointer[Executor]
		once   sync.Once
		answer = make(chan schema.Record, 1)
	)
	s := newStack(t, stackOptions{leases: func(c *coordinator.Coordinator) Leases {
		return hookedLeases{Coordinator: c, onKeepAlive: func(l *coordinator.Lease) {
			once.Do(func() {
				rec, err := exec.Load().Cancel(context.Background(), l.Owner)
				if err != nil {
					t.Errorf("cancel: %v", err)
				}
				answer <- rec
			})
		}}
	}})
	exec.Store(s.exec)
	rec := s.submit(t, "cancel-at-start", schema.ActionComment, issue(11), `{"body":"never"}`)
	got := s.await(t, rec.OperationID, 10*time.Second)
	if a := <-answer; a.Status != schema.StatusRunning || !a.CancellationRequested {
		t.Fatalf("cancel answered status=%s cancellationRequested=%v", a.Status, a.CancellationRequested)
	}
	if is, _ := s.sim.Issue("octo", "demo", 11); len(is.Comments) != 0 {
		t.Errorf("comments posted after the cancellation: %+v", is.Comments)
	}
	if calls, _ := callsAndProbes(got); got.Status != schema.StatusCancelled || calls != 0 || got.Attempts != 0 {
		t.Errorf("status=%s attempts=%d calls=%d log=%+v", got.Status, got.Attempts, calls, got.AttemptLog)
	}
}

// A cancellation accepted while a worker saves the start of a further
// attempt (after a failed one, its wait over and its boundary passed)
// stops it before that call: the save brings the cancellation back with
// it, and the call is not made.
func TestCancelDuringAttemptStartSaveMakesNoCall(t *testing.T) {
	t.Parallel()
	var (
		exec atomic.Pointer[Executor]
		s    *stack
		once sync.Once
	)
	s = newStack(t, stackOptions{leases: func(c *coordinator.Coordinator) Leases {
		return hookedLeases{Coordinator: c, onFenced: func(l *coordinator.Lease) {
			// The second attempt's start is saved once the first has
			// ended: cancel then, before the save.
			cur, err := s.store.Get(context.Background(), l.Owner)
			if err != nil || len(cur.AttemptLog) != 1 || cur.AttemptLog[0].EndedAt.IsZero() {
				return
			}
			once.Do(func() {
				if rec, err := exec.Load().Cancel(context.Background(), l.Owner); err != nil || rec.Status != schema.StatusRunning {
					t.Errorf("cancel: %s %v", rec.Status, err)
				}
			})
		}}
	}})
	exec.Store(s.exec)
	if _, err := s.sim.SetFault(ghsim.Fault{Route: "POST /repos/{owner}/{repo}/statuses/{sha}", Kind: ghsim.FaultStatus, Status: 502, Count: 1}); err != nil {
		t.Fatal(err)
	}
	sha := ghsim.DemoHeadSHA(3)
	rec := s.submit(t, "cancel-at-second-start", schema.ActionCreateStatus, schema.Resource{Type: "commit", ID: "octo/demo@" + sha},
		`{"state":"success","context":"ci"}`)
	got := s.await(t, rec.OperationID, 10*time.Second)
	if sts, _ := s.sim.Statuses("octo", "demo", sha); len(sts) != 0 {
		t.Errorf("statuses set after the cancellation: %+v", sts)
	}
	if calls, _ := callsAndProbes(got); got.Status != schema.StatusCancelled || calls != 1 || got.Attempts != 1 {
		t.Errorf("status=%s attempts=%d calls=%d log=%+v", got.Status, got.Attempts, calls, got.AttemptLog)
	}
}

// An operation in the dead-letter stream holds back the later operations
// of its resource: they wait while it waits for an operator, and once it
// is replayed the three run in the order they were submitted.
func TestDeadLetteredOperationKeepsItsResourceOrderWhenReplayed(t *testing.T) {
	t.Parallel()
	var (
		poison atomic.Value
		healed atomic.Bool
	)
	poison.Store("")
	s := newStack(t, stackOptions{maxFailures: 1, handler: func(h queue.Handler) queue.Handler {
		return func(ctx context.Context, id string) queue.Result {
			if id == poison.Load().(string) && !healed.Load() {
				return queue.Failed(errors.New("store unavailable"))
			}
			return h(ctx, id)
		}
	}})
	ctx := context.Background()
	// The issue is held elsewhere until the first operation is
	// dead-lettered, so that it is still queued then.
	held, err := s.coord.Acquire(ctx, issue(12).Key(), "outside", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	sub := schema.Submission{IdempotencyKey: "first", Action: schema.ActionComment, Resource: issue(12), Payload: json.RawMessage(`{"body":"first"}`), InstallationID: 1}
	rec, err := NewRecord("tester", sub, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	poison.Store(rec.OperationID)
	first := s.submit(t, "first", schema.ActionComment, issue(12), `{"body":"first"}`)
	var dl queue.DeadLetter
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if dl, err = s.broker.DeadLetterOf(ctx, first.OperationID); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("never dead-lettered: %v", err)
		}
	}
	second := s.submit(t, "second", schema.ActionComment, issue(12), `{"body":"second"}`)
	third := s.submit(t, "third", schema.ActionComment, issue(12), `{"body":"third"}`)
	if err := s.coord.Release(ctx, held); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond) // the later ones are delivered, and wait
	for _, id := range []string{second.OperationID, third.OperationID} {
		if got, err := s.store.Get(ctx, id); err != nil || got.Status != schema.StatusQueued {
			t.Fatalf("behind a dead letter: %s %v", got.Status, err)
		}
	}
	healed.Store(true)
	if _, err := s.broker.ReplayDeadLetter(ctx, dl.Sequence); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{first.OperationID, second.OperationID, third.OperationID} {
		if got := s.await(t, id, 10*time.Second); got.Status != schema.StatusSucceeded {
			t.Errorf("%s: %s", got.IdempotencyKey, got.Status)
		}
	}
	is, _ := s.sim.Issue("octo", "demo", 12)
	var order []string
	for _, c := range is.Comments {
		order = append(order, strings.SplitN(c.Body, "\n", 2)[0])
	}
	if strings.Join(order, ",") != "first,second,third" {
		t.Errorf("comments in the order %v", order)
	}
}
