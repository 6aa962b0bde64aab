package coordinator

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/baton-dev/baton/internal/sqlite"
)

// SQLiteStore keeps leases in baton's SQLite database (tables leases,
// lease_tokens and lease_history, migration 0002). Every change goes
// through the database's group-commit writer, so concurrent acquisitions
// share one transaction and one fsync, and each is durable when it
// returns. Several processes may share the file: their writers serialize
// with BEGIN IMMEDIATE, and the token counter lives in the file.
type SQLiteStore struct {
	db    *sqlite.DB
	clock Clock
	// keep is how many history events per key survive a trim; trimEvery is
	// one in how many acquisitions trims its key's history.
	keep      int
	trimEvery int
}

var _ Store = (*SQLiteStore)(nil)

// HistoryLimit is how many events per key History returns and the store
// keeps (it may hold a few more between trims).
const HistoryLimit = 200

// NewSQLiteStore returns a store on db that judges expiry by clock (the
// system clock if nil).
func NewSQLiteStore(db *sqlite.DB, clock Clock) *SQLiteStore {
	if clock == nil {
		clock = SystemClock()
	}
	return &SQLiteStore{db: db, clock: clock, keep: HistoryLimit, trimEvery: 32}
}

// storedLease is a row of leases.
type storedLease struct {
	owner      string
	token      int64
	ttlUs      int64
	acquiredAt int64
	expiresAt  int64
}

const selectLease = `SELECT owner, token, ttl_us, acquired_at, expires_at FROM leases WHERE key = ?`

func scanLease(row *sql.Row) (storedLease, bool, error) {
	var l storedLease
	err := row.Scan(&l.owner, &l.token, &l.ttlUs, &l.acquiredAt, &l.expiresAt)
	if errors.Is(err, sql.ErrNoRows) {
		return l, false, nil
	}
	if err != nil {
		return l, false, fmt.Errorf("coordinator: read lease: %w", err)
	}
	return l, true, nil
}

func micros(us int64) time.Duration { return time.Duration(us) * time.Microsecond }

func fromMicros(us int64) time.Time { return time.UnixMicro(us) }

// Acquire implements Store.
func (s *SQLiteStore) Acquire(ctx context.Context, req AcquireRequest, then func(*sqlite.Tx, Grant) error) (Grant, error) {
	var g Grant
	err := s.db.Write(ctx, func(tx *sqlite.Tx) error {
		now := s.clock.Now()
		nowUs := now.UnixMicro()
		prev, found, err := scanLease(tx.QueryRow(selectLease, req.Key))
		if err != nil {
			return err
		}
		if found && prev.expiresAt > nowUs {
			return &LeaseHeldError{Key: req.Key, Owner: prev.owner, ExpiresIn: micros(prev.expiresAt - nowUs)}
		}
		var token int64
		if err := tx.QueryRow(`UPDATE lease_tokens SET last = last + 1 WHERE id = 1 RETURNING last`).Scan(&token); err != nil {
			return fmt.Errorf("coordinator: next fencing token: %w", err)
		}
		ttlUs := req.TTL.Microseconds()
		expUs := nowUs + ttlUs
		if _, err := tx.Exec(`INSERT INTO leases (key, owner, token, ttl_us, acquired_at, expires_at)
			VALUES (?, ?, ?, ?, ?, ?)
			ON CONFLICT (key) DO UPDATE SET owner = excluded.owner, token = excluded.token,
				ttl_us = excluded.ttl_us, acquired_at = excluded.acquired_at, expires_at = excluded.expires_at`,
			req.Key, req.Owner, token, ttlUs, nowUs, expUs); err != nil {
			return fmt.Errorf("coordinator: store lease: %w", err)
		}
		g = Grant{
			Fence:      Fence{Key: req.Key, Owner: req.Owner, Token: token},
			TTL:        req.TTL,
			AcquiredAt: fromMicros(nowUs),
			ExpiresAt:  fromMicros(expUs),
		}
		ev := Event{Kind: EventAcquired, At: g.AcquiredAt, Owner: req.Owner, Token: token, TTL: req.TTL}
		if found {
			g.Preempted = &Preemption{Owner: prev.owner, Token: prev.token, ExpiredFor: micros(nowUs - prev.expiresAt)}
			ev.Kind = EventPreempted
			ev.PreviousOwner, ev.PreviousToken, ev.ExpiredFor = prev.owner, prev.token, g.Preempted.ExpiredFor
		}
		if err := s.record(tx, req.Key, 2*token, ev); err != nil {
			return err
		}
		// Trim this key's history now and then rather than on every
		// acquisition: the chance is independent of the key and the token,
		// so every busy key is trimmed about once in trimEvery acquisitions.
		if rand.IntN(s.trimEvery) == 0 {
			if err := s.trim(tx, req.Key); err != nil {
				return err
			}
		}
		if then != nil {
			return then(tx, g)
		}
		return nil
	})
	if err != nil {
		return Grant{}, err
	}
	return g, nil
}

// Renew implements Store.
func (s *SQLiteStore) Renew(ctx context.Context, f Fence, ttl time.Duration) (Grant, error) {
	var g Grant
	err := s.db.Write(ctx, func(tx *sqlite.Tx) error {
		nowUs := s.clock.Now().UnixMicro()
		expUs := nowUs + ttl.Microseconds()
		var acquiredAt int64
		err := tx.QueryRow(`UPDATE leases SET expires_at = ?, ttl_us = ?
			WHERE key = ? AND owner = ? AND token = ? AND expires_at > ? RETURNING acquired_at`,
			expUs, ttl.Microseconds(), f.Key, f.Owner, f.Token, nowUs).Scan(&acquiredAt)
		if errors.Is(err, sql.ErrNoRows) {
			return s.lostReason(tx, f, nowUs)
		}
		if err != nil {
			return fmt.Errorf("coordinator: renew lease: %w", err)
		}
		g = Grant{Fence: f, TTL: ttl, AcquiredAt: fromMicros(acquiredAt), ExpiresAt: fromMicros(expUs)}
		return nil
	})
	if err != nil {
		return Grant{}, err
	}
	return g, nil
}

// Release implements Store. The delete comes first and carries the
// ownership check, so the common case is one statement; before runs after
// it, in the same savepoint, which undoes the delete if before fails.
func (s *SQLiteStore) Release(ctx context.Context, f Fence, before func(*sqlite.Tx) error) error {
	return s.db.Write(ctx, func(tx *sqlite.Tx) error {
		nowUs := s.clock.Now().UnixMicro()
		res, err := tx.Exec(`DELETE FROM leases WHERE key = ? AND owner = ? AND token = ? AND expires_at > ?`,
			f.Key, f.Owner, f.Token, nowUs)
		if err != nil {
			return fmt.Errorf("coordinator: delete lease: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return s.lostReason(tx, f, nowUs)
		}
		if before != nil {
			if err := before(tx); err != nil {
				return err
			}
		}
		return s.record(tx, f.Key, 2*f.Token+1, Event{Kind: EventReleased, At: fromMicros(nowUs), Owner: f.Owner, Token: f.Token})
	})
}

// Fenced implements Store.
func (s *SQLiteStore) Fenced(ctx context.Context, f Fence, fn func(*sqlite.Tx) error) error {
	guard := s.Guard(f)
	return s.db.Write(ctx, func(tx *sqlite.Tx) error {
		if err := guard(tx); err != nil {
			return err
		}
		return fn(tx)
	})
}

// Guard implements Store.
func (s *SQLiteStore) Guard(f Fence) func(*sqlite.Tx) error {
	return func(tx *sqlite.Tx) error {
		return s.check(tx, f, s.clock.Now().UnixMicro())
	}
}

// check returns nil if f is the key's live lease, and *LeaseLostError
// saying why not otherwise.
func (s *SQLiteStore) check(tx *sqlite.Tx, f Fence, nowUs int64) error {
	cur, found, err := scanLease(tx.QueryRow(selectLease, f.Key))
	if err != nil {
		return err
	}
	var r LostReason
	switch {
	case !found:
		r = LostNotHeld
	case cur.token != f.Token || cur.owner != f.Owner:
		r = LostSuperseded
	case cur.expiresAt <= nowUs:
		r = LostExpired
	default:
		return nil
	}
	return &LeaseLostError{Key: f.Key, Owner: f.Owner, Token: f.Token, Reason: r}
}

// lostReason explains why a conditional change on f touched no row.
func (s *SQLiteStore) lostReason(tx *sqlite.Tx, f Fence, nowUs int64) error {
	if err := s.check(tx, f, nowUs); err != nil {
		return err
	}
	return fmt.Errorf("coordinator: lease %q changed under a write transaction", f.Key) // cannot happen: one writer at a time
}

// Check implements Store.
func (s *SQLiteStore) Check(ctx context.Context, key string) (Status, error) {
	cur, found, err := scanLease(s.db.QueryRow(ctx, selectLease, key))
	if err != nil {
		return Status{}, err
	}
	nowUs := s.clock.Now().UnixMicro()
	if !found || cur.expiresAt <= nowUs {
		return Status{Key: key}, nil
	}
	return Status{Key: key, Locked: true, Owner: cur.owner, Token: cur.token, ExpiresIn: micros(cur.expiresAt - nowUs)}, nil
}

// Expired implements Store. It scans the leases table, which holds only
// leases not yet released: as many rows as there are holders.
func (s *SQLiteStore) Expired(ctx context.Context, limit int) ([]Stale, error) {
	nowUs := s.clock.Now().UnixMicro()
	rows, err := s.db.Query(ctx, `SELECT key, owner, token, ttl_us, expires_at FROM leases
		WHERE expires_at <= ? ORDER BY expires_at + ? * ttl_us LIMIT ?`, nowUs, DeadTTLs, limit)
	if err != nil {
		return nil, fmt.Errorf("coordinator: list expired leases: %w", err)
	}
	defer rows.Close()
	var out []Stale
	for rows.Next() {
		var (
			st         Stale
			ttlUs, exp int64
		)
		if err := rows.Scan(&st.Key, &st.Owner, &st.Token, &ttlUs, &exp); err != nil {
			return nil, fmt.Errorf("coordinator: read expired lease: %w", err)
		}
		st.TTL, st.ExpiresAt, st.ExpiredFor = micros(ttlUs), fromMicros(exp), micros(nowUs-exp)
		out = append(out, st)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("coordinator: list expired leases: %w", err)
	}
	return out, nil
}

// ForceRelease implements Store.
func (s *SQLiteStore) ForceRelease(ctx context.Context, leases []Stale) ([]Stale, error) {
	var done []Stale
	err := s.db.Write(ctx, func(tx *sqlite.Tx) error {
		done = done[:0]
		nowUs := s.clock.Now().UnixMicro()
		for _, st := range leases {
			expUs := st.ExpiresAt.UnixMicro()
			res, err := tx.Exec(`DELETE FROM leases WHERE key = ? AND token = ? AND expires_at = ? AND expires_at <= ?`,
				st.Key, st.Token, expUs, nowUs)
			if err != nil {
				return fmt.Errorf("coordinator: force-release lease: %w", err)
			}
			if n, _ := res.RowsAffected(); n == 0 {
				continue // renewed in time, taken over or released meanwhile
			}
			st.ExpiredFor = micros(nowUs - expUs)
			if err := s.record(tx, st.Key, 2*st.Token+1, Event{Kind: EventForceReleased, At: fromMicros(nowUs),
				Owner: st.Owner, Token: st.Token, TTL: st.TTL, ExpiredFor: st.ExpiredFor}); err != nil {
				return err
			}
			done = append(done, st)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return done, nil
}

// record adds an event to the key's history.
func (s *SQLiteStore) record(tx *sqlite.Tx, key string, seq int64, ev Event) error {
	_, err := tx.Exec(`INSERT INTO lease_history
		(key, seq, kind, at, owner, token, ttl_us, prev_owner, prev_token, expired_for_us)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		key, seq, string(ev.Kind), ev.At.UnixMicro(), ev.Owner, ev.Token, ev.TTL.Microseconds(),
		ev.PreviousOwner, ev.PreviousToken, ev.ExpiredFor.Microseconds())
	if err != nil {
		return fmt.Errorf("coordinator: record lease history: %w", err)
	}
	return nil
}

// trim deletes the key's events older than the newest s.keep: a walk of
// s.keep index entries and the deletion of what has accumulated since the
// last trim.
func (s *SQLiteStore) trim(tx *sqlite.Tx, key string) error {
	_, err := tx.Exec(`DELETE FROM lease_history WHERE key = ?1 AND seq <
		(SELECT seq FROM lease_history WHERE key = ?1 ORDER BY seq DESC LIMIT 1 OFFSET ?2)`, key, s.keep-1)
	if err != nil {
		return fmt.Errorf("coordinator: trim lease history: %w", err)
	}
	return nil
}

// pruneKeys is how many keys PruneHistory looks at in one read;
// pruneWriteKeys is the most whose history it deletes in one write. A key
// keeps up to HistoryLimit events and what accumulates between two trims
// (about 264 in all), so a write deletes at most some 8,500 rows while
// submissions and saves wait for the writer: about 40 ms at the rate a
// pass measured here (360,000 events in 1.7 s, docs/PERFORMANCE.md), an
// estimate, not a measurement of such a write.
const (
	pruneKeys      = 500
	pruneWriteKeys = 32
)

// PruneHistory implements Store. There is no index by time (every
// acquisition and release would pay for it), but a key's newest event is
// the last entry of its range in the primary key: the keys are visited by
// seeking from one to the next (a recursive query, pruneKeys at a time on
// the read pool), so a pass costs a few index seeks per key, not a read of
// every event. Each idle key's events up to the newest one seen are
// deleted in a write that checks again that the key holds no lease, so an
// acquisition in between keeps its own events.
func (s *SQLiteStore) PruneHistory(ctx context.Context, before time.Time) (int64, error) {
	return s.pruneHistory(ctx, before, pruneKeys, pruneWriteKeys)
}

// pruneHistory is PruneHistory looking at chunk keys at a time and
// deleting the histories of writeKeys keys at a time.
func (s *SQLiteStore) pruneHistory(ctx context.Context, before time.Time, chunk, writeKeys int) (int64, error) {
	cut := before.UnixMicro()
	after := ""
	var total int64
	for {
		type idle struct {
			key string
			seq int64
		}
		var batch []idle
		rows, err := s.db.Query(ctx, `WITH RECURSIVE k(key, n) AS (
				SELECT (SELECT key FROM lease_history WHERE key > ?1 ORDER BY key LIMIT 1), 1
				UNION ALL
				SELECT (SELECT key FROM lease_history WHERE key > k.key ORDER BY key LIMIT 1), n + 1
				FROM k WHERE k.key IS NOT NULL AND n < ?2)
			SELECT key,
				(SELECT seq FROM lease_history h WHERE h.key = k.key ORDER BY seq DESC LIMIT 1),
				(SELECT at FROM lease_history h WHERE h.key = k.key ORDER BY seq DESC LIMIT 1)
			FROM k WHERE key IS NOT NULL ORDER BY n`, after, chunk)
		if err != nil {
			return total, fmt.Errorf("coordinator: find idle lease histories: %w", err)
		}
		n := 0
		for rows.Next() {
			var (
				key     string
				seq, at int64
			)
			if err := rows.Scan(&key, &seq, &at); err != nil {
				rows.Close()
				return total, fmt.Errorf("coordinator: find idle lease histories: %w", err)
			}
			n++
			after = key
			if at < cut {
				batch = append(batch, idle{key, seq})
			}
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return total, fmt.Errorf("coordinator: find idle lease histories: %w", err)
		}
		for len(batch) > 0 {
			part := batch[:min(len(batch), writeKeys)]
			batch = batch[len(part):]
			var deleted int64
			err := s.db.Write(ctx, func(tx *sqlite.Tx) error {
				deleted = 0
				for _, b := range part {
					res, err := tx.Exec(`DELETE FROM lease_history WHERE key = ?1 AND seq <= ?2
						AND NOT EXISTS (SELECT 1 FROM leases WHERE key = ?1)`, b.key, b.seq)
					if err != nil {
						return fmt.Errorf("coordinator: prune lease history: %w", err)
					}
					if d, _ := res.RowsAffected(); d > 0 {
						deleted++
					}
				}
				return nil
			})
			if err != nil {
				return total, err
			}
			total += deleted
		}
		if n < chunk {
			return total, nil
		}
	}
}

// History implements Store.
func (s *SQLiteStore) History(ctx context.Context, key string, limit int) ([]Event, error) {
	rows, err := s.db.Query(ctx, `SELECT kind, at, owner, token, ttl_us, prev_owner, prev_token, expired_for_us
		FROM lease_history WHERE key = ? ORDER BY seq DESC LIMIT ?`, key, limit)
	if err != nil {
		return nil, fmt.Errorf("coordinator: read lease history: %w", err)
	}
	defer rows.Close()
	var out []Event
	for rows.Next() {
		var (
			ev                      Event
			kind                    string
			at, ttlUs, expiredForUs int64
		)
		if err := rows.Scan(&kind, &at, &ev.Owner, &ev.Token, &ttlUs, &ev.PreviousOwner, &ev.PreviousToken, &expiredForUs); err != nil {
			return nil, fmt.Errorf("coordinator: read lease history: %w", err)
		}
		ev.Kind, ev.At, ev.TTL, ev.ExpiredFor = EventKind(kind), fromMicros(at), micros(ttlUs), micros(expiredForUs)
		out = append(out, ev)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("coordinator: read lease history: %w", err)
	}
	slices.Reverse(out)
	return out, nil
}
