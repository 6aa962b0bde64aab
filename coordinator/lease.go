package coordinator

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/baton-dev/baton/internal/sqlite"
)

// Lease is the handle of a lease this process holds. Its Fence (Key, Owner,
// Token) and AcquiredAt, Preempted never change; the expiry and the local
// deadline move with each renewal and are read through methods. A Lease is
// safe for concurrent use: a KeepAlive goroutine renews it while its
// holder calls AssertOwned.
type Lease struct {
	Fence
	// AcquiredAt is when the store granted the lease.
	AcquiredAt time.Time
	// Preempted is the expired lease this acquisition took over, if any.
	Preempted *Preemption

	c  *Coordinator
	mu sync.Mutex
	// ttl is the TTL of the last grant; expiresAt its expiry in the store;
	// deadline the local deadline: the time the grant was asked for, plus
	// ttl, minus the safety margin.
	ttl       time.Duration
	expiresAt time.Time
	deadline  time.Time
	// lost, once set, is final: the lease was released, or a renewal, a
	// fenced write or the keepalive found it lost.
	lost *LeaseLostError
	kept bool // a KeepAlive runs on this lease
	// releasing: a Release is in flight. A renewal that lands in the same
	// write batch after the release's delete finds no lease; the keepalive
	// must not report that as a loss.
	releasing bool
}

func (c *Coordinator) newLease(g Grant, asked time.Time) *Lease {
	return &Lease{
		Fence:      g.Fence,
		AcquiredAt: g.AcquiredAt,
		Preempted:  g.Preempted,
		c:          c,
		ttl:        g.TTL,
		expiresAt:  g.ExpiresAt,
		deadline:   asked.Add(g.TTL - c.marginFor(g.TTL)),
	}
}

// AssertOwned returns nil if the lease may still be used: it has not been
// released or found lost, and its local deadline (expiry minus the safety
// margin) has not passed. It does no I/O; call it immediately before each
// act the lease guards. Otherwise it returns a *LeaseLostError.
func (l *Lease) AssertOwned() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost != nil {
		return l.lost
	}
	// The store judges expiry by the wall clock; time.Time compares by the
	// monotonic clock when both sides have it. Either passing the deadline
	// ends the lease here, so a wall clock stepped forward (which makes the
	// store expire the lease early) cannot leave this holder trusting it.
	now := l.c.clock.Now()
	if !now.Before(l.deadline) || !now.Round(0).Before(l.deadline.Round(0)) {
		return l.lostError(LostDeadline, nil)
	}
	return nil
}

// ExpiresAt returns the lease's expiry in the store, as of the last
// acquisition or renewal.
func (l *Lease) ExpiresAt() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.expiresAt
}

// Deadline returns the local deadline: after it, AssertOwned fails unless
// a renewal moved it.
func (l *Lease) Deadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline
}

// TTL returns the TTL of the last acquisition or renewal.
func (l *Lease) TTL() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ttl
}

func (l *Lease) lostError(r LostReason, err error) *LeaseLostError {
	return &LeaseLostError{Key: l.Key, Owner: l.Owner, Token: l.Token, Reason: r, Err: err}
}

// markLost records that the lease is lost (or released); the first reason
// stays.
func (l *Lease) markLost(e *LeaseLostError) {
	l.mu.Lock()
	if l.lost == nil {
		l.lost = e
	}
	l.mu.Unlock()
}

// noteErr marks the lease lost if err says so.
func (l *Lease) noteErr(err error) {
	var lost *LeaseLostError
	// Only a loss of this lease: the caller's SQL in Fenced or ReleaseWith
	// may report another lease's.
	if errors.As(err, &lost) && lost.Key == l.Key && lost.Owner == l.Owner && lost.Token == l.Token {
		l.markLost(lost)
	}
}

func (l *Lease) setReleasing(v bool) {
	l.mu.Lock()
	l.releasing = v
	l.mu.Unlock()
}

// releaseStarted reports whether the holder released the lease or is
// releasing it.
func (l *Lease) releaseStarted() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.releasing || (l.lost != nil && l.lost.Reason == LostReleased)
}

// released reports whether the holder released the lease.
func (l *Lease) released() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lost != nil && l.lost.Reason == LostReleased
}

// Acquire takes the lease on key for owner, for ttl (MinTTL to MaxTTL).
//
// It fails with *LeaseHeldError (errors.Is ErrLeaseHeld) while the key has
// a live lease, whoever holds it: the same owner asking again gets
// lease_held too, because handing a live lease out a second time would let
// two handles of one owner act at once, and the older handle's
// AssertOwned would keep trusting a lease whose token is gone. An expired
// lease is taken over; the returned Lease's Preempted says from whom and
// how long it had been expired, and the history records the takeover.
//
// The returned lease carries a fencing token greater than every token
// issued before, for any key. Bad input is *InvalidRequestError.
func (c *Coordinator) Acquire(ctx context.Context, key, owner string, ttl time.Duration) (*Lease, error) {
	return c.AcquireWith(ctx, key, owner, ttl, nil)
}

// AcquireWith is Acquire that runs fn in the same transaction, right after
// the lease is granted: fn sees the new lease (and its token) and may write
// to baton's database through tx. If fn fails, the acquisition is undone
// (no lease, no token spent, no history) and fn's error is returned. fn
// runs on the database's writer: it must be short and wait for nothing.
// The executor records an operation as running this way, in one fsync with
// the lease.
func (c *Coordinator) AcquireWith(ctx context.Context, key, owner string, ttl time.Duration, fn func(*sqlite.Tx, *Lease) error) (*Lease, error) {
	l, err := c.acquire(ctx, key, owner, ttl, fn)
	r := result(err)
	if err == nil && l.Preempted != nil {
		r = resultPreempted
	}
	c.metrics.acquires.WithLabelValues(r).Inc()
	return l, err
}

func (c *Coordinator) acquire(ctx context.Context, key, owner string, ttl time.Duration, fn func(*sqlite.Tx, *Lease) error) (*Lease, error) {
	if err := validateKey(key); err != nil {
		return nil, err
	}
	if err := validateOwner(owner); err != nil {
		return nil, err
	}
	if err := validateTTL(ttl); err != nil {
		return nil, err
	}
	asked := c.clock.Now()
	var l *Lease
	var then func(*sqlite.Tx, Grant) error
	if fn != nil {
		then = func(tx *sqlite.Tx, g Grant) error {
			l = c.newLease(g, asked)
			return fn(tx, l)
		}
	}
	g, err := c.store.Acquire(ctx, AcquireRequest{Key: key, Owner: owner, TTL: ttl}, then)
	if err != nil {
		return nil, err
	}
	if l == nil {
		l = c.newLease(g, asked)
	}
	if p := g.Preempted; p != nil {
		c.log.Info("expired lease taken over",
			zap.String(fieldEvent, eventPreempted), zap.String(fieldLeaseKey, key),
			zap.String(fieldOwner, LogOwner(owner)), zap.Int64(fieldToken, g.Token),
			zap.String(fieldPrevOwner, LogOwner(p.Owner)), zap.Int64(fieldPrevToken, p.Token),
			zap.Duration(fieldExpiredFor, p.ExpiredFor))
	}
	return l, nil
}

// Renew extends the lease to expire ttl from now and moves its local
// deadline, if the caller still holds it (same owner and token, not
// expired). Otherwise it returns *LeaseLostError and marks the handle
// lost. Other errors (a busy or closed store) say nothing about the lease.
// A handle once lost stays lost, even if a later Renew succeeds.
func (c *Coordinator) Renew(ctx context.Context, l *Lease, ttl time.Duration) error {
	err := c.renew(ctx, l, ttl)
	c.metrics.renewals.WithLabelValues(result(err)).Inc()
	return err
}

func (c *Coordinator) renew(ctx context.Context, l *Lease, ttl time.Duration) error {
	if err := validateTTL(ttl); err != nil {
		return err
	}
	if l.released() {
		return l.lostError(LostReleased, nil)
	}
	asked := c.clock.Now()
	g, err := c.store.Renew(ctx, l.Fence, ttl)
	if err != nil {
		l.noteErr(err)
		return err
	}
	l.mu.Lock()
	l.ttl = g.TTL
	l.expiresAt = g.ExpiresAt
	l.deadline = asked.Add(g.TTL - c.marginFor(g.TTL))
	l.mu.Unlock()
	return nil
}

// RenewFence renews the lease f names, for holders that keep no handle (the
// HTTP API). It returns the renewed lease, *LeaseLostError if f is not the
// key's live lease, or *InvalidRequestError for bad input.
func (c *Coordinator) RenewFence(ctx context.Context, f Fence, ttl time.Duration) (Grant, error) {
	g, err := c.renewFence(ctx, f, ttl)
	c.metrics.renewals.WithLabelValues(result(err)).Inc()
	return g, err
}

func (c *Coordinator) renewFence(ctx context.Context, f Fence, ttl time.Duration) (Grant, error) {
	if err := validateFence(f); err != nil {
		return Grant{}, err
	}
	if err := validateTTL(ttl); err != nil {
		return Grant{}, err
	}
	return c.store.Renew(ctx, f, ttl)
}

// Release deletes the lease if the caller still holds it (same owner and
// token, not expired). A lost lease is reported as *LeaseLostError and
// nothing changes: a new holder keeps its lease, and an expired lease
// nobody took stays until it is taken over or reconciled. After a
// successful Release, AssertOwned fails.
func (c *Coordinator) Release(ctx context.Context, l *Lease) error {
	return c.ReleaseWith(ctx, l, nil)
}

// ReleaseWith is Release that runs fn in the same transaction, once the
// lease's row has been deleted on the condition that the caller still
// holds it (so fn runs only for the holder, and must not Guard this lease:
// its row is gone). If fn fails, the transaction is undone, the lease is
// kept and fn's error returned. The executor saves an operation's terminal
// record this way: the save is fenced, and the record and the release
// share one fsync. fn runs on the database's writer: it must be short and
// wait for nothing.
func (c *Coordinator) ReleaseWith(ctx context.Context, l *Lease, fn func(*sqlite.Tx) error) error {
	l.setReleasing(true)
	err := c.store.Release(ctx, l.Fence, fn)
	if err == nil {
		// Released, whatever a renewal racing the release noted first
		// (lost_not_held: it ran after the delete).
		l.mu.Lock()
		l.lost = l.lostError(LostReleased, nil)
		l.mu.Unlock()
	} else {
		l.noteErr(err)
		l.setReleasing(false)
	}
	c.metrics.releases.WithLabelValues(result(err)).Inc()
	return err
}

// ReleaseFence releases the lease f names, for holders that keep no
// handle. It returns *LeaseLostError if f is not the key's live lease, or
// *InvalidRequestError for bad input.
func (c *Coordinator) ReleaseFence(ctx context.Context, f Fence) error {
	err := validateFence(f)
	if err == nil {
		err = c.store.Release(ctx, f, nil)
	}
	c.metrics.releases.WithLabelValues(result(err)).Inc()
	return err
}

// Check reports whether key has a live lease, and whose.
func (c *Coordinator) Check(ctx context.Context, key string) (Status, error) {
	if err := validateKey(key); err != nil {
		return Status{}, err
	}
	return c.store.Check(ctx, key)
}
