package mergequeue

import (
	"context"
	"errors"
	"sync"

	"go.uber.org/zap"

	"github.com/baton-dev/baton/internal/lifecycle"
)

// Queue is the merge queue of every repository baton is installed on. It
// is safe for concurrent use.
type Queue struct {
	cfg     Config
	log     *zap.Logger
	metrics *metrics

	fin *finisher

	// protectionWarned holds the "repository key@base" of the bases whose
	// protection this process was refused, and "strict:repository
	// key@base" of those whose protection requires up-to-date branches, so
	// that each warning is logged once per base, not on every run.
	protectionWarned sync.Map

	mu      sync.Mutex
	started bool
	stopped bool
	ctx     context.Context // of the background work, once started
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// New validates cfg and returns a queue. Call Start to run the reconcile
// loop and apply operations' outcomes, Stop when done.
func New(cfg Config) (*Queue, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	q := &Queue{cfg: cfg, log: cfg.Logger.With(zap.String(logSubsystem, "mergequeue")), metrics: m}
	q.fin = newFinisher(q)
	return q, nil
}

// Start starts the reconcile loop (a pass at once, then every
// ReconcileInterval) and the application of finished operations, and
// returns once they run. It fails if the queue was started or stopped
// before.
func (q *Queue) Start(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	q.mu.Lock()
	if q.started || q.stopped {
		q.mu.Unlock()
		return errors.New("mergequeue: Start called twice or after Stop")
	}
	q.started = true
	q.ctx, q.cancel = context.WithCancel(context.WithoutCancel(ctx))
	loopCtx := q.ctx
	q.wg.Add(1)
	go func() {
		defer q.wg.Done()
		q.reconcileLoop(loopCtx)
	}()
	q.mu.Unlock()
	q.fin.start() // after q.mu: the finisher takes its lock, then q.mu
	q.log.Info("merge queue started", zap.String(logEvent, "mergequeue.started"))
	return nil
}

// Stop stops the background work and waits for it, or returns ctx's error
// if ctx ends first. Outcomes of operations not yet applied are left to
// the next reconcile (the pull_request webhooks and the operation records
// tell it what happened). Stop is safe before Start and safe twice.
func (q *Queue) Stop(ctx context.Context) error {
	q.mu.Lock()
	q.stopped = true
	if q.cancel != nil {
		q.cancel()
	}
	q.mu.Unlock()
	return lifecycle.Wait(ctx, &q.wg)
}

// goBackground runs fn on a goroutine the queue owns, if it runs; it
// reports false when the queue is not running.
func (q *Queue) goBackground(fn func(ctx context.Context)) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.started || q.stopped {
		return false
	}
	ctx := q.ctx
	q.wg.Add(1)
	go func() {
		defer q.wg.Done()
		fn(ctx)
	}()
	return true
}
