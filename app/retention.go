package app

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// DefaultOperationRetention is how long a finished operation's record is
// kept unless Config.OperationRetention says otherwise.
const DefaultOperationRetention = 30 * 24 * time.Hour

// MinOperationRetention is the shortest retention baton accepts: the
// idempotency key of an operation made from a webhook must outlive
// GitHub's redeliveries, which go up to three days back.
const MinOperationRetention = 72 * time.Hour

// pruneInterval is how often finished operations past the retention are
// deleted. The first prune runs as the server starts.
const pruneInterval = time.Hour

// startPruner deletes, at start and then every pruneInterval, the
// finished operations that finished longer than the retention ago.
func (s *Server) startPruner() {
	if s.cfg.OperationRetention < 0 {
		return
	}
	pruned := prometheus.NewCounter(prometheus.CounterOpts{Name: "baton_operations_pruned_total",
		Help: "Finished operations whose records were deleted after the retention (--operation-retention)."})
	s.reg.MustRegister(pruned)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(pruneInterval)
		defer t.Stop()
		for {
			before := time.Now().Add(-s.cfg.OperationRetention)
			n, err := s.store.Prune(ctx, before)
			pruned.Add(float64(n))
			switch {
			case err != nil && ctx.Err() == nil:
				s.log.Warn("pruning finished operations failed", zap.String("event", "operations_prune_failed"), zap.Error(err))
			case n > 0:
				s.log.Info("finished operations pruned", zap.String("event", "operations_pruned"),
					zap.Int64("operations", n), zap.Time("finishedBefore", before))
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	})
	s.onStop(func(context.Context) error {
		cancel()
		wg.Wait()
		return nil
	})
}
