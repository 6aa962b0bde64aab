package executor

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-dev/baton/app/ghsim"
	"github.com/baton-dev/baton/schema"
)

// storeRunning creates an operation in the store (no message is published)
// and saves it as running, with the given attempts spent and attempt log,
// the state a worker leaves when it stops between two steps of the loop.
func storeRunning(t *testing.T, s *stack, key string, maxAttempts, attempts int, log []schema.Attempt) *schema.Record {
	t.Helper()
	ctx := context.Background()
	now := time.Now().UTC()
	rec, err := NewRecord("tester", schema.Submission{IdempotencyKey: key, Action: schema.ActionComment,
		Resource: issue(12), Payload: json.RawMessage(`{"body":"once"}`), InstallationID: 1, MaxAttempts: maxAttempts}, now)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.store.Create(ctx, rec); err != nil {
		t.Fatal(err)
	}
	rec.Status, rec.StartedAt, rec.UpdatedAt = schema.StatusRunning, &now, now
	rec.Attempts, rec.AttemptLog = attempts, log
	for _, a := range log {
		if a.ErrorCategory != "" {
			rec.LastErrorCategory, rec.LastErrorMessage = a.ErrorCategory, a.ErrorMessage
		}
	}
	if err := s.store.Save(ctx, rec); err != nil {
		t.Fatal(err)
	}
	return rec
}

// An operation whose attempts are all spent, taken up again after its last
// attempt failed ambiguously and a probe found nothing (its worker stopped
// right after the probe), is recorded failed at once: no call is made, and
// the record stays valid (attempts never exceed maxAttempts).
func TestSpentOperationFailsWithoutACall(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	ctx := context.Background()
	t0 := time.Now().UTC().Add(-time.Minute)
	log := []schema.Attempt{
		{Number: 1, StartedAt: t0, EndedAt: t0.Add(time.Second), HTTPStatus: 502, ErrorCategory: CategoryServerError, ErrorMessage: "502 Bad Gateway"},
		{Number: 1, StartedAt: t0.Add(2 * time.Second), EndedAt: t0.Add(3 * time.Second), HTTPStatus: 200, Probe: true},
	}
	rec := storeRunning(t, s, "spent", 1, 1, log)

	if r := s.exec.Process(ctx, rec.OperationID); r.Kind != ResultDone {
		t.Fatalf("Process: %v (%v), want done", r, r.Err)
	}
	got, err := s.store.Get(ctx, rec.OperationID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != schema.StatusFailed || got.Attempts != 1 || got.LastErrorCategory != CategoryServerError || len(got.AttemptLog) != 2 {
		t.Fatalf("record: status %s attempts %d category %q log %+v, want failed after its one attempt",
			got.Status, got.Attempts, got.LastErrorCategory, got.AttemptLog)
	}
	is, err := s.sim.Issue("octo", "demo", 12)
	if err != nil {
		t.Fatal(err)
	}
	if len(is.Comments) != 0 {
		t.Errorf("comments on #12: %+v, want none (no attempt was left)", is.Comments)
	}
}

// As TestRefusalAfterAmbiguousAttemptIsProbed, with a cancellation that
// arrives while the refused call is in flight: the refusal may be GitHub
// answering the earlier attempt's effect, so the record may not say
// cancelled before a probe has looked. The probe finds the merge, and the
// operation is the success it is, its cancellation requested.
func TestCancelAfterRefusalFollowingAmbiguousAttemptProbesFirst(t *testing.T) {
	t.Parallel()
	var (
		stackP atomic.Pointer[stack]
		opID   atomic.Value
	)
	late := &lateMerge{t: t, onMerge: func() {
		// The second attempt: cancelled while its call is in flight.
		if _, err := stackP.Load().exec.Cancel(context.Background(), opID.Load().(string)); err != nil {
			t.Errorf("cancel: %v", err)
		}
	}}
	s := newStack(t, stackOptions{front: frontProxy(late.serve)})
	stackP.Store(s)
	head := ghsim.DemoHeadSHA(1)
	id, err := OperationID("tester", "late-merge-cancelled")
	if err != nil {
		t.Fatal(err)
	}
	opID.Store(id)
	rec := s.submit(t, "late-merge-cancelled", schema.ActionMerge, schema.Resource{Type: "pull_request", ID: "octo/demo#1"}, `{"sha":"`+head+`"}`)
	if rec.OperationID != id {
		t.Fatalf("operation %s, want %s", rec.OperationID, id)
	}
	got := s.await(t, rec.OperationID, 20*time.Second)
	if !late.hasLanded() {
		t.Fatal("the held merge never landed")
	}
	if pr, _ := s.sim.Pull("octo", "demo", 1); !pr.Merged {
		t.Fatal("pull request not merged")
	}
	if got.Status != schema.StatusSucceeded || !got.CancellationRequested {
		t.Fatalf("status=%s cancellationRequested=%v %s %s log=%+v, want succeeded with the cancellation requested",
			got.Status, got.CancellationRequested, got.LastErrorCategory, got.LastErrorMessage, got.AttemptLog)
	}
}

// A probe that cannot tell (here every look at the comments fails with a
// 500) is tried maxProbeFailures times, no more and no fewer, and the
// operation then fails saying it could not check: it spends none of its
// attempts on probes and never calls again blind.
func TestProbeGivesUpAfterMaxProbeFailures(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{exec: Config{BaseBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond}})
	for _, f := range []ghsim.Fault{
		{Route: "POST /repos/{owner}/{repo}/issues/{number}/comments", Kind: ghsim.FaultStatus, Status: 502, Count: 1},
		{Route: "GET /repos/{owner}/{repo}/issues/{number}/comments", Kind: ghsim.FaultStatus, Status: 500},
	} {
		if _, err := s.sim.SetFault(f); err != nil {
			t.Fatal(err)
		}
	}
	rec := s.submit(t, "unprobeable", schema.ActionComment, issue(10), `{"body":"maybe"}`)
	got := s.await(t, rec.OperationID, 20*time.Second)
	calls, probes := callsAndProbes(got)
	if got.Status != schema.StatusFailed || calls != 1 || got.Attempts != 1 || probes != maxProbeFailures {
		t.Fatalf("status=%s attempts=%d calls=%d probes=%d, want failed after 1 call and %d probes; log=%+v",
			got.Status, got.Attempts, calls, probes, maxProbeFailures, got.AttemptLog)
	}
	if !strings.Contains(got.LastErrorMessage, "could not check") || got.LastErrorCategory != CategoryServerError {
		t.Errorf("last error %s: %q", got.LastErrorCategory, got.LastErrorMessage)
	}
}

// The last attempt is not followed by a backoff: when it fails
// ambiguously the operation probes at once and, finding nothing, fails.
// The record shows no wait after it.
func TestNoWaitAfterTheLastAttempt(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{exec: Config{BaseBackoff: 3 * time.Second, MaxBackoff: 3 * time.Second}})
	if _, err := s.sim.SetFault(ghsim.Fault{Route: "POST /repos/{owner}/{repo}/issues/{number}/comments", Kind: ghsim.FaultStatus, Status: 502, Count: 1}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	rec := s.submit(t, "last", schema.ActionComment, issue(10), `{"body":"only once"}`, func(sub *schema.Submission) { sub.MaxAttempts = 1 })
	got := s.await(t, rec.OperationID, 20*time.Second)
	calls, probes := callsAndProbes(got)
	if got.Status != schema.StatusFailed || calls != 1 || probes != 1 || got.LastErrorCategory != CategoryServerError {
		t.Fatalf("status=%s calls=%d probes=%d category=%s log=%+v, want failed after one call and one probe",
			got.Status, calls, probes, got.LastErrorCategory, got.AttemptLog)
	}
	if w := got.AttemptLog[0].WaitMillis; w != 0 {
		t.Errorf("the last attempt is followed by a wait of %d ms", w)
	}
	if d := time.Since(start); d >= 3*time.Second {
		t.Errorf("took %v: the backoff after the last attempt was waited out", d)
	}
}

// The wait after a failed first attempt is BaseBackoff with jitter on its
// upper half, between BaseBackoff/2 and BaseBackoff, and is recorded on
// the attempt.
func TestFirstBackoffIsBaseBackoffWithJitter(t *testing.T) {
	t.Parallel()
	const base = 400 * time.Millisecond
	s := newStack(t, stackOptions{exec: Config{BaseBackoff: base, MaxBackoff: 30 * time.Second}})
	if _, err := s.sim.SetFault(ghsim.Fault{Route: "POST /repos/{owner}/{repo}/issues/{number}/labels", Kind: ghsim.FaultStatus, Status: 500, Count: 1}); err != nil {
		t.Fatal(err)
	}
	rec := s.submit(t, "backoff", schema.ActionAddLabels, issue(11), `{"labels":["x"]}`)
	got := s.await(t, rec.OperationID, 20*time.Second)
	if got.Status != schema.StatusSucceeded || len(got.AttemptLog) == 0 {
		t.Fatalf("status=%s log=%+v", got.Status, got.AttemptLog)
	}
	if w := time.Duration(got.AttemptLog[0].WaitMillis) * time.Millisecond; w < base/2 || w > base {
		t.Errorf("wait after the first attempt %v, want between %v and %v", w, base/2, base)
	}
}

// Backoffs grow but never past MaxBackoff.
func TestBackoffCappedAtMaxBackoff(t *testing.T) {
	t.Parallel()
	const capped = 250 * time.Millisecond
	s := newStack(t, stackOptions{exec: Config{BaseBackoff: 200 * time.Millisecond, MaxBackoff: capped}})
	if _, err := s.sim.SetFault(ghsim.Fault{Route: "POST /repos/{owner}/{repo}/issues/{number}/labels", Kind: ghsim.FaultStatus, Status: 500, Count: 3}); err != nil {
		t.Fatal(err)
	}
	rec := s.submit(t, "capped", schema.ActionAddLabels, issue(11), `{"labels":["x"]}`, func(sub *schema.Submission) { sub.MaxAttempts = 4 })
	got := s.await(t, rec.OperationID, 20*time.Second)
	calls, _ := callsAndProbes(got)
	if got.Status != schema.StatusSucceeded || calls != 4 {
		t.Fatalf("status=%s calls=%d log=%+v", got.Status, calls, got.AttemptLog)
	}
	for i, a := range got.AttemptLog {
		if w := time.Duration(a.WaitMillis) * time.Millisecond; w > capped {
			t.Errorf("attempt log entry %d: wait %v, more than MaxBackoff %v", i, w, capped)
		}
	}
}

// A worker that finished an operation carries out up to HandoffLimit of
// the resource's next ones itself, then hands the next to the queue.
func TestHandoffLimitIsExact(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	rec := &nudgeRecorder{}
	e, err := New(Config{Store: s.store, Dispatcher: rec, Leases: s.coord, GitHub: s.gh, HandoffLimit: 2})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := range 4 {
		r, _, err := e.Submit(context.Background(), "tester", schema.Submission{IdempotencyKey: "limit-" + itoa(i),
			Action: schema.ActionComment, Resource: issue(12), Payload: json.RawMessage(`{"body":"x"}`), InstallationID: 1})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.OperationID)
	}
	if r := e.Process(context.Background(), ids[0]); r.Kind != ResultDone {
		t.Fatalf("Process = %v %v", r, r.Err)
	}
	for i, id := range ids {
		got, err := s.store.Get(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		want := schema.StatusSucceeded
		if i == 3 {
			want = schema.StatusQueued
		}
		if got.Status != want {
			t.Errorf("operation %d: %s, want %s", i, got.Status, want)
		}
	}
	if got := rec.got(); !slices.Equal(got, ids[3:]) {
		t.Errorf("nudged %v, want %v", got, ids[3:])
	}
}

// An operation submitted for one installation whose repository is now
// covered by another fails with installation_unavailable before any call:
// it is never carried out under an installation it was not submitted for.
func TestRepositoryMovedToAnotherInstallation(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{exec: Config{Installations: installationsFunc(func(context.Context, string, string) (int64, error) {
		return 2, nil
	})}})
	rec := s.submit(t, "moved", schema.ActionComment, issue(10), `{"body":"never"}`)
	got := s.await(t, rec.OperationID, 20*time.Second)
	if got.Status != schema.StatusFailed || got.LastErrorCategory != CategoryInstallationUnavailable || got.Attempts != 0 ||
		got.InstallationID != 1 || !strings.Contains(got.LastErrorMessage, "moved from installation 1 to 2") {
		t.Fatalf("status=%s attempts=%d installation=%d %s: %q", got.Status, got.Attempts, got.InstallationID, got.LastErrorCategory, got.LastErrorMessage)
	}
	if n := len(s.sim.Effects()); n != 0 {
		t.Errorf("%d effects", n)
	}
}

// A comment GitHub created whose answer is cut short (the connection lost
// mid-body: go-github's decoder fails with a bare unexpected EOF) may have
// been applied: the operation probes, finds the comment, and succeeds
// without posting it twice.
func TestAnswerCutShortIsProbed(t *testing.T) {
	t.Parallel()
	var once sync.Once
	s := newStack(t, stackOptions{exec: Config{BaseBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond},
		front: frontProxy(func(w http.ResponseWriter, r *http.Request, next http.Handler) bool {
			if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/issues/10/comments") {
				return false
			}
			hit := false
			once.Do(func() { hit = true })
			if !hit {
				return false
			}
			rec := httptest.NewRecorder()
			next.ServeHTTP(rec, r)
			body := rec.Body.Bytes()
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(rec.Code)
			_, _ = w.Write(body[:len(body)/2])
			return true
		})})
	rec := s.submit(t, "cut-short", schema.ActionComment, issue(10), `{"body":"once only"}`)
	got := s.await(t, rec.OperationID, 20*time.Second)
	if got.Status != schema.StatusSucceeded {
		t.Fatalf("status=%s %s %q log=%+v", got.Status, got.LastErrorCategory, got.LastErrorMessage, got.AttemptLog)
	}
	if first := got.AttemptLog[0]; first.ErrorCategory != CategoryNetwork {
		t.Errorf("first attempt %+v, want a network failure", first)
	}
	is, err := s.sim.Issue("octo", "demo", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(is.Comments) != 1 {
		t.Errorf("%d comments on #10, want 1", len(is.Comments))
	}
}

// A call cut short by the consumer's stop deadline is not a failure of
// the operation: the operation goes back to the queue still running, its
// attempt left without an end (so it counts and is probed when it runs
// again), not failed as cancelled.
func TestCallInterruptedByTheStopDeadlineIsNotAFailure(t *testing.T) {
	t.Parallel()
	arrived := make(chan struct{})
	var once sync.Once
	s := newStack(t, stackOptions{front: frontProxy(func(w http.ResponseWriter, r *http.Request, next http.Handler) bool {
		if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/issues/10/comments") {
			return false
		}
		once.Do(func() { close(arrived) })
		select { // GitHub is slow to answer; the caller gives up first
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
		w.WriteHeader(http.StatusBadGateway)
		return true
	})})
	rec := s.submit(t, "interrupted", schema.ActionComment, issue(10), `{"body":"slow"}`)
	select {
	case <-arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("the call never arrived")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := s.cons.Stop(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("consumer stop: %v, want its deadline to pass", err)
	}
	var got schema.Record
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var err error
		if got, err = s.store.Get(context.Background(), rec.OperationID); err != nil {
			t.Fatal(err)
		}
		if st, _ := s.coord.Check(context.Background(), rec.Resource.Key()); !st.Locked || got.Terminal() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the lease was never released")
		}
	}
	if got.Status != schema.StatusRunning || got.Attempts != 1 || len(got.AttemptLog) != 1 || !got.AttemptLog[0].EndedAt.IsZero() {
		t.Fatalf("status=%s attempts=%d %s %q log=%+v, want still running with its attempt left open",
			got.Status, got.Attempts, got.LastErrorCategory, got.LastErrorMessage, got.AttemptLog)
	}
}

// A cancellation requested through another process (written to the store,
// no in-process signal) is found by the wait's poll of the record, and
// ends a long backoff early.
func TestCancelFromAnotherProcessEndsTheWait(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{exec: Config{BaseBackoff: 20 * time.Second, MaxBackoff: 20 * time.Second, CancelPoll: 100 * time.Millisecond}})
	cancelDuringWait(t, s, "cancel-elsewhere", func(id string) error {
		_, err := s.store.RequestCancel(context.Background(), id)
		return err
	})
}

// A handed-off operation that cannot finish now (GitHub asks for a long
// wait) gets a message of its own at once, so that its wait applies to
// it, rather than being left to its old message's delay.
func TestHandedOffOperationThatWaitsIsNudged(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	rec := &nudgeRecorder{}
	var ids []string
	e, err := New(Config{Store: s.store, Dispatcher: rec, Leases: s.coord, GitHub: s.gh, HandoffLimit: 10,
		OnFinished: func(r schema.Record) {
			if r.OperationID == ids[0] {
				if _, err := s.sim.SetFault(ghsim.Fault{Route: "POST /repos/{owner}/{repo}/issues/{number}/comments",
					Kind: ghsim.FaultTooManyRequests, RetryAfter: 90 * time.Second}); err != nil {
					t.Error(err)
				}
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		r, _, err := e.Submit(context.Background(), "tester", schema.Submission{IdempotencyKey: "nudge-" + itoa(i),
			Action: schema.ActionComment, Resource: issue(12), Payload: json.RawMessage(`{"body":"x"}`), InstallationID: 1})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.OperationID)
	}
	if r := e.Process(context.Background(), ids[0]); r.Kind != ResultDone {
		t.Fatalf("Process = %v %v", r, r.Err)
	}
	next, err := s.store.Get(context.Background(), ids[1])
	if err != nil {
		t.Fatal(err)
	}
	if next.Status != schema.StatusRunning || next.NextAttemptAt == nil {
		t.Fatalf("next operation %s next attempt %v, want it sent back to wait", next.Status, next.NextAttemptAt)
	}
	if got := rec.got(); !slices.Equal(got, ids[1:]) {
		t.Errorf("nudged %v, want %v", got, ids[1:])
	}
}
