package app

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/baton-dev/baton/app/ghsim"
)

// A delivery baton gave up on is handled again when it is redelivered from
// GitHub (the App's "Recent Deliveries", or the API): that is how an
// operator, the cause mended, has GitHub's event acted on. A redelivery of
// a handled delivery is still only counted.
func TestRedeliveryOfAFailedDeliveryIsHandledAgain(t *testing.T) {
	t.Parallel()
	ctx := hookCtx(t)
	var broken atomic.Bool
	broken.Store(true)
	var runs atomic.Int64
	h := EventHandlerFunc{On: []string{"pull_request"}, Func: func(ctx context.Context, d Delivery) error {
		runs.Add(1)
		if broken.Load() {
			return Permanent(errors.New("the handler cannot do it yet"))
		}
		return nil
	}}
	e := newHookEnv(t, hookEnvOptions{handlers: map[string]EventHandler{"picky": h}})
	e.waitSettled(ctx)
	if err := e.sim.AddLabel("octo", "demo", 1, "bug", "monalisa"); err != nil {
		t.Fatal(err)
	}
	e.waitSettled(ctx)
	var first ghsim.Delivery
	for _, d := range e.sim.Deliveries() {
		if d.Event == "pull_request" {
			first = d
		}
	}
	if first.GUID == "" {
		t.Fatal("no pull_request delivery")
	}
	if rec := waitLedgerState(t, ctx, e.ledger, first.GUID, DeliveryFailed); rec.Attempts != 0 || runs.Load() != 1 {
		t.Fatalf("before the redelivery: %+v, %d runs", rec, runs.Load())
	}

	broken.Store(false) // mended
	if err := e.sim.Redeliver(first.ID); err != nil {
		t.Fatal(err)
	}
	e.waitSettled(ctx)
	rec := waitLedgerState(t, ctx, e.ledger, first.GUID, DeliveryHandled)
	if runs.Load() != 2 || rec.Redeliveries != 1 || rec.Outcome["picky"] != outcomeHandled {
		t.Fatalf("after the redelivery: %+v, %d runs", rec, runs.Load())
	}
	last := e.sim.Deliveries()
	if d := last[len(last)-1]; d.GUID != first.GUID || d.StatusCode != http.StatusAccepted {
		t.Errorf("the redelivery was answered %d (%s), not 202", d.StatusCode, d.ResponseBody)
	}

	// Handled now: another redelivery is a duplicate, and nothing runs.
	if err := e.sim.Redeliver(first.ID); err != nil {
		t.Fatal(err)
	}
	e.waitSettled(ctx)
	last = e.sim.Deliveries()
	if d := last[len(last)-1]; d.StatusCode != http.StatusOK || runs.Load() != 2 {
		t.Errorf("a redelivery of a handled delivery: %d, %d runs", d.StatusCode, runs.Load())
	}
}

func waitLedgerState(t *testing.T, ctx context.Context, l *DeliveryLedger, id string, want DeliveryState) DeliveryRecord {
	t.Helper()
	var rec DeliveryRecord
	hookEventually(t, ctx, "delivery "+id+" "+string(want), func() bool {
		var err error
		rec, err = l.Get(ctx, id)
		return err == nil && rec.State == want
	})
	return rec
}
