package app

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/baton-dev/baton/internal/sqlite"
)

// repoCacheSize bounds the answers a registryCache keeps. Names nobody installed
// baton on are remembered too (clients ask for them again), so a client
// inventing names must not grow the map without end: at the bound it is
// emptied and fills again.
const repoCacheSize = 10_000

// registryCache remembers answers read from the installations registry:
// InstallationOf's (repoAnswer, so that a submission does not read SQLite
// to learn its repository's installation) and SameAccountInstallations'
// (so that authenticating a request does not either). It is exact rather
// than timed: every change to the registry goes through
// Installations.write, which moves the generation on once its transaction
// has ended, and an answer read under an older generation is never kept.
// The data directory's lock makes the serving process the registry's only
// writer (on Unix, where the lock is taken).
type registryCache[V any] struct {
	gen atomic.Uint64
	mu  sync.RWMutex
	m   map[string]V
}

// repoCache keeps InstallationOf's answers.
type repoCache = registryCache[repoAnswer]

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
func (c *registryCache[V]) get(key string) (V, bool) {
	c.mu.RLock()
	a, ok := c.m[key]
	c.mu.RUnlock()
	return a, ok
}

// put keeps a, read under generation gen, unless the registry changed
// since.
func (c *registryCache[V]) put(key string, a V, gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.gen.Load() {
		return
	}
	if c.m == nil || len(c.m) >= repoCacheSize {
		c.m = make(map[string]V)
	}
	c.m[key] = a
}

// invalidate forgets every answer.
func (c *registryCache[V]) invalidate() {
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
