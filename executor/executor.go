package executor

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/baton-dev/baton/schema"
)

// Dispatcher hands an operation to the queue. Dispatch returns once the
// queue has durably accepted the operation ID. Package queue implements it.
type Dispatcher interface {
	Dispatch(ctx context.Context, operationID string) error
}

// The bounds of Config.LeaseTTL, the TTL of an operation's resource lease
// (at most 5 minutes, DESIGN.md; at least long enough to renew at TTL/3).
const (
	MinLeaseTTL = 3 * time.Second
	MaxLeaseTTL = 5 * time.Minute
)

// Config configures an Executor.
type Config struct {
	// Store keeps the records. Required.
	Store Store
	// Dispatcher publishes new operations. Required.
	Dispatcher Dispatcher
	// Now is the clock of records' timestamps. Defaults to time.Now.
	Now func() time.Time
	// Logger receives the executor's events. Defaults to zap.NewNop().
	Logger *zap.Logger
	// MarkInterval is how long dispatched IDs wait to be marked in the
	// store, so that many marks share one write. Defaults to 20ms.
	MarkInterval time.Duration

	// The rest is needed by Process only.

	// Leases is the resource lease coordinator (*coordinator.Coordinator).
	Leases Leases
	// GitHub makes the installations' clients.
	GitHub *GitHubClients
	// Installations resolves repositories to installations and says when
	// baton may no longer act on one. nil trusts the record's
	// installationId.
	Installations InstallationResolver
	// LeaseTTL is the TTL of the resource lease an operation holds (kept
	// alive while it runs). Defaults to 30s; at most 5 minutes. The queue's
	// ack wait must exceed it.
	LeaseTTL time.Duration
	// BusyDelay is when an operation whose resource is busy (its lease
	// held) is tried again. Defaults to 1s.
	BusyDelay time.Duration
	// OrderDelay is when an operation that waits for an older unfinished
	// operation on its resource is delivered again, at the latest: the
	// worker that finishes the older one hands the resource over to it
	// (see HandoffLimit), so the delay only matters when that worker is
	// gone. Long delays keep waiting operations from crowding the queue's
	// redeliveries. Defaults to 30s.
	OrderDelay time.Duration
	// HandoffLimit is how many of a resource's next operations a worker
	// carries out, one after the other, after finishing one. Defaults to
	// 1000; negative means none: the worker only sends the next one a
	// fresh message (as it does when a chain reaches the limit), so that
	// it need not wait out OrderDelay.
	HandoffLimit int
	// HandoffTime bounds the time a worker spends on such a chain.
	// Defaults to 30s.
	HandoffTime time.Duration
	// BaseBackoff is the delay before the second attempt; it doubles with
	// each further attempt (with jitter). Defaults to 250ms.
	BaseBackoff time.Duration
	// MaxBackoff caps the delay between attempts. Defaults to 30s.
	MaxBackoff time.Duration
	// MaxInlineWait is the longest wait GitHub may impose that a worker
	// sleeps through holding the operation; a longer one sends the
	// operation back to the queue, spending no attempt. Defaults to 30s.
	MaxInlineWait time.Duration
	// CancelPoll is how often a waiting operation reads its record for a
	// cancellation requested in another process. Defaults to 1s.
	CancelPoll time.Duration
	// LocalWait is the longest an operation waits in memory for an
	// operation of this process that holds its resource (or must run
	// before it) to finish, before it goes back to the queue instead.
	// Defaults to 2s.
	LocalWait time.Duration
	// Pacing shapes the mutating requests of each installation.
	Pacing PacingConfig
	// Registerer receives the executor's metrics (baton_executor_*). nil
	// registers none.
	Registerer prometheus.Registerer
	// OnFinished, if set, is called with every record Process makes
	// terminal, after it is saved, and with every queued record Cancel
	// makes cancelled. It runs on the worker (or the caller of Cancel): it
	// must return quickly (hand the record to a goroutine of its own for
	// real work).
	// Features built on operations (the merge queue) learn outcomes here.
	OnFinished func(schema.Record)
}

// Executor accepts operations (Submit), cancels them (Cancel), reports
// them (Get, List) and carries them out (Process).
type Executor struct {
	cfg        Config
	store      Store
	writer     RecordWriter
	dispatcher Dispatcher
	leases     Leases
	gh         *GitHubClients
	installs   InstallationResolver
	now        func() time.Time
	log        *zap.Logger
	marks      *marker
	pauses     *pauses
	pacer      *pacer
	cancels    cancelSignals
	nudger     Nudger
	turns      turnstile
	metrics    *metrics
	terminal   *finishedSet // the operations this executor made terminal
}

// New validates cfg and returns an Executor. Call Start before Submit and
// Stop when done.
func New(cfg Config) (*Executor, error) {
	if cfg.Store == nil {
		return nil, errors.New("executor: Config.Store is required")
	}
	if cfg.Dispatcher == nil {
		return nil, errors.New("executor: Config.Dispatcher is required")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	cfg.MarkInterval = cmp.Or(cfg.MarkInterval, 20*time.Millisecond)
	cfg.LeaseTTL = cmp.Or(cfg.LeaseTTL, 30*time.Second)
	if cfg.LeaseTTL < MinLeaseTTL || cfg.LeaseTTL > MaxLeaseTTL {
		return nil, fmt.Errorf("executor: LeaseTTL %v is outside %v–%v", cfg.LeaseTTL, MinLeaseTTL, MaxLeaseTTL)
	}
	cfg.BusyDelay = cmp.Or(cfg.BusyDelay, time.Second)
	cfg.OrderDelay = cmp.Or(cfg.OrderDelay, 30*time.Second)
	cfg.HandoffLimit = cmp.Or(cfg.HandoffLimit, 1000)
	cfg.HandoffTime = cmp.Or(cfg.HandoffTime, 30*time.Second)
	cfg.BaseBackoff = cmp.Or(cfg.BaseBackoff, 250*time.Millisecond)
	cfg.MaxBackoff = cmp.Or(cfg.MaxBackoff, 30*time.Second)
	cfg.MaxInlineWait = cmp.Or(cfg.MaxInlineWait, 30*time.Second)
	cfg.CancelPoll = cmp.Or(cfg.CancelPoll, time.Second)
	cfg.LocalWait = cmp.Or(cfg.LocalWait, 2*time.Second)
	if cfg.BusyDelay < 0 || cfg.BaseBackoff <= 0 || cfg.MaxBackoff < cfg.BaseBackoff || cfg.MaxInlineWait < 0 || cfg.CancelPoll <= 0 {
		return nil, errors.New("executor: delays must be positive and MaxBackoff at least BaseBackoff")
	}
	cfg.Pacing.fill()
	log := cfg.Logger.With(zap.String(LogSubsystem, "executor"))
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	e := &Executor{
		cfg:        cfg,
		store:      cfg.Store,
		dispatcher: cfg.Dispatcher,
		leases:     cfg.Leases,
		gh:         cfg.GitHub,
		installs:   cfg.Installations,
		now:        cfg.Now,
		log:        log,
		marks:      newMarker(cfg.Store, cfg.MarkInterval, cfg.Now, log),
		pauses:     newPauses(),
		pacer:      newPacer(cfg.Pacing, cfg.Now),
		metrics:    m,
		terminal:   newFinishedSet(cfg.Store, cfg.Now),
	}
	e.writer, _ = cfg.Store.(RecordWriter)
	e.nudger, _ = cfg.Dispatcher.(Nudger)
	return e, nil
}

// Start starts the executor's background work and returns once it runs.
func (e *Executor) Start(ctx context.Context) error {
	e.marks.start()
	return nil
}

// Stop flushes pending bookkeeping and stops the background work, waiting
// at most until ctx ends. It is safe before Start and safe twice.
func (e *Executor) Stop(ctx context.Context) error {
	return e.marks.stop(ctx)
}

// Submit turns what actor asked for into an operation. A new operation is
// stored (durably) and dispatched: created is true. The same actor and
// idempotency key with the same input returns the existing operation,
// created false; with different input it is schema.ErrIdempotencyConflict
// naming the existing operation, and nothing happens.
//
// A dispatch that fails does not fail the submission: the record is
// already durable and the queue's reconciler publishes it later.
func (e *Executor) Submit(ctx context.Context, actor string, s schema.Submission) (schema.Record, bool, error) {
	rec, err := NewRecord(actor, s, e.now())
	if err != nil {
		return schema.Record{}, false, err
	}
	stored, created, err := e.store.Create(ctx, rec)
	if schema.ErrorCode(err) == schema.CodeIdempotencyConflict {
		// A record created before the payload was hashed as decoded (see
		// NewRecord) holds the hash of the payload as it was sent: the same
		// payload sent again is that operation, not a conflict.
		if old, gerr := e.store.Get(ctx, rec.OperationID); gerr == nil {
			if h, herr := IdempotencyHash(actor, s.Action, rec.Resource, s.Payload); herr == nil && h == old.IdempotencyHash {
				stored, err = old, nil
			}
		}
	}
	if err != nil {
		return schema.Record{}, false, err
	}
	if created {
		e.metrics.submitted.WithLabelValues("true").Inc()
	} else {
		e.metrics.submitted.WithLabelValues("false").Inc()
	}
	if !stored.Terminal() && stored.DispatchedAt == nil {
		e.dispatch(ctx, &stored)
	}
	return stored, created, nil
}

// dispatch publishes one operation and queues the outbox mark.
func (e *Executor) dispatch(ctx context.Context, rec *schema.Record) {
	if err := e.dispatcher.Dispatch(ctx, rec.OperationID); err != nil {
		e.log.Warn("dispatch failed; the reconciler will publish it",
			zap.String(LogEvent, "dispatch_failed"), zap.String(LogOperationID, rec.OperationID), zap.Error(err))
		return
	}
	e.marks.add(rec.OperationID)
}

// Get returns an operation's record.
func (e *Executor) Get(ctx context.Context, operationID string) (schema.Record, error) {
	return e.store.Get(ctx, operationID)
}

// List returns records matching f, newest first, with the next cursor.
func (e *Executor) List(ctx context.Context, f ListFilter) ([]schema.Record, string, error) {
	return e.store.List(ctx, f)
}

// Cancel cancels a queued operation at once, or asks a running one to stop
// at its next boundary (between attempts or during a wait; a call to GitHub
// in flight is never interrupted). A terminal operation is
// schema.ErrAlreadyTerminal.
func (e *Executor) Cancel(ctx context.Context, operationID string) (schema.Record, error) {
	epoch := e.terminal.mark()
	rec, err := e.store.RequestCancel(ctx, operationID)
	if err == nil && rec.Status == schema.StatusRunning {
		e.cancels.notify(operationID)
		// It may be in no worker: waiting in the queue (sent back for a
		// long wait), or with no message at all (dead-lettered after a
		// failure once it was marked running), blocking its resource. A
		// fresh message has it recorded cancelled now (after the probe an
		// attempt that may have been applied is owed). If a worker holds
		// it, that message finds its lease held and comes back later, or
		// finds it terminal: it never makes a call — a record with its
		// cancellation requested only probes — and a busy resource does
		// not count toward dead-lettering.
		e.nudge(ctx, operationID)
	}
	if err != nil {
		return rec, err
	}
	cancelled := rec.Status == schema.StatusCancelled
	if cancelled && e.nudger != nil && e.writer != nil {
		// The next operation on its resource was waiting for it: it may
		// go now, without waiting out its delay.
		if next, ok, nerr := e.writer.NextPending(ctx, rec.Resource); nerr == nil && ok {
			e.nudge(ctx, next)
		}
	}
	e.log.Info("cancellation requested", zap.String(LogEvent, "cancel_requested"),
		zap.String(LogOperationID, operationID), zap.String(LogStatus, string(rec.Status)))
	if cancelled {
		// Cancelled while queued: terminal now, without Process.
		e.terminal.add(operationID, epoch)
		e.metrics.finished(&rec)
		if f := e.cfg.OnFinished; f != nil {
			f(rec.Clone())
		}
	}
	return rec, nil
}

// marker batches outbox marks: IDs the queue acknowledged are written to
// the store together, every interval, in one write.
type marker struct {
	store    Store
	interval time.Duration
	now      func() time.Time
	log      *zap.Logger

	mu      sync.Mutex
	pending []string
	wake    chan struct{}

	startOnce sync.Once
	stopOnce  sync.Once
	quit      chan struct{}
	done      chan struct{}
	started   bool
}

func newMarker(store Store, interval time.Duration, now func() time.Time, log *zap.Logger) *marker {
	return &marker{store: store, interval: interval, now: now, log: log,
		wake: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
}

func (m *marker) start() {
	m.startOnce.Do(func() {
		m.mu.Lock()
		m.started = true
		m.mu.Unlock()
		go m.run()
	})
}

func (m *marker) add(id string) {
	m.mu.Lock()
	m.pending = append(m.pending, id)
	m.mu.Unlock()
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

func (m *marker) run() {
	defer close(m.done)
	for {
		select {
		case <-m.quit:
			m.flush(context.Background())
			return
		case <-m.wake:
		}
		t := time.NewTimer(m.interval)
		select {
		case <-m.quit:
			t.Stop()
			m.flush(context.Background())
			return
		case <-t.C:
		}
		m.flush(context.Background())
	}
}

func (m *marker) flush(ctx context.Context) {
	m.mu.Lock()
	ids := m.pending
	m.pending = nil
	m.mu.Unlock()
	if len(ids) == 0 {
		return
	}
	if err := m.store.MarkDispatched(ctx, ids, m.now()); err != nil {
		// Not fatal: an unmarked record is at worst checked again by the
		// reconciler, which finds its message in the stream.
		m.log.Warn("marking dispatched operations failed", zap.String(LogEvent, "mark_dispatched_failed"),
			zap.Int("count", len(ids)), zap.Error(err))
	}
}

func (m *marker) stop(ctx context.Context) error {
	m.mu.Lock()
	started := m.started
	m.mu.Unlock()
	if !started {
		return nil
	}
	m.stopOnce.Do(func() { close(m.quit) })
	select {
	case <-m.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
