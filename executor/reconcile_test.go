package executor

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/baton-dev/baton/app/ghsim"
	"github.com/baton-dev/baton/queue"
	"github.com/baton-dev/baton/schema"
)

// Running operations whose worker is alive are left out of the
// reconciler's candidates without hiding the others: with more of them
// than a batch at the front of the store's order, one pass still
// publishes every lost operation behind them, and a running operation
// whose worker is gone.
func TestDispatchCandidatesSkipsLiveWorkers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStack(t, stackOptions{})
	down, err := New(Config{Store: s.store, Dispatcher: failingDispatcher{}})
	if err != nil {
		t.Fatal(err)
	}
	submit := func(key string, n int) schema.Record {
		t.Helper()
		if _, err := s.sim.AddIssue("octo", "demo", ghsim.NewIssue{Number: n, Title: key}); err != nil {
			t.Fatal(err)
		}
		rec, _, err := down.Submit(ctx, "tester", schema.Submission{IdempotencyKey: key, Action: schema.ActionComment,
			Resource: issue(n), Payload: json.RawMessage(`{"body":"found"}`), InstallationID: 1})
		if err != nil {
			t.Fatal(err)
		}
		return rec
	}
	markRunning := func(rec schema.Record) {
		t.Helper()
		now := time.Now()
		rec.Status, rec.StartedAt, rec.UpdatedAt = schema.StatusRunning, &now, now
		if err := s.store.Save(ctx, &rec); err != nil {
			t.Fatal(err)
		}
	}
	const batch = 4
	busy := map[string]bool{}
	for i := 0; i < 2*batch+1; i++ { // first in the store's order
		rec := submit("busy-"+itoa(i), 200+i)
		markRunning(rec)
		if _, err := s.coord.Acquire(ctx, rec.Resource.Key(), rec.OperationID, 15*time.Minute); err != nil {
			t.Fatal(err)
		}
		busy[rec.OperationID] = true
	}
	orphan := submit("orphan", 300) // running, its worker gone
	markRunning(orphan)
	want := map[string]bool{orphan.OperationID: true}
	for i := 0; i < 3*batch+2; i++ {
		want[submit("lost-"+itoa(i), 400+i).OperationID] = true
	}

	ids, err := s.exec.DispatchCandidates(ctx, time.Now(), batch)
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != batch {
		t.Fatalf("DispatchCandidates returned %d candidates, want a full batch of %d", len(ids), batch)
	}
	for _, id := range ids {
		if busy[id] {
			t.Errorf("candidate %s is running with a live worker", id)
		}
	}

	r, err := queue.NewReconciler(s.broker, queue.ReconcilerConfig{
		Candidates: s.exec.DispatchCandidates, MarkDispatched: s.exec.MarkDispatched,
		MinAge: time.Nanosecond, Interval: time.Hour, BatchSize: batch,
	})
	if err != nil {
		t.Fatal(err)
	}
	report, err := r.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if w := (queue.ReconcileReport{Checked: len(want), Republished: len(want)}); report != w {
		t.Fatalf("one pass: %+v, want %+v", report, w)
	}
	for id := range want {
		if got := s.await(t, id, 30*time.Second); got.Status != schema.StatusSucceeded {
			t.Errorf("%s: %s", id, got.Status)
		}
	}
	for id := range busy {
		if rec, err := s.store.Get(ctx, id); err != nil || rec.Status != schema.StatusRunning {
			t.Errorf("busy %s: %s, %v", id, rec.Status, err)
		}
	}
}

// A limit of zero or less asks for nothing (and must not loop or panic).
func TestDispatchCandidatesNoLimit(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	for _, limit := range []int{0, -1} {
		ids, err := s.exec.DispatchCandidates(context.Background(), time.Now(), limit)
		if err != nil || len(ids) != 0 {
			t.Errorf("limit %d: %v, %v", limit, ids, err)
		}
	}
}
