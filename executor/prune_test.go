package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/baton-dev/baton/schema"
)

// TestPrune: only finished operations last updated before the cut go;
// unfinished ones stay whatever their age, and so do those that finished
// after the cut. A pruned key makes a new operation again.
func TestPrune(t *testing.T) {
	t.Parallel()
	b := newTestStore(t)
	ctx := context.Background()
	cut := time.Now().Add(-30 * 24 * time.Hour)
	old := cut.Add(-10 * 24 * time.Hour)

	// create makes a record created at created and moves it to status,
	// updated at updated.
	create := func(key string, created, updated time.Time, status schema.Status) *schema.Record {
		t.Helper()
		s := schema.Submission{IdempotencyKey: key, Action: schema.ActionComment,
			Resource: schema.Resource{Type: schema.ResourceIssue, ID: "octo/app#1"},
			Payload:  json.RawMessage(`{"body":"hi"}`)}
		rec, err := NewRecord("alice", s, created)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := b.store.Create(ctx, rec); err != nil {
			t.Fatal(err)
		}
		rec.Version = 1
		if status == schema.StatusQueued {
			return rec
		}
		rec.Status, rec.UpdatedAt, rec.StartedAt = schema.StatusRunning, updated, &created
		if err := b.store.Save(ctx, rec); err != nil {
			t.Fatal(err)
		}
		if status == schema.StatusRunning {
			return rec
		}
		rec.Status, rec.UpdatedAt, rec.CompletedAt, rec.Outcome = status, updated, &updated, schema.OutcomeFor(status)
		switch status {
		case schema.StatusSucceeded:
			rec.Result = json.RawMessage(`{"commentId":1}`)
		case schema.StatusFailed:
			rec.LastErrorCategory, rec.LastErrorMessage = "client_error", "refused"
		}
		if err := b.store.Save(ctx, rec); err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		return rec
	}

	var gone, kept []*schema.Record
	// Finished old operations over several chunks, with unfinished and
	// late-finished ones among them.
	const chunk = 10
	for i := range 4*chunk + 7 {
		at := old.Add(time.Duration(i) * time.Second)
		switch {
		case i%9 == 1:
			kept = append(kept, create(fmt.Sprint("queued-", i), at, at, schema.StatusQueued))
		case i%9 == 2:
			kept = append(kept, create(fmt.Sprint("running-", i), at, at, schema.StatusRunning))
		case i%9 == 3:
			kept = append(kept, create(fmt.Sprint("late-", i), at, cut.Add(time.Minute), schema.StatusSucceeded))
		default:
			status := []schema.Status{schema.StatusSucceeded, schema.StatusFailed, schema.StatusCancelled}[i%3]
			gone = append(gone, create(fmt.Sprint("old-", i), at, at.Add(time.Minute), status))
		}
	}
	// Young ones, and an old finished one numbered after a young one: the
	// walk stops at the first operation created after the cut.
	kept = append(kept, create("young", cut.Add(time.Hour), cut.Add(time.Hour), schema.StatusSucceeded))
	kept = append(kept, create("old-after-young", old, old, schema.StatusSucceeded))

	n, err := b.store.prune(ctx, cut, chunk)
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(len(gone)) {
		t.Errorf("Prune = %d, want %d", n, len(gone))
	}
	for _, rec := range gone {
		if _, err := b.store.Get(ctx, rec.OperationID); !errors.Is(err, schema.ErrNotFound) {
			t.Fatalf("%s (%s) after Prune: %v", rec.IdempotencyHash[:8], rec.Status, err)
		}
	}
	for _, rec := range kept {
		got, err := b.store.Get(ctx, rec.OperationID)
		if err != nil || got.Status != rec.Status {
			t.Fatalf("kept %s: %v, %v", rec.Status, got.Status, err)
		}
	}
	if n, err := b.store.prune(ctx, cut, chunk); err != nil || n != 0 {
		t.Errorf("second Prune = %d, %v", n, err)
	}
	// A later cut takes every finished one left (the late ones, the young
	// one and the one numbered after it); the unfinished ones still stay.
	finished := 0
	for _, rec := range kept {
		if rec.Terminal() {
			finished++
		}
	}
	if n, err := b.store.Prune(ctx, time.Now()); err != nil || n != int64(finished) || finished != 7 {
		t.Errorf("Prune of everything finished = %d, %v; want %d (7)", n, err, finished)
	}

	// The key of a pruned operation is free again: the same submission
	// makes a new queued operation, under the same ID.
	first := gone[0]
	s := schema.Submission{IdempotencyKey: "old-0", Action: schema.ActionComment,
		Resource: schema.Resource{Type: schema.ResourceIssue, ID: "octo/app#1"}, Payload: json.RawMessage(`{"body":"hi"}`)}
	again, err := NewRecord("alice", s, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	got, created, err := b.store.Create(ctx, again)
	if err != nil || !created || got.OperationID != first.OperationID || got.Status != schema.StatusQueued {
		t.Errorf("Create after Prune = %s %v %s, %v", got.OperationID, created, got.Status, err)
	}
}
