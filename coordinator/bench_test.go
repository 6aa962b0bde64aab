package coordinator

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/baton-dev/baton/internal/sqlite"
)

// BenchmarkTokenCounter measures what the global token counter costs an
// acquisition: the counter's UPDATE … RETURNING, many to a transaction as
// group commit runs them, beside a point SELECT on the leases table (what
// any one statement of an acquisition costs) for scale.
func BenchmarkTokenCounter(b *testing.B) {
	b.Run("counter", func(b *testing.B) {
		benchStatement(b, func(tx *sqlite.Tx) error {
			var tok int64
			return tx.QueryRow(`UPDATE lease_tokens SET last = last + 1 WHERE id = 1 RETURNING last`).Scan(&tok)
		})
	})
	b.Run("point-select", func(b *testing.B) {
		benchStatement(b, func(tx *sqlite.Tx) error {
			_, _, err := scanLease(tx.QueryRow(selectLease, "issue:octo/app#1"))
			return err
		})
	})
}

func benchStatement(b *testing.B, stmt func(*sqlite.Tx) error) {
	db := openDB(b, filepath.Join(b.TempDir(), "baton.db"))
	ctx := context.Background()
	b.ResetTimer()
	for done := 0; done < b.N; {
		n := min(b.N-done, 256)
		if err := db.Write(ctx, func(tx *sqlite.Tx) error {
			for range n {
				if err := stmt(tx); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			b.Fatal(err)
		}
		done += n
	}
}
