package executor

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/baton-dev/baton/app/ghsim"
	"github.com/baton-dev/baton/coordinator"
	"github.com/baton-dev/baton/internal/sqlite"
	"github.com/baton-dev/baton/schema"
)

// lateKeepAlive is the real coordinator with a keepalive that has not
// noticed anything yet: it neither renews nor cancels. It stands for the
// moment between a lease's local deadline passing and its keepalive
// cancelling the holder, which AssertOwned covers.
type lateKeepAlive struct{ *coordinator.Coordinator }

func (lateKeepAlive) KeepAlive(ctx context.Context, _ *coordinator.Lease) (context.Context, func()) {
	return ctx, func() {}
}

// A worker whose lease's local deadline passes while it waits for its
// turn in the installation's pace makes no call: AssertOwned, checked
// immediately before the call, stops it, although the store still holds
// its lease and its keepalive has not cancelled it. The operation is
// retried later; nothing reached GitHub.
func TestNoCallAfterTheLocalDeadline(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "baton.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	clock := coordinator.NewFakeClock(time.Now())
	coord, err := coordinator.New(coordinator.Config{DB: db, Clock: clock, SafetyMargin: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	sim, gh := newSim(t, ghsim.Config{})
	store := NewSQLiteStore(db, nil)
	exec, err := New(Config{Store: store, Dispatcher: &nudgeRecorder{}, Leases: lateKeepAlive{coord}, GitHub: gh,
		LeaseTTL: time.Minute, Pacing: PacingConfig{MinInterval: 1500 * time.Millisecond, ContentLimits: []RateWindow{}}})
	if err != nil {
		t.Fatal(err)
	}
	create := func(key string, n int) *schema.Record {
		rec, err := NewRecord("tester", schema.Submission{IdempotencyKey: key, Action: schema.ActionComment,
			Resource: issue(n), Payload: json.RawMessage(`{"body":"` + key + `"}`), InstallationID: 1}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := store.Create(ctx, rec); err != nil {
			t.Fatal(err)
		}
		return rec
	}
	first, second := create("first", 10), create("second", 11)
	if r := exec.Process(ctx, first.OperationID); r.Kind != ResultDone {
		t.Fatalf("first: %v (%v)", r, r.Err)
	}
	// The second waits about 1.5 s for its turn in the pace, holding its
	// lease. Meanwhile its local deadline (TTL − margin) passes; the
	// store's expiry does not.
	res := make(chan Result, 1)
	go func() { res <- exec.Process(ctx, second.OperationID) }()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("second operation never marked running")
		}
		if rec, err := store.Get(ctx, second.OperationID); err == nil && rec.Status == schema.StatusRunning {
			break
		}
	}
	clock.Advance(59 * time.Second)
	if r := <-res; r.Kind != ResultRetry {
		t.Fatalf("second: %v (%v), want a retry later", r, r.Err)
	}
	if is, err := sim.Issue("octo", "demo", 11); err != nil || len(is.Comments) != 0 {
		t.Fatalf("comments on #11: %+v %v: a call was made after the lease's local deadline", is.Comments, err)
	}
}
