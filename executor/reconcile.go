package executor

import (
	"context"
	"time"

	"github.com/baton-dev/baton/coordinator"
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
func (e *Executor) DispatchCandidates(ctx context.Context, before time.Time, limit int) ([]string, error) {
	ids, err := e.store.Undispatched(ctx, before, limit)
	if err != nil {
		return nil, err
	}
	lc, ok := e.leases.(LeaseChecker)
	if !ok {
		return ids, nil
	}
	out := ids[:0]
	for _, id := range ids {
		rec, err := e.store.Get(ctx, id)
		if err != nil {
			return nil, err
		}
		if rec.Terminal() {
			continue
		}
		if rec.Status == "running" {
			st, err := lc.Check(ctx, rec.Resource.Key())
			if err != nil {
				return nil, err
			}
			if st.Locked && st.Owner == rec.OperationID {
				continue // its worker is alive
			}
		}
		out = append(out, id)
	}
	return out, nil
}

// MarkDispatched records that the queue holds these operations (the
// reconciler's counterpart of the marks Submit makes).
func (e *Executor) MarkDispatched(ctx context.Context, ids []string, at time.Time) error {
	return e.store.MarkDispatched(ctx, ids, at)
}
