package queue

import (
	"context"
	"slices"
	"testing"
	"time"
)

// Messages deleted from the stream behind baton's back, and a dispatch that
// never happened, are published again; operations present in the stream
// or parked in the dead-letter stream are not; every operation then
// reaches the handler once.
func TestReconcilerRepublishesLostMessages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := startBroker(t, "")
	s := b.sess.Load()
	store := newFakeStore()
	now := time.Now()
	ids := opIDs("lost", 50)
	for _, id := range ids {
		store.add(id, now)
		dispatch(t, b, id)
	}
	if err := store.markDispatched(ctx, ids, now); err != nil {
		t.Fatal(err)
	}
	store.add("never-dispatched", now)
	store.add("parked", now)
	if err := s.deadLetter(ctx, "parked", 5, "poison", 1); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids[:20] {
		m, err := s.ops.GetLastMsgForSubject(ctx, OperationSubject(id))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.ops.DeleteMsg(ctx, m.Sequence); err != nil {
			t.Fatal(err)
		}
	}

	clock := now.Add(2 * time.Minute)
	r, err := NewReconciler(b, ReconcilerConfig{
		Candidates:     store.candidates,
		MarkDispatched: store.markDispatched,
		BatchSize:      16,
		Now:            func() time.Time { return clock },
	})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := r.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := ReconcileReport{Checked: 52, Present: 30, DeadLettered: 1, Republished: 21}
	if rep != want {
		t.Fatalf("first pass: %+v, want %+v", rep, want)
	}
	if got := streamMsgs(t, s.ops); got != 51 {
		t.Fatalf("stream holds %d messages, want 51 (one per operation)", got)
	}
	// Everything was marked dispatched: the same moment has no candidates.
	if rep, err := r.RunOnce(ctx); err != nil || rep.Checked != 0 {
		t.Errorf("second pass at the same time: %+v, %v", rep, err)
	}
	// Later, the waiting operations are found in place, not duplicated.
	clock = clock.Add(2 * time.Minute)
	rep, err = r.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := (ReconcileReport{Checked: 52, Present: 51, DeadLettered: 1}); rep != want {
		t.Errorf("later pass: %+v, want %+v", rep, want)
	}
	if got := streamMsgs(t, s.ops); got != 51 {
		t.Errorf("stream holds %d messages after a later pass, want 51", got)
	}

	rec := newRecorder()
	startConsumer(t, b, ConsumerConfig{Handler: func(ctx context.Context, id string) Result {
		store.finish(id)
		return rec.handle(ctx, id)
	}})
	eventually(t, 10*time.Second, "every operation handled", func() bool { return rec.seen() == 51 })
	for _, id := range append(ids, "never-dispatched") {
		if n := rec.count(id); n != 1 {
			t.Errorf("%s handled %d times, want 1", id, n)
		}
	}
	if n := rec.count("parked"); n != 0 {
		t.Errorf("the dead-lettered operation was run %d times", n)
	}
}

// Candidates may leave some out after applying the limit (the executor
// skips running operations whose worker is alive): a short batch is not
// the end, and one pass still settles every other candidate. Marks made
// during the pass do not bring candidates back within it.
func TestReconcilerPassContinuesAfterFilteredBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := startBroker(t, "")
	s := b.sess.Load()
	store := newFakeStore()
	now := time.Now()
	ids := opIDs("filtered", 100)
	busy := map[string]bool{}
	for i, id := range ids {
		store.add(id, now)
		if i%10 == 0 {
			busy[id] = true
		}
	}
	var calls int
	candidates := func(ctx context.Context, before time.Time, limit int) ([]string, error) {
		calls++
		all, err := store.candidates(ctx, before, len(ids)+1)
		if err != nil {
			return nil, err
		}
		slices.Sort(all) // the store's order: by sequence
		all = all[:min(limit, len(all))]
		return slices.DeleteFunc(all, func(id string) bool { return busy[id] }), nil
	}
	clock := now.Add(2 * time.Minute)
	r, err := NewReconciler(b, ReconcilerConfig{
		Candidates:     candidates,
		MarkDispatched: store.markDispatched,
		BatchSize:      16,
		Now: func() time.Time {
			clock = clock.Add(time.Second) // every batch sees a later time
			return clock
		},
		MinAge: time.Nanosecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := r.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := (ReconcileReport{Checked: 90, Republished: 90}); rep != want {
		t.Fatalf("one pass: %+v, want %+v (after %d Candidates calls)", rep, want, calls)
	}
	if got := streamMsgs(t, s.ops); got != 90 {
		t.Errorf("stream holds %d messages, want 90", got)
	}
	if calls > 12 {
		t.Errorf("%d Candidates calls for 100 candidates in batches of 16", calls)
	}
}

// The running reconciler publishes what was never dispatched, and leaves a
// long-waiting operation with its single message.
func TestReconcilerLoop(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "")
	s := b.sess.Load()
	store := newFakeStore()
	ids := opIDs("undispatched", 10)
	for _, id := range append(ids, "waiting") {
		store.add(id, time.Now())
	}
	rec := newRecorder()
	rec.result = func(id string, _ int) Result {
		if id == "waiting" {
			return RetryAfter(time.Hour) // its resource is held
		}
		store.finish(id)
		return Done()
	}
	startConsumer(t, b, ConsumerConfig{Handler: rec.handle})
	r, err := NewReconciler(b, ReconcilerConfig{
		Candidates:     store.candidates,
		MarkDispatched: store.markDispatched,
		Interval:       20 * time.Millisecond,
		MinAge:         time.Nanosecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "all operations handled", func() bool { return store.pending() == 1 && rec.count("waiting") == 1 })
	eventually(t, 5*time.Second, "several more passes", func() bool { return b.Stats().ReconciledPresent >= 5 })
	if got := streamMsgs(t, s.ops); got != 1 {
		t.Errorf("stream holds %d messages, want only the waiting operation's", got)
	}
	if n := rec.count("waiting"); n != 1 {
		t.Errorf("waiting operation delivered %d times, want 1", n)
	}
	if err := r.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := r.Stop(context.Background()); err != nil {
		t.Errorf("second Stop = %v", err)
	}
}
