package sqlite

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	sqlite3 "modernc.org/sqlite/lib"

	driver "modernc.org/sqlite"
)

// runBatch runs fns in one batch, in order (the writer is held until all
// are queued), and returns their errors.
func runBatch(t *testing.T, db *DB, fns ...func(*Tx) error) []error {
	t.Helper()
	return runBatchWhile(t, db, func() {}, fns...)
}

// runBatchWhile is runBatch that calls during once every write is queued,
// before the writer goes on.
func runBatchWhile(t *testing.T, db *DB, during func(), fns ...func(*Tx) error) []error {
	t.Helper()
	ctx := context.Background()
	gate, started := make(chan struct{}), make(chan struct{})
	held := make(chan error, 1)
	go func() {
		held <- db.Write(ctx, func(*Tx) error { close(started); <-gate; return nil })
	}()
	<-started
	errs := make([]chan error, len(fns))
	for i, fn := range fns {
		errs[i] = make(chan error, 1)
		go func() { errs[i] <- db.Write(ctx, fn) }()
		for deadline := time.Now().Add(5 * time.Second); len(db.reqs) < i+1; runtime.Gosched() {
			if time.Now().After(deadline) {
				t.Fatalf("write %d never queued", i)
			}
		}
	}
	during()
	close(gate)
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	out := make([]error, len(fns))
	timeout := time.After(10 * time.Second)
	for i := range fns {
		select {
		case out[i] = <-errs[i]:
		case <-timeout:
			t.Fatalf("write %d never answered", i)
		}
	}
	return out
}

var errOwn = errors.New("the write's own failure")

func insertKV(k string) func(*Tx) error {
	return func(tx *Tx) error {
		_, err := tx.Exec(`INSERT INTO kv (k, v) VALUES (?, 1)`, k)
		return err
	}
}

func failOnItsOwn(tx *Tx) error {
	if _, err := tx.Exec(`INSERT INTO kv (k, v) VALUES ('own', 1)`); err != nil {
		return err
	}
	return errOwn
}

func sqliteCode(err error) int {
	var se *driver.Error
	if !errors.As(err, &se) {
		return -1
	}
	return se.Code() & 0xff
}

// When a batch is lost (a write made SQLite roll the transaction back) or
// its commit fails, each write that had failed on its own still returns
// its own error, not the batch's: a caller told lease_lost or
// already_terminal must not hear "storage failed" instead. The others get
// the batch's failure, and nothing of the batch is kept.
func TestBatchFailureKeepsEachWritesOwnError(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("transaction lost", func(t *testing.T) {
		t.Parallel()
		db := openTest(t)
		if err := db.Write(ctx, insertKV("old")); err != nil {
			t.Fatal(err)
		}
		errs := runBatch(t, db, insertKV("a"), failOnItsOwn, func(tx *Tx) error {
			_, err := tx.Exec(`INSERT OR ROLLBACK INTO kv (k, v) VALUES ('old', 2)`)
			return err
		}, insertKV("c"))
		if !errors.Is(errs[1], errOwn) {
			t.Errorf("write that failed on its own: %v, want its own error", errs[1])
		}
		for _, i := range []int{0, 2, 3} {
			if sqliteCode(errs[i]) != sqlite3.SQLITE_CONSTRAINT {
				t.Errorf("write %d: %v, want the lost transaction's cause", i, errs[i])
			}
		}
		wantKeys(t, db, "old")
	})
	t.Run("commit failed", func(t *testing.T) {
		t.Parallel()
		db := openTest(t)
		if err := db.Write(ctx, func(tx *Tx) error {
			if _, err := tx.Exec(`CREATE TABLE p (id INTEGER PRIMARY KEY)`); err != nil {
				return err
			}
			_, err := tx.Exec(`CREATE TABLE c (id INTEGER PRIMARY KEY, p INTEGER REFERENCES p(id) DEFERRABLE INITIALLY DEFERRED)`)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		// The dangling reference is only checked at COMMIT.
		errs := runBatch(t, db, insertKV("a"), failOnItsOwn, func(tx *Tx) error {
			_, err := tx.Exec(`INSERT INTO c (id, p) VALUES (1, 99)`)
			return err
		})
		if !errors.Is(errs[1], errOwn) {
			t.Errorf("write that failed on its own: %v, want its own error", errs[1])
		}
		for _, i := range []int{0, 2} {
			if sqliteCode(errs[i]) != sqlite3.SQLITE_CONSTRAINT {
				t.Errorf("write %d: %v, want the commit's failure", i, errs[i])
			}
		}
		wantKeys(t, db)
		if err := db.Write(ctx, insertKV("after")); err != nil {
			t.Fatalf("write after a failed commit: %v", err)
		}
		wantKeys(t, db, "after")
	})
}

func wantKeys(t *testing.T, db *DB, want ...string) {
	t.Helper()
	rows, err := db.Query(context.Background(), `SELECT k FROM kv ORDER BY k`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			t.Fatal(err)
		}
		got = append(got, k)
	}
	if len(got) != len(want) {
		t.Fatalf("keys %v, want %v", got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("keys %v, want %v", got, want)
		}
	}
}
