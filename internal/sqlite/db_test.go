package sqlite

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"go.uber.org/goleak"
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
