package app

import (
	"testing"

	"github.com/baton-dev/baton/app/ghsim"
)

// A redelivery GitHub refuses for a rate limit ends the pass: the
// deliveries left are asked for by the next pass, not each in turn
// against a GitHub that is refusing (after a long outage, thousands of
// requests refused in a row, which only prolong the limit).
func TestRecoveryStopsAtARateLimit(t *testing.T) {
	t.Parallel()
	e := newHookEnv(t, hookEnvOptions{})
	ctx := hookCtx(t)
	e.waitSettled(ctx)
	e.sim.SetWebhookFault(ghsim.WebhookFault{Count: 5}) // baton unreachable
	for _, label := range []string{"a", "b", "c", "d", "e"} {
		if err := e.sim.AddLabel("octo", "demo", 11, label, ""); err != nil {
			t.Fatal(err)
		}
	}
	e.waitSettled(ctx)
	const route = "POST /app/hook/deliveries/{delivery_id}/attempts"
	fault, err := e.sim.SetFault(ghsim.Fault{Route: route, Kind: ghsim.FaultTooManyRequests})
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewRecovery(RecoveryConfig{Ledger: e.ledger, App: e.clients.App()})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := r.Recover(ctx)
	if err == nil || len(rep.Redelivered) != 0 || rep.Failed != 5 {
		t.Fatalf("pass under a rate limit: %+v, %v", rep, err)
	}
	for _, f := range e.sim.Faults() {
		if f.ID == fault && f.Fired != 1 {
			t.Errorf("%d redeliveries sent after GitHub limited the first", f.Fired-1)
		}
	}

	e.sim.ClearFaults()
	rep, err = r.Recover(ctx)
	if err != nil || len(rep.Redelivered) != 5 {
		t.Fatalf("the next pass: %+v, %v", rep, err)
	}
	e.waitSettled(ctx)
}
