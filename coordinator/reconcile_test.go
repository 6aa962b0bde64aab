package coordinator

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Reconcile force-releases leases dead for more than three TTLs, leaves the
// live ones and the recently expired ones (reported as stale), records and
// logs each release, and leaves tokens increasing.
func TestReconcile(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	b := newBundle(t, setup{cfg: func(c *Config) { c.Registerer = reg }})
	ctx := context.Background()
	dead := mustAcquire(t, b.c, "dead", "op-dead", 10*time.Second)     // expires at 10s, dead after 40s
	mustAcquire(t, b.c, "stale", "op-stale", 20*time.Second)           // expires at 20s, dead after 80s
	mustAcquire(t, b.c, "edge", "op-edge", 5*time.Second)              // expires at 5s, dead after 20s
	live := mustAcquire(t, b.c, "live", "op-live", 15*time.Minute)     // live
	released := mustAcquire(t, b.c, "gone", "op-gone", 10*time.Second) // released, nothing to do
	if err := b.c.Release(ctx, released); err != nil {
		t.Fatal(err)
	}
	b.clock.Advance(40*time.Second + time.Microsecond)
	rep, err := b.c.Reconcile(ctx)
	if err != nil {
		t.Fatal(err)
	}
	keys := func(s []Stale) (out []string) {
		for _, st := range s {
			out = append(out, st.Key)
		}
		return out
	}
	if got := keys(rep.Released); len(got) != 2 || got[0] != "edge" || got[1] != "dead" {
		t.Fatalf("released %v, want [edge dead]", got)
	}
	if got := keys(rep.Stale); len(got) != 1 || got[0] != "stale" {
		t.Fatalf("stale %v, want [stale]", got)
	}
	if r := rep.Released[1]; r.Owner != "op-dead" || r.Token != dead.Token || r.TTL != 10*time.Second ||
		r.ExpiredFor != 30*time.Second+time.Microsecond {
		t.Errorf("released entry %+v", r)
	}
	if st := rep.Stale[0]; st.Owner != "op-stale" || st.ExpiredFor != 20*time.Second+time.Microsecond {
		t.Errorf("stale entry %+v", st)
	}
	for _, k := range []string{"dead", "edge"} {
		h, err := b.c.History(ctx, k)
		if err != nil || len(h) != 2 || h[1].Kind != EventForceReleased {
			t.Fatalf("history of %s: %+v %v", k, h, err)
		}
	}
	if n := b.logs.FilterField(stringField(fieldEvent, eventForceReleased)).Len(); n != 2 {
		t.Errorf("%d force-release log lines, want 2", n)
	}
	if n := b.logs.FilterField(stringField(fieldEvent, eventStale)).Len(); n != 1 {
		t.Errorf("%d stale log lines, want 1", n)
	}
	if v := gathered(t, reg, "baton_coordinator_force_released_total", ""); v != 2 {
		t.Errorf("force-released metric %v", v)
	}
	if v := gathered(t, reg, "baton_coordinator_acquires_total", "ok"); v != 5 {
		t.Errorf("acquires{result=ok} metric %v, want 5", v)
	}
	// The dead holder wakes up: its lease is gone.
	wantLost(t, "dead holder's renew", b.c.Renew(ctx, dead, 10*time.Second), LostNotHeld)
	if st, _ := b.c.Check(ctx, "live"); !st.Locked || st.Token != live.Token {
		t.Errorf("live lease after reconcile: %+v", st)
	}
	if l := mustAcquire(t, b.c, "dead", "op-new", time.Minute); l.Token <= live.Token || l.Preempted != nil {
		t.Errorf("acquire after force-release: token %d preempted %+v", l.Token, l.Preempted)
	}
	// Nothing more to do; the stale lease is still stale.
	if rep, err := b.c.Reconcile(ctx); err != nil || len(rep.Released) != 0 || len(rep.Stale) != 1 {
		t.Errorf("second reconcile: %+v %v", rep, err)
	}
}

// Start runs Reconcile every ReconcileInterval, each run scheduled after
// the previous one; Stop is safe before Start and twice.
func TestReconcileLoop(t *testing.T) {
	t.Parallel()
	b := newBundle(t, setup{cfg: func(c *Config) { c.ReconcileInterval = time.Minute }})
	ctx := context.Background()
	if err := b.c.Stop(ctx); err != nil { // before Start
		t.Fatal(err)
	}
	b2 := newBundle(t, setup{cfg: func(c *Config) { c.ReconcileInterval = time.Minute }})
	if err := b2.c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b2.c.Start(ctx); err == nil {
		t.Error("second Start succeeded")
	}
	mustAcquire(t, b2.c, "dead", "op", time.Second)
	waitTimersAt(t, b2.clock, epoch.Add(time.Minute))
	b2.clock.Advance(time.Minute)
	waitTimersAt(t, b2.clock, epoch.Add(2*time.Minute)) // the run finished and the next is scheduled
	if n := b2.logs.FilterField(stringField(fieldEvent, eventForceReleased)).Len(); n != 1 {
		t.Fatalf("%d force-releases by the loop, want 1", n)
	}
	if err := b2.c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b2.c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	waitTimersAt(t, b2.clock)
	if err := b2.c.Start(ctx); err == nil {
		t.Error("Start after Stop succeeded")
	}
}

// gathered returns the value of the counter name (with result=label, if
// given) from reg.
func gathered(t *testing.T, reg *prometheus.Registry, name, label string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if label == "" || len(m.GetLabel()) == 1 && m.GetLabel()[0].GetValue() == label {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}
