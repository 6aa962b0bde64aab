package executor

import (
	"context"
	"time"

	"github.com/baton-dev/baton/coordinator"
	"github.com/baton-dev/baton/schema"
)

// LeaseChecker reads a resource's lease (*coordinator.Coordinator).
type LeaseChecker interface {
	Check(ctx context.Context, key string) (coordinator.Status, error)
}

// DispatchCandidates lists, for the queue's reconciler, the operations
// that may need publishing again: queued ones, and running ones whose
// worker is gone (no live lease held by the operation), last dispatched
// before the given time or never. The reconciler asks the stream before
// publishing, so a candidate whose message is only waiting is left alone.
//
// Running operations whose worker is alive are left out, and do not take
// the place of others: the store is read again with a larger limit until
// limit candidates are found or the store has no more, so fewer than
// limit means there are no more.
func (e *Executor) DispatchCandidates(ctx context.Context, before time.Time, limit int) ([]string, error) {
	if limit <= 0 {
		return nil, nil
	}
	lc, ok := e.leases.(LeaseChecker)
	if !ok {
		return e.store.Undispatched(ctx, before, limit)
	}
	out := make([]string, 0, limit)
	seen := make(map[string]bool)
	for n := limit; ; n *= 2 {
		ids, err := e.store.Undispatched(ctx, before, n)
		if err != nil {
			return nil, err
		}
		for _, id := range ids {
			if seen[id] {
				continue
			}
			seen[id] = true
			want, err := e.needsDispatch(ctx, lc, id)
			if err != nil {
				return nil, err
			}
			if !want {
				continue
			}
			if out = append(out, id); len(out) == limit {
				return out, nil
			}
		}
		if len(ids) < n {
			return out, nil
		}
	}
}

// needsDispatch says whether the operation is unfinished and not held by
// a live worker.
func (e *Executor) needsDispatch(ctx context.Context, lc LeaseChecker, id string) (bool, error) {
	rec, err := e.store.Get(ctx, id)
	if err != nil {
		return false, err
	}
	if rec.Terminal() {
		return false, nil
	}
	if rec.Status == schema.StatusRunning {
		st, err := lc.Check(ctx, rec.Resource.Key())
		if err != nil {
			return false, err
		}
		if st.Locked && st.Owner == rec.OperationID {
			return false, nil // its worker is alive
		}
	}
	return true, nil
}

// MarkDispatched records that the queue holds these operations (the
// reconciler's counterpart of the marks Submit makes).
func (e *Executor) MarkDispatched(ctx context.Context, ids []string, at time.Time) error {
	return e.store.MarkDispatched(ctx, ids, at)
}
