package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// After a spike that grew the WAL (here a reader holding an old snapshot
// while 100 MB were written, as a long read or a large prune can), the
// file comes back to a bound once the WAL is checkpointed and reset:
// SQLite reuses a WAL from its start but does not shrink it by itself,
// and a server that once had a spike would keep the disk it took for as
// long as it runs.
func TestWALShrinksAfterSpike(t *testing.T) {
	t.Parallel()
	db := openTest(t)
	ctx := context.Background()
	walSize := func() int64 {
		fi, err := os.Stat(db.Path() + "-wal")
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	// A reader that keeps its snapshot: no checkpoint can go past it.
	tx, err := db.reader.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := tx.QueryRow(`SELECT COUNT(*) FROM kv`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	pad := strings.Repeat("x", 2000)
	for b := 0; b < 50; b++ {
		if err := db.Write(ctx, func(tx *Tx) error {
			for i := 0; i < 1000; i++ {
				if _, err := tx.Exec(`INSERT INTO kv (k, v) VALUES (?, ?)`, fmt.Sprint(b, "-", i, pad), i); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	peak := walSize()
	if peak < 2*walSizeLimit {
		t.Fatalf("the WAL grew to %d bytes only: the test measures nothing", peak)
	}
	_ = tx.Rollback()
	// Writes go on, a little at a time, as under steady load.
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; ; i++ {
		if err := db.Write(ctx, func(tx *Tx) error {
			_, err := tx.Exec(`INSERT OR REPLACE INTO kv (k, v) VALUES ('steady', ?)`, i)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if s := walSize(); s <= walSizeLimit {
			t.Logf("WAL %d bytes at its peak, %d after", peak, s)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("WAL still %d bytes 20s after the spike (%d at its peak), want at most %d", walSize(), peak, walSizeLimit)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
