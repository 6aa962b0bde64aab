package executor

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/baton-dev/baton/internal/sqlite"
)

// The bounds of what an executor remembers of the operations it made
// terminal (see finishedSet).
const (
	// finishedSetSize is how many it remembers, the latest. An operation's
	// own message usually arrives a queue's backlog after a handoff
	// finished it: a few thousand finishes later at the benchmark's rate.
	finishedSetSize = 8192
	// finishedSetTTL is how long it remembers one. Far shorter than the
	// shortest retention after which a finished record may be pruned (72
	// hours in package app), so that no record another process pruned
	// (and whose key made a new operation of the same ID) is still taken
	// for finished here.
	finishedSetTTL = 10 * time.Minute
)

// finishedSet remembers the operations this executor made terminal, so
// that a later delivery of one (its own message, after a handoff carried
// it out, or a duplicate) is acknowledged without reading the store.
// That is what reading it would do: a terminal record never leaves its
// terminal status (the store refuses the save), and Process of a terminal
// operation does nothing but acknowledge it.
//
// The one way out of a terminal status is deletion: Prune, after which
// the idempotency key may make a new operation with the same ID. The set
// is tied to the store's count of prunes that deleted records (see
// prunable) and forgets everything when it moved; an entry is added only
// if no prune deleted anything since before the save that made it
// terminal. Memory is bounded (finishedSetSize entries, finishedSetTTL
// each) and empty after a restart: what it does not hold is read from the
// store, as before.
type finishedSet struct {
	now    func() time.Time
	prunes func() uint64

	mu     sync.Mutex
	epoch  uint64               // prunes() when the contents were known good
	until  map[string]time.Time // operation ID → when it is forgotten
	ring   []string             // the IDs in the order they came, to drop the oldest
	next   int                  // the slot of ring the next ID takes
	filled bool
}

// prunable is implemented by stores whose terminal records can be
// deleted: pruneEpoch counts the prunes that deleted any, in this process,
// on the store's database.
type prunable interface {
	pruneEpoch() uint64
}

// newFinishedSet returns a set for store, or nil (remember nothing) when
// the store does not say when it deletes records.
func newFinishedSet(store Store, now func() time.Time) *finishedSet {
	p, ok := store.(prunable)
	if !ok {
		return nil
	}
	return &finishedSet{now: now, prunes: p.pruneEpoch, epoch: p.pruneEpoch(),
		until: make(map[string]time.Time, finishedSetSize), ring: make([]string, finishedSetSize)}
}

// mark returns the store's prune count, to be passed to add once the save
// that makes an operation terminal has returned. Safe on a nil set.
func (s *finishedSet) mark() uint64 {
	if s == nil {
		return 0
	}
	return s.prunes()
}

// add remembers that operationID is terminal in the store, as a save that
// began after mark returned epoch made it. Safe on a nil set.
func (s *finishedSet) add(operationID string, epoch uint64) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.current() || epoch != s.epoch {
		// A prune deleted records since the save began: this one may be
		// among them.
		return
	}
	if old := s.ring[s.next]; s.filled {
		delete(s.until, old)
	}
	s.ring[s.next] = operationID
	s.until[operationID] = s.now().Add(finishedSetTTL)
	if s.next++; s.next == len(s.ring) {
		s.next, s.filled = 0, true
	}
}

// has reports whether operationID is known terminal. Safe on a nil set.
func (s *finishedSet) has(operationID string) bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.current() {
		return false
	}
	t, ok := s.until[operationID]
	return ok && s.now().Before(t)
}

// current forgets everything if a prune deleted records since the set
// last looked, and reports whether it had not. s.mu is held.
func (s *finishedSet) current() bool {
	if e := s.prunes(); e != s.epoch {
		clear(s.until)
		clear(s.ring)
		s.epoch, s.next, s.filled = e, 0, false
		return false
	}
	return true
}

// pruneEpochs counts, per database, the prunes that deleted records
// (SQLiteStore.pruneEpoch): every store on one database sees the prunes
// of the others.
var pruneEpochs sync.Map // *sqlite.DB → *atomic.Uint64

func pruneEpochOf(db *sqlite.DB) *atomic.Uint64 {
	c, _ := pruneEpochs.LoadOrStore(db, new(atomic.Uint64))
	return c.(*atomic.Uint64)
}
