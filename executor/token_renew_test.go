package executor

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-dev/baton/app/ghsim"
	"github.com/baton-dev/baton/schema"
)

// GitHub refuses an installation token that this machine still takes for
// valid (its clock behind GitHub's; or a token just issued and not yet
// usable everywhere at GitHub) with 401 "Bad credentials". The request was
// not applied: the operation asks for a new token and tries again, instead
// of failing for good.
func TestRefusedTokenRenewed(t *testing.T) {
	t.Parallel()
	var ahead atomic.Int64 // how far GitHub's clock is ahead of this machine's
	s := newStack(t, stackOptions{sim: ghsim.Config{
		TokenTTL: 3 * time.Minute,
		Now:      func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) },
	}})
	issue := schema.Resource{Type: "issue", ID: "octo/demo#10"}
	first := s.submit(t, "before", schema.ActionComment, issue, `{"body":"first"}`)
	if got := s.await(t, first.OperationID, 20*time.Second); got.Status != schema.StatusSucceeded {
		t.Fatalf("first: %s %s", got.Status, got.LastErrorMessage)
	}
	issued := s.sim.TokensIssued()
	// The token the client holds expires in 3 minutes by this machine's
	// clock; GitHub's, now 3.5 minutes ahead, says it has expired.
	ahead.Store(int64(3*time.Minute + 30*time.Second))
	second := s.submit(t, "after", schema.ActionComment, issue, `{"body":"second"}`)
	got := s.await(t, second.OperationID, 20*time.Second)
	// The refused call spends no attempt: GitHub refused the token, not
	// the request.
	if got.Status != schema.StatusSucceeded || got.Attempts != 1 || len(got.AttemptLog) != 2 {
		t.Fatalf("status=%s attempts=%d category=%s %s log=%+v", got.Status, got.Attempts, got.LastErrorCategory, got.LastErrorMessage, got.AttemptLog)
	}
	if a := got.AttemptLog[0]; a.HTTPStatus != 401 || a.ErrorCategory != CategoryUnauthorized {
		t.Errorf("first call %+v", a)
	}
	if n := s.sim.TokensIssued() - issued; n != 1 {
		t.Errorf("%d tokens issued for the retry, want 1", n)
	}
	if n := len(s.sim.Effects()); n != 2 {
		t.Errorf("%d effects, want 2 (one comment each)", n)
	}
}

// A token refused again after the renewal is a refusal: the run asks for a
// new token once, and the operation fails rather than spend its attempts.
func TestTokenRenewedOnce(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	// Every token is refused: the simulator's fault answers the comment
	// route with 401 whatever the token.
	if _, err := s.sim.SetFault(ghsim.Fault{Route: "POST /repos/{owner}/{repo}/issues/{number}/comments", Kind: ghsim.FaultUnauthorized}); err != nil {
		t.Fatal(err)
	}
	rec := s.submit(t, "refused", schema.ActionComment, schema.Resource{Type: "issue", ID: "octo/demo#10"}, `{"body":"x"}`,
		func(sub *schema.Submission) { sub.MaxAttempts = 5 })
	got := s.await(t, rec.OperationID, 20*time.Second)
	if got.Status != schema.StatusFailed || got.Attempts != 1 || len(got.AttemptLog) != 2 || got.LastErrorCategory != CategoryUnauthorized {
		t.Fatalf("status=%s attempts=%d category=%s log=%+v", got.Status, got.Attempts, got.LastErrorCategory, got.AttemptLog)
	}
}

// An operation of one attempt gets its token renewal too: the call GitHub
// refused for its token spends no attempt.
func TestTokenRenewedOnLastAttempt(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	if _, err := s.sim.SetFault(ghsim.Fault{Route: "POST /repos/{owner}/{repo}/issues/{number}/comments", Kind: ghsim.FaultUnauthorized, Count: 1}); err != nil {
		t.Fatal(err)
	}
	rec := s.submit(t, "one-attempt", schema.ActionComment, schema.Resource{Type: "issue", ID: "octo/demo#10"}, `{"body":"x"}`,
		func(sub *schema.Submission) { sub.MaxAttempts = 1 })
	got := s.await(t, rec.OperationID, 20*time.Second)
	if got.Status != schema.StatusSucceeded || got.Attempts != 1 || len(got.AttemptLog) != 2 {
		t.Fatalf("status=%s attempts=%d category=%s log=%+v", got.Status, got.Attempts, got.LastErrorCategory, got.AttemptLog)
	}
	if n := len(s.sim.Effects()); n != 1 {
		t.Errorf("%d effects, want 1", n)
	}
}
