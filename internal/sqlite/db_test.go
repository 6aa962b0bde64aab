package sqlite

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	driver "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func openTest(t *testing.T) *DB {
	t.Helper()
	db, err := Open(context.Background(), filepath.Join(t.TempDir(), "t.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := db.Write(context.Background(), func(tx *Tx) error {
		_, err := tx.Exec(`CREATE TABLE kv (k TEXT PRIMARY KEY, v INTEGER)`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return db
}

func count(t *testing.T, db *DB) int {
	t.Helper()
	var n int
	if err := db.QueryRow(context.Background(), `SELECT COUNT(*) FROM kv`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// In one group-committed batch, a function that fails or panics loses only
// its own changes; the others commit.
func TestBatchIsolatesFailures(t *testing.T) {
	t.Parallel()
	db := openTest(t)
	ctx := context.Background()
	const n = 60
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = db.Write(ctx, func(tx *Tx) error {
				if _, err := tx.Exec(`INSERT INTO kv (k, v) VALUES (?, ?)`, fmt.Sprint(i), i); err != nil {
					return err
				}
				switch i % 3 {
				case 1:
					return errors.New("refused")
				case 2:
					panic("bug")
				}
				return nil
			})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if (i%3 == 0) != (err == nil) {
			t.Errorf("write %d: err = %v", i, err)
		}
	}
	if got := count(t, db); got != n/3 {
		t.Errorf("rows = %d, want %d", got, n/3)
	}
	if s := db.Stats(); s.Writes < n || s.Transactions >= s.Writes {
		t.Logf("stats %+v (batching depends on timing)", s)
	}
}

func TestWriteSeesEarlierWritesOfBatch(t *testing.T) {
	t.Parallel()
	db := openTest(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := db.Write(ctx, func(tx *Tx) error {
				_, err := tx.Exec(`INSERT INTO kv (k, v) VALUES ('c', 1) ON CONFLICT (k) DO UPDATE SET v = v + 1`)
				return err
			})
			if err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	var v int
	if err := db.QueryRow(ctx, `SELECT v FROM kv WHERE k = 'c'`).Scan(&v); err != nil || v != 50 {
		t.Errorf("counter = %d, %v; want 50", v, err)
	}
}

func TestCancelledContextNotRun(t *testing.T) {
	t.Parallel()
	db := openTest(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ran := false
	err := db.Write(ctx, func(tx *Tx) error { ran = true; return nil })
	if !errors.Is(err, context.Canceled) || ran {
		t.Errorf("Write with cancelled ctx = %v, ran = %v", err, ran)
	}
}

func TestWriteAfterClose(t *testing.T) {
	t.Parallel()
	db, err := Open(context.Background(), filepath.Join(t.TempDir(), "t.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
	if err := db.Write(context.Background(), func(*Tx) error { return nil }); !errors.Is(err, ErrClosed) {
		t.Errorf("Write after Close = %v", err)
	}
}

// Two handles on one file (as two processes would have) apply the
// migrations once and both write.
func TestTwoHandlesOneFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "t.db")
	var (
		wg  sync.WaitGroup
		dbs [2]*DB
		err [2]error
	)
	for i := range dbs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dbs[i], err[i] = Open(context.Background(), path, Options{})
		}()
	}
	wg.Wait()
	for i := range dbs {
		if err[i] != nil {
			t.Fatal(err[i])
		}
		defer dbs[i].Close()
	}
	var n int
	if e := dbs[0].QueryRow(context.Background(), `SELECT COUNT(*) FROM schema_migrations`).Scan(&n); e != nil {
		t.Fatal(e)
	}
	var want int
	if e := dbs[1].QueryRow(context.Background(), `SELECT MAX(version) FROM schema_migrations`).Scan(&want); e != nil || n != want {
		t.Errorf("schema_migrations rows = %d, max version %d (%v)", n, want, e)
	}
}

func TestRefusesNewerSchema(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "t.db")
	db, err := Open(context.Background(), path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Write(context.Background(), func(tx *Tx) error {
		_, err := tx.Exec(`INSERT INTO schema_migrations (version, name, applied_at) VALUES (9999, 'future', 0)`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if _, err := Open(context.Background(), path, Options{}); err == nil {
		t.Fatal("a database from a newer baton was opened")
	}
}

func TestBadOptions(t *testing.T) {
	t.Parallel()
	if _, err := Open(context.Background(), filepath.Join(t.TempDir(), "t.db"), Options{Synchronous: "OFF"}); err == nil {
		t.Error("synchronous=OFF accepted")
	}
	if _, err := Open(context.Background(), "", Options{}); err == nil {
		t.Error("empty path accepted")
	}
}

// When SQLite rolls back a batch's whole transaction (disk full, INSERT OR
// ROLLBACK, ...), no write of the batch is kept, so each one gets an error
// carrying the cause, and the next batch still commits.
func TestBatchTransactionLost(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		code int    // SQLite primary result code of the failure
		fail string // statements of the write that makes SQLite roll back
	}{
		{"disk full", sqlite3.SQLITE_FULL,
			`PRAGMA max_page_count = 8; INSERT INTO kv (k, v) VALUES ('big', zeroblob(1000000))`},
		{"insert or rollback", sqlite3.SQLITE_CONSTRAINT,
			`INSERT OR ROLLBACK INTO kv (k, v) VALUES ('old', 2)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := openTest(t)
			ctx := context.Background()
			insert := func(k string) func(*Tx) error {
				return func(tx *Tx) error {
					_, err := tx.Exec(`INSERT INTO kv (k, v) VALUES (?, 1)`, k)
					return err
				}
			}
			if err := db.Write(ctx, insert("old")); err != nil {
				t.Fatal(err)
			}

			// Hold the writer so that a, the failing write and c queue up
			// and run in that order in one batch.
			gate, started := make(chan struct{}), make(chan struct{})
			held := make(chan error, 1)
			go func() {
				held <- db.Write(ctx, func(*Tx) error { close(started); <-gate; return nil })
			}()
			<-started
			fns := []func(*Tx) error{insert("a"), func(tx *Tx) error {
				for _, q := range strings.Split(tc.fail, ";") {
					if _, err := tx.Exec(q); err != nil {
						return err
					}
				}
				return nil
			}, insert("c")}
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
			close(gate)
			if err := <-held; err != nil {
				t.Fatal(err)
			}
			for i, name := range []string{"a", "failing", "c"} {
				err := <-errs[i]
				var se *driver.Error
				if !errors.As(err, &se) || se.Code()&0xff != tc.code {
					t.Errorf("write %s: err = %v, want one carrying SQLite code %d", name, err, tc.code)
				}
			}
			var kept []string
			rows, err := db.Query(ctx, `SELECT k FROM kv WHERE k <> 'old' ORDER BY k`)
			if err != nil {
				t.Fatal(err)
			}
			for rows.Next() {
				var k string
				if err := rows.Scan(&k); err != nil {
					t.Fatal(err)
				}
				kept = append(kept, k)
			}
			rows.Close()
			if len(kept) > 0 {
				t.Errorf("rows %v kept by writes that returned an error", kept)
			}

			// The database takes writes again, in batches and alone.
			if err := db.Write(ctx, func(tx *Tx) error {
				_, err := tx.Exec(`PRAGMA max_page_count = 1073741823`)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			for _, k := range []string{"d", "e", "f"} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := db.Write(ctx, insert(k)); err != nil {
						t.Errorf("write %s after the lost batch: %v", k, err)
					}
				}()
			}
			wg.Wait()
			if got := count(t, db); got != 4 {
				t.Errorf("rows = %d, want 4 (old, d, e, f)", got)
			}
		})
	}
}

// capPages caps db's size at its pages now and extra more, as a full disk
// would (the cap is the writer connection's).
func capPages(t *testing.T, db *DB, extra int) {
	t.Helper()
	ctx := context.Background()
	var pages int
	if err := db.QueryRow(ctx, `PRAGMA page_count`).Scan(&pages); err != nil {
		t.Fatal(err)
	}
	if err := db.Write(ctx, func(tx *Tx) error {
		_, err := tx.Exec(fmt.Sprintf(`PRAGMA max_page_count = %d`, pages+extra))
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// Ready says the store is not ready while writes fail for want of storage
// (here a database capped at its size, as a full disk would), even though
// reads and small writes that fit still succeed, and ready again once a
// write would be kept, without anyone else writing.
func TestReadyReportsFailingWrites(t *testing.T) {
	t.Parallel()
	db := openTest(t)
	ctx := context.Background()
	if err := db.Ready(ctx); err != nil {
		t.Fatalf("Ready on a fresh database: %v", err)
	}
	capPages(t, db, 1)
	err := db.Write(ctx, func(tx *Tx) error {
		_, err := tx.Exec(`INSERT INTO kv (k, v) VALUES ('big', zeroblob(100000))`)
		return err
	})
	var se *driver.Error
	if !errors.As(err, &se) || se.Code()&0xff != sqlite3.SQLITE_FULL {
		t.Fatalf("write into a full database: %v, want SQLITE_FULL", err)
	}
	// A small write still fits; the store is not ready for all that.
	if err := db.Write(ctx, func(tx *Tx) error {
		_, err := tx.Exec(`INSERT INTO kv (k, v) VALUES ('small', 1)`)
		return err
	}); err != nil {
		t.Fatalf("small write: %v", err)
	}
	if err := db.Ready(ctx); !errors.As(err, &se) || se.Code()&0xff != sqlite3.SQLITE_FULL {
		t.Fatalf("Ready while writes fail: %v, want an error carrying SQLITE_FULL", err)
	}
	// Lift the cap without committing anything (the pragma is the
	// connection's): Ready's own probe finds the store writable again.
	errNoCommit := errors.New("no commit")
	if err := db.Write(ctx, func(tx *Tx) error {
		if _, err := tx.Exec(`PRAGMA max_page_count = 1073741823`); err != nil {
			return err
		}
		return errNoCommit
	}); !errors.Is(err, errNoCommit) {
		t.Fatal(err)
	}
	if err := db.Ready(ctx); err != nil {
		t.Fatalf("Ready once writes are kept again: %v", err)
	}
	var n int
	if err := db.QueryRow(ctx, `SELECT COUNT(*) FROM schema_migrations WHERE version < 1`).Scan(&n); err != nil || n != 0 {
		t.Errorf("probe rows left in schema_migrations: %d (%v)", n, err)
	}
}

// Ready's probe write runs in a transaction of its own: on a full disk it
// fails in SQLite itself, which rolls back the whole transaction, and
// writes batched with it (small ones that fit) would fail with it. A
// server polled for readiness would turn its submissions into errors.
func TestReadyProbeBatchedAlone(t *testing.T) {
	t.Parallel()
	db := openTest(t)
	ctx := context.Background()
	capPages(t, db, 2)
	if err := db.Write(ctx, func(tx *Tx) error {
		_, err := tx.Exec(`INSERT INTO kv (k, v) VALUES ('big', zeroblob(100000))`)
		return err
	}); err == nil {
		t.Fatal("a write larger than the database's cap was kept")
	}
	// Hold the writer, so that the next three requests queue up together:
	// a small write, Ready, a small write.
	release, holding := make(chan struct{}), make(chan struct{})
	held := make(chan error, 1)
	go func() { held <- db.Write(ctx, func(*Tx) error { close(holding); <-release; return nil }) }()
	<-holding
	queued := func(n int) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); len(db.reqs) < n; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d requests queued, want %d", len(db.reqs), n)
			}
		}
	}
	small := func(k string) <-chan error {
		c := make(chan error, 1)
		go func() {
			c <- db.Write(ctx, func(tx *Tx) error {
				_, err := tx.Exec(`INSERT INTO kv (k, v) VALUES (?, 1)`, k)
				return err
			})
		}()
		return c
	}
	before := small("before")
	queued(1)
	ready := make(chan error, 1)
	go func() { ready <- db.Ready(ctx) }()
	queued(2)
	after := small("after")
	queued(3)
	close(release)
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	if err := <-before; err != nil {
		t.Errorf("small write queued before Ready's probe: %v", err)
	}
	if err := <-after; err != nil {
		t.Errorf("small write queued after Ready's probe: %v", err)
	}
	if err := <-ready; err == nil {
		t.Error("Ready on a full database: nil")
	}
}
