package coordinator

import (
	"context"

	"go.uber.org/zap"
)

// ReconcileReport is what one Reconcile did.
type ReconcileReport struct {
	// Released are the leases force-released: expired for more than
	// DeadTTLs times their TTL, and nobody had taken them over.
	Released []Stale
	// Stale are expired leases left in place: not dead long enough yet.
	// Anyone may take them over meanwhile.
	Stale []Stale
}

// reconcileBatch bounds the leases one pass reads and the deletions one
// transaction makes.
const reconcileBatch = 500

// Reconcile force-releases leases dead for more than DeadTTLs TTLs (their
// holders crashed or hung and nobody asked for the key since), records each
// in the key's history, logs each, and reports what it released and which
// expired leases it left. Force-releasing frees no one (an expired lease
// can be taken over at once); it keeps the table to live holders and makes
// Check and the history tell the truth.
func (c *Coordinator) Reconcile(ctx context.Context) (ReconcileReport, error) {
	var rep ReconcileReport
	for {
		expired, err := c.store.Expired(ctx, reconcileBatch)
		if err != nil {
			return rep, err
		}
		var dead []Stale
		for _, st := range expired {
			if st.ExpiredFor > DeadTTLs*st.TTL {
				dead = append(dead, st)
			} else {
				rep.Stale = append(rep.Stale, st)
			}
		}
		var released []Stale
		if len(dead) > 0 {
			if released, err = c.store.ForceRelease(ctx, dead); err != nil {
				return rep, err
			}
		}
		for _, st := range released {
			c.metrics.forceReleased.Inc()
			c.log.Warn("dead lease force-released",
				zap.String(fieldEvent, eventForceReleased), zap.String(fieldLeaseKey, st.Key),
				zap.String(fieldOwner, LogOwner(st.Owner)), zap.Int64(fieldToken, st.Token),
				zap.Duration(fieldTTL, st.TTL), zap.Duration(fieldExpiredFor, st.ExpiredFor))
		}
		rep.Released = append(rep.Released, released...)
		// Expired lists leases in the order they die: only a full batch of
		// dead leases may hide more behind it.
		if len(expired) < reconcileBatch || len(dead) < len(expired) || len(released) == 0 {
			break
		}
	}
	for _, st := range rep.Stale {
		c.log.Info("expired lease not yet dead",
			zap.String(fieldEvent, eventStale), zap.String(fieldLeaseKey, st.Key),
			zap.String(fieldOwner, LogOwner(st.Owner)), zap.Int64(fieldToken, st.Token),
			zap.Duration(fieldTTL, st.TTL), zap.Duration(fieldExpiredFor, st.ExpiredFor))
	}
	return rep, nil
}

// reconcileLoop runs Reconcile every c.every, each run scheduled after the
// previous one finished.
func (c *Coordinator) reconcileLoop(ctx context.Context) {
	defer c.wg.Done()
	t := c.clock.NewTimer(c.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		rep, err := c.Reconcile(ctx)
		if err != nil && ctx.Err() == nil {
			c.log.Error("lease reconcile failed", zap.String(fieldEvent, eventReconcileError), zap.Error(err))
		} else if len(rep.Released) > 0 {
			c.log.Info("leases reconciled", zap.String(fieldEvent, eventReconciled),
				zap.Int(fieldReleased, len(rep.Released)), zap.Int(fieldStale, len(rep.Stale)))
		}
		t.Reset(c.every)
	}
}
