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
// has ended, and an answer read under an older generation is never used.
// The data directory's lock makes the serving process the registry's only
// writer.
type repoCache struct {
	gen atomic.Uint64
	mu  sync.RWMutex
	m   map[string]repoAnswer
}

// repoAnswer is what InstallationOf found for a repository under
// generation gen: its installation and whether it is suspended, or that
// no installation in force covers it.
type repoAnswer struct {
	gen       uint64
	id        int64
	suspended bool
	missing   bool
}

// get returns the answer for key if it was read under generation gen.
func (c *repoCache) get(key string, gen uint64) (repoAnswer, bool) {
	c.mu.RLock()
	a, ok := c.m[key]
	c.mu.RUnlock()
	return a, ok && a.gen == gen
}

// put keeps a, unless the registry changed since a was read.
func (c *repoCache) put(key string, a repoAnswer) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if a.gen != c.gen.Load() {
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

// write runs fn in a write transaction and then forgets the cached
// answers, whatever the outcome (a failed commit may still have changed
// the file). Every change to the registry's tables goes through it.
func (in *Installations) write(ctx context.Context, fn func(*sqlite.Tx) error) error {
	defer in.cache.invalidate()
	return in.db.Write(ctx, fn)
}
