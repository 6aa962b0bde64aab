package app

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/baton-dev/baton/internal/lifecycle"
)

// EventDispatcherConfig configures an EventDispatcher.
type EventDispatcherConfig struct {
	// Ledger is the deliveries ledger to work through. Required.
	Ledger *DeliveryLedger
	// Workers bounds the deliveries handled at once (each of a different
	// repository). Defaults to 8.
	Workers int
	// MaxAttempts is how many failed runs of its handlers a delivery gets
	// before it is marked failed. Defaults to 5.
	MaxAttempts int
	// RetryBase is the wait after a delivery's first failure; it doubles
	// with each further failure (with jitter), up to RetryMax. Defaults to
	// 1s.
	RetryBase time.Duration
	// RetryMax caps the wait between failed runs. Defaults to 5m.
	RetryMax time.Duration
	// HandlerTimeout bounds one handler's run on one delivery. Defaults to
	// 2m.
	HandlerTimeout time.Duration
	// Retention is how long handled and failed deliveries stay in the
	// ledger (deduplication and missed-delivery recovery look back three
	// days, so at least 72h). Defaults to 7 days.
	Retention time.Duration
	// PruneInterval is how often old deliveries are pruned (also once at
	// Start). Defaults to 1h.
	PruneInterval time.Duration
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
	// Logger defaults to zap.NewNop().
	Logger *zap.Logger
	// Registerer receives the dispatcher's metrics; nil registers none.
	Registerer prometheus.Registerer
}

func (c *EventDispatcherConfig) fill() error {
	c.Workers = cmp.Or(c.Workers, 8)
	c.MaxAttempts = cmp.Or(c.MaxAttempts, 5)
	c.RetryBase = cmp.Or(c.RetryBase, time.Second)
	c.RetryMax = cmp.Or(c.RetryMax, 5*time.Minute)
	c.HandlerTimeout = cmp.Or(c.HandlerTimeout, 2*time.Minute)
	c.Retention = cmp.Or(c.Retention, 7*24*time.Hour)
	c.PruneInterval = cmp.Or(c.PruneInterval, time.Hour)
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	var errs []error
	if c.Ledger == nil {
		errs = append(errs, errors.New("no Ledger"))
	}
	if c.Workers < 1 || c.Workers > 1024 {
		errs = append(errs, fmt.Errorf("want 1 <= Workers <= 1024, not %d", c.Workers))
	}
	if c.MaxAttempts < 1 {
		errs = append(errs, fmt.Errorf("want MaxAttempts >= 1, not %d", c.MaxAttempts))
	}
	if c.RetryBase <= 0 || c.RetryMax < c.RetryBase {
		errs = append(errs, fmt.Errorf("want 0 < RetryBase <= RetryMax, not %s and %s", c.RetryBase, c.RetryMax))
	}
	if c.HandlerTimeout <= 0 || c.PruneInterval <= 0 {
		errs = append(errs, errors.New("want positive HandlerTimeout and PruneInterval"))
	}
	if c.Retention < 72*time.Hour {
		errs = append(errs, fmt.Errorf("want Retention >= 72h (GitHub redelivers up to three days back), not %s", c.Retention))
	}
	if len(errs) > 0 {
		return fmt.Errorf("app: invalid event dispatcher config: %w", errors.Join(errs...))
	}
	return nil
}

// EventDispatcher hands the deliveries of the ledger to the handlers
// subscribed to their events, asynchronously, with a bounded pool of
// workers:
//
//   - Deliveries of one repository are handled one at a time, in the order
//     baton received them (installation events without a repository are
//     ordered per installation); different repositories are handled in
//     parallel.
//   - A handler that fails is run again with exponential backoff; one that
//     returns RetryAfter is run again after the wait it asked for, without
//     counting a failure. Later deliveries of the same repository wait
//     behind it, so order holds.
//   - When every handler has handled a delivery it is marked handled; after
//     MaxAttempts failed runs (or a Permanent error) it is marked failed,
//     with the error, and the repository's next deliveries proceed.
//   - Start picks up the deliveries left pending by a previous run (a crash
//     included): nothing recorded is lost.
type EventDispatcher struct {
	cfg    EventDispatcherConfig
	log    *zap.Logger
	ledger *DeliveryLedger

	subMu   sync.Mutex
	subs    []eventSubscription
	frozen  bool // set at Start: subscriptions are read without the lock after
	handled *prometheus.CounterVec

	lifeMu  sync.Mutex
	started bool
	stopped bool
	cancel  context.CancelFunc
	wg      sync.WaitGroup

	replays  chan pendingRef
	loopDone chan struct{} // closed when the loop has returned
	work     chan deliveryJob
	results  chan deliveryJobResult
}

type eventSubscription struct {
	name   string
	h      EventHandler
	all    bool
	events map[string]bool
}

var handlerNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,63}$`)

// NewEventDispatcher validates cfg and returns a dispatcher. Subscribe the
// handlers, then Start it. A ledger has one dispatcher: it is the one that
// learns of the deliveries the ledger records.
func NewEventDispatcher(cfg EventDispatcherConfig) (*EventDispatcher, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	d := &EventDispatcher{
		cfg:      cfg,
		log:      cfg.Logger.With(zap.String(logKeySubsystem, "events")),
		ledger:   cfg.Ledger,
		replays:  make(chan pendingRef),
		loopDone: make(chan struct{}),
		work:     make(chan deliveryJob, cfg.Workers),
		results:  make(chan deliveryJobResult, cfg.Workers),
		handled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "baton_webhook_deliveries_handled_total",
			Help: "Webhook deliveries the event dispatcher finished, by final state (handled or failed).",
		}, []string{"state"}),
	}
	// Both series exist from the start, at 0: an alert on the increase of
	// state="failed" sees the first failed delivery, which a series born
	// at 1 would hide (increase over a series' first sample is 0).
	for _, st := range []DeliveryState{DeliveryHandled, DeliveryFailed} {
		d.handled.WithLabelValues(string(st))
	}
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(d.handled); err != nil {
			return nil, fmt.Errorf("app: register event dispatcher metrics: %w", err)
		}
	}
	return d, nil
}

// Subscribe adds a handler under name, a stable identifier (lower-case
// letters, digits, '_', '.', '-'): the ledger records each handler's
// outcome by name, so that after a restart a handler that already handled
// a delivery is not run on it again. Subscribe before Start.
func (d *EventDispatcher) Subscribe(name string, h EventHandler) error {
	if !handlerNameRE.MatchString(name) {
		return fmt.Errorf("app: handler name %q: want lower-case letters, digits, '_', '.', '-' (at most 64)", name)
	}
	if h == nil {
		return fmt.Errorf("app: handler %q is nil", name)
	}
	d.subMu.Lock()
	defer d.subMu.Unlock()
	if d.frozen {
		return fmt.Errorf("app: subscribe %q: the dispatcher has started", name)
	}
	for _, s := range d.subs {
		if s.name == name {
			return fmt.Errorf("app: a handler named %q is subscribed already", name)
		}
	}
	s := eventSubscription{name: name, h: h, events: map[string]bool{}}
	for _, e := range h.Events() {
		if e == "*" {
			s.all = true
		}
		s.events[e] = true
	}
	d.subs = append(d.subs, s)
	return nil
}

// Start picks up the pending deliveries and starts the workers. It returns
// once they run.
func (d *EventDispatcher) Start(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	d.lifeMu.Lock()
	defer d.lifeMu.Unlock()
	if d.started || d.stopped {
		return errors.New("app: event dispatcher already started or stopped")
	}
	d.started = true
	d.subMu.Lock()
	d.frozen = true
	d.subMu.Unlock()
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	d.cancel = cancel
	for range d.cfg.Workers {
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			d.worker(runCtx)
		}()
	}
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		defer close(d.loopDone)
		d.loop(runCtx)
	}()
	d.log.Info("event dispatcher started", zap.String(logKeyEvent, "events.started"), zap.Int("workers", d.cfg.Workers))
	return nil
}

// Stop stops handing out deliveries, cancels the handlers running, and
// waits for the workers, at most until ctx ends. Deliveries not handled
// stay pending for the next Start. Stop is safe before Start and twice.
func (d *EventDispatcher) Stop(ctx context.Context) error {
	d.lifeMu.Lock()
	d.stopped = true
	if d.cancel != nil {
		d.cancel()
	}
	d.lifeMu.Unlock()
	return lifecycle.Wait(ctx, &d.wg)
}

// Replay makes a failed delivery pending again: the handlers that had not
// handled it run again, with a fresh count of attempts. The dispatcher
// must be running. Once the delivery is pending again Replay returns nil,
// even if ctx ends before the dispatcher's loop has taken it (the loop is
// given it when it can).
func (d *EventDispatcher) Replay(ctx context.Context, deliveryID string) error {
	d.lifeMu.Lock()
	running := d.started && !d.stopped
	d.lifeMu.Unlock()
	if !running {
		return errors.New("app: the event dispatcher is not running")
	}
	ref, err := d.ledger.requeue(ctx, deliveryID)
	if err != nil {
		return err
	}
	d.log.Info("delivery replayed", zap.String(logKeyEvent, "events.replayed"), zap.String(logKeyDeliveryID, deliveryID))
	select {
	case d.replays <- ref:
		return nil
	case <-d.loopDone:
		// Stopping: the delivery is pending in the ledger; the next Start
		// takes it.
		return nil
	case <-ctx.Done():
		// The delivery is pending in the ledger already, and the loop
		// learns of pending deliveries only as they are recorded: it
		// must be given this one however long it is busy, or it would
		// wait for the next Start.
		go func() {
			select {
			case d.replays <- ref:
			case <-d.loopDone:
			}
		}()
		return nil
	}
}

// deliveryQueue is the pending deliveries of one ordering key.
type deliveryQueue struct {
	key     string
	items   []pendingRef // in seq order; items[0] is next
	running bool
}

type deliveryJob struct {
	key string
	ref pendingRef
}

type deliveryJobResult struct {
	key string
	seq int64
	// done: the delivery left the pending state (handled, failed, or
	// found not pending); otherwise it stays at the head, ready at readyAt.
	done    bool
	readyAt time.Time
}

// loop owns the queues: it learns of new deliveries from the ledger, hands
// ready ones to the workers, and takes their results.
func (d *EventDispatcher) loop(ctx context.Context) {
	queues := map[string]*deliveryQueue{}
	known := map[int64]bool{}
	// rerun holds the replays of deliveries the loop still knows: a worker
	// recorded one failed and its result has not been taken yet. Each is
	// added again once that result has been.
	rerun := map[int64]pendingRef{}
	var lastSeq int64
	busy := 0
	rescan := false // the ledger could not be read: scan again soon
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	prune := time.NewTicker(d.cfg.PruneInterval)
	defer prune.Stop()

	add := func(p pendingRef) {
		if known[p.seq] {
			return
		}
		known[p.seq] = true
		q := queues[p.key]
		if q == nil {
			q = &deliveryQueue{key: p.key}
			queues[p.key] = q
		}
		i, _ := slices.BinarySearchFunc(q.items, p.seq, func(e pendingRef, seq int64) int { return cmp.Compare(e.seq, seq) })
		q.items = slices.Insert(q.items, i, p)
	}
	// scan loads the pending deliveries recorded since the last scan. It
	// reports false when the ledger could not be read (retried shortly).
	scan := func() bool {
		for {
			refs, err := d.ledger.pendingAfter(ctx, lastSeq, 1000)
			if err != nil {
				if ctx.Err() == nil {
					d.log.Error("reading pending deliveries failed; retrying", zap.String(logKeyEvent, "events.scan_failed"), zap.Error(err))
				}
				return false
			}
			for _, p := range refs {
				add(p)
				lastSeq = max(lastSeq, p.seq)
			}
			if len(refs) < 1000 {
				return true
			}
		}
	}
	pump := func() {
		now := d.cfg.Now()
		for busy < d.cfg.Workers {
			var next *deliveryQueue
			for _, q := range queues {
				if q.running || len(q.items) == 0 || q.items[0].readyAt.After(now) {
					continue
				}
				if next == nil || q.items[0].seq < next.items[0].seq {
					next = q
				}
			}
			if next == nil {
				break
			}
			next.running = true
			busy++
			d.work <- deliveryJob{key: next.key, ref: next.items[0]} // never blocks: at most Workers jobs are out
		}
		var wake time.Time
		if rescan {
			wake = now.Add(time.Second)
		}
		for _, q := range queues {
			if !q.running && len(q.items) > 0 && (wake.IsZero() || q.items[0].readyAt.Before(wake)) {
				wake = q.items[0].readyAt
			}
		}
		timer.Stop()
		if !wake.IsZero() {
			timer.Reset(max(wake.Sub(now), time.Millisecond))
		}
	}

	// pruneLedger deletes the deliveries older than the retention. It runs
	// at start too (once the pending deliveries are handed out), not only
	// every PruneInterval: a server restarted more often than that would
	// otherwise never prune.
	pruneLedger := func() {
		before := d.cfg.Now().Add(-d.cfg.Retention)
		if n, err := d.ledger.Prune(ctx, before); err != nil {
			if ctx.Err() == nil {
				d.log.Warn("pruning the deliveries ledger failed", zap.String(logKeyEvent, "events.prune_failed"), zap.Error(err))
			}
		} else if n > 0 {
			d.log.Info("old deliveries pruned", zap.String(logKeyEvent, "events.pruned"), zap.Int64("deliveries", n))
		}
	}

	rescan = !scan()
	pump()
	pruneLedger()
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.ledger.recorded:
			rescan = !scan()
		case p := <-d.replays:
			if known[p.seq] {
				// Replayed between the worker's recording it failed and
				// the loop's taking the result, which would drop it.
				rerun[p.seq] = p
				break
			}
			add(p)
		case r := <-d.results:
			busy--
			// The job's delivery is found by its seq, not taken to be the
			// head: a replayed delivery older than the running one is
			// inserted ahead of it meanwhile.
			if q := queues[r.key]; q != nil {
				q.running = false
				if i := slices.IndexFunc(q.items, func(p pendingRef) bool { return p.seq == r.seq }); i >= 0 {
					if r.done {
						delete(known, r.seq)
						q.items = slices.Delete(q.items, i, i+1)
					} else {
						q.items[i].readyAt = r.readyAt
					}
				}
				if len(q.items) == 0 {
					delete(queues, r.key)
				}
			}
			if p, ok := rerun[r.seq]; ok {
				delete(rerun, r.seq)
				add(p) // a no-op if the result kept it
			}
		case <-timer.C:
			if rescan {
				rescan = !scan()
			}
		case <-prune.C:
			pruneLedger()
		}
		pump()
	}
}

func (d *EventDispatcher) worker(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case job := <-d.work:
			res := d.handle(ctx, job)
			select {
			case d.results <- res: // never blocks for long: the loop reads until ctx ends
			case <-ctx.Done():
				return
			}
		}
	}
}

// handle runs the handlers on one delivery and records the result.
func (d *EventDispatcher) handle(ctx context.Context, job deliveryJob) deliveryJobResult {
	res := deliveryJobResult{key: job.key, seq: job.ref.seq}
	retryLater := func() deliveryJobResult {
		res.readyAt = d.cfg.Now().Add(time.Second)
		return res
	}
	pd, found, err := d.ledger.loadPending(ctx, job.ref.seq)
	if err != nil {
		if ctx.Err() == nil {
			d.log.Error("loading a delivery failed; retrying", zap.String(logKeyEvent, "events.load_failed"),
				zap.String(logKeyDeliveryID, job.ref.id), zap.Error(err))
		}
		return retryLater()
	}
	if !found {
		res.done = true
		return res
	}
	rec := pd.rec
	outcome := rec.Outcome
	pd.Attempt = rec.Attempts + 1
	log := d.log.With(zap.String(logKeyDeliveryID, pd.ID), zap.String(logKeyGitHubEvent, pd.Event),
		zap.String(logKeyAction, pd.Action), zap.Int64(logKeyInstallation, pd.InstallationID),
		zap.String(logKeyRepository, pd.Repository))

	var (
		matching   []string
		failedRun  bool
		retryAfter time.Duration
		firstErr   string
	)
	for _, s := range d.subs {
		if !s.all && !s.events[pd.Event] {
			continue
		}
		matching = append(matching, s.name)
		if o := outcome[s.name]; o == outcomeHandled || o == outcomeFailed {
			continue
		}
		err := d.run(ctx, s, pd.Delivery)
		if ctx.Err() != nil {
			// Stopping: the run is abandoned, not recorded; the delivery
			// stays pending for the next start.
			return res
		}
		var ra *RetryAfterError
		switch {
		case err == nil:
			outcome[s.name] = outcomeHandled
		case errors.As(err, &ra):
			outcome[s.name] = outcomeRetry
			retryAfter = max(retryAfter, ra.After)
			log.Debug("handler asked to retry later", zap.String(logKeyEvent, "events.retry_after"),
				zap.String(logKeyHandler, s.name), zap.Duration("after", ra.After), zap.Error(err))
		case IsPermanent(err):
			outcome[s.name] = outcomeFailed
			firstErr = cmp.Or(firstErr, s.name+": "+err.Error())
			log.Warn("handler failed for good", zap.String(logKeyEvent, "events.handler_failed"),
				zap.String(logKeyHandler, s.name), zap.Error(err))
		default:
			outcome[s.name] = outcomeError
			failedRun = true
			firstErr = cmp.Or(firstErr, s.name+": "+err.Error())
			log.Warn("handler failed", zap.String(logKeyEvent, "events.handler_failed"),
				zap.String(logKeyHandler, s.name), zap.Int(logKeyAttempt, pd.Attempt), zap.Error(err))
		}
	}

	now := d.cfg.Now()
	r := deliveryResult{state: DeliveryPending, attempts: rec.Attempts, outcome: outcome, at: now, lastError: rec.LastError}
	if firstErr != "" {
		r.lastError = truncateText(firstErr, 1000)
	}
	if failedRun {
		r.attempts++
		if r.attempts >= d.cfg.MaxAttempts {
			// Out of attempts: the handlers that failed are done with it.
			for _, name := range matching {
				if outcome[name] == outcomeError {
					outcome[name] = outcomeFailed
				}
			}
		}
	}
	var waiting, failed []string
	for _, name := range matching {
		switch outcome[name] {
		case outcomeHandled:
		case outcomeFailed:
			failed = append(failed, name)
		default:
			waiting = append(waiting, name)
		}
	}
	switch {
	case len(waiting) > 0 && failedRun && r.attempts < d.cfg.MaxAttempts:
		r.nextAt = now.Add(max(d.backoff(r.attempts), retryAfter))
	case len(waiting) > 0:
		r.nextAt = now.Add(max(retryAfter, 10*time.Millisecond))
	case len(failed) > 0:
		r.state = DeliveryFailed
	default:
		r.state = DeliveryHandled
	}
	if err := d.ledger.saveResult(ctx, job.ref.seq, r); err != nil {
		if ctx.Err() == nil {
			log.Error("recording a delivery's outcome failed; it will run again", zap.String(logKeyEvent, "events.save_failed"), zap.Error(err))
		}
		return retryLater()
	}
	switch r.state {
	case DeliveryHandled:
		d.handled.WithLabelValues(string(DeliveryHandled)).Inc()
		log.Debug("delivery handled", zap.String(logKeyEvent, "events.handled"))
		res.done = true
	case DeliveryFailed:
		d.handled.WithLabelValues(string(DeliveryFailed)).Inc()
		log.Error("delivery failed; giving up", zap.String(logKeyEvent, "events.failed"),
			zap.Strings("handlers", failed), zap.Int(logKeyAttempt, r.attempts), zap.String("lastError", r.lastError))
		res.done = true
	default:
		res.readyAt = r.nextAt
	}
	return res
}

// run calls one handler with its timeout, turning a panic into an error.
func (d *EventDispatcher) run(ctx context.Context, s eventSubscription, dv Delivery) (err error) {
	hctx, cancel := context.WithTimeout(ctx, d.cfg.HandlerTimeout)
	defer cancel()
	defer func() {
		if p := recover(); p != nil {
			d.log.Error("handler panicked", zap.String(logKeyEvent, "events.handler_panicked"),
				zap.String(logKeyHandler, s.name), zap.String(logKeyDeliveryID, dv.ID),
				zap.Any("panic", p), zap.ByteString("stack", debug.Stack()))
			err = fmt.Errorf("handler panicked: %v", p)
		}
	}()
	return s.h.HandleEvent(hctx, dv)
}

// backoff is the wait after the n-th failed run: RetryBase·2^(n−1),
// with ±20% jitter, capped at RetryMax.
func (d *EventDispatcher) backoff(n int) time.Duration {
	wait := d.cfg.RetryBase
	for i := 1; i < n && wait < d.cfg.RetryMax; i++ {
		wait *= 2
	}
	wait = min(wait, d.cfg.RetryMax)
	jitter := time.Duration(rand.Int64N(int64(wait)/5 + 1))
	return min(wait-wait/10+jitter, d.cfg.RetryMax)
}

func truncateText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && (s[n]&0xC0) == 0x80 { // do not cut a UTF-8 sequence
		n--
	}
	return s[:n] + "…"
}
