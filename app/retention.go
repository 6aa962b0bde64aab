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

// pruner is one kind of record startPruner deletes.
type pruner struct {
	prune   func(context.Context, time.Time) (int64, error)
	counter prometheus.Counter
	what    string // plural noun of what is counted, and the log events' stem
}

// startPruner deletes, at start and then every pruneInterval, the
// operations that finished longer than the retention ago, and the lease
// histories of the keys nobody has held for as long.
func (s *Server) startPruner() {
	if s.cfg.OperationRetention < 0 {
		return
	}
	pruners := []pruner{
		{s.store.Prune, prometheus.NewCounter(prometheus.CounterOpts{Name: "baton_operations_pruned_total",
			Help: "Finished operations whose records were deleted after the retention (--operation-retention)."}),
			"operations"},
		// The leases of resources nobody has worked on for as long.
		{s.coord.PruneHistory, prometheus.NewCounter(prometheus.CounterOpts{Name: "baton_lease_histories_pruned_total",
			Help: "Lease keys whose history was deleted, nobody having held them for the retention (--operation-retention)."}),
			"lease_histories"},
	}
	for _, p := range pruners {
		s.reg.MustRegister(p.counter)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(pruneInterval)
		defer t.Stop()
		for {
			before := time.Now().Add(-s.cfg.OperationRetention)
			for _, p := range pruners {
				n, err := p.prune(ctx, before)
				p.counter.Add(float64(n))
				switch {
				case err != nil && ctx.Err() == nil:
					s.log.Warn("pruning failed", zap.String("event", p.what+"_prune_failed"), zap.Error(err))
				case n > 0:
					s.log.Info("pruned", zap.String("event", p.what+"_pruned"), zap.Int64(p.what, n), zap.Time("before", before))
				}
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
