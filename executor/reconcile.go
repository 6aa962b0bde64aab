package executor

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

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

// LeaseReleaser reads and releases a resource's lease by its fence
// (*coordinator.Coordinator).
type LeaseReleaser interface {
	LeaseChecker
	ReleaseFence(ctx context.Context, f coordinator.Fence) error
}

// ResumeOrphans re-drives, at once, the operations a previous process of
// this server was carrying out when it died (a crash, SIGKILL): records
// running whose resource lease is still held in their own name. Nothing
// of this process holds a lease yet when it is called (the caller calls it
// before its queue consumer starts, and the data directory's lock keeps
// any other process off the database), so such a lease's holder is gone:
// it is released, by its fence (owner and token), and the operation gets
// a fresh message. Without this the operation would wait for its message's
// ack wait (a minute by default) and its lease's expiry.
//
// What the dead holder may have sent is left to Process: an attempt whose
// start was saved and whose end was not is probed before anything is sent
// again, as after any crash. It returns how many operations it re-drove.
func (e *Executor) ResumeOrphans(ctx context.Context) (int, error) {
	lr, ok := e.leases.(LeaseReleaser)
	if !ok {
		return 0, nil
	}
	type orphan struct {
		id    string
		fence coordinator.Fence
	}
	// Every running record is read and its lease checked first, then the
	// orphans released: a page of the list is not held open meanwhile.
	var orphans []orphan
	f := ListFilter{Status: schema.StatusRunning, Limit: 500}
	for {
		recs, next, err := e.store.List(ctx, f)
		if err != nil {
			return 0, err
		}
		for _, rec := range recs {
			key := rec.Resource.Key()
			st, err := lr.Check(ctx, key)
			if err != nil {
				return 0, err
			}
			if st.Locked && st.Owner == rec.OperationID {
				orphans = append(orphans, orphan{rec.OperationID, coordinator.Fence{Key: key, Owner: st.Owner, Token: st.Token}})
			}
		}
		if next == "" {
			break
		}
		f.Cursor = next
	}
	n := 0
	for _, o := range orphans {
		if err := lr.ReleaseFence(ctx, o.fence); err != nil {
			if errors.Is(err, coordinator.ErrLeaseLost) {
				continue // expired and taken over meanwhile: not ours to release
			}
			return n, err
		}
		e.log.Info("lease of a previous process released; operation resumed",
			zap.String(LogEvent, "orphan_resumed"), zap.String(LogOperationID, o.id))
		e.nudge(ctx, o.id)
		n++
	}
	return n, nil
}
