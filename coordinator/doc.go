// Package coordinator hands out baton's leases: one holder per resource at
// a time, each holding fenced by a token, kept in the same SQLite database
// as the operation records.
//
// # What it owns
//
// Leases on opaque keys (the executor uses resource keys such as
// `pull_request:octo/app#42`; outside holders use whatever key they ask
// for, and share the coordinator with operations): acquire, renew,
// release-if-owner, check, reconcile, the fencing tokens, a per-key history
// of who held what, and the clock all of this is judged by. Storage sits
// behind [Store]; [SQLiteStore] keeps the tables of migration
// 0002_leases.sql (leases, lease_tokens, lease_history).
//
// # Guarantees
//
//   - A key has at most one live lease. [Coordinator.Acquire] on a live
//     lease fails with *[LeaseHeldError] (code lease_held, with the holder
//     and the time it has left), even when the caller is the holder: a live
//     lease is never handed out twice, because the older handle's
//     AssertOwned would keep trusting a token that is no longer current.
//     An expired lease is taken over; the new [Lease] says whom it
//     preempted and how long that lease had been expired.
//   - Every acquisition returns a fencing token greater than every token
//     issued before, for any key, across releases, takeovers,
//     force-releases, restarts and processes sharing the database file.
//     Tokens come from one counter row (lease_tokens), updated in the
//     acquisition's transaction; no token is issued twice.
//   - Renew, Release and fenced writes succeed only while the caller's
//     lease is live in the store: same owner, same token, not expired by the
//     coordinator's clock at the moment of the change. Otherwise they fail
//     with *[LeaseLostError] (code lease_lost) and change nothing. An
//     expired lease is lost even if nobody took it; releasing a lost lease
//     leaves the new holder's lease alone.
//   - Every change is durable when it returns (synchronous=FULL, through
//     the database's group-commit writer). Processes sharing the file
//     serialize with BEGIN IMMEDIATE and a busy timeout.
//   - Bad input (an empty or oversized key or owner, a TTL outside
//     [MinTTL, MaxTTL], a token that is not positive) is
//     *[InvalidRequestError] (code invalid_request). A well-formed token
//     that is not the key's current one is lease_lost.
//
// The errors implement ErrorCode() and ErrorDetails(), which package schema
// reads to build the API's error bodies; callers branch with errors.Is
// against [ErrLeaseHeld], [ErrLeaseLost] and [ErrInvalidRequest].
//
// # Usage
//
//	lease, err := coord.Acquire(ctx, key, operationID, 5*time.Minute)
//	if errors.Is(err, coordinator.ErrLeaseHeld) { /* try again later */ }
//	work, stop := coord.KeepAlive(ctx, lease)
//	defer stop()
//	for each act {
//		if err := lease.AssertOwned(); err != nil { stop; the lease is lost }
//		act(work)
//	}
//	stop()
//	err = coord.ReleaseWith(ctx, lease, func(tx *sqlite.Tx) error {
//		return saveTerminalRecord(tx) // fenced, and one fsync with the release
//	})
//
// [Coordinator.AcquireWith] and [Coordinator.ReleaseWith] run the caller's
// SQL in the transaction that grants or releases the lease; if it fails,
// the grant or the release is undone with it. [Coordinator.Fenced] runs the
// caller's SQL behind the ownership check, and [Coordinator.Guard] returns
// that check for another component's transaction (the executor's
// SaveGuarded). Holders that keep no handle, such as clients of the HTTP
// API, use [Coordinator.RenewFence] and [Coordinator.ReleaseFence] with the
// key, owner and token they were given.
//
// # Fencing and the local deadline
//
// The store is the authority: a write under a lease checks owner, token
// and expiry in the same transaction, so a holder that was paused past its
// expiry and replaced cannot write. Acts outside the database (a GitHub
// call) cannot be fenced that way; [Lease.AssertOwned] guards them in
// memory, without I/O. It fails once the local deadline has passed: the
// time the acquisition or renewal was asked for, plus the TTL, minus the
// safety margin (Config.SafetyMargin, 2s by default, at most a quarter of
// the TTL). Counting from the moment of asking, not of the answer, keeps
// the local deadline before the store's expiry however long the answer
// took. AssertOwned also fails once the lease was released or found lost.
//
// # Keepalive pacing
//
// [Coordinator.KeepAlive] renews every TTL/3, each renewal scheduled after
// the previous one finished (a timer reset on completion, never a ticker):
// with a store slower than TTL/3, renewals neither overlap nor pile up.
// Renewals that fail for reasons that say nothing about the lease (a busy
// store) are retried with backoff until the local deadline. When the store
// says the lease is lost, or the local deadline passes first (even with a
// renewal still in flight), the holder's context is cancelled with a
// *LeaseLostError as its cause and the keepalive ends.
//
// # Reconcile
//
// An expired lease can be taken over at once, so nobody waits on a dead
// holder. [Coordinator.Reconcile] (run every Config.ReconcileInterval
// between Start and Stop) force-releases leases expired for more than
// [DeadTTLs] (3) TTLs that nobody took over, records and logs each, and
// reports them with the expired leases it left (stale).
//
// # History
//
// [Coordinator.History] returns a key's last [HistoryLimit] (200) events:
// acquisitions, takeovers (preempted, naming the lease taken over),
// releases and force-releases. Renewals are not kept. The table is trimmed
// by about one acquisition in 32 of each key, never by a large delete on
// every acquisition.
//
// # Time
//
// Every decision that depends on time asks the [Clock] in Config, never
// package time: tests use a [FakeClock] to move past an expiry or a renewal
// interval without sleeping. Several processes on one file must agree on
// the time; on one machine the system clock does.
//
// The store compares wall-clock times (expiry in Unix microseconds).
// AssertOwned fails when either the monotonic or the wall clock has passed
// the local deadline, so a wall clock stepped forward ends a holder's
// trust as early as it ends the lease in the store. A wall clock stepped
// back makes leases last longer in the store than their TTL; holders are
// still bounded by their monotonic deadline, and a waiting acquirer waits
// longer. Fenced writes are safe either way: they are judged by the store.
package coordinator
