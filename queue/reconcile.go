package queue

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	lc "github.com/baton-dev/baton/internal/lifecycle"
)

// ReconcilerConfig configures a Reconciler. The two functions come from the
// record store, which the queue does not see.
type ReconcilerConfig struct {
	// Candidates returns up to limit operations that should be in the
	// stream: records queued, or running without a live lease, whose last
	// dispatch is older than dispatchedBefore or never happened (and whose
	// record is older than dispatchedBefore). Oldest first. It may return
	// fewer than limit while more remain (it left some out after applying
	// the limit): a pass asks again until it gets none, MaxPerPass is
	// reached or something fails. Required.
	Candidates func(ctx context.Context, dispatchedBefore time.Time, limit int) ([]string, error)
	// MarkDispatched records that the operations were dispatched at at.
	// The reconciler calls it for every candidate it has settled (found in
	// a stream, or published again), so the next Candidates call moves on
	// to others. Required.
	MarkDispatched func(ctx context.Context, ids []string, at time.Time) error

	// Interval between passes. The first pass runs at Start. Defaults to 30s.
	Interval time.Duration
	// MinAge is how long after its last dispatch an operation becomes a
	// candidate (dispatchedBefore = now − MinAge). Defaults to 1m.
	MinAge time.Duration
	// BatchSize is the limit given to Candidates. Defaults to 500.
	BatchSize int
	// MaxPerPass bounds the candidates looked at in one pass. Defaults to
	// 10,000.
	MaxPerPass int
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
	// Logger defaults to the Broker's.
	Logger *zap.Logger
}

func (c *ReconcilerConfig) fill(b *Broker) error {
	c.Interval = cmp.Or(c.Interval, 30*time.Second)
	c.MinAge = cmp.Or(c.MinAge, time.Minute)
	c.BatchSize = cmp.Or(c.BatchSize, 500)
	c.MaxPerPass = cmp.Or(c.MaxPerPass, 10_000)
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = b.log
	} else {
		c.Logger = c.Logger.With(zap.String(fieldSubsystem, "queue"))
	}
	var errs []error
	if c.Candidates == nil || c.MarkDispatched == nil {
		errs = append(errs, errors.New("both Candidates and MarkDispatched are required"))
	}
	if c.Interval <= 0 || c.MinAge < 0 {
		errs = append(errs, fmt.Errorf("interval %s, minimum age %s: want Interval > 0, MinAge >= 0", c.Interval, c.MinAge))
	}
	if c.BatchSize < 1 || c.MaxPerPass < c.BatchSize {
		errs = append(errs, fmt.Errorf("BatchSize = %d, MaxPerPass = %d: want 1 <= BatchSize <= MaxPerPass", c.BatchSize, c.MaxPerPass))
	}
	if len(errs) > 0 {
		return fmt.Errorf("queue: invalid reconciler config: %w", errors.Join(errs...))
	}
	return nil
}

// Reconciler publishes again the operations the record store says should
// be in the stream and are not: a dispatch that never happened (a crash
// between the record and the publish, or a publish that failed) or a
// message the stream lost. It asks the streams first, so an operation that
// is legitimately waiting in the stream (its resource is held, it is in
// its failure backoff) or parked in the dead-letter stream is left alone.
type Reconciler struct {
	b   *Broker
	cfg ReconcilerConfig
	log *zap.Logger

	mu     sync.Mutex
	state  lifecycle
	sess   *session
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// ReconcileReport counts what one pass did.
type ReconcileReport struct {
	Checked      int // candidates looked at
	Present      int // already in StreamOperations
	DeadLettered int // in StreamDeadLetters: left for an operator
	Republished  int // published again
	Errors       int // could not be checked or published; retried next pass
}

// NewReconciler validates cfg and returns a Reconciler for b, ready to
// Start (or to RunOnce).
func NewReconciler(b *Broker, cfg ReconcilerConfig) (*Reconciler, error) {
	if err := cfg.fill(b); err != nil {
		return nil, err
	}
	return &Reconciler{b: b, cfg: cfg, log: cfg.Logger}, nil
}

// Start runs a pass at once and then every Interval, until Stop. The
// Broker must be running; its Stop also stops the Reconciler.
func (r *Reconciler) Start(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.state != stateNew {
		return errors.New("queue: reconciler Start called twice or after Stop")
	}
	sess, err := r.b.adopt(r)
	if err != nil {
		return err
	}
	r.sess = sess
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	r.cancel = cancel
	r.state = stateRunning
	r.wg.Add(1)
	go r.loop(runCtx)
	return nil
}

// Stop ends the loop, interrupting a pass, and waits for it. Safe before
// Start and safe twice.
func (r *Reconciler) Stop(ctx context.Context) error {
	r.mu.Lock()
	if r.state != stateRunning {
		r.state = stateStopped
		r.mu.Unlock()
		return nil
	}
	r.state = stateStopped
	r.mu.Unlock()
	defer r.b.disown(r)
	r.cancel()
	return lc.Wait(ctx, &r.wg)
}

func (r *Reconciler) loop(ctx context.Context) {
	defer r.wg.Done()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, err := r.pass(ctx, r.sess); err != nil && ctx.Err() == nil {
			r.log.Warn("reconcile pass failed", zap.String(fieldEvent, "queue.reconcile_failed"), zap.Error(err))
		}
		t.Reset(r.cfg.Interval)
	}
}

// RunOnce runs one pass now.
func (r *Reconciler) RunOnce(ctx context.Context) (ReconcileReport, error) {
	s, err := r.b.session()
	if err != nil {
		return ReconcileReport{}, err
	}
	return r.pass(ctx, s)
}

// pass settles candidates batch by batch: each is looked up in
// StreamOperations, then StreamDeadLetters, and published again if in
// neither; every settled candidate is marked dispatched now.
func (r *Reconciler) pass(ctx context.Context, s *session) (ReconcileReport, error) {
	var rep ReconcileReport
	defer func() {
		if rep.Checked > 0 {
			r.log.Info("reconcile pass", zap.String(fieldEvent, "queue.reconciled"),
				zap.Int("checked", rep.Checked), zap.Int("present", rep.Present),
				zap.Int("deadLettered", rep.DeadLettered), zap.Int("republished", rep.Republished),
				zap.Int("errors", rep.Errors))
		}
	}()
	m := &r.b.counters
	// One cutoff for the whole pass: what a batch marks dispatched (at a
	// later now) is then not asked about again in the same pass.
	before := r.cfg.Now().Add(-r.cfg.MinAge)
	for rep.Checked < r.cfg.MaxPerPass {
		now := r.cfg.Now()
		ids, err := r.cfg.Candidates(ctx, before, r.cfg.BatchSize)
		if err != nil {
			return rep, fmt.Errorf("queue: reconcile candidates: %w", err)
		}
		if len(ids) == 0 {
			return rep, nil
		}
		settled := make([]string, 0, len(ids))
		var missing []string
		for _, id := range ids {
			rep.Checked++
			if ValidateOperationID(id) != nil {
				r.log.Error("candidate is not a valid operation ID; skipped", zap.String(fieldEvent, "queue.reconcile_bad_id"))
				settled = append(settled, id)
				rep.Errors++
				continue
			}
			where, err := s.locate(ctx, id)
			switch {
			case err != nil:
				rep.Errors++
				m.recErrors.Add(1)
				r.log.Warn("cannot look the operation up", zap.String(fieldEvent, "queue.reconcile_lookup_failed"),
					zap.String(fieldOperationID, id), zap.Error(err))
			case where == StreamOperations:
				rep.Present++
				m.recPresent.Add(1)
				settled = append(settled, id)
			case where == StreamDeadLetters:
				rep.DeadLettered++
				m.recDeadLettered.Add(1)
				settled = append(settled, id)
			default:
				missing = append(missing, id)
			}
		}
		if len(missing) > 0 {
			msgs := make([]*nats.Msg, len(missing))
			for i, id := range missing {
				msgs[i] = operationMsg(id, reconcileMsgID(id, now))
			}
			for i, err := range s.publishAll(ctx, msgs) {
				r.b.notePublish(ctx, err)
				if err != nil {
					rep.Errors++
					m.recErrors.Add(1)
					r.log.Warn("republish failed", zap.String(fieldEvent, "queue.republish_failed"),
						zap.String(fieldOperationID, missing[i]), zap.Error(err))
					continue
				}
				rep.Republished++
				m.recRepublished.Add(1)
				m.republished.Add(1)
				settled = append(settled, missing[i])
				r.log.Info("operation published again", zap.String(fieldEvent, "queue.republished"),
					zap.String(fieldOperationID, missing[i]))
			}
		}
		if len(settled) > 0 {
			if err := r.cfg.MarkDispatched(ctx, settled, now); err != nil {
				return rep, fmt.Errorf("queue: reconcile mark dispatched: %w", err)
			}
		}
		// Stop when something failed: the failed ones would come back
		// first and be retried at once. A short batch is not the end: the
		// store may have left some out after applying the limit (running
		// operations whose worker is alive), so ask again until none come.
		if rep.Errors > 0 {
			return rep, nil
		}
		if err := ctx.Err(); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// locate says which stream holds a message for the operation:
// StreamOperations, StreamDeadLetters, or "" for neither.
func (s *session) locate(ctx context.Context, id string) (string, error) {
	for _, st := range []struct {
		name    string
		stream  jetstream.Stream
		subject string
	}{
		{StreamOperations, s.ops, OperationSubject(id)},
		{StreamDeadLetters, s.dlq, DeadLetterSubject(id)},
	} {
		_, err := st.stream.GetLastMsgForSubject(ctx, st.subject)
		if err == nil {
			return st.name, nil
		}
		if !errors.Is(err, jetstream.ErrMsgNotFound) {
			return "", err
		}
	}
	return "", nil
}
