package executor

import (
	"testing"
	"time"

	"github.com/baton-dev/baton/app/ghsim"
	"github.com/baton-dev/baton/schema"
)

const exchangeRoute = "POST /app/installations/{id}/access_tokens"

// A failed installation-token exchange (a 5xx, or no answer) means the
// call it was for was never sent: it spends no attempt — an operation of
// one attempt still makes its call — and the call is made again without a
// probe, since nothing can have been applied.
func TestExchangeFailureSpendsNoAttempt(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		fault ghsim.Fault
	}{
		{"502", ghsim.Fault{Route: exchangeRoute, Kind: ghsim.FaultStatus, Status: 502, Count: 1}},
		{"no answer", ghsim.Fault{Route: exchangeRoute, Kind: ghsim.FaultDropBefore, Count: 1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := newStack(t, stackOptions{exec: Config{BaseBackoff: 10 * time.Millisecond}})
			if _, err := s.sim.SetFault(c.fault); err != nil {
				t.Fatal(err)
			}
			got := commentOnceAfterAFailedExchange(t, s, "one-attempt")
			if a := got.AttemptLog[0]; !a.NotSent || a.Probe || (c.name == "502" && a.HTTPStatus != 502) {
				t.Errorf("the failed exchange is recorded as %+v", a)
			}
			if a := got.AttemptLog[1]; a.NotSent || a.Probe || a.ErrorCategory != "" {
				t.Errorf("the call is recorded as %+v", a)
			}
			if n := len(s.sim.Effects()); n != 1 {
				t.Errorf("%d effects, want 1", n)
			}
		})
	}
}

// An exchange that has not answered when the call's time runs out is a
// failed exchange too: go-github then returns the context's error alone,
// but no request of the call reached GitHub, so it spends no attempt and
// owes no probe.
func TestExchangeTimeoutSpendsNoAttempt(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{exec: Config{BaseBackoff: 10 * time.Millisecond}, ghTimeout: 300 * time.Millisecond})
	if _, err := s.sim.SetFault(ghsim.Fault{Route: exchangeRoute, Kind: ghsim.FaultLatency, Latency: 2 * time.Second, Count: 1}); err != nil {
		t.Fatal(err)
	}
	got := commentOnceAfterAFailedExchange(t, s, "slow-exchange")
	if a := got.AttemptLog[0]; !a.NotSent || a.Probe || a.ErrorCategory != CategoryTimeout {
		t.Errorf("the timed-out exchange is recorded as %+v", a)
	}
	if n := len(s.sim.Effects()); n != 1 {
		t.Errorf("%d effects, want 1", n)
	}
}

// A refusal that follows a failed exchange is not probed: the exchange
// sent nothing that could have been applied.
func TestExchangeFailureOwesNoProbe(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{exec: Config{BaseBackoff: 10 * time.Millisecond}})
	if _, err := s.sim.SetFault(ghsim.Fault{Route: exchangeRoute, Kind: ghsim.FaultStatus, Status: 503, Count: 1}); err != nil {
		t.Fatal(err)
	}
	// No such issue: GitHub refuses the comment with 404.
	rec := s.submit(t, "missing", schema.ActionComment, schema.Resource{Type: "issue", ID: "octo/demo#9999"}, `{"body":"x"}`)
	got := s.await(t, rec.OperationID, 20*time.Second)
	if got.Status != schema.StatusFailed || got.LastErrorCategory != CategoryNotFound || got.Attempts != 1 {
		t.Fatalf("status=%s attempts=%d category=%s %s log=%+v", got.Status, got.Attempts, got.LastErrorCategory, got.LastErrorMessage, got.AttemptLog)
	}
	for _, a := range got.AttemptLog {
		if a.Probe {
			t.Fatalf("probed after a failed exchange: %+v", got.AttemptLog)
		}
	}
}

// Exchanges that keep failing do not keep the operation going forever:
// after maxNotSent in a row it fails, having sent nothing.
func TestExchangeFailuresBounded(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{exec: Config{BaseBackoff: 10 * time.Millisecond}})
	if _, err := s.sim.SetFault(ghsim.Fault{Route: exchangeRoute, Kind: ghsim.FaultStatus, Status: 502}); err != nil {
		t.Fatal(err)
	}
	rec := s.submit(t, "down", schema.ActionComment, schema.Resource{Type: "issue", ID: "octo/demo#10"}, `{"body":"x"}`)
	got := s.await(t, rec.OperationID, 30*time.Second)
	if got.Status != schema.StatusFailed || got.LastErrorCategory != CategoryServerError || got.Attempts != 0 || len(got.AttemptLog) != maxNotSent {
		t.Fatalf("status=%s attempts=%d category=%s %s log=%+v", got.Status, got.Attempts, got.LastErrorCategory, got.LastErrorMessage, got.AttemptLog)
	}
	for _, a := range got.AttemptLog {
		if !a.NotSent || a.Probe {
			t.Fatalf("attempt log %+v", got.AttemptLog)
		}
	}
	if n := len(s.sim.Effects()); n != 0 {
		t.Errorf("%d effects, want none", n)
	}
}

// The count of failed exchanges is read from the record, so it holds
// across runs: a run that starts with failed exchanges behind it has only
// what is left of the budget, and a call that was sent ends the count.
func TestNotSentInARow(t *testing.T) {
	t.Parallel()
	ns := schema.Attempt{NotSent: true, ErrorCategory: CategoryServerError, EndedAt: time.Now()}
	sent := schema.Attempt{ErrorCategory: CategoryServerError, EndedAt: time.Now()}
	limited := schema.Attempt{NotSent: true, ErrorCategory: CategorySecondaryRateLimit, EndedAt: time.Now()}
	for _, c := range []struct {
		log       []schema.Attempt
		want      int
		ambiguous bool
	}{
		{nil, 0, false},
		{[]schema.Attempt{ns, ns}, 2, false},
		{[]schema.Attempt{ns, sent, ns}, 1, true},
		{[]schema.Attempt{sent, ns, ns}, 2, true},
		{[]schema.Attempt{ns, limited, ns}, 1, false},
	} {
		rec := &schema.Record{AttemptLog: c.log}
		if got := notSentInARow(rec); got != c.want {
			t.Errorf("%+v: %d in a row, want %d", c.log, got, c.want)
		}
		// A call never sent settles nothing about the one before it.
		if got := lastAttemptAmbiguous(rec); got != c.ambiguous {
			t.Errorf("%+v: ambiguous %v, want %v", c.log, got, c.ambiguous)
		}
	}
}

// commentOnceAfterAFailedExchange submits a comment on octo/demo#10 with
// one attempt, awaits it, and checks that it succeeded on that attempt,
// after one failed exchange: two entries in its attempt log.
func commentOnceAfterAFailedExchange(t *testing.T, s *stack, key string) schema.Record {
	t.Helper()
	rec := s.submit(t, key, schema.ActionComment, schema.Resource{Type: "issue", ID: "octo/demo#10"}, `{"body":"x"}`,
		func(sub *schema.Submission) { sub.MaxAttempts = 1 })
	got := s.await(t, rec.OperationID, 20*time.Second)
	if got.Status != schema.StatusSucceeded || got.Attempts != 1 || len(got.AttemptLog) != 2 {
		t.Fatalf("status=%s attempts=%d category=%s %s log=%+v", got.Status, got.Attempts, got.LastErrorCategory, got.LastErrorMessage, got.AttemptLog)
	}
	return got
}
