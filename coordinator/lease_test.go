package coordinator

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/sqlite"
)

const testKey = "pull_request:octo/app#42"

func mustAcquire(t testing.TB, c *Coordinator, key, owner string, ttl time.Duration) *Lease {
	t.Helper()
	l, err := c.Acquire(context.Background(), key, owner, ttl)
	if err != nil {
		t.Fatalf("acquire %s by %s: %v", key, owner, err)
	}
	return l
}

func wantLost(t testing.TB, what string, err error, reason LostReason) {
	t.Helper()
	var lost *LeaseLostError
	if !errors.As(err, &lost) || !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("%s: err = %v, want lease_lost", what, err)
	}
	if lost.ErrorCode() != "lease_lost" {
		t.Errorf("%s: code %q", what, lost.ErrorCode())
	}
	if reason != "" && lost.Reason != reason {
		t.Errorf("%s: reason %s, want %s", what, lost.Reason, reason)
	}
}

// A live lease is refused to everyone, its own owner included, with the
// holder and the time left; once released it can be taken again with a
// greater token.
func TestAcquireIsExclusive(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	ctx := context.Background()
	a := mustAcquire(t, b.c, testKey, "op-a", time.Minute)
	if a.Token <= 0 || !a.ExpiresAt().Equal(epoch.Add(time.Minute)) || a.Preempted != nil {
		t.Fatalf("lease = %+v expires %v", a.Fence, a.ExpiresAt())
	}
	b.clock.Advance(20 * time.Second)
	for _, owner := range []string{"op-b", "op-a"} {
		_, err := b.c.Acquire(ctx, testKey, owner, time.Minute)
		var held *LeaseHeldError
		if !errors.As(err, &held) || !errors.Is(err, ErrLeaseHeld) {
			t.Fatalf("acquire by %s of a live lease: %v, want lease_held", owner, err)
		}
		if held.Owner != "op-a" || held.ExpiresIn != 40*time.Second || held.Key != testKey {
			t.Errorf("held = %+v", held)
		}
		if held.ErrorCode() != "lease_held" {
			t.Errorf("code = %s", held.ErrorCode())
		}
		d := held.ErrorDetails()
		if d["owner"] != "op-a" || d["expiresIn"] != 40.0 {
			t.Errorf("details = %v", d)
		}
	}
	if err := b.c.Release(ctx, a); err != nil {
		t.Fatal(err)
	}
	if err := a.AssertOwned(); err == nil {
		t.Error("AssertOwned after Release succeeded")
	}
	bl := mustAcquire(t, b.c, testKey, "op-b", time.Minute)
	if bl.Token <= a.Token {
		t.Errorf("token after release %d, want > %d", bl.Token, a.Token)
	}
}

// The paused holder: A acquires; the clock passes A's expiry; B takes
// over; A's renewal and fenced write fail with lease_lost; A's release
// leaves B's lease alone; the history shows the takeover.
func TestPausedHolder(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	ctx := context.Background()
	a := mustAcquire(t, b.c, testKey, "op-a", 30*time.Second)
	b.clock.Advance(45 * time.Second) // A is paused (GC, SIGSTOP, a slow call) past its expiry

	bl := mustAcquire(t, b.c, testKey, "op-b", 30*time.Second)
	if bl.Preempted == nil || bl.Preempted.Owner != "op-a" || bl.Preempted.Token != a.Token ||
		bl.Preempted.ExpiredFor != 15*time.Second {
		t.Fatalf("preempted = %+v", bl.Preempted)
	}
	if bl.Token <= a.Token {
		t.Fatalf("takeover token %d not above %d", bl.Token, a.Token)
	}

	// A wakes up.
	if err := a.AssertOwned(); err == nil {
		t.Error("A's AssertOwned succeeded after its expiry")
	}
	wantLost(t, "A's renew", b.c.Renew(ctx, a, 30*time.Second), LostSuperseded)
	ran := false
	err := b.c.Fenced(ctx, a, func(tx *sqlite.Tx) error {
		ran = true
		return nil
	})
	wantLost(t, "A's fenced write", err, LostSuperseded)
	if ran {
		t.Error("A's fenced write ran")
	}
	err = b.db.Write(ctx, func(tx *sqlite.Tx) error { return b.c.Guard(a)(tx) })
	wantLost(t, "A's guard", err, LostSuperseded)
	wantLost(t, "A's release", b.c.Release(ctx, a), LostSuperseded)

	st, err := b.c.Check(ctx, testKey)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Locked || st.Owner != "op-b" || st.Token != bl.Token || st.ExpiresIn != 30*time.Second {
		t.Fatalf("after A's release: %+v", st)
	}
	if err := b.c.Fenced(ctx, bl, func(*sqlite.Tx) error { return nil }); err != nil {
		t.Errorf("B's fenced write: %v", err)
	}
	if err := bl.AssertOwned(); err != nil {
		t.Errorf("B's AssertOwned: %v", err)
	}

	hist, err := b.c.History(ctx, testKey)
	if err != nil {
		t.Fatal(err)
	}
	if len(hist) != 2 || hist[0].Kind != EventAcquired || hist[0].Owner != "op-a" ||
		hist[1].Kind != EventPreempted || hist[1].Owner != "op-b" || hist[1].Token != bl.Token ||
		hist[1].PreviousOwner != "op-a" || hist[1].PreviousToken != a.Token || hist[1].ExpiredFor != 15*time.Second {
		t.Fatalf("history = %+v", hist)
	}
	if n := b.logs.FilterField(stringField(fieldEvent, eventPreempted)).Len(); n != 1 {
		t.Errorf("%d preemption log lines, want 1", n)
	}
}

// An expired lease is lost even if nobody took it: renew, fenced write and
// release refuse it, and the row stays for a taker or Reconcile.
func TestExpiredLeaseIsLost(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	ctx := context.Background()
	a := mustAcquire(t, b.c, testKey, "op-a", 10*time.Second)
	b.clock.Advance(10 * time.Second)
	wantLost(t, "renew", b.c.Renew(ctx, a, 10*time.Second), LostExpired)
	wantLost(t, "release", b.c.Release(ctx, a), LostExpired)
	wantLost(t, "fenced", b.c.Fenced(ctx, a, func(*sqlite.Tx) error { return nil }), LostExpired)
	wantLost(t, "assert", a.AssertOwned(), LostExpired) // marked lost by the answers above
	if st, _ := b.c.Check(ctx, testKey); st.Locked {
		t.Errorf("check of an expired lease: %+v", st)
	}
}

// Renew moves the expiry and the local deadline; the deadline counts from
// the moment the renewal was asked, minus the margin (capped at TTL/4).
func TestRenewAndLocalDeadline(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	ctx := context.Background()
	a := mustAcquire(t, b.c, testKey, "op-a", 4*time.Second)
	if want := epoch.Add(3 * time.Second); !a.Deadline().Equal(want) { // margin min(2s, 4s/4) = 1s
		t.Fatalf("deadline %v, want %v", a.Deadline(), want)
	}
	b.clock.Advance(2999 * time.Millisecond)
	if err := a.AssertOwned(); err != nil {
		t.Fatalf("before the deadline: %v", err)
	}
	b.clock.Advance(time.Millisecond)
	wantLost(t, "at the deadline", a.AssertOwned(), LostDeadline)
	if err := b.c.Renew(ctx, a, time.Minute); err != nil { // still live in the store until 4s
		t.Fatal(err)
	}
	now := epoch.Add(3 * time.Second)
	if !a.ExpiresAt().Equal(now.Add(time.Minute)) || !a.Deadline().Equal(now.Add(time.Minute-2*time.Second)) || a.TTL() != time.Minute {
		t.Fatalf("after renew: expires %v deadline %v ttl %v", a.ExpiresAt(), a.Deadline(), a.TTL())
	}
	if err := a.AssertOwned(); err != nil {
		t.Fatalf("after renew: %v", err)
	}
	st, _ := b.c.Check(ctx, testKey)
	if st.ExpiresIn != time.Minute {
		t.Errorf("check after renew: %+v", st)
	}
	// The stateless form, as the HTTP API uses it.
	g, err := b.c.RenewFence(ctx, a.Fence, 2*time.Minute)
	if err != nil || !g.ExpiresAt.Equal(now.Add(2*time.Minute)) {
		t.Fatalf("RenewFence = %+v, %v", g, err)
	}
	if err := b.c.ReleaseFence(ctx, a.Fence); err != nil {
		t.Fatal(err)
	}
	wantLost(t, "release twice", b.c.ReleaseFence(ctx, a.Fence), LostNotHeld)
	wantLost(t, "renew after release", b.c.Renew(ctx, a, time.Minute), LostNotHeld)
}

// Fencing tokens strictly increase per key across releases, takeovers,
// force-releases, keys and a restart of the database.
func TestTokensIncreaseAcrossEverything(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "baton.db")
	clock := NewFakeClock(epoch)
	db, err := sqlite.Open(context.Background(), path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(Config{DB: db, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var last int64
	step := func(what string, l *Lease) {
		t.Helper()
		if l.Token <= last {
			t.Fatalf("%s: token %d not above %d", what, l.Token, last)
		}
		last = l.Token
	}
	l := mustAcquire(t, c, "k", "a", time.Second)
	step("first", l)
	if err := c.Release(ctx, l); err != nil {
		t.Fatal(err)
	}
	l = mustAcquire(t, c, "k", "a", time.Second)
	step("after release", l)
	step("other key", mustAcquire(t, c, "other", "a", time.Second))
	clock.Advance(2 * time.Second)
	l = mustAcquire(t, c, "k", "b", time.Second)
	step("takeover", l)
	clock.Advance(5 * time.Second)
	if rep, err := c.Reconcile(ctx); err != nil || len(rep.Released) != 2 {
		t.Fatalf("reconcile = %+v, %v", rep, err)
	}
	step("after reconcile", mustAcquire(t, c, "k", "c", time.Second))
	db.Close()

	db2 := openDB(t, path)
	c2, err := New(Config{DB: db2, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Second)
	step("after restart", mustAcquire(t, c2, "k", "d", time.Second))
}

// AcquireWith and ReleaseWith run the caller's SQL in the lease's
// transaction: a failing function undoes the grant or the release.
func TestWriteHooksShareTheTransaction(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	ctx := context.Background()
	if err := b.db.Write(ctx, func(tx *sqlite.Tx) error {
		_, err := tx.Exec(`CREATE TABLE records (id TEXT PRIMARY KEY, token INTEGER)`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("save refused")
	var seen int64
	_, err := b.c.AcquireWith(ctx, testKey, "op-a", time.Minute, func(tx *sqlite.Tx, l *Lease) error {
		seen = l.Token
		if _, err := tx.Exec(`INSERT INTO records VALUES ('r', ?)`, l.Token); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("AcquireWith = %v", err)
	}
	if st, _ := b.c.Check(ctx, testKey); st.Locked {
		t.Fatal("acquisition kept after its hook failed")
	}
	if h, _ := b.c.History(ctx, testKey); len(h) != 0 {
		t.Fatalf("history of an undone acquisition: %+v", h)
	}
	l, err := b.c.AcquireWith(ctx, testKey, "op-a", time.Minute, func(tx *sqlite.Tx, l *Lease) error {
		_, err := tx.Exec(`INSERT INTO records VALUES ('r', ?)`, l.Token)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if l.Token != seen {
		t.Errorf("token %d after an undone acquisition that saw %d: the undone one was never issued, so it is reused", l.Token, seen)
	}
	var stored int64
	if err := b.db.QueryRow(ctx, `SELECT token FROM records WHERE id = 'r'`).Scan(&stored); err != nil || stored != l.Token {
		t.Fatalf("record token = %d, %v", stored, err)
	}

	if err := b.c.ReleaseWith(ctx, l, func(tx *sqlite.Tx) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("ReleaseWith = %v", err)
	}
	if err := l.AssertOwned(); err != nil {
		t.Fatalf("lease lost after a failed ReleaseWith: %v", err)
	}
	if err := b.c.ReleaseWith(ctx, l, func(tx *sqlite.Tx) error {
		_, err := tx.Exec(`UPDATE records SET token = -1`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if st, _ := b.c.Check(ctx, testKey); st.Locked {
		t.Fatal("lease kept after ReleaseWith")
	}
	if err := b.db.QueryRow(ctx, `SELECT token FROM records WHERE id = 'r'`).Scan(&stored); err != nil || stored != -1 {
		t.Fatalf("record token = %d, %v", stored, err)
	}
	// A released lease's hook never runs.
	ran := false
	err = b.c.ReleaseWith(ctx, l, func(*sqlite.Tx) error { ran = true; return nil })
	wantLost(t, "release twice", err, "")
	if ran {
		t.Error("hook ran for a lease already released")
	}
}

// Bad input is refused with invalid_request, before touching the store; a
// well-formed token that is not the key's is lease_lost.
func TestBadInput(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	ctx := context.Background()
	good := mustAcquire(t, b.c, testKey, "op-a", time.Minute)
	long := func(n int) string { return strings.Repeat("k", n) }
	invalidCases := []struct {
		name  string
		field string
		err   error
	}{
		{"empty key", "key", func() error { _, err := b.c.Acquire(ctx, "", "o", time.Minute); return err }()},
		{"empty owner", "owner", func() error { _, err := b.c.Acquire(ctx, "k", "", time.Minute); return err }()},
		{"key too long", "key", func() error { _, err := b.c.Acquire(ctx, long(MaxKeyBytes+1), "o", time.Minute); return err }()},
		{"owner too long", "owner", func() error { _, err := b.c.Acquire(ctx, "k", long(MaxOwnerBytes+1), time.Minute); return err }()},
		{"key with newline", "key", func() error { _, err := b.c.Acquire(ctx, "a\nb", "o", time.Minute); return err }()},
		{"key not UTF-8", "key", func() error { _, err := b.c.Acquire(ctx, "a\xffb", "o", time.Minute); return err }()},
		{"ttl zero", "ttl", func() error { _, err := b.c.Acquire(ctx, "k", "o", 0); return err }()},
		{"ttl below 1s", "ttl", func() error { _, err := b.c.Acquire(ctx, "k", "o", 999*time.Millisecond); return err }()},
		{"ttl above 15m", "ttl", func() error { _, err := b.c.Acquire(ctx, "k", "o", MaxTTL+time.Second); return err }()},
		{"ttl negative", "ttl", func() error { _, err := b.c.Acquire(ctx, "k", "o", -time.Minute); return err }()},
		{"renew ttl out of range", "ttl", b.c.Renew(ctx, good, 16*time.Minute)},
		{"fence token zero", "token", b.c.ReleaseFence(ctx, Fence{Key: testKey, Owner: "op-a"})},
		{"fence token negative", "token", func() error {
			_, err := b.c.RenewFence(ctx, Fence{Key: testKey, Owner: "op-a", Token: -3}, time.Minute)
			return err
		}()},
		{"fence empty owner", "owner", b.c.ReleaseFence(ctx, Fence{Key: testKey, Token: good.Token})},
		{"check empty key", "key", func() error { _, err := b.c.Check(ctx, ""); return err }()},
		{"history empty key", "key", func() error { _, err := b.c.History(ctx, ""); return err }()},
	}
	for _, tc := range invalidCases {
		var inv *InvalidRequestError
		if !errors.As(tc.err, &inv) || !errors.Is(tc.err, ErrInvalidRequest) || inv.ErrorCode() != "invalid_request" || inv.Field != tc.field {
			t.Errorf("%s: err = %v, want invalid_request on %s", tc.name, tc.err, tc.field)
		}
	}
	// The longest key and owner allowed are fine.
	mustAcquire(t, b.c, long(MaxKeyBytes), long(MaxOwnerBytes), MaxTTL)
	mustAcquire(t, b.c, "k-min-ttl", "o", MinTTL)

	// Forged: well-formed, but not the key's current lease.
	forged := []Fence{
		{Key: testKey, Owner: "op-a", Token: good.Token + 1000},
		{Key: testKey, Owner: "op-b", Token: good.Token},
		{Key: "never-acquired", Owner: "op-a", Token: good.Token},
	}
	for _, f := range forged {
		_, err := b.c.RenewFence(ctx, f, time.Minute)
		wantLost(t, "renew forged", err, "")
		wantLost(t, "release forged", b.c.ReleaseFence(ctx, f), "")
	}
	st, _ := b.c.Check(ctx, testKey)
	if !st.Locked || st.Token != good.Token {
		t.Fatalf("forged releases disturbed the lease: %+v", st)
	}
	if s := b.c.ReleaseFence(ctx, forged[0]).Error(); !strings.Contains(s, "superseded") {
		t.Errorf("forged-token error does not say why: %s", s)
	}
}

// A lease lost inside the caller's SQL of Fenced or ReleaseWith is another
// lease's loss: the handle running the transaction stays owned.
func TestOtherLeasesLossDoesNotMarkThisOne(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	ctx := context.Background()
	mine := mustAcquire(t, b.c, testKey, "op-a", 30*time.Second)
	other := mustAcquire(t, b.c, testKey+"-other", "op-b", 30*time.Second)
	if err := b.c.Release(ctx, other); err != nil {
		t.Fatal(err)
	}
	guardOther := b.c.Guard(other)
	err := b.c.Fenced(ctx, mine, func(tx *sqlite.Tx) error { return guardOther(tx) })
	if !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("Fenced with the other lease's guard = %v, want its loss", err)
	}
	if err := mine.AssertOwned(); err != nil {
		t.Fatalf("this lease marked lost by another's loss: %v", err)
	}
	if err := b.c.ReleaseWith(ctx, mine, func(tx *sqlite.Tx) error { return guardOther(tx) }); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("ReleaseWith with the other lease's guard = %v", err)
	}
	if err := mine.AssertOwned(); err != nil {
		t.Fatalf("after ReleaseWith failed on another lease: %v", err)
	}
	if st, err := b.c.Check(ctx, testKey); err != nil || !st.Locked || st.Token != mine.Token {
		t.Fatalf("Check = %+v, %v: the failed ReleaseWith must keep the lease", st, err)
	}
}
