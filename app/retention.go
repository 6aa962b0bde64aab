package app

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/baton-dev/baton/queue"
	"github.com/baton-dev/baton/schema"
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

// deadLetterSweepInterval is how often the dead letters of operations that
// are finished (or gone) are removed: a cancelled dead-lettered operation
// stops counting as waiting within it.
const deadLetterSweepInterval = time.Minute

// pruner is one kind of record startPruner deletes.
type pruner struct {
	prune   func(context.Context, time.Time) (int64, error)
	counter prometheus.Counter
	what    string // plural noun of what is counted, and the log events' stem
}

// startPruner deletes, at start and then every pruneInterval, the
// operations that finished longer than the retention ago and the lease
// histories of the keys nobody has held for as long; and, at start and
// then every deadLetterSweepInterval, whatever the retention, the dead
// letters that no longer stand for an operation waiting (pruneDeadLetters).
func (s *Server) startPruner() {
	deadLetters := pruner{func(ctx context.Context, _ time.Time) (int64, error) {
		return pruneDeadLetters(ctx, s.broker, s.store.Get)
	}, prometheus.NewCounter(prometheus.CounterOpts{Name: "baton_queue_dead_letters_removed_total",
		Help: "Dead letters removed because their operation finished (cancelled) or its record is gone."}),
		"dead_letters"}
	s.reg.MustRegister(deadLetters.counter)
	s.runPruners(deadLetterSweepInterval, 0, deadLetters)
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
	s.runPruners(pruneInterval, s.cfg.OperationRetention, pruners...)
}

// runPruners runs pruners, at start and then every interval, until the
// server stops; each deletes what is older than retention.
func (s *Server) runPruners(interval, retention time.Duration, pruners ...pruner) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			before := time.Now().Add(-retention)
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

// deadLetterPruning is what pruning dead letters needs of the queue
// (*queue.Broker).
type deadLetterPruning interface {
	DeadLetters(ctx context.Context, after uint64, limit int) ([]queue.DeadLetter, error)
	RemoveDeadLetter(ctx context.Context, seq uint64) error
}

// pruneDeadLetters deletes the dead letters that no longer stand for an
// operation waiting, and returns how many. A dead-lettered operation
// leaves the dead-letter stream when it is replayed; one cancelled instead
// (the other way out) would leave its dead letter there forever, counted
// by baton_queue_dead_letters as waiting. So a dead letter goes when its
// operation is finished (cancelled), when its record is gone (deleted
// after the retention, or never stored), or when the record belongs to a
// later operation with the same ID (made with the same key once the first
// one's record was deleted, so created at least MinOperationRetention
// after the dead letter). Such a stale dead letter would also make the
// queue's reconciler take the later operation for dead-lettered, and
// never publish it. Unfinished operations keep their dead letters: they
// wait for an operator.
func pruneDeadLetters(ctx context.Context, q deadLetterPruning, get func(context.Context, string) (schema.Record, error)) (int64, error) {
	const page = 100
	var (
		n     int64
		after uint64
	)
	for {
		dls, err := q.DeadLetters(ctx, after, page)
		if err != nil {
			return n, err
		}
		for _, dl := range dls {
			after = dl.Sequence
			rec, err := get(ctx, dl.OperationID)
			switch {
			case errors.Is(err, schema.ErrNotFound):
			case err != nil:
				return n, err
			case rec.Status.Terminal():
			case dl.Time.Before(rec.CreatedAt.Add(-MinOperationRetention)):
			default:
				continue
			}
			switch err := q.RemoveDeadLetter(ctx, dl.Sequence); {
			case errors.Is(err, queue.ErrDeadLetterNotFound): // replayed meanwhile
			case err != nil:
				return n, err
			default:
				n++
			}
		}
		if len(dls) < page {
			return n, nil
		}
	}
}
