package executor

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/baton-dev/baton/app/ghsim"
	"github.com/baton-dev/baton/schema"
)

// Every call to GitHub is counted by action and result, so that retries
// show on /metrics while they happen, not only once an operation fails
// for good: an operation that succeeded on its second call counts one
// server_error and one ok.
func TestAttemptsCounted(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	s := newStack(t, stackOptions{exec: Config{Registerer: reg}})
	if _, err := s.sim.SetFault(ghsim.Fault{Route: "POST /repos/{owner}/{repo}/issues/{number}/comments",
		Kind: ghsim.FaultStatus, Status: 502, Count: 1}); err != nil {
		t.Fatal(err)
	}
	rec := s.submit(t, "attempts-1", schema.ActionComment, issue(10), `{"body":"second time lucky"}`)
	if done := s.await(t, rec.OperationID, 20*time.Second); done.Status != schema.StatusSucceeded {
		t.Fatalf("operation %s", done.Status)
	}
	for result, want := range map[string]float64{CategoryServerError: 1, "ok": 1} {
		if n := counterValue(t, reg, "baton_executor_attempts_total",
			map[string]string{"action": schema.ActionComment, "result": result}); n != want {
			t.Errorf("attempts (%s) = %v, want %v", result, n, want)
		}
	}
}
