package coordinator

import (
	"context"
	"time"

	"github.com/baton-dev/baton/internal/sqlite"
)

// Store keeps leases. The coordinator validates input, keeps the handles'
// local deadlines, paces renewals and decides what Reconcile releases; the
// Store makes each change atomically and decides, at the moment of the
// change and by its own clock, whether a lease is live. Implementations:
// *SQLiteStore.
//
// Write hooks (then, before, fn) run inside the Store's transaction, as
// *sqlite.Tx, because baton's operation records live in the same SQLite
// file and a record saved under a lease must be checked in the same
// transaction. A store of another kind would offer fenced writes on its
// own terms.
type Store interface {
	// Acquire grants req.Key to req.Owner for req.TTL with a new fencing
	// token, unless the key has a live lease (*LeaseHeldError, whoever its
	// owner). An expired lease is taken over and reported in
	// Grant.Preempted. then, if not nil, runs in the same transaction after
	// the grant; if it fails, the grant is undone and its error returned.
	Acquire(ctx context.Context, req AcquireRequest, then func(*sqlite.Tx, Grant) error) (Grant, error)
	// Renew extends the lease f names to expire ttl from now, if f is
	// still the key's live lease; otherwise *LeaseLostError.
	Renew(ctx context.Context, f Fence, ttl time.Duration) (Grant, error)
	// Release deletes the lease f names if it is still the key's live
	// lease; otherwise *LeaseLostError, and nothing changes. before, if not
	// nil, runs in the same transaction after the conditional delete found
	// the lease (the row is gone when it runs); if it fails, nothing
	// changes and its error is returned.
	Release(ctx context.Context, f Fence, before func(*sqlite.Tx) error) error
	// Fenced runs fn in a transaction that first checks that f is the key's
	// live lease (*LeaseLostError otherwise, and fn does not run).
	Fenced(ctx context.Context, f Fence, fn func(*sqlite.Tx) error) error
	// Guard returns that check as a function to run first inside another
	// component's transaction on the same database.
	Guard(f Fence) func(*sqlite.Tx) error
	// Check reads the key's lease.
	Check(ctx context.Context, key string) (Status, error)
	// Expired lists up to limit leases that have expired and are still
	// stored (nobody has taken them over or released them), in the order
	// they die: expiry plus DeadTTLs TTLs, earliest first.
	Expired(ctx context.Context, limit int) ([]Stale, error)
	// ForceRelease deletes each of the given leases that is still stored
	// unchanged (same token, same expiry) and expired, and returns those it
	// deleted.
	ForceRelease(ctx context.Context, leases []Stale) ([]Stale, error)
	// History returns up to limit of the key's latest events, oldest first.
	History(ctx context.Context, key string, limit int) ([]Event, error)
	// PruneHistory deletes the history of every key whose latest event
	// happened before before and that holds no lease, and returns how
	// many keys' histories it deleted.
	PruneHistory(ctx context.Context, before time.Time) (int64, error)
}

// Fence names one holding of a lease: the key, its owner and the fencing
// token the acquisition returned. Outside holders that keep no handle (the
// HTTP API) renew and release by Fence.
type Fence struct {
	Key   string
	Owner string
	Token int64
}

// AcquireRequest asks a Store for a lease.
type AcquireRequest struct {
	Key   string
	Owner string
	TTL   time.Duration
}

// Grant is a lease as a Store granted or renewed it.
type Grant struct {
	Fence
	TTL        time.Duration
	AcquiredAt time.Time
	ExpiresAt  time.Time
	// Preempted is the lease this acquisition took over, if the key's
	// previous lease had expired without being released.
	Preempted *Preemption
}

// Preemption describes an expired lease taken over by a new acquisition.
type Preemption struct {
	Owner string
	Token int64
	// ExpiredFor is how long the lease had been expired when it was taken.
	ExpiredFor time.Duration
}

// Status is what Check reports of a key.
type Status struct {
	Key    string
	Locked bool
	// Owner, Token and ExpiresIn describe the live lease; they are zero
	// when the key is not locked.
	Owner     string
	Token     int64
	ExpiresIn time.Duration
}

// Stale is an expired lease still stored, as Reconcile finds it.
type Stale struct {
	Key        string
	Owner      string
	Token      int64
	TTL        time.Duration
	ExpiresAt  time.Time
	ExpiredFor time.Duration
}

// EventKind names an entry of a key's history.
type EventKind string

// The events kept in a key's history. Renewals are not kept: a long holder
// would push everything else out.
const (
	EventAcquired      EventKind = "acquired"
	EventPreempted     EventKind = "preempted" // acquired by taking over an expired lease
	EventReleased      EventKind = "released"
	EventForceReleased EventKind = "force_released"
)

// Event is one entry of a key's history.
type Event struct {
	Kind  EventKind
	At    time.Time
	Owner string
	Token int64
	// TTL is the TTL of an acquisition.
	TTL time.Duration
	// For EventPreempted: the lease taken over. For EventForceReleased:
	// ExpiredFor is how long the lease had been dead.
	PreviousOwner string
	PreviousToken int64
	ExpiredFor    time.Duration
}
