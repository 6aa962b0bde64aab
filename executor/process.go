package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"time"

	"github.com/google/go-github/v62/github"
	"go.uber.org/zap"

	"github.com/baton-dev/baton/coordinator"
	"github.com/baton-dev/baton/internal/sqlite"
	"github.com/baton-dev/baton/queue"
	"github.com/baton-dev/baton/schema"
)

// ResultKind says what the queue should do with an operation's message
// after Process.
type ResultKind int

// What Process asks of the queue.
const (
	// ResultDone: acknowledge. The operation is terminal (whatever its
	// outcome) or there is nothing to do.
	ResultDone ResultKind = iota + 1
	// ResultRetry: deliver again after Delay. Not a failure: the resource
	// is busy, or GitHub asked for a wait.
	ResultRetry
	// ResultFailed: the executor could not process the message (the store
	// is unavailable, a bug). The queue retries with backoff and, after
	// repeated failures, dead-letters it.
	ResultFailed
)

// Result is the outcome of Process for the queue.
type Result struct {
	Kind  ResultKind
	Delay time.Duration
	Err   error
	// finished is set when this Process made the operation terminal (and
	// so freed its resource for the next one).
	finished bool
}

func done() Result                 { return Result{Kind: ResultDone} }
func retry(d time.Duration) Result { return Result{Kind: ResultRetry, Delay: d} }
func failed(err error) Result      { return Result{Kind: ResultFailed, Err: err} }
func (r Result) String() string    { return [...]string{"?", "done", "retry", "failed"}[r.Kind] }
func (e *Executor) busy() Result   { return retry(e.cfg.BusyDelay) }
func (e *Executor) callCtx(ctx, worker context.Context) (context.Context, context.CancelFunc) {
	// A call in flight is not interrupted by a cancellation, a lost lease
	// or a graceful stop (draining): only its own timeout ends it, or the
	// end of the worker's context, which the queue cancels when a stop's
	// deadline has passed (see runner.interrupted).
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.gh.Timeout())
	unhook := context.AfterFunc(worker, cancel)
	return cctx, func() { unhook(); cancel() }
}

// Leases is what the executor needs of the lease coordinator
// (*coordinator.Coordinator).
type Leases interface {
	AcquireWith(ctx context.Context, key, owner string, ttl time.Duration, fn func(*sqlite.Tx, *coordinator.Lease) error) (*coordinator.Lease, error)
	KeepAlive(ctx context.Context, l *coordinator.Lease) (context.Context, func())
	Fenced(ctx context.Context, l *coordinator.Lease, fn func(*sqlite.Tx) error) error
	ReleaseWith(ctx context.Context, l *coordinator.Lease, fn func(*sqlite.Tx) error) error
}

// RecordWriter is what Process needs of the store beyond Store: saves that
// run inside the coordinator's transactions, and the per-resource order.
// *SQLiteStore implements it.
type RecordWriter interface {
	SaveFunc(rec *schema.Record, cas bool) (func(*sqlite.Tx) error, error)
	OlderPending(ctx context.Context, rec *schema.Record) (bool, error)
	NextPending(ctx context.Context, res schema.Resource) (operationID string, ok bool, err error)
}

// InstallationResolver says which installation covers a repository. An
// error with code forbidden means baton may not act there (not installed,
// suspended): the operation fails with category installation_unavailable.
// So does one whose repository is now covered by another installation than
// the one it was submitted for, unless the resolver is an AccountResolver
// that says both are of one account (a reinstall): it runs on the new one.
type InstallationResolver interface {
	InstallationOf(ctx context.Context, owner, repo string) (int64, error)
}

// Process carries out one operation: the queue's handler. It loads the
// record (terminal: done), waits its turn on the resource (an older
// unfinished operation on it, or its lease held: retry later), takes the
// resource's lease and marks the record running in one transaction, then
// runs the attempt loop under the lease, saving every change fenced by it,
// and saves the terminal record in the transaction that releases the
// lease.
//
// Having finished an operation, Process hands the resource to the next
// unfinished operation on it and carries that one out too (up to
// HandoffLimit, and while ctx lasts): operations of one resource run one
// after the other in creation order, so the next one's turn comes exactly
// when this one ends, while its own message may be far back in the queue
// or waiting out a delay. That message, delivered later, finds it
// terminal: the executor remembers the operations it made terminal (see
// finishedSet) and acknowledges it without reading the store.
func (e *Executor) Process(ctx context.Context, operationID string) Result {
	if e.leases == nil || e.writer == nil || e.gh == nil {
		return failed(errors.New("executor: Process needs Config.Leases, Config.GitHub and a store that implements RecordWriter"))
	}
	res, finished := e.processOne(ctx, operationID, false, nil)
	if finished == nil {
		return res
	}
	start := time.Now()
	for n := 0; ; n++ {
		// The lookup must also work when the worker is stopping (ctx
		// ended): the next operation is then handed to the queue.
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		next, rec, ok, err := e.nextPending(lctx, *finished)
		cancel()
		if err != nil || !ok {
			break
		}
		if n >= e.cfg.HandoffLimit || ctx.Err() != nil || isClosed(queue.Draining(ctx)) || time.Since(start) >= e.cfg.HandoffTime {
			// This worker has had the resource long enough (or is
			// stopping, or hands off nothing): hand the next operation to
			// the queue at once. Its old message may wait out OrderDelay,
			// and nobody else would end the wait.
			e.nudge(ctx, next)
			break
		}
		// next is the resource's oldest unfinished operation, and none
		// older can appear (seq only grows, nothing leaves a terminal
		// status): process need not look again.
		r, fin := e.processOne(ctx, next, true, rec)
		if r.Kind != ResultDone {
			// It waits for something else (a pace, a pause, a lease held
			// elsewhere) or failed: give it a message of its own now, so
			// that the wait or the failure applies to it, rather than
			// leave it to its old message's delay.
			e.nudge(ctx, next)
			break
		}
		if fin == nil {
			break
		}
	}
	return res
}

// isClosed reports whether ch is closed (a nil channel never is).
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// nudge publishes a fresh message for an operation, if the dispatcher can.
func (e *Executor) nudge(ctx context.Context, operationID string) {
	if e.nudger == nil {
		return
	}
	if err := e.nudger.Nudge(context.WithoutCancel(ctx), operationID); err != nil {
		e.log.Debug("nudge failed", zap.String(LogEvent, "nudge_failed"), zap.String(LogOperationID, operationID), zap.Error(err))
	}
}

// pendingReader is implemented by a RecordWriter that can return the
// next operation of a resource with its record in one read
// (*SQLiteStore): the handoff then need not read the record again.
type pendingReader interface {
	nextPendingRecord(ctx context.Context, res schema.Resource) (schema.Record, bool, error)
}

// nextPending returns the oldest unfinished operation on res, and its
// record when the store read it too (nil otherwise).
func (e *Executor) nextPending(ctx context.Context, res schema.Resource) (string, *schema.Record, bool, error) {
	if pr, ok := e.writer.(pendingReader); ok {
		if rec, ok, err := pr.nextPendingRecord(ctx, res); err == nil {
			if !ok {
				return "", nil, false, nil
			}
			return rec.OperationID, &rec, true, nil
		}
		// (The store failed, or the record cannot be read: as without
		// the record, so that the failure is the next operation's.)
	}
	id, ok, err := e.writer.NextPending(ctx, res)
	return id, nil, ok, err
}

// processOne is Process without the handoff. finished is the resource of
// the operation when this call made it terminal. handedOff says that the
// operation is known to be the oldest unfinished one on its resource;
// read, if not nil, is its record as read with that (in place of a first
// read).
func (e *Executor) processOne(ctx context.Context, operationID string, handedOff bool, read *schema.Record) (Result, *schema.Resource) {
	if e.terminal.has(operationID) {
		// Made terminal here (by a handoff, usually): done, as reading
		// the record would say, without reading it.
		return done(), nil
	}
	for range 3 {
		var (
			rec schema.Record
			err error
		)
		if read != nil {
			rec, read = *read, nil
		} else {
			rec, err = e.store.Get(ctx, operationID)
		}
		if errors.Is(err, schema.ErrNotFound) {
			e.log.Warn("message for an unknown operation", zap.String(LogEvent, "unknown_operation"), zap.String(LogOperationID, operationID))
			return done(), nil
		}
		if err != nil {
			return failed(err), nil
		}
		if rec.Terminal() {
			return done(), nil
		}
		res, stale := e.process(ctx, &rec, handedOff)
		if !stale {
			var finished *schema.Resource
			if res.finished { // set only by finish, with ResultDone
				finished = &rec.Resource
			}
			return res, finished
		}
		// The record changed between our read and our acquisition (a
		// cancellation, another worker's save): read it again.
	}
	return e.busy(), nil
}

// process is one try of Process on a record read just before; stale is
// true when the record changed before the lease was taken. handedOff
// skips the look for an older unfinished operation on the resource (the
// caller knows there is none).
func (e *Executor) process(ctx context.Context, rec *schema.Record, handedOff bool) (res Result, stale bool) {
	log := e.opLogger(rec)
	tg, err := schema.ParseResource(rec.Resource)
	if err != nil {
		return failed(fmt.Errorf("executor: stored resource: %w", err)), false
	}
	payload, err := schema.DecodeStoredPayload(rec.Action, rec.Payload)
	if err != nil {
		return failed(fmt.Errorf("executor: stored payload: %w", err)), false
	}
	if !rec.CancellationRequested && rec.NextAttemptAt != nil {
		// The operation was sent back to the queue until then (a long
		// Retry-After, a pause, a turn in the pace): a delivery that comes
		// earlier (a nudge, a duplicate, the reconciler's) does not run it
		// early, and spends no attempt. A cancellation does not wait.
		if w := rec.NextAttemptAt.Sub(e.now()); w > 0 {
			return retry(w), false
		}
	}
	if !handedOff {
		if older, err := e.writer.OlderPending(ctx, rec); err != nil {
			return failed(err), false
		} else if older {
			// Its turn comes when the older one ends: the worker that
			// ends it hands the resource over (see Process), so this
			// message only has to come back in case that worker is gone.
			return retry(e.cfg.OrderDelay), false
		}
	}
	inst, unavailable, err := e.installation(ctx, rec, tg)
	if err != nil {
		return failed(err), false
	}
	now := e.now()
	if unavailable == nil && !rec.CancellationRequested {
		// A wait GitHub imposed on the installation, or a long turn in its
		// pace: go back to the queue without touching the lease. An
		// operation asked to stop does not wait: it takes the lease only
		// to be recorded cancelled (after a probe, when an earlier attempt
		// may have been applied).
		if w := e.pauses.remaining(inst, now); w > 0 {
			return retry(w), false
		}
		if w := e.pacer.admit(inst); w > 0 {
			return retry(w), false
		}
	}

	// Take the resource and mark the operation running, in one
	// transaction. The save is a compare-and-swap on the version read, so
	// a record that changed meanwhile is read again.
	run := rec.Clone()
	run.Status = schema.StatusRunning
	run.UpdatedAt = now
	run.NextAttemptAt = nil
	if run.StartedAt == nil {
		run.StartedAt = &now
	}
	if unavailable == nil {
		run.InstallationID = inst
	}
	// When the first thing to do is a call (no probe owed, budget left,
	// nothing to wait for), its start is recorded in this same save,
	// sparing a write; if the call does not happen after all, the entry is
	// taken back before the next save.
	preStart := unavailable == nil && !run.CancellationRequested && !lastAttemptAmbiguous(&run) &&
		run.Attempts < run.MaxAttempts && e.pauses.remaining(inst, now) == 0
	if preStart {
		run.Attempts++
		run.AppendAttempt(schema.Attempt{Number: run.Attempts, StartedAt: now})
	}
	save, err := e.writer.SaveFunc(&run, true)
	if err != nil {
		return failed(err), false
	}
	// Watch for a cancellation before the save that marks the record
	// running: one requested before the save makes it stale (read again),
	// one after it finds the record running and closes this channel, which
	// the first boundary sees, before any call.
	cancelled, unwatch := e.cancels.watch(rec.OperationID)
	defer unwatch()
	lease, err := e.leases.AcquireWith(ctx, rec.Resource.Key(), rec.OperationID, e.cfg.LeaseTTL,
		func(tx *sqlite.Tx, _ *coordinator.Lease) error { return save(tx) })
	switch {
	case errors.Is(err, coordinator.ErrLeaseHeld):
		if e.turns.wait(ctx, rec.Resource.Key(), e.cfg.LocalWait) {
			return Result{}, true // held here a moment ago: read and try again
		}
		return e.busy(), false
	case errors.Is(err, ErrStale):
		return Result{}, true
	case errors.Is(err, schema.ErrAlreadyTerminal):
		return done(), false
	case err != nil:
		return failed(err), false
	}
	if lease.Preempted != nil {
		log.Info("took over an expired lease", zap.String(LogEvent, "lease_preempted"),
			zap.String("previousOwner", coordinator.LogOwner(lease.Preempted.Owner)), zap.Duration("expiredFor", lease.Preempted.ExpiredFor))
	}
	// A panic from here on (a bug in an action or in the loop) must not
	// leave the resource locked until the lease expires: the lease is
	// released (after the keepalive has stopped, below) and the record
	// left as a crash would leave it, and the queue counts the failure.
	defer func() {
		if p := recover(); p != nil {
			res, stale = e.recovered(ctx, log, lease, p), false
		}
	}()
	leave := e.turns.enter(rec.Resource.Key())
	defer leave() // also when the lease was lost
	kctx, stop := e.leases.KeepAlive(ctx, lease)
	defer stop()
	r := &runner{e: e, ctx: kctx, parent: ctx, drain: queue.Draining(ctx), lease: lease, rec: &run, target: tg, payload: payload, inst: inst, log: log, started: preStart, leave: leave}
	r.cancelled = cancelled
	if run.CancellationRequested && !r.probeOwed() {
		res, _ := r.boundary()
		return res, false
	}
	if unavailable != nil {
		// (Also when a cancellation was requested after an attempt that
		// may have been applied: without the installation nothing can
		// check it, so the record must not say cancelled.)
		return r.finish(schema.StatusFailed, nil, CategoryInstallationUnavailable, unavailable.Error()), false
	}
	// A cancellation after an attempt that may have been applied is
	// recorded only once the probe has looked: the loop probes first.
	return r.loop(), false
}

// recovered handles a panic that ended an operation's run under its
// lease: it logs it with its stack and releases the lease without saving
// the record, which stays as the last fenced save left it (running, with
// an attempt whose end is not recorded if the panic came during one, so
// the next run probes before it calls again). The operation fails this
// delivery: the queue sends it back after its failure backoff and
// dead-letters it if it keeps failing.
//
// The panic's value is logged only when the runtime raised it: a value
// given to panic by code may hold anything, payload content included.
func (e *Executor) recovered(ctx context.Context, log *zap.Logger, lease *coordinator.Lease, p any) Result {
	what := fmt.Sprintf("a value of type %T", p)
	if re, ok := p.(runtime.Error); ok {
		what = re.Error()
	}
	log.Error("operation panicked; lease released", zap.String(LogEvent, "operation_panicked"),
		zap.String("panic", what), zap.Stack("stack"))
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := e.leases.ReleaseWith(rctx, lease, nil); err != nil && !errors.Is(err, coordinator.ErrLeaseLost) {
		log.Warn("lease not released after a panic; it expires", zap.String(LogEvent, "release_failed"), zap.Error(err))
	}
	return failed(fmt.Errorf("executor: panic while processing: %s", what))
}

// installation finds the installation the operation runs as. unavailable
// is set when baton may not act on the repository (the operation fails).
func (e *Executor) installation(ctx context.Context, rec *schema.Record, tg schema.Target) (id int64, unavailable, err error) {
	if e.installs == nil {
		if rec.InstallationID == 0 {
			return 0, errors.New("no installation covers " + tg.FullName()), nil
		}
		return rec.InstallationID, nil, nil
	}
	id, err = e.installs.InstallationOf(ctx, tg.Owner, tg.Repo)
	if err != nil {
		if schema.ErrorCode(err) == schema.CodeForbidden || schema.ErrorCode(err) == schema.CodeNotFound {
			return 0, err, nil
		}
		return 0, nil, err
	}
	if rec.InstallationID != 0 && rec.InstallationID != id {
		same, err := e.sameAccount(ctx, rec.InstallationID, id)
		if err != nil {
			return 0, nil, err
		}
		if !same {
			return 0, fmt.Errorf("repository %s moved from installation %d to %d", tg.FullName(), rec.InstallationID, id), nil
		}
	}
	return id, nil, nil
}

// AccountResolver is what an InstallationResolver may also implement
// (*app.Installations does): the installations of the GitHub accounts of
// ids, ids included.
type AccountResolver interface {
	SameAccountInstallations(ctx context.Context, ids []int64) ([]int64, error)
}

// sameAccount says whether installation to is of the account of
// installation from: the App was uninstalled from the account and
// installed again (an account has one installation of an App at a time),
// and an operation submitted for the first runs on the second, as the
// tokens bound to the first act on it. A repository that went to another
// account's installation (transferred) is not the same.
func (e *Executor) sameAccount(ctx context.Context, from, to int64) (bool, error) {
	ar, ok := e.installs.(AccountResolver)
	if !ok {
		return false, nil
	}
	ids, err := ar.SameAccountInstallations(ctx, []int64{from})
	if err != nil {
		return false, err
	}
	return slices.Contains(ids, to), nil
}

// maxProbeFailures is how many probes that could not tell (a 5xx, a
// timeout) an operation tries before it gives up.
const maxProbeFailures = 5

// maxNotSent is how many calls in a row an operation may fail to send for
// want of an installation token (the exchange answered 5xx, or not at
// all) before it fails: such a failure spends no attempt, and GitHub
// failing every exchange must not keep the operation going forever.
const maxNotSent = 5

// runner carries one operation through its attempts under its lease.
type runner struct {
	e         *Executor
	ctx       context.Context // ends when the lease is lost or the worker stops
	parent    context.Context
	drain     <-chan struct{} // closed when the worker begins to stop (queue.Draining)
	lease     *coordinator.Lease
	rec       *schema.Record
	target    schema.Target
	payload   any
	inst      int64
	log       *zap.Logger
	cancelled <-chan struct{}
	leave     func() // records the resource left here (see turnstile)
	client    *github.Client
	// probeFailures counts the probes that could not tell.
	probeFailures int
	// tokenRenewed is set once the run asked for a new installation token
	// after GitHub refused one (renewToken).
	tokenRenewed bool
	// started is true while the last attempt in the record is one whose
	// start was saved ahead of its call (see process) and that has not
	// been made yet.
	started bool
	// refused is set when a call was refused for good (not retryable) after
	// an earlier attempt of the operation that may have been applied: the
	// refusal may be GitHub answering an effect that is already there (a
	// merge that went through after its call timed out and after a probe
	// missed it), so the loop probes once more and fails with this only if
	// the probe finds nothing.
	refused *Classification
}

// unstart takes back an attempt recorded ahead of a call that is not
// going to be made.
func (r *runner) unstart() {
	if r.started {
		r.started = false
		r.rec.Attempts--
		r.rec.AttemptLog = r.rec.AttemptLog[:len(r.rec.AttemptLog)-1]
	}
}

func (r *runner) loop() Result {
	e := r.e
	act := actions[r.rec.Action]
	client, err := e.gh.Installation(r.inst)
	if err != nil {
		return r.finish(schema.StatusFailed, nil, CategoryInternal, err.Error())
	}
	r.client = client
	// An earlier attempt that never recorded its end (a crash, a lost
	// lease) or that ended ambiguously may have been applied.
	// (An attempt recorded ahead of its call is not one of those.)
	probe := !r.started && lastAttemptAmbiguous(r.rec)
	for {
		if res, stop := r.boundary(); stop {
			return res
		}
		if r.rec.CancellationRequested {
			// boundary let it go on: a probe is owed before the record
			// may say cancelled. Nothing but probes happens now.
			probe = true
		}
		if isClosed(r.drain) {
			// The worker is stopping: no new call (nor probe) starts;
			// the operation goes back to the queue as it is.
			return r.requeue(0)
		}
		if w := e.pauses.remaining(r.inst, e.now()); w > 0 {
			if w > e.cfg.MaxInlineWait {
				return r.requeue(w)
			}
			if res, stop := r.wait(w, false); stop {
				return res
			}
			continue
		}
		if probe {
			res, stop, again := r.probe(act)
			if stop {
				return res
			}
			if again {
				continue
			}
			// It found nothing (or the action has no probe). Round the
			// loop again, so that a cancellation or a stop that came
			// meanwhile is seen before a new call.
			probe = false
			if cl := r.refused; cl != nil {
				return r.finish(schema.StatusFailed, nil, cl.Category, cl.Message)
			}
			continue
		}
		if !r.started && r.rec.Attempts >= r.rec.MaxAttempts {
			return r.finish(schema.StatusFailed, nil, r.rec.LastErrorCategory, r.rec.LastErrorMessage)
		}
		paced, err := r.pace()
		var rq paceRequeue
		switch {
		case errors.As(err, &rq):
			return r.requeue(rq.delay)
		case err != nil:
			continue // the lease was lost or the worker stops: see boundary
		}
		res, stop, ambiguous := r.attempt(act, paced)
		if stop {
			return res
		}
		probe = ambiguous
	}
}

// pace waits for the installation's pace, if pacing is on; a
// cancellation ends the wait (the loop's boundary then sees it).
func (r *runner) pace() (func(), error) {
	return r.e.pacer.acquire(r.ctx, r.cancelled, r.drain, r.inst)
}

// boundary is checked between attempts: cancellation requested, lease
// lost, worker stopping. A cancellation is recorded at once unless an
// earlier attempt may have been applied (probeOwed): the record must not
// say cancelled before the probe has looked, so boundary lets the loop go
// on to probe (and to nothing else).
func (r *runner) boundary() (Result, bool) {
	select {
	case <-r.cancelled:
		r.rec.CancellationRequested = true
	default:
	}
	if r.rec.CancellationRequested {
		r.cancelled = nil // seen: a closed channel would fire again and again
		if !r.probeOwed() {
			return r.finish(schema.StatusCancelled, nil, CategoryCancelled, "cancelled before the next attempt"), true
		}
	}
	if err := r.ctx.Err(); err != nil {
		if errors.Is(context.Cause(r.ctx), coordinator.ErrLeaseLost) {
			r.log.Warn("lease lost; stopping", zap.String(LogEvent, "lease_lost"))
			return r.e.busy(), true
		}
		// The worker is stopping: leave the operation for the next one.
		return r.requeue(0), true
	}
	return Result{}, false
}

// probeOwed reports whether the last attempt may have been applied without
// baton knowing (see lastAttemptAmbiguous) and the action can check it.
func (r *runner) probeOwed() bool {
	return !r.started && (lastAttemptAmbiguous(r.rec) || r.refused != nil) && hasProbe(actions[r.rec.Action])
}

// wait sleeps d unless the operation is cancelled, the lease lost or the
// worker stops first; the record is polled for a cancellation requested
// from another process. A worker that begins to stop (its queue consumer
// draining) does not sit out the wait: the operation goes back to the
// queue for what is left of it, spending no attempt.
//
// A cancellation that cannot be recorded yet because a probe is owed (see
// boundary) ends the wait when probeNow is set (a backoff after an
// ambiguous failure: the probe runs at once); otherwise (the wait follows
// a probe that could not tell, or is a pause GitHub imposed) the wait goes
// on.
func (r *runner) wait(d time.Duration, probeNow bool) (Result, bool) {
	end := time.Now().Add(d)
	t := time.NewTimer(d)
	defer t.Stop()
	poll := time.NewTicker(r.e.cfg.CancelPoll)
	defer poll.Stop()
	for {
		select {
		case <-t.C:
			return Result{}, false
		case <-r.drain:
			if res, stop := r.boundary(); stop {
				return res, true
			}
			return r.requeue(max(time.Until(end), time.Millisecond)), true
		case <-r.cancelled:
			r.rec.CancellationRequested = true
			if res, stop := r.boundary(); stop || probeNow {
				return res, stop
			}
		case <-r.ctx.Done():
			return r.boundary()
		case <-poll.C:
			if r.rec.CancellationRequested {
				continue // known already: a probe is owed
			}
			if cur, err := r.e.store.Get(r.ctx, r.rec.OperationID); err == nil && cur.CancellationRequested {
				r.rec.CancellationRequested = true
				if res, stop := r.boundary(); stop || probeNow {
					return res, stop
				}
			}
		}
	}
}

// probe checks the action's post-condition. stop ends Process with res;
// again means go round the loop again (a wait was imposed).
func (r *runner) probe(act action) (res Result, stop, again bool) {
	if !hasProbe(act) {
		return Result{}, false, false
	}
	if err := r.lease.AssertOwned(); err != nil {
		return r.e.busy(), true, false
	}
	start := r.e.now()
	ctx, cancel := r.e.callCtx(r.ctx, r.parent)
	isDone, result, resp, err := act.probe(withGitHubClock(withApp(ctx, r.e.gh.identity), r.e.gh.clockSkew), r.client, r.rec, r.target, r.payload)
	cl := Classify(err, r.e.now()) // before cancel: see attempt
	cancel()
	if err != nil && r.parent.Err() != nil {
		return r.interrupted("probe"), true, false
	}
	a := schema.Attempt{Number: r.rec.Attempts, StartedAt: start, EndedAt: r.e.now(), Probe: true}
	if resp != nil {
		a.HTTPStatus, a.RequestID = resp.StatusCode, resp.Header.Get("X-Github-Request-Id")
	}
	if err == nil {
		r.rec.AppendAttempt(a)
		if isDone {
			r.log.Info("probe found the effect of an earlier attempt", zap.String(LogEvent, "probe_found"))
			return r.finish(schema.StatusSucceeded, result, "", ""), true, false
		}
		return Result{}, false, false
	}
	a.ErrorCategory, a.ErrorMessage, a.NotSent = cl.Category, cl.Message, cl.NotSent
	if a.HTTPStatus == 0 {
		a.HTTPStatus, a.RequestID = cl.Status, cl.RequestID
	}
	r.rec.AppendAttempt(a)
	r.rec.LastErrorCategory, r.rec.LastErrorMessage = cl.Category, cl.Message
	if cl.PauseInstallation {
		r.pause(cl)
		return Result{}, false, true
	}
	r.renewToken(&cl)
	if !cl.Retryable {
		return r.finish(schema.StatusFailed, nil, cl.Category, cl.Message), true, false
	}
	// The probe could not tell; it must not be skipped, so it is tried
	// again after a wait. Probes only read: they have a budget of their
	// own (maxProbeFailures), and do not spend the operation's attempts —
	// a last attempt that failed ambiguously is still probed. A
	// post-condition that cannot be checked at all ends the operation.
	r.probeFailures++
	if r.probeFailures >= maxProbeFailures {
		return r.finish(schema.StatusFailed, nil, cl.Category, "could not check whether an earlier attempt was applied: "+cl.Message), true, false
	}
	delay := r.e.backoff(r.probeFailures, cl.Wait)
	if res, stop := r.saveBetween(delay); stop {
		return res, true, false
	}
	if res, stop := r.wait(delay, false); stop {
		return res, true, false
	}
	return Result{}, false, true
}

// attempt makes one call. The attempt's start is saved (fenced) before
// the call, so that a crash during it leaves a record that says an attempt
// may have been applied.
func (r *runner) attempt(act action, paced func()) (res Result, stop, ambiguous bool) {
	e := r.e
	// paced is called as soon as the response is back (below); deferred
	// too, so that a panic gives the installation's pace its slot back.
	defer paced()
	if r.started {
		// Recorded with the lease: make the call now.
		r.rec.AttemptLog[len(r.rec.AttemptLog)-1].StartedAt = e.now()
	} else {
		r.rec.Attempts++
		now := e.now()
		r.rec.AppendAttempt(schema.Attempt{Number: r.rec.Attempts, StartedAt: now})
		r.rec.UpdatedAt = now
		if err := r.saveFenced(); err != nil {
			paced()
			return r.lost(err), true, false
		}
		// Recorded ahead of its call from here on, as process records
		// the first one: a cancellation that came meanwhile takes it back.
		r.started = true
	}
	// A cancellation requested since the boundary (the save brings back
	// one saved meanwhile; Cancel in this process closes r.cancelled) is
	// seen before the call, not after it.
	select {
	case <-r.cancelled:
		r.rec.CancellationRequested = true
	default:
	}
	if r.rec.CancellationRequested {
		paced()
		// No probe is owed with the call not made (r.started): the
		// boundary records the operation cancelled.
		res, _ := r.boundary()
		return res, true, false
	}
	r.started = false
	a := r.rec.AttemptLog[len(r.rec.AttemptLog)-1]
	if err := r.lease.AssertOwned(); err != nil {
		paced()
		return e.busy(), true, false
	}
	ctx, cancel := e.callCtx(r.ctx, r.parent)
	// An action that reads before it mutates checks the lease again
	// immediately before the mutating call.
	// One that must make something durable first (update_ref's ref
	// before a forced update) saves the record, fenced.
	ctx, sent := withSentMark(ctx)
	result, resp, err := act.do(withSave(withGuard(ctx, r.lease.AssertOwned), r.saveFenced), r.client, r.rec, r.target, r.payload)
	// Classified while the call's context lives: a token exchange refused
	// with a 403 is told apart by its body (see exchangeMessage), which its
	// request's cancellation would cut off where it has not all arrived.
	cl := Classify(err, e.now())
	cancel()
	if err != nil && cl.Category == CategoryTimeout && !cl.NotSent && !sent.Load() {
		// The call's time ran out before any of its requests was sent:
		// the installation token's exchange had not answered (go-github
		// then returns the context's error alone, without the exchange's).
		// Nothing can have been applied.
		cl.Ambiguous, cl.NotSent = false, true
		cl.Message = "installation token: " + cl.Message
	}
	paced()
	if err != nil && r.parent.Err() != nil {
		return r.interrupted("call"), true, false
	}
	var ge *guardError
	if errors.As(err, &ge) {
		// The lease ended between the action's read and its mutation:
		// nothing was changed, but the record cannot be saved any more.
		r.log.Warn("lease lost before the call; stopping", zap.String(LogEvent, "lease_lost"))
		return e.busy(), true, false
	}
	last := &r.rec.AttemptLog[len(r.rec.AttemptLog)-1]
	last.EndedAt = e.now()
	if resp != nil {
		last.HTTPStatus, last.RequestID = resp.StatusCode, resp.Header.Get("X-Github-Request-Id")
	}
	if err == nil {
		e.metrics.attempts.WithLabelValues(r.rec.Action, "ok").Inc()
		r.log.Info("attempt succeeded", zap.String(LogEvent, "attempt_succeeded"), zap.Int(LogAttempt, a.Number))
		return r.finish(schema.StatusSucceeded, result, "", ""), true, false
	}
	last.ErrorCategory, last.ErrorMessage, last.NotSent = cl.Category, cl.Message, cl.NotSent
	if last.HTTPStatus == 0 || cl.NotSent {
		// (A request go-github refused itself carries a made-up 403.)
		last.HTTPStatus, last.RequestID = cl.Status, cl.RequestID
	}
	r.rec.LastErrorCategory, r.rec.LastErrorMessage = cl.Category, cl.Message
	e.metrics.attempts.WithLabelValues(r.rec.Action, cl.Category).Inc()
	r.renewToken(&cl)
	r.log.Info("attempt failed", zap.String(LogEvent, "attempt_failed"), zap.Int(LogAttempt, a.Number),
		zap.String(LogErrorCategory, cl.Category), zap.Int("httpStatus", last.HTTPStatus), zap.Bool("retryable", cl.Retryable))
	if cl.PauseInstallation {
		r.pause(cl)
	}
	if cl.RenewToken && cl.Retryable {
		// GitHub refused the token, not the request, which was not
		// applied: the call goes again at once with a new token and
		// spends no attempt (once per run: renewToken), so that a last
		// attempt gets its renewal too.
		r.rec.Attempts--
		return Result{}, false, false
	}
	if !cl.Retryable {
		if hasProbe(act) && appliedBefore(r.rec) {
			// An earlier attempt may have been applied after all (GitHub
			// finishing a timed-out merge, a 202's background update):
			// a refusal now (405 already merged, 422, a conflict) may be
			// that effect. The loop probes first; it fails with this
			// only if the probe finds nothing.
			r.refused = &cl
			return Result{}, false, true
		}
		return r.finish(schema.StatusFailed, nil, cl.Category, cl.Message), true, false
	}
	long := cl.Wait > e.cfg.MaxInlineWait
	// The backoff counts the attempts spent, or for a call never sent
	// for want of a token, the calls in a row that failed so.
	tries := r.rec.Attempts
	tokenless := cl.NotSent && !cl.PauseInstallation
	switch {
	case tokenless:
		// The installation token could not be had (its exchange answered
		// 5xx, or not at all): the call was never sent. It spends no
		// attempt and owes no probe, so that an operation of one attempt
		// is not failed, nor a retry held up, by a request that never
		// reached GitHub. Such failures have a budget of their own,
		// counted on the record so that it holds across runs and
		// restarts: after maxNotSent in a row the operation fails.
		r.rec.Attempts--
		if tries = notSentInARow(r.rec); tries >= maxNotSent {
			return r.finish(schema.StatusFailed, nil, cl.Category, cl.Message), true, false
		}
	case cl.NotSent || (cl.PauseInstallation && long):
		// A request refused without being applied — never sent, or
		// stopped by a rate limit (the refusals that pause the
		// installation) — spends no attempt when it is to wait long: the
		// operation goes back to the queue. A go-github refusal (never
		// sent) spends none whatever the wait. An ambiguous failure (a
		// 5xx that may have been applied) spends its attempt in any case.
		r.rec.Attempts--
		if !long {
			// The installation's pause (set above) is waited out by the
			// loop.
			return Result{}, false, false
		}
	case r.rec.Attempts >= r.rec.MaxAttempts:
		if cl.Ambiguous {
			// The last call may have been applied: the loop probes
			// before it gives the operation up.
			return Result{}, false, true
		}
		return r.finish(schema.StatusFailed, nil, cl.Category, cl.Message), true, false
	}
	if long {
		// A long wait: back to the queue. After an attempt that counts,
		// the probe owed for an ambiguous failure runs when it returns.
		last.WaitMillis = cl.Wait.Milliseconds()
		return r.requeue(cl.Wait), true, false
	}
	delay := e.backoff(tries, cl.Wait)
	last.WaitMillis = delay.Milliseconds()
	if res, stop := r.saveBetween(delay); stop {
		return res, true, false
	}
	if res, stop := r.wait(delay, !tokenless); stop {
		return res, true, false
	}
	return Result{}, false, cl.Ambiguous
}

// renewToken drops the installation's client when GitHub refused its
// token, and takes a new one: the next call exchanges a new token. The
// client is dropped only if it is still the one whose token was refused:
// workers that met the same 401 together share one new token. Operations
// of the installation running meanwhile finish their call with the client
// they hold. It does so once per run: a token refused again is a refusal
// (cl is made not retryable), as the design has every 401.
func (r *runner) renewToken(cl *Classification) {
	if !cl.RenewToken {
		return
	}
	if r.tokenRenewed {
		cl.Retryable = false
		return
	}
	r.tokenRenewed = true
	r.e.gh.forgetClient(r.inst, r.client)
	if c, err := r.e.gh.Installation(r.inst); err == nil {
		r.client = c
	}
	r.log.Info("installation token refused; a new one is asked for", zap.String(LogEvent, "token_renewed"))
}

// interrupted ends the run whose call (or probe) the worker's hard stop
// cut short: the stop's deadline passed while it was in flight, and the
// process is about to exit. As after a crash, the attempt stays without an
// end, so it counts and is probed before anything else when the operation
// runs again; unlike after a crash, the lease is released now, so it runs
// again as soon as a worker takes it, not once the lease has expired.
func (r *runner) interrupted(what string) Result {
	r.log.Warn(what+" in flight interrupted by the stop's deadline; sent back to the queue", zap.String(LogEvent, "call_interrupted"))
	return r.requeue(0)
}

// saveBetween saves the record before a wait, with nextAttemptAt.
func (r *runner) saveBetween(delay time.Duration) (Result, bool) {
	now := r.e.now()
	next := now.Add(delay)
	r.rec.NextAttemptAt = &next
	r.rec.UpdatedAt = now
	if err := r.saveFenced(); err != nil {
		return r.lost(err), true
	}
	r.rec.NextAttemptAt = nil
	return Result{}, false
}

func (r *runner) saveFenced() error {
	save, err := r.e.writer.SaveFunc(r.rec, false)
	if err != nil {
		return err
	}
	return r.e.leases.Fenced(context.WithoutCancel(r.ctx), r.lease, save)
}

// lost turns a failed fenced save into the queue's answer.
func (r *runner) lost(err error) Result {
	if errors.Is(err, coordinator.ErrLeaseLost) {
		r.log.Warn("lease lost before a save; stopping", zap.String(LogEvent, "lease_lost"))
		return r.e.busy()
	}
	if errors.Is(err, schema.ErrAlreadyTerminal) {
		return done()
	}
	return failed(err)
}

// requeue releases the resource and sends the operation back to the
// queue for delay, recording when it runs again.
func (r *runner) requeue(delay time.Duration) Result {
	now := r.e.now()
	r.rec.UpdatedAt = now
	if delay > 0 {
		next := now.Add(delay)
		r.rec.NextAttemptAt = &next
	}
	if err := r.release(); err != nil {
		return r.lost(err)
	}
	r.log.Info("sent back to the queue", zap.String(LogEvent, "requeued"), zap.Duration("delay", delay))
	return retry(delay)
}

// finish saves the terminal record in the transaction that releases the
// lease.
func (r *runner) finish(status schema.Status, result any, category, message string) Result {
	now := r.e.now()
	r.rec.Status = status
	r.rec.Outcome = schema.OutcomeFor(status)
	r.rec.CompletedAt = &now
	r.rec.UpdatedAt = now
	r.rec.NextAttemptAt = nil
	if status != schema.StatusSucceeded {
		r.rec.LastErrorCategory, r.rec.LastErrorMessage = category, message
	}
	if result != nil {
		b, err := json.Marshal(result)
		if err != nil {
			return failed(fmt.Errorf("executor: encode result: %w", err))
		}
		r.rec.Result = b
	}
	epoch := r.e.terminal.mark()
	if err := r.release(); err != nil {
		return r.lost(err)
	}
	r.e.terminal.add(r.rec.OperationID, epoch)
	fields := []zap.Field{zap.String(LogEvent, "operation_"+string(status)), zap.Int(LogAttempt, r.rec.Attempts)}
	if category != "" {
		fields = append(fields, zap.String(LogErrorCategory, category))
	}
	r.log.Info("operation finished", fields...)
	r.e.metrics.finished(r.rec)
	if f := r.e.cfg.OnFinished; f != nil {
		f(r.rec.Clone())
	}
	return Result{Kind: ResultDone, finished: true}
}

// pause holds every operation of the installation for the wait GitHub's
// rate limit named. The pause's start is logged once, at Warn: all of an
// installation's work stops, which an operator should hear of without
// reading every attempt; an extension of a pause in force is not.
func (r *runner) pause(cl Classification) {
	now := r.e.now()
	until := now.Add(cl.Wait)
	if r.e.pauses.set(r.inst, now, until) {
		r.log.Warn("installation paused by GitHub's rate limit; its operations wait",
			zap.String(LogEvent, "installation_paused"), zap.Int64(LogInstallation, r.inst),
			zap.String(LogErrorCategory, cl.Category), zap.Duration("wait", cl.Wait), zap.Time("until", until.UTC()))
	}
}

func (r *runner) release() error {
	r.unstart()
	save, err := r.e.writer.SaveFunc(r.rec, false)
	if err != nil {
		return err
	}
	// The release must reach the store even when the worker is stopping.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.parent), 10*time.Second)
	defer cancel()
	if err := r.e.leases.ReleaseWith(ctx, r.lease, save); err != nil {
		return err
	}
	r.leave()
	return nil
}

// lastAttemptAmbiguous reports whether the operation's last attempt may
// have been applied without baton knowing: it never recorded an end, or
// ended in an ambiguous failure.
func lastAttemptAmbiguous(rec *schema.Record) bool {
	for i := len(rec.AttemptLog) - 1; i >= 0; i-- {
		a := rec.AttemptLog[i]
		if a.Probe {
			if a.ErrorCategory == "" {
				return false // a probe after it looked and found nothing
			}
			continue // a probe that could not tell settles nothing
		}
		if a.NotSent {
			continue // a call never sent changed nothing either
		}
		return mayHaveApplied(a)
	}
	return false
}

// notSentInARow counts the calls at the end of the operation's attempt
// log that failed unsent for want of an installation token (see
// maxNotSent); a go-github refusal for a rate limit, which pauses the
// installation and so is bounded by GitHub's wait, ends the count.
func notSentInARow(rec *schema.Record) int {
	n := 0
	for i := len(rec.AttemptLog) - 1; i >= 0; i-- {
		a := rec.AttemptLog[i]
		if a.Probe || !a.NotSent {
			break
		}
		switch a.ErrorCategory {
		case CategoryServerError, CategoryNetwork, CategoryTimeout:
			n++
			continue
		}
		break
	}
	return n
}

// mayHaveApplied reports whether call attempt a may have been applied
// without baton knowing: it never recorded an end, or ended in an
// ambiguous failure.
func mayHaveApplied(a schema.Attempt) bool {
	if a.NotSent {
		return false
	}
	if a.EndedAt.IsZero() {
		return true
	}
	switch a.ErrorCategory {
	case CategoryNetwork, CategoryTimeout, CategoryServerError:
		// Conservatively ambiguous: a probe costs one read.
		return true
	}
	return false
}

// appliedBefore reports whether an attempt before the last one may have
// been applied without baton knowing (no recorded end, or an ambiguous
// failure), whatever probes found since: an effect can land after the
// probe that looked for it.
func appliedBefore(rec *schema.Record) bool {
	if len(rec.AttemptLog) == 0 {
		return false
	}
	for _, a := range rec.AttemptLog[:len(rec.AttemptLog)-1] {
		if !a.Probe && mayHaveApplied(a) {
			return true
		}
	}
	return false
}

// backoff is the delay before attempt n+1: 250 ms·2^(n−1) with jitter,
// raised to GitHub's wait when that is larger, capped at MaxBackoff.
func (e *Executor) backoff(n int, providerWait time.Duration) time.Duration {
	d := e.cfg.BaseBackoff << min(max(n-1, 0), 20)
	// Full jitter on the upper half: between d/2 and d.
	d = d/2 + time.Duration(rand.Int64N(int64(d/2)+1))
	d = max(d, providerWait)
	return min(d, e.cfg.MaxBackoff)
}

func (e *Executor) opLogger(rec *schema.Record) *zap.Logger {
	fields := []zap.Field{
		zap.String(LogOperationID, rec.OperationID),
		zap.String(LogAction, rec.Action),
		zap.String(LogResourceType, rec.Resource.Type),
		zap.String(LogResourceID, rec.Resource.ID),
	}
	if rec.CorrelationID != "" {
		fields = append(fields, zap.String(LogCorrelationID, rec.CorrelationID))
	}
	return e.log.With(fields...)
}
