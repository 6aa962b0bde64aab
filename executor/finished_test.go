package executor

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-dev/baton/schema"
)

// countingStore counts the records read through Get.
type countingStore struct {
	*SQLiteStore
	gets atomic.Int64
}

func (c *countingStore) Get(ctx context.Context, id string) (schema.Record, error) {
	c.gets.Add(1)
	return c.SQLiteStore.Get(ctx, id)
}

// newCountingExecutor is an executor of s's parts (a process of baton)
// whose store counts its reads, and the number of records it reported
// finished.
func newCountingExecutor(t *testing.T, s *stack) (*Executor, *countingStore, *atomic.Int64) {
	t.Helper()
	store := &countingStore{SQLiteStore: NewSQLiteStore(s.db, nil)}
	var finished atomic.Int64
	e, err := New(Config{Store: store, Dispatcher: s.broker, Leases: s.coord, GitHub: s.gh,
		Pacing:     PacingConfig{Disabled: true},
		OnFinished: func(schema.Record) { finished.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	return e, store, &finished
}

// createUndispatched stores an operation without publishing it, so that
// only the test's calls of Process carry it out.
func createUndispatched(t *testing.T, s *stack, key string, res schema.Resource) schema.Record {
	t.Helper()
	rec, err := NewRecord("tester", schema.Submission{IdempotencyKey: key, Action: schema.ActionComment,
		Resource: res, Payload: json.RawMessage(`{"body":"once"}`), InstallationID: 1}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	stored, created, err := s.store.Create(context.Background(), rec)
	if err != nil || !created {
		t.Fatalf("create: %v (created %v)", err, created)
	}
	return stored
}

func commentsOn(t *testing.T, s *stack, n int) int {
	t.Helper()
	is, err := s.sim.Issue("octo", "demo", n)
	if err != nil {
		t.Fatal(err)
	}
	return len(is.Comments)
}

// redeliveryReads delivers id to e again, which must acknowledge it, and
// returns how many records that read from store.
func redeliveryReads(t *testing.T, e *Executor, store *countingStore, id string) int64 {
	t.Helper()
	reads := store.gets.Load()
	if r := e.Process(context.Background(), id); r.Kind != ResultDone {
		t.Fatalf("redelivery: %v (%v), want done", r, r.Err)
	}
	return store.gets.Load() - reads
}

// A delivery of an operation this executor finished (its own message,
// after a handoff carried it out) is acknowledged without reading the
// store, and changes nothing: no call, no second OnFinished. After a
// restart (nothing remembered) the delivery reads the record and finds it
// terminal; after the record was pruned and its key made a new operation
// of the same ID, the delivery carries the new one out.
func TestRedeliveryOfFinishedOperationReadsNoRecord(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	ctx := context.Background()
	e, store, finished := newCountingExecutor(t, s)
	rec := createUndispatched(t, s, "finished-once", issue(11))

	if r := e.Process(ctx, rec.OperationID); r.Kind != ResultDone {
		t.Fatalf("Process: %v (%v)", r, r.Err)
	}
	if got := s.await(t, rec.OperationID, 10*time.Second); got.Status != schema.StatusSucceeded {
		t.Fatalf("status %s, want succeeded", got.Status)
	}
	if n := redeliveryReads(t, e, store, rec.OperationID); n != 0 {
		t.Errorf("the redelivery of a finished operation read the store %d times, want none", n)
	}
	if n := finished.Load(); n != 1 {
		t.Errorf("OnFinished called %d times, want once", n)
	}

	// Restarted: the process remembers nothing, and the store says
	// terminal.
	e2, store2, finished2 := newCountingExecutor(t, s)
	if n := redeliveryReads(t, e2, store2, rec.OperationID); n != 1 {
		t.Errorf("the redelivery after a restart read the store %d times, want once", n)
	}
	if n := finished2.Load(); n != 0 {
		t.Errorf("OnFinished called %d times after the restart, want never", n)
	}
	if n := commentsOn(t, s, 11); n != 1 {
		t.Fatalf("%d comments on #11, want 1", n)
	}

	// Pruned (by another store on the database, as package app does),
	// and made again with the same key: the same ID, a new operation.
	if n, err := s.store.Prune(ctx, time.Now().Add(time.Hour)); err != nil || n != 1 {
		t.Fatalf("prune: %d, %v; want 1 deleted", n, err)
	}
	again := createUndispatched(t, s, "finished-once", issue(11))
	if again.OperationID != rec.OperationID {
		t.Fatal("the key made another ID")
	}
	if r := e.Process(ctx, again.OperationID); r.Kind != ResultDone {
		t.Fatalf("Process of the new operation: %v (%v)", r, r.Err)
	}
	if got := s.await(t, again.OperationID, 10*time.Second); got.Status != schema.StatusSucceeded {
		t.Fatalf("new operation: status %s, want succeeded", got.Status)
	}
	if n := commentsOn(t, s, 11); n != 2 {
		t.Errorf("%d comments on #11, want 2: the new operation of the pruned one's ID was not carried out", n)
	}
}

// A queued operation this executor cancelled is, like one it carried
// out, acknowledged without a read when its message comes.
func TestRedeliveryOfCancelledOperationReadsNoRecord(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	ctx := context.Background()
	e, store, finished := newCountingExecutor(t, s)
	rec := createUndispatched(t, s, "cancelled-queued", issue(12))
	if got, err := e.Cancel(ctx, rec.OperationID); err != nil || got.Status != schema.StatusCancelled {
		t.Fatalf("cancel: %v, %v", got.Status, err)
	}
	if n := redeliveryReads(t, e, store, rec.OperationID); n != 0 {
		t.Errorf("the delivery of a cancelled operation read the store %d times, want none", n)
	}
	if n := finished.Load(); n != 1 {
		t.Errorf("OnFinished called %d times, want once (by Cancel)", n)
	}
	if n := commentsOn(t, s, 12); n != 0 {
		t.Errorf("%d comments on #12, want none", n)
	}
}

// The set forgets the oldest beyond its size and every entry after its
// time.
func TestFinishedSetBounds(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_000_000, 0)
	var epoch uint64
	s := &finishedSet{now: func() time.Time { return now }, prunes: func() uint64 { return epoch },
		until: map[string]time.Time{}, ring: make([]string, 3)}
	for _, id := range []string{"a", "b", "c", "d"} {
		s.add(id, s.mark())
	}
	if s.has("a") || !s.has("b") || !s.has("d") || len(s.until) != 3 {
		t.Errorf("after 4 adds to a set of 3: a %v, b %v, d %v, %d held", s.has("a"), s.has("b"), s.has("d"), len(s.until))
	}
	now = now.Add(finishedSetTTL)
	if s.has("d") {
		t.Error("an entry outlived finishedSetTTL")
	}
	now = now.Add(-time.Second)
	m := s.mark()
	epoch++ // a prune deleted records while "e" was being saved
	s.add("e", m)
	if s.has("e") || s.has("d") {
		t.Error("the set kept entries across a prune")
	}
}

// The operation a handoff carries out next is read with the lookup that
// finds it: the worker reads each record once.
func TestHandoffReadsTheNextRecordOnce(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	ctx := context.Background()
	e, store, finished := newCountingExecutor(t, s)
	first := createUndispatched(t, s, "handoff-1", issue(10))
	second := createUndispatched(t, s, "handoff-2", issue(10))
	if r := e.Process(ctx, first.OperationID); r.Kind != ResultDone {
		t.Fatalf("Process: %v (%v)", r, r.Err)
	}
	if got := s.await(t, second.OperationID, 10*time.Second); got.Status != schema.StatusSucceeded {
		t.Fatalf("the second operation: status %s, want succeeded by the handoff", got.Status)
	}
	if n := finished.Load(); n != 2 {
		t.Errorf("%d operations finished, want 2", n)
	}
	if n := store.gets.Load(); n != 1 {
		t.Errorf("the worker read records %d times, want once (the first operation's)", n)
	}
}
