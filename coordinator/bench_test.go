package coordinator

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/sqlite"
)

// BenchmarkAcquireRelease measures durable (synchronous=FULL)
// acquire+release pairs per second on the real SQLite store and the
// system clock: 32 holders each on its own key, and 8 holders contending
// for one key (a holder told lease_held asks again at once; held/pair
// counts those refusals).
func BenchmarkAcquireRelease(b *testing.B) {
	b.Run("distinct-keys-32", func(b *testing.B) {
		benchPairs(b, 32, func(g int) string { return fmt.Sprintf("issue:octo/app#%d", g) })
	})
	b.Run("one-key-8", func(b *testing.B) {
		benchPairs(b, 8, func(int) string { return "pull_request:octo/app#42" })
	})
}

func benchPairs(b *testing.B, holders int, key func(g int) string) {
	db := openDB(b, filepath.Join(b.TempDir(), "baton.db"))
	c, err := New(Config{DB: db})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	var next, held atomic.Int64
	before := db.Stats()
	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	for g := 0; g < holders; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			owner := fmt.Sprintf("bench-holder-%d", g)
			for next.Add(1) <= int64(b.N) {
				for {
					l, err := c.Acquire(ctx, key(g), owner, time.Minute)
					if errors.Is(err, ErrLeaseHeld) {
						held.Add(1)
						continue
					}
					if err != nil {
						b.Error(err)
						return
					}
					if err := c.Release(ctx, l); err != nil {
						b.Error(err)
						return
					}
					break
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	after := db.Stats()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pairs/s")
	b.ReportMetric(float64(held.Load())/float64(b.N), "held/pair")
	if tx := after.Transactions - before.Transactions; tx > 0 {
		b.ReportMetric(float64(after.Writes-before.Writes)/float64(tx), "writes/tx")
	}
}

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
