package coordinator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/sqlite"
)

// A lease is expired from the very microsecond of its expiry, for every
// reader of the store alike: Check calls it free, Reconcile reports it
// stale (not yet dead), and a holder's fenced write is refused. It is dead
// only once more than DeadTTLs TTLs have passed since: at exactly three
// TTLs Reconcile still leaves it, a microsecond later it force-releases
// it.
func TestExpiryAndDeathBoundaries(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	ctx := context.Background()
	const ttl = 10 * time.Second
	l := mustAcquire(t, b.c, testKey, "op-a", ttl)

	b.clock.Advance(ttl) // now == expiresAt
	if st, err := b.c.Check(ctx, testKey); err != nil || st.Locked {
		t.Fatalf("check at the expiry: %+v %v, want free", st, err)
	}
	rep, err := b.c.Reconcile(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Released) != 0 || len(rep.Stale) != 1 || rep.Stale[0].Key != testKey || rep.Stale[0].ExpiredFor != 0 {
		t.Fatalf("reconcile at the expiry: %+v, want the lease stale, expired for 0s", rep)
	}

	b.clock.Advance(DeadTTLs * ttl) // expired for exactly three TTLs
	rep, err = b.c.Reconcile(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Released) != 0 || len(rep.Stale) != 1 || rep.Stale[0].ExpiredFor != DeadTTLs*ttl {
		t.Fatalf("reconcile at three TTLs: %+v, want the lease stale, not released", rep)
	}

	b.clock.Advance(time.Microsecond)
	rep, err = b.c.Reconcile(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Released) != 1 || rep.Released[0].Token != l.Token || len(rep.Stale) != 0 {
		t.Fatalf("reconcile past three TTLs: %+v, want the lease released", rep)
	}
}

// A handle released by its holder answers Renew with lost_released, without
// asking the store (which would call the lease not held, or superseded once
// the key is taken again).
func TestRenewAfterReleaseSaysReleased(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	ctx := context.Background()
	l := mustAcquire(t, b.c, testKey, "op-a", time.Minute)
	if err := b.c.Release(ctx, l); err != nil {
		t.Fatal(err)
	}
	wantLost(t, "renew of a released handle", b.c.Renew(ctx, l, time.Minute), LostReleased)
	next := mustAcquire(t, b.c, testKey, "op-a", time.Minute)
	wantLost(t, "renew of a released handle, key taken again", b.c.Renew(ctx, l, time.Minute), LostReleased)
	if err := next.AssertOwned(); err != nil {
		t.Fatalf("new lease after the old handle's renew: %v", err)
	}
}

// The loss of an earlier lease of the same key and owner (an older token)
// does not mark the current one lost: an operation that takes its
// resource's lease again holds a new token, and the old one's loss is not
// its.
func TestOlderTokensLossDoesNotMarkTheNewLease(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	ctx := context.Background()
	old := mustAcquire(t, b.c, testKey, "op-a", 30*time.Second)
	if err := b.c.Release(ctx, old); err != nil {
		t.Fatal(err)
	}
	cur := mustAcquire(t, b.c, testKey, "op-a", 30*time.Second)
	guardOld := b.c.Guard(old)
	err := b.c.Fenced(ctx, cur, func(tx *sqlite.Tx) error { return guardOld(tx) })
	wantLost(t, "Fenced with the old token's guard", err, LostSuperseded)
	if err := cur.AssertOwned(); err != nil {
		t.Fatalf("current lease marked lost by its predecessor's loss: %v", err)
	}
	if err := b.c.Fenced(ctx, cur, func(*sqlite.Tx) error { return nil }); err != nil {
		t.Fatalf("fenced write under the current lease: %v", err)
	}
}

// Every C0 control character and DEL is refused in keys and owners; the
// first printable character is accepted.
func TestControlCharactersRefused(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	ctx := context.Background()
	for _, r := range []rune{0x00, 0x01, 0x09, 0x0a, 0x1f, 0x7f} {
		key := "pull_request:octo/app#4" + string(r)
		if _, err := b.c.Acquire(ctx, key, "op-a", time.Minute); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("key with %U: %v, want invalid_request", r, err)
		}
		if _, err := b.c.Acquire(ctx, testKey, "op"+string(r), time.Minute); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("owner with %U: %v, want invalid_request", r, err)
		}
	}
	if _, err := b.c.Acquire(ctx, "key with space", "op a", time.Minute); err != nil {
		t.Errorf("key and owner with U+0020: %v", err)
	}
}

// A lease taken from under its handle before the handle's deadline (here
// released through its fence, as the HTTP API does) is found lost by the
// first fenced write, guarded save, renewal or release that looks, and from then on
// AssertOwned fails: the holder makes no GitHub call it no longer owns.
func TestLossFoundByTheStoreMarksTheHandle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		find func(b *bundle, l *Lease) error
	}{
		{"fenced", func(b *bundle, l *Lease) error {
			return b.c.Fenced(ctx, l, func(*sqlite.Tx) error { return nil })
		}},
		{"guard", func(b *bundle, l *Lease) error {
			guard := b.c.Guard(l)
			return b.db.Write(ctx, func(tx *sqlite.Tx) error { return guard(tx) })
		}},
		{"renew", func(b *bundle, l *Lease) error { return b.c.Renew(ctx, l, time.Minute) }},
		{"release", func(b *bundle, l *Lease) error { return b.c.Release(ctx, l) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := newBundle(t)
			l := mustAcquire(t, b.c, testKey, "op-a", time.Minute)
			if err := b.c.ReleaseFence(ctx, l.Fence); err != nil {
				t.Fatal(err)
			}
			if err := l.AssertOwned(); err != nil {
				t.Fatalf("AssertOwned before any look at the store: %v (it does no I/O)", err)
			}
			wantLost(t, tc.name, tc.find(b, l), LostNotHeld)
			err := l.AssertOwned()
			wantLost(t, "AssertOwned after the loss was found", err, LostNotHeld)
		})
	}
}

// One Reconcile force-releases every dead lease, however many batches of
// reconcileBatch they fill.
func TestReconcileReleasesMoreThanABatch(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	ctx := context.Background()
	const n = reconcileBatch + 10
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := b.c.Acquire(ctx, fmt.Sprintf("key-%d", i), "op", time.Second); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	b.clock.Advance(time.Second + DeadTTLs*time.Second + time.Microsecond) // past expiry plus three TTLs
	rep, err := b.c.Reconcile(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Released) != n || len(rep.Stale) != 0 {
		t.Fatalf("released %d, stale %d; want all %d released", len(rep.Released), len(rep.Stale), n)
	}
}
