package app

import (
	"context"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/baton-dev/baton/app/ghsim"
)

func recoveryCounter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			var sum float64
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
			return sum
		}
	}
	return 0
}

// countingHookEnv is a hookEnv whose one handler, "count", counts how
// often each delivery is handled; counts returns those counts so far.
func countingHookEnv(t *testing.T) (e *hookEnv, counts func() map[string]int) {
	t.Helper()
	var (
		mu      sync.Mutex
		handled = map[string]int{}
	)
	count := EventHandlerFunc{On: []string{"*"}, Func: func(_ context.Context, d Delivery) error {
		mu.Lock()
		handled[d.ID]++
		mu.Unlock()
		return nil
	}}
	e = newHookEnv(t, hookEnvOptions{handlers: map[string]EventHandler{"count": count}})
	return e, func() map[string]int {
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(handled)
	}
}

// Five deliveries fail at "GitHub" (baton was unreachable): recovery finds
// them, has them redelivered, and each is handled once; the deliveries
// that had succeeded are left alone.
func TestRecoveryRedeliversMissedDeliveries(t *testing.T) {
	t.Parallel()
	e, counts := countingHookEnv(t)
	ctx := hookCtx(t)
	if _, err := e.sim.AddComment("octo", "demo", 10, "before", ""); err != nil {
		t.Fatal(err)
	}
	e.waitDeliveries(ctx)
	e.sim.SetWebhookFault(ghsim.WebhookFault{Count: 5})
	for _, label := range []string{"a", "b", "c", "d", "e"} {
		if err := e.sim.AddLabel("octo", "demo", 11, label, ""); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.sim.AddComment("octo", "demo", 10, "after", ""); err != nil {
		t.Fatal(err)
	}
	e.waitSettled(ctx)
	var failed, succeeded []string
	for _, d := range e.sim.Deliveries() {
		if d.OK() {
			succeeded = append(succeeded, d.GUID)
		} else {
			failed = append(failed, d.GUID)
		}
	}
	if len(failed) != 5 || len(succeeded) != 2 {
		t.Fatalf("%d failed, %d succeeded deliveries", len(failed), len(succeeded))
	}

	reg := prometheus.NewRegistry()
	r, err := NewRecovery(RecoveryConfig{Ledger: e.ledger, App: e.clients.App(), Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	r.pageSize = 3 // page through GitHub's log with its cursor
	rep, err := r.Recover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Attempts != 7 || rep.Deliveries != 7 || rep.Failed != 5 || rep.Skipped != 0 {
		t.Errorf("report %+v", rep)
	}
	if got := slices.Sorted(slices.Values(rep.Redelivered)); !slices.Equal(got, slices.Sorted(slices.Values(failed))) {
		t.Fatalf("redelivered %v, want %v", rep.Redelivered, failed)
	}
	if n := recoveryCounter(t, reg, "baton_webhook_deliveries_recovered_total"); n != 5 {
		t.Errorf("baton_webhook_deliveries_recovered_total = %v", n)
	}
	e.waitSettled(ctx)
	for _, guid := range failed {
		rec, err := e.ledger.Get(ctx, guid)
		if err != nil || rec.State != DeliveryHandled || rec.Event != "issues" || rec.Action != "labeled" {
			t.Errorf("recovered %s: %+v, %v", guid, rec, err)
		}
	}
	// Nothing more to do; the deliveries that had succeeded were never
	// redelivered.
	rep, err = r.Recover(ctx)
	if err != nil || len(rep.Redelivered) != 0 || rep.Failed != 0 {
		t.Errorf("second pass: %+v, %v", rep, err)
	}
	for _, d := range e.sim.Deliveries() {
		if d.Redelivery && slices.Contains(succeeded, d.GUID) {
			t.Errorf("a delivery that had succeeded was redelivered: %s", d.GUID)
		}
	}
	handled := counts()
	for _, guid := range append(failed, succeeded...) {
		if handled[guid] != 1 {
			t.Errorf("delivery %s handled %d times", guid, handled[guid])
		}
	}
	if len(handled) != 7 {
		t.Errorf("%d deliveries handled, want 7", len(handled))
	}
}

// A delivery that failed at "GitHub" but is in the ledger (baton recorded
// it, and its answer was lost on the way back) is skipped: it is not
// redelivered, and is handled once.
func TestRecoverySkipsDeliveriesInTheLedger(t *testing.T) {
	t.Parallel()
	e, counts := countingHookEnv(t)
	ctx := hookCtx(t)
	e.sim.SetWebhookFault(ghsim.WebhookFault{Count: 2})
	for _, label := range []string{"a", "b"} {
		if err := e.sim.AddLabel("octo", "demo", 11, label, ""); err != nil {
			t.Fatal(err)
		}
	}
	e.waitDeliveries(ctx)
	sent := e.sim.Deliveries()
	if len(sent) != 2 || sent[0].OK() || sent[1].OK() {
		t.Fatalf("simulator deliveries: %+v", sent)
	}
	known, missed := sent[0], sent[1]
	// baton got the first after all: it is recorded under its GUID.
	if resp := e.post("s3cret", known.Event, known.GUID, known.Payload); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("recording %s: %d", known.GUID, resp.StatusCode)
	}
	e.waitSettled(ctx)

	r, err := NewRecovery(RecoveryConfig{Ledger: e.ledger, App: e.clients.App()})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := r.Recover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Failed != 2 || rep.Skipped != 1 || !slices.Equal(rep.Redelivered, []string{missed.GUID}) {
		t.Errorf("report %+v, want %s redelivered and %s skipped", rep, missed.GUID, known.GUID)
	}
	e.waitSettled(ctx)
	for _, d := range e.sim.Deliveries() {
		if d.Redelivery && d.GUID == known.GUID {
			t.Errorf("the delivery in the ledger was redelivered: %s", d.GUID)
		}
	}
	handled := counts()
	for _, guid := range []string{known.GUID, missed.GUID} {
		if handled[guid] != 1 {
			t.Errorf("delivery %s handled %d times", guid, handled[guid])
		}
	}
}

// A redelivery still in flight is not requested twice; one that keeps
// failing is requested at most MaxRedeliveries times; deliveries older
// than the window are not looked at.
func TestRecoveryRemembersAndGivesUp(t *testing.T) {
	t.Parallel()
	e := newHookEnv(t, hookEnvOptions{})
	ctx := hookCtx(t)
	e.sim.SetWebhookFault(ghsim.WebhookFault{}) // baton stays unreachable
	if err := e.sim.AddLabel("octo", "demo", 11, "x", ""); err != nil {
		t.Fatal(err)
	}
	e.waitDeliveries(ctx)
	now := time.Now()
	clock := func() time.Time { return now }
	r, err := NewRecovery(RecoveryConfig{Ledger: e.ledger, App: e.clients.App(), MaxRedeliveries: 2, RememberFor: time.Hour, Now: func() time.Time { return clock() }})
	if err != nil {
		t.Fatal(err)
	}
	pass := func() RecoveryReport {
		t.Helper()
		rep, err := r.Recover(ctx)
		if err != nil {
			t.Fatal(err)
		}
		e.waitDeliveries(ctx)
		return rep
	}
	if rep := pass(); len(rep.Redelivered) != 1 {
		t.Fatalf("first pass %+v", rep)
	}
	if rep := pass(); len(rep.Redelivered) != 0 || rep.Skipped != 1 {
		t.Errorf("requested again while remembered: %+v", rep)
	}
	now = now.Add(2 * time.Hour)
	if rep := pass(); len(rep.Redelivered) != 1 {
		t.Errorf("not requested again once forgotten: %+v", rep)
	}
	now = now.Add(2 * time.Hour)
	if rep := pass(); len(rep.Redelivered) != 0 || rep.Skipped != 1 || rep.Attempts != 3 {
		t.Errorf("requested beyond MaxRedeliveries: %+v", rep)
	}
	now = now.Add(73 * time.Hour)
	if rep := pass(); rep.Attempts != 0 {
		t.Errorf("looked at deliveries older than the window: %+v", rep)
	}
	if all := ledgerAll(t, ctx, e.ledger); len(all) != 0 {
		t.Errorf("ledger %+v", all)
	}
}

// Start runs a pass at once; Stop ends the loop.
func TestRecoveryStartStop(t *testing.T) {
	t.Parallel()
	e := newHookEnv(t, hookEnvOptions{})
	ctx := hookCtx(t)
	e.sim.SetWebhookFault(ghsim.WebhookFault{Count: 1})
	if err := e.sim.AddLabel("octo", "demo", 11, "x", ""); err != nil {
		t.Fatal(err)
	}
	e.waitDeliveries(ctx)
	guid := e.sim.Deliveries()[0].GUID
	r, err := NewRecovery(RecoveryConfig{Ledger: e.ledger, App: e.clients.App()})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	hookEventually(t, ctx, "the missed delivery recovered at start", func() bool {
		rec, err := e.ledger.Get(ctx, guid)
		return err == nil && rec.State == DeliveryHandled
	})
	for range 2 {
		if err := r.Stop(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if r.Start(ctx) == nil {
		t.Error("Start after Stop accepted")
	}
	if _, err := NewRecovery(RecoveryConfig{Ledger: e.ledger}); err == nil {
		t.Error("no App client accepted")
	}
}

// The recovered counter counts deliveries GitHub could not make, and its
// help and the operator's list of metrics say so: an operator must not
// read it as the deliveries baton's handlers failed (state="failed" of
// baton_webhook_deliveries_handled_total).
func TestRecoveredMetricSaysMissedNotFailed(t *testing.T) {
	t.Parallel()
	e := newHookEnv(t, hookEnvOptions{})
	reg := prometheus.NewRegistry()
	if _, err := NewRecovery(RecoveryConfig{Ledger: e.ledger, App: e.clients.App(), Registerer: reg}); err != nil {
		t.Fatal(err)
	}
	const name = "baton_webhook_deliveries_recovered_total"
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var help string
	for _, mf := range mfs {
		if mf.GetName() == name {
			help = mf.GetHelp()
		}
	}
	doc, err := os.ReadFile(filepath.Join("..", "deploy", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var row string
	for line := range strings.Lines(string(doc)) {
		if strings.HasPrefix(line, "| `"+name+"`") {
			row = line
		}
	}
	for what, text := range map[string]string{"help": help, "deploy/README.md": row} {
		if !strings.Contains(text, "GitHub could not deliver") || strings.Contains(text, "had failed") || strings.Contains(text, "failed deliveries") {
			t.Errorf("%s of %s = %q: want the deliveries GitHub could not deliver, not failed ones", what, name, text)
		}
	}
}
