package coordinator

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.uber.org/zap"
)

var (
	errKeepAliveRunning = errors.New("coordinator: a KeepAlive already runs for this lease")
	errRenewalInFlight  = errors.New("a renewal was still in flight at the local deadline")
)

// KeepAlive renews l every TTL/3 until stop is called or ctx ends, and
// returns a context for the holder's work. If the lease is lost, that
// context is cancelled with a *LeaseLostError as its cause
// (errors.Is(context.Cause(ctx), ErrLeaseLost)), so the holder stops before
// it acts again.
//
// Each renewal is scheduled TTL/3 after the previous one finished, on a
// timer reset after completion: renewals never overlap and never queue up
// behind a slow store. A renewal that fails for a reason that says nothing
// about the lease (a busy or closed store) is retried with backoff until
// the local deadline; a renewal that finds the lease lost, or a local
// deadline that passes first (even while a renewal is still in flight),
// ends the keepalive and cancels the context.
//
// stop cancels the returned context, waits for the keepalive goroutine to
// finish and may be called any number of times; call it before Release,
// or after: a released lease ends its keepalive quietly. At most one
// KeepAlive runs per lease; a second one returns a context already
// cancelled.
func (c *Coordinator) KeepAlive(ctx context.Context, l *Lease) (context.Context, func()) {
	kctx, cancel := context.WithCancelCause(ctx)
	if e, ok := l.AssertOwned().(*LeaseLostError); ok && e.Reason == LostReleased {
		cancel(e) // released before it was kept alive: nothing to keep
		return kctx, func() {}
	}
	l.mu.Lock()
	if l.kept {
		l.mu.Unlock()
		cancel(errKeepAliveRunning)
		return kctx, func() {}
	}
	l.kept = true
	l.mu.Unlock()
	done := make(chan struct{})
	go c.keepAlive(kctx, cancel, l, done)
	stop := sync.OnceFunc(func() {
		cancel(context.Canceled)
		<-done
		l.mu.Lock()
		l.kept = false
		l.mu.Unlock()
	})
	return kctx, stop
}

func (c *Coordinator) keepAlive(ctx context.Context, cancel context.CancelCauseFunc, l *Lease, done chan<- struct{}) {
	defer close(done)
	lose := func(e *LeaseLostError) {
		if ctx.Err() != nil || l.releaseStarted() {
			return // stopped or released meanwhile: not a loss the holder needs to hear of
		}
		l.markLost(e)
		cancel(e)
		c.metrics.lost.Inc()
		c.log.Warn("lease lost; holder cancelled",
			zap.String(fieldEvent, eventLost), zap.String(fieldLeaseKey, l.Key),
			zap.String(fieldOwner, LogOwner(l.Owner)), zap.Int64(fieldToken, l.Token),
			zap.String(fieldReason, string(e.Reason)), zap.NamedError("cause", e.Err))
	}
	if err := l.AssertOwned(); err != nil {
		if e := err.(*LeaseLostError); e.Reason == LostReleased {
			return // released meanwhile: ends quietly, as after a timer
		} else {
			lose(e)
		}
		return
	}
	timer := c.clock.NewTimer(l.TTL() / 3)
	defer timer.Stop()
	var (
		lastErr error         // of the last renewal, if it failed
		backoff time.Duration // before the next retry
	)
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C():
		}
		if l.released() {
			return
		}
		if err := l.AssertOwned(); err != nil {
			e := err.(*LeaseLostError)
			if e.Reason == LostDeadline && lastErr != nil {
				e = l.lostError(LostDeadline, lastErr)
			}
			lose(e)
			return
		}
		ttl := l.TTL()
		declared, err := c.renewBeforeDeadline(ctx, l, ttl, lastErr, lose)
		switch {
		case declared:
			return
		case err == nil:
			lastErr, backoff = nil, 0
			timer.Reset(l.TTL() / 3)
			continue
		case ctx.Err() != nil || l.released():
			return
		}
		var lost *LeaseLostError
		if errors.As(err, &lost) {
			lose(lost)
			return
		}
		// A failure that says nothing about the lease: retry, but not past
		// the local deadline (the next round declares the loss there).
		lastErr = err
		backoff = min(max(2*backoff, ttl/30, 10*time.Millisecond), ttl/6)
		wait := min(backoff, l.Deadline().Sub(c.clock.Now()))
		c.log.Warn("lease renewal failed; retrying",
			zap.String(fieldEvent, eventRenewRetry), zap.String(fieldLeaseKey, l.Key),
			zap.String(fieldOwner, LogOwner(l.Owner)), zap.Int64(fieldToken, l.Token),
			zap.Duration(fieldRetryIn, wait), zap.Error(err))
		timer.Reset(max(wait, 0))
	}
}

// renewBeforeDeadline renews l, but stops waiting at the local deadline:
// then it declares the loss at once (lose cancels the holder) and only
// afterwards waits for the renewal to finish, so the holder is stopped on
// time and renewals still never overlap. declared reports that it did.
// lastErr, the previous renewal's failure if any, goes into the loss.
func (c *Coordinator) renewBeforeDeadline(ctx context.Context, l *Lease, ttl time.Duration, lastErr error, lose func(*LeaseLostError)) (declared bool, err error) {
	rctx, rcancel := context.WithCancel(ctx)
	defer rcancel()
	res := make(chan error, 1)
	go func() { res <- c.Renew(rctx, l, ttl) }()
	deadline := c.clock.NewTimer(l.Deadline().Sub(c.clock.Now()))
	defer deadline.Stop()
	select {
	case err := <-res:
		return false, err
	case <-deadline.C():
	}
	select {
	case err := <-res: // finished as the deadline came: its answer stands
		return false, err
	default:
	}
	lose(l.lostError(LostDeadline, errors.Join(errRenewalInFlight, lastErr)))
	// The renewal may still succeed in the store; the holder, stopped,
	// releases the lease as usual.
	rcancel()
	<-res
	return true, nil
}
