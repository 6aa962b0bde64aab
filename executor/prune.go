package executor

import (
	"context"
	"fmt"
	"time"

	"github.com/baton-dev/baton/internal/sqlite"
	"github.com/baton-dev/baton/schema"
)

// pruneChunk is how many rows Prune reads at a time, and the most it
// deletes in one transaction: the writer is shared with every submission
// and save, and is never held for a large delete.
const pruneChunk = 500

// Prune deletes the finished operations (succeeded, failed or cancelled)
// last updated before before, and returns how many it deleted.
// Unfinished operations stay whatever their age, dead-lettered ones
// included. Once an operation is pruned its status is no longer known, and
// its idempotency key may be used again: it then makes a new operation,
// with the same ID (which is derived from the actor and the key).
//
// There is no index on status or age (it would cost every operation two
// more index writes), so Prune walks the table in seq order from the
// oldest, pruneChunk rows at a time on the read pool, and stops at the
// first operation created at or after before: seq is given as operations
// are written, so the ones after it are, but for a few, younger. (An
// operation's creation time is taken before its write waits for the
// writer, so concurrent submissions may be numbered out of order, and so
// may operations around a step of the clock; an old one numbered after a
// young one waits for a later prune, and one stamped in the future by a
// clock that then stepped back holds the walk there until the cut passes
// its time.) Each chunk's finished old rows are deleted in one write,
// which checks status and age again.
func (s *SQLiteStore) Prune(ctx context.Context, before time.Time) (int64, error) {
	return s.prune(ctx, before, pruneChunk)
}

// prune is Prune reading chunk rows at a time.
func (s *SQLiteStore) prune(ctx context.Context, before time.Time, chunk int) (int64, error) {
	cut := before.UnixMicro()
	var after, total int64
	for {
		seqs, next, more, err := s.pruneCandidates(ctx, after, cut, chunk)
		if err != nil {
			return total, err
		}
		if len(seqs) > 0 {
			var n int64
			err := s.db.Write(ctx, func(tx *sqlite.Tx) error {
				n = 0
				for _, seq := range seqs {
					res, err := tx.Exec(`DELETE FROM operations WHERE seq = ?
						AND status IN ('succeeded', 'failed', 'cancelled') AND updated_at < ?`, seq, cut)
					if err != nil {
						return fmt.Errorf("executor: prune operations: %w", err)
					}
					d, _ := res.RowsAffected()
					n += d
				}
				if n > 0 {
					// Before the commit: see pruneEpoch.
					s.pruned.Add(1)
				}
				return nil
			})
			if err != nil {
				return total, err
			}
			total += n
		}
		if !more {
			return total, nil
		}
		after = next
	}
}

// pruneCandidates reads up to chunk operations with seq > after, and
// returns the seqs of the finished ones updated before cut, the last seq
// read, and whether the walk goes on (a full chunk, all created before
// cut).
func (s *SQLiteStore) pruneCandidates(ctx context.Context, after, cut int64, chunk int) (seqs []int64, last int64, more bool, err error) {
	rows, err := s.db.Query(ctx, `SELECT seq, status, created_at, updated_at FROM operations
		WHERE seq > ? ORDER BY seq LIMIT ?`, after, chunk)
	if err != nil {
		return nil, 0, false, fmt.Errorf("executor: find operations to prune: %w", err)
	}
	defer rows.Close()
	read := 0
	for rows.Next() {
		var (
			seq, created, updated int64
			status                string
		)
		if err := rows.Scan(&seq, &status, &created, &updated); err != nil {
			return nil, 0, false, fmt.Errorf("executor: find operations to prune: %w", err)
		}
		if created >= cut {
			return seqs, seq, false, nil
		}
		read++
		last = seq
		if schema.Status(status).Terminal() && updated < cut {
			seqs = append(seqs, seq)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, 0, false, fmt.Errorf("executor: find operations to prune: %w", err)
	}
	return seqs, last, read == chunk, nil
}
