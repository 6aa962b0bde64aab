package coordinator

import (
	"context"

	"github.com/baton-dev/baton/internal/sqlite"
)

// Fenced runs fn in a transaction that first checks, against the store's
// rows and the coordinator's clock, that l is still the key's live lease
// (same owner, same token, not expired). If it is not, fn does not run and
// *LeaseLostError is returned (and the handle is marked lost): a holder
// that lost its lease cannot write. fn runs on the database's writer: it
// must be short and wait for nothing.
func (c *Coordinator) Fenced(ctx context.Context, l *Lease, fn func(*sqlite.Tx) error) error {
	err := c.store.Fenced(ctx, l.Fence, fn)
	l.noteErr(err)
	return err
}

// Guard returns the check Fenced makes, to run first inside another
// component's transaction on the same database, for example as the guard
// of the executor's SaveGuarded:
//
//	err := store.SaveGuarded(ctx, rec, coord.Guard(lease))
//
// The guard reads the clock when it runs, so the check holds at the moment
// of the write, whenever the write is scheduled.
func (c *Coordinator) Guard(l *Lease) func(*sqlite.Tx) error {
	guard := c.store.Guard(l.Fence)
	return func(tx *sqlite.Tx) error {
		err := guard(tx)
		l.noteErr(err)
		return err
	}
}
