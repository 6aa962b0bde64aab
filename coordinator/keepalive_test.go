package coordinator

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/sqlite"
)

// storeFuncs wraps a Store and replaces the methods whose function is set:
// a test double at the seam the package declares (Config.Store).
type storeFuncs struct {
	Store
	renew   func(ctx context.Context, f Fence, ttl time.Duration) (Grant, error)
	release func(ctx context.Context, f Fence, before func(*sqlite.Tx) error) error
}

func (s storeFuncs) Release(ctx context.Context, f Fence, before func(*sqlite.Tx) error) error {
	if s.release != nil {
		return s.release(ctx, f, before)
	}
	return s.Store.Release(ctx, f, before)
}

func (s storeFuncs) Renew(ctx context.Context, f Fence, ttl time.Duration) (Grant, error) {
	if s.renew != nil {
		return s.renew(ctx, f, ttl)
	}
	return s.Store.Renew(ctx, f, ttl)
}

// withRenew makes the bundle's coordinator renew through fn, which gets
// the real store to call on.
func withRenew(fn func(real Store, ctx context.Context, f Fence, ttl time.Duration) (Grant, error)) setup {
	return setup{store: func(real Store) Store {
		return storeFuncs{Store: real, renew: func(ctx context.Context, f Fence, ttl time.Duration) (Grant, error) {
			return fn(real, ctx, f, ttl)
		}}
	}}
}

// waitTimersAt waits until exactly the given timers are armed.
func waitTimersAt(t *testing.T, clock *FakeClock, want ...time.Time) {
	t.Helper()
	if err := clock.WaitTimers(waitCtx(t), func(got []time.Time) bool { return slices.EqualFunc(got, want, time.Time.Equal) }); err != nil {
		t.Fatalf("timers armed %v, want %v: %v", clock.Timers(), want, err)
	}
}

func waitDone(t *testing.T, ctx context.Context) {
	t.Helper()
	select {
	case <-ctx.Done():
	case <-waitCtx(t).Done():
		t.Fatal("holder context not cancelled")
	}
}

// With a healthy store, the keepalive renews every TTL/3 after the last
// renewal finished, moving the expiry and the local deadline, until
// stopped; the lease can then be released.
func TestKeepAliveRenews(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	l := mustAcquire(t, b.c, testKey, "op-a", 30*time.Second)
	work, stop := b.c.KeepAlive(context.Background(), l)
	for i := 1; i <= 10; i++ {
		at := epoch.Add(time.Duration(i) * 10 * time.Second)
		waitTimersAt(t, b.clock, at)
		b.clock.Set(at)
		// The renewal has finished once the next one is scheduled.
		waitTimersAt(t, b.clock, at.Add(10*time.Second))
		if !l.ExpiresAt().Equal(at.Add(30*time.Second)) || !l.Deadline().Equal(at.Add(28*time.Second)) {
			t.Fatalf("renewal %d: expires %v deadline %v", i, l.ExpiresAt(), l.Deadline())
		}
	}
	if err := l.AssertOwned(); err != nil || work.Err() != nil {
		t.Fatalf("after 100s of renewals: %v %v", err, work.Err())
	}
	stop()
	stop() // twice is fine
	if !errors.Is(context.Cause(work), context.Canceled) {
		t.Errorf("cause after stop: %v", context.Cause(work))
	}
	if n := len(b.clock.Timers()); n != 0 {
		t.Errorf("%d timers armed after stop", n)
	}
	if err := b.c.Release(context.Background(), l); err != nil {
		t.Fatal(err)
	}
}

// The pacing test: a store whose renewal takes longer than TTL/3. While a
// renewal is in flight no other starts, and when it finishes the next one
// is scheduled TTL/3 later: no overlap, no queue of missed renewals.
func TestKeepAlivePacing(t *testing.T) {
	t.Parallel()
	var (
		inFlight, maxInFlight, calls atomic.Int32
		started                      = make(chan time.Time)
		proceed                      = make(chan struct{})
	)
	var b *bundle
	b = newBundle(t, withRenew(func(real Store, ctx context.Context, f Fence, ttl time.Duration) (Grant, error) {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for m := maxInFlight.Load(); n > m && !maxInFlight.CompareAndSwap(m, n); m = maxInFlight.Load() {
		}
		calls.Add(1)
		started <- b.clock.Now()
		select {
		case <-proceed:
		case <-ctx.Done():
			return Grant{}, ctx.Err()
		}
		return real.Renew(ctx, f, ttl)
	}))
	l := mustAcquire(t, b.c, testKey, "op-a", 30*time.Second) // renew every 10s, deadline 28s after asking
	work, stop := b.c.KeepAlive(context.Background(), l)
	defer stop()

	waitTimersAt(t, b.clock, epoch.Add(10*time.Second))
	b.clock.Advance(10 * time.Second)
	if at := <-started; !at.Equal(epoch.Add(10 * time.Second)) {
		t.Fatalf("first renewal at %v", at)
	}
	// The renewal takes 15s (1.5 intervals). Only the local deadline's
	// timer is armed meanwhile: no second renewal is scheduled.
	for range 3 {
		b.clock.Advance(5 * time.Second)
		waitTimersAt(t, b.clock, epoch.Add(28*time.Second))
	}
	proceed <- struct{}{}
	// Finished at 25s: the next renewal is due at 35s, not at once.
	waitTimersAt(t, b.clock, epoch.Add(35*time.Second))
	if !l.Deadline().Equal(epoch.Add(38 * time.Second)) { // asked at 10s + 30s - 2s
		t.Fatalf("deadline after the slow renewal %v", l.Deadline())
	}
	b.clock.Advance(10 * time.Second)
	if at := <-started; !at.Equal(epoch.Add(35 * time.Second)) {
		t.Fatalf("second renewal at %v", at)
	}
	proceed <- struct{}{}
	waitTimersAt(t, b.clock, epoch.Add(45*time.Second))
	if calls.Load() != 2 || maxInFlight.Load() != 1 {
		t.Fatalf("%d renewals, at most %d at once; want 2 and 1", calls.Load(), maxInFlight.Load())
	}
	if err := l.AssertOwned(); err != nil || work.Err() != nil {
		t.Fatalf("lease after slow renewals: %v, %v", err, context.Cause(work))
	}
}

// A renewal still in flight at the local deadline does not hold the holder
// up: the loss is declared at the deadline and the holder's context
// cancelled with lease_lost; the renewal is then abandoned and waited for.
func TestKeepAliveDeadlinePassesDuringRenewal(t *testing.T) {
	t.Parallel()
	started := make(chan struct{})
	var returned atomic.Bool
	b := newBundle(t, withRenew(func(_ Store, ctx context.Context, f Fence, ttl time.Duration) (Grant, error) {
		close(started)
		<-ctx.Done() // a store that hangs until given up on
		returned.Store(true)
		return Grant{}, ctx.Err()
	}))
	l := mustAcquire(t, b.c, testKey, "op-a", 30*time.Second)
	work, stop := b.c.KeepAlive(context.Background(), l)
	defer stop()
	waitTimersAt(t, b.clock, epoch.Add(10*time.Second))
	b.clock.Advance(10 * time.Second)
	<-started
	waitTimersAt(t, b.clock, epoch.Add(28*time.Second))
	b.clock.Advance(17 * time.Second)
	if work.Err() != nil {
		t.Fatal("holder cancelled before the deadline")
	}
	b.clock.Advance(time.Second)
	waitDone(t, work)
	var lost *LeaseLostError
	if cause := context.Cause(work); !errors.As(cause, &lost) || !errors.Is(cause, ErrLeaseLost) || lost.Reason != LostDeadline {
		t.Fatalf("cause = %v", cause)
	}
	wantLost(t, "AssertOwned", l.AssertOwned(), LostDeadline)
	stop()
	if !returned.Load() {
		t.Error("keepalive returned before the renewal it abandoned")
	}
	if n := b.logs.FilterField(stringField(fieldEvent, eventLost)).Len(); n != 1 {
		t.Errorf("%d loss log lines", n)
	}
}

// When the store says the lease is gone, the holder's context is cancelled
// at once with lease_lost.
func TestKeepAliveLossCancelsHolder(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	l := mustAcquire(t, b.c, testKey, "op-a", 30*time.Second)
	work, stop := b.c.KeepAlive(context.Background(), l)
	defer stop()
	// An operator deletes the lease behind the holder's back.
	if err := b.db.Write(context.Background(), func(tx *sqlite.Tx) error {
		_, err := tx.Exec(`DELETE FROM leases`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	waitTimersAt(t, b.clock, epoch.Add(10*time.Second))
	b.clock.Advance(10 * time.Second)
	waitDone(t, work)
	var lost *LeaseLostError
	if !errors.As(context.Cause(work), &lost) || lost.Reason != LostNotHeld {
		t.Fatalf("cause = %v", context.Cause(work))
	}
	wantLost(t, "AssertOwned", l.AssertOwned(), LostNotHeld)
}

// Failures that say nothing about the lease are retried with backoff; if
// they last until the local deadline, the lease is declared lost there,
// with the last failure as the reason.
func TestKeepAliveRetriesTransientFailures(t *testing.T) {
	t.Parallel()
	errBusy := errors.New("database is locked")
	var failing atomic.Int32 // failures left; -1 = forever
	failing.Store(2)
	calls := make(chan time.Time)
	var b *bundle
	b = newBundle(t, withRenew(func(real Store, ctx context.Context, f Fence, ttl time.Duration) (Grant, error) {
		calls <- b.clock.Now()
		if n := failing.Load(); n != 0 {
			failing.Add(-1)
			return Grant{}, errBusy
		}
		return real.Renew(ctx, f, ttl)
	}))
	l := mustAcquire(t, b.c, testKey, "op-a", 30*time.Second)
	work, stop := b.c.KeepAlive(context.Background(), l)
	defer stop()
	step := func(at time.Duration) {
		t.Helper()
		waitTimersAt(t, b.clock, epoch.Add(at))
		b.clock.Set(epoch.Add(at))
		if got := <-calls; !got.Equal(epoch.Add(at)) {
			t.Fatalf("renewal at %v, want %v", got, epoch.Add(at))
		}
	}
	// Fails at 10s, is retried 1s later, fails, is retried 2s later, and
	// succeeds: the next renewal is at 23s, the deadline at 13s+28s.
	step(10 * time.Second)
	step(11 * time.Second)
	step(13 * time.Second)
	waitTimersAt(t, b.clock, epoch.Add(23*time.Second))
	if !l.Deadline().Equal(epoch.Add(41*time.Second)) || work.Err() != nil {
		t.Fatalf("after retries: deadline %v, %v", l.Deadline(), context.Cause(work))
	}

	// Now every renewal fails: retries back off (1s, 2s, 4s, capped at
	// TTL/6) but never past the deadline, where the loss is declared.
	failing.Store(-1)
	for _, at := range []time.Duration{23, 24, 26, 30, 35, 40} {
		step(at * time.Second)
	}
	// The last retry is due at the deadline, the time the failed
	// renewal's own deadline timer was set for too. Move the clock only
	// once the retry's timer is armed (its log line comes just before),
	// or the retry is armed a second after a clock already at 41s.
	retries := func() int { return b.logs.FilterField(stringField(fieldEvent, eventRenewRetry)).Len() }
	for ctx := waitCtx(t); retries() < 8; {
		select {
		case <-ctx.Done():
			t.Fatalf("%d renewal retries logged, want 8", retries())
		case <-time.After(time.Millisecond):
		}
	}
	waitTimersAt(t, b.clock, epoch.Add(41*time.Second))
	b.clock.Set(epoch.Add(41 * time.Second))
	waitDone(t, work)
	cause := context.Cause(work)
	var lost *LeaseLostError
	if !errors.As(cause, &lost) || lost.Reason != LostDeadline || !errors.Is(cause, errBusy) {
		t.Fatalf("cause = %v, want lease_lost at the deadline because of the busy store", cause)
	}
}

// A lease released while its keepalive runs ends the keepalive quietly.
func TestKeepAliveAfterRelease(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	l := mustAcquire(t, b.c, testKey, "op-a", 30*time.Second)
	work, stop := b.c.KeepAlive(context.Background(), l)
	waitTimersAt(t, b.clock, epoch.Add(10*time.Second)) // kept alive, then released
	if err := b.c.Release(context.Background(), l); err != nil {
		t.Fatal(err)
	}
	b.clock.Advance(10 * time.Second)
	waitTimersAt(t, b.clock) // the keepalive ended without arming anything
	stop()
	if !errors.Is(context.Cause(work), context.Canceled) {
		t.Errorf("cause = %v, want a plain stop", context.Cause(work))
	}
	if n := b.logs.FilterField(stringField(fieldEvent, eventLost)).Len(); n != 0 {
		t.Errorf("a release was logged as a loss")
	}
}

// A renewal that lands just after the release deleted the lease finds no
// lease: that is the release, not a loss. The keepalive ends quietly and
// the handle says released.
func TestKeepAliveRenewalRacingRelease(t *testing.T) {
	t.Parallel()
	renewing, deleted := make(chan struct{}), make(chan struct{})
	var work context.Context
	b := newBundle(t, setup{store: func(real Store) Store {
		return storeFuncs{Store: real,
			renew: func(ctx context.Context, f Fence, ttl time.Duration) (Grant, error) {
				close(renewing)
				<-deleted // renews in the release's batch, after its delete
				return real.Renew(ctx, f, ttl)
			},
			release: func(ctx context.Context, f Fence, before func(*sqlite.Tx) error) error {
				err := real.Release(ctx, f, before)
				close(deleted)
				// Let the keepalive take the renewal's answer before the
				// release's own answer reaches the handle.
				select {
				case <-work.Done():
				case <-time.After(300 * time.Millisecond):
				}
				return err
			},
		}
	}})
	l := mustAcquire(t, b.c, testKey, "op-a", 30*time.Second)
	var stop func()
	work, stop = b.c.KeepAlive(context.Background(), l)
	defer stop()
	waitTimersAt(t, b.clock, epoch.Add(10*time.Second))
	b.clock.Advance(10 * time.Second)
	<-renewing
	if err := b.c.Release(context.Background(), l); err != nil {
		t.Fatal(err)
	}
	stop()
	wantLost(t, "AssertOwned", l.AssertOwned(), LostReleased)
	if n := b.logs.FilterField(stringField(fieldEvent, eventLost)).Len(); n != 0 {
		t.Errorf("the release was logged as a loss")
	}
	if !errors.Is(context.Cause(work), context.Canceled) {
		t.Errorf("cause = %v, want a plain stop", context.Cause(work))
	}
}

// One keepalive per lease: a second is refused; a keepalive of a lease
// already released stops at once.
func TestKeepAliveRefusals(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	l := mustAcquire(t, b.c, testKey, "op-a", 30*time.Second)
	_, stop := b.c.KeepAlive(context.Background(), l)
	second, stop2 := b.c.KeepAlive(context.Background(), l)
	if !errors.Is(context.Cause(second), errKeepAliveRunning) {
		t.Errorf("second keepalive: %v", context.Cause(second))
	}
	stop2()
	stop()
	if err := b.c.Release(context.Background(), l); err != nil {
		t.Fatal(err)
	}
	after, stop3 := b.c.KeepAlive(context.Background(), l)
	defer stop3()
	waitDone(t, after)
	if !errors.Is(context.Cause(after), ErrLeaseLost) {
		t.Errorf("keepalive of a released lease: %v", context.Cause(after))
	}
}

// Stop waits for the keepalive goroutine and every renewal it started, from
// many goroutines at once.
func TestKeepAliveStopConcurrent(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	l := mustAcquire(t, b.c, testKey, "op-a", 30*time.Second)
	_, stop := b.c.KeepAlive(context.Background(), l)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() { defer wg.Done(); stop() }()
	}
	wg.Wait()
}
