package app

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/baton-dev/baton/internal/sqlite"
)

// repoCacheSize bounds the answers repoCache keeps. Names nobody installed
// baton on are remembered too (clients ask for them again), so a client
// inventing names must not grow the map without end: at the bound it is
// emptied and fills again.
const repoCacheSize = 10_000

// repoCache remembers InstallationOf's answers, so that a submission does
// not read SQLite to learn its repository's installation. It is exact
// rather than timed: every change to the registry goes through
// Installations.write, which moves the generation on once its transaction
// has ended, and an answer read under an older generation is never kept.
// The data directory's lock makes the serving process the registry's only
// writer (on Unix, where the lock is taken).
type repoCache struct {
	gen atomic.Uint64
	mu  sync.RWMutex
	m   map[string]repoAnswer
}

// repoAnswer is what InstallationOf found for a repository: its
// installation and whether it is suspended, or that no installation in
// force covers it.
type repoAnswer struct {
	id        int64
	suspended bool
	missing   bool
}

// get returns the answer kept for key. Every answer in the map was read
// under the current generation: put keeps no other, and invalidate empties
// the map as it moves the generation on.
func (c *repoCache) get(key string) (repoAnswer, bool) {
	c.mu.RLock()
	a, ok := c.m[key]
	c.mu.RUnlock()
	return a, ok
}

// put keeps a, read under generation gen, unless the registry changed
// since.
func (c *repoCache) put(key string, a repoAnswer, gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.gen.Load() {
		return
	}
	if c.m == nil || len(c.m) >= repoCacheSize {
		c.m = make(map[string]repoAnswer)
	}
	c.m[key] = a
}

// invalidate forgets every answer.
func (c *repoCache) invalidate() {
	c.mu.Lock()
	c.gen.Add(1)
	c.m = nil
	c.mu.Unlock()
}

// accountCache remembers SameAccountInstallations' answers, by the list of
// installations asked about, exactly as repoCache does (every change to
// the registry moves its generation on), so that authenticating a request
// does not read SQLite.
type accountCache struct {
	gen atomic.Uint64
	mu  sync.RWMutex
	m   map[string][]int64
}

func (c *accountCache) get(key string) ([]int64, bool) {
	c.mu.RLock()
	ids, ok := c.m[key]
	c.mu.RUnlock()
	return ids, ok
}

// put keeps ids, read under generation gen, unless the registry changed
// since. The map is emptied at repoCacheSize.
func (c *accountCache) put(key string, ids []int64, gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.gen.Load() {
		return
	}
	if c.m == nil || len(c.m) >= repoCacheSize {
		c.m = make(map[string][]int64)
	}
	c.m[key] = ids
}

func (c *accountCache) invalidate() {
	c.mu.Lock()
	c.gen.Add(1)
	c.m = nil
	c.mu.Unlock()
}

// write runs fn in a write transaction, dropping the repository aliases
// fn's changes ended (pruneAliasesTx), and then forgets the cached
// answers, whatever the outcome (a failed commit may still have changed
// the file). Every change to the registry's tables goes through it.
func (in *Installations) write(ctx context.Context, fn func(*sqlite.Tx) error) error {
	defer in.accountCache.invalidate()
	defer in.currentCache.invalidate()
	defer in.cache.invalidate()
	return in.db.Write(ctx, func(tx *sqlite.Tx) error {
		if err := fn(tx); err != nil {
			return err
		}
		return pruneAliasesTx(tx)
	})
}
