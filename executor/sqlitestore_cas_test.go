package executor

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/sqlite"
	"github.com/baton-dev/baton/schema"
)

// A compare-and-swap save of a copy read before another change (here a
// cancellation requested while running, which moves the version) is
// refused with ErrStale, and changes nothing: the executor reads the
// record again rather than counting a failure. The same save made from
// the current version goes through.
func TestCompareAndSwapSaveOfAStaleCopy(t *testing.T) {
	t.Parallel()
	b := newTestStore(t)
	ctx := context.Background()
	rec, _, err := b.store.Create(ctx, newRecord(t, "alice", "cas", "hi"))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	running := rec.Clone()
	running.Status, running.StartedAt = schema.StatusRunning, &now
	if err := b.store.Save(ctx, &running); err != nil {
		t.Fatal(err)
	}
	read := running.Clone() // what a worker read
	if _, err := b.store.RequestCancel(ctx, rec.OperationID); err != nil {
		t.Fatal(err)
	}
	casSave := func(r *schema.Record, cas bool) error {
		save, err := b.store.SaveFunc(r, cas)
		if err != nil {
			return err
		}
		return b.db.Write(ctx, func(tx *sqlite.Tx) error { return save(tx) })
	}
	stale := read.Clone()
	stale.Attempts = 1
	if err := casSave(&stale, true); !errors.Is(err, ErrStale) {
		t.Fatalf("compare-and-swap save of a stale copy = %v, want ErrStale", err)
	}
	if got, _ := b.store.Get(ctx, rec.OperationID); got.Attempts != 0 || got.Version != read.Version+1 {
		t.Fatalf("after the refused save: attempts %d version %d, want 0 and %d", got.Attempts, got.Version, read.Version+1)
	}
	current, err := b.store.Get(ctx, rec.OperationID)
	if err != nil {
		t.Fatal(err)
	}
	current.Attempts = 1
	if err := casSave(&current, true); err != nil {
		t.Fatalf("compare-and-swap save of the current copy: %v", err)
	}
	if !current.CancellationRequested || current.Version != read.Version+2 {
		t.Errorf("after the save: cancellationRequested %v version %d", current.CancellationRequested, current.Version)
	}
}

// A cursor baton never returns (sequence 0 or below: seqs start at 1) is
// refused as invalid, not answered with an empty page.
func TestListRefusesCursorsBatonNeverGives(t *testing.T) {
	t.Parallel()
	b := newTestStore(t)
	ctx := context.Background()
	if _, _, err := b.store.Create(ctx, newRecord(t, "alice", "listed", "hi")); err != nil {
		t.Fatal(err)
	}
	for _, seq := range []int64{0, -1} {
		if recs, _, err := b.store.List(ctx, ListFilter{Cursor: encodeCursor(seq)}); schema.ErrorCode(err) != schema.CodeInvalidRequest {
			t.Errorf("cursor of seq %d: %d records, %v; want invalid_request", seq, len(recs), err)
		}
	}
	if recs, _, err := b.store.List(ctx, ListFilter{Cursor: encodeCursor(2)}); err != nil || len(recs) != 1 {
		t.Errorf("cursor of seq 2: %d records, %v; want the one before it", len(recs), err)
	}
}
