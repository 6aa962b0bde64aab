package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Writes already accepted when Close is called are run and committed
// before Close returns: none is dropped, none left waiting for an answer.
func TestCloseCommitsQueuedWrites(t *testing.T) {
	t.Parallel()
	// The writer picks between the queue and the close at random: ten
	// rounds leave no room for luck.
	for range 10 {
		closeWithQueuedWrites(t)
	}
}

func closeWithQueuedWrites(t *testing.T) {
	t.Helper()
	db, err := Open(context.Background(), filepath.Join(t.TempDir(), "t.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := db.Write(ctx, func(tx *Tx) error {
		_, err := tx.Exec(`CREATE TABLE kv (k TEXT PRIMARY KEY, v INTEGER)`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	fns := make([]func(*Tx) error, 5)
	for i := range fns {
		fns[i] = insertKV(fmt.Sprint(i))
	}
	closed := make(chan error, 1)
	errs := runBatchWhile(t, db, func() {
		go func() { closed <- db.Close() }()
		<-db.quit // Close has begun: Write takes nothing more
	}, fns...)
	for i, err := range errs {
		if err != nil {
			t.Errorf("queued write %d: %v, want committed", i, err)
		}
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	db2, err := Open(ctx, db.Path(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db2.Close()
	var n int
	if err := db2.QueryRow(ctx, `SELECT COUNT(*) FROM kv`).Scan(&n); err != nil || n != len(fns) {
		t.Fatalf("%d rows after reopening (%v), want %d", n, err, len(fns))
	}
}

// A database Open creates, and the -wal and -shm files SQLite makes beside
// it, are readable by their owner only, whatever the umask: they hold
// what clients asked of GitHub.
func TestOpenCreatesPrivateFiles(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "t.db")
	db, err := Open(context.Background(), path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Write(context.Background(), func(tx *Tx) error {
		_, err := tx.Exec(`CREATE TABLE kv (k TEXT PRIMARY KEY, v INTEGER)`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{path, path + "-wal", path + "-shm"} {
		st, err := os.Stat(name)
		if err != nil {
			t.Fatal(err)
		}
		if perm := st.Mode().Perm(); perm&0o077 != 0 {
			t.Errorf("%s has mode %v, want no access for group and others", filepath.Base(name), perm)
		}
	}
}

// A second process's handle on the database (`baton token`, `baton
// backup`) closes without holding up the server's writes: its last
// checkpoint does not wait for a reader of the server's (here a raw
// connection on an older snapshot) while blocking every writer, as a
// TRUNCATE checkpoint with a busy timeout does.
func TestCloseDoesNotBlockOtherWriters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "t.db")
	server, err := Open(ctx, path, Options{BusyTimeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	write := func(k string) error {
		return server.Write(ctx, func(tx *Tx) error {
			_, err := tx.Exec(`INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, 0)`, -1000-len(k), k)
			return err
		})
	}
	if err := write("a"); err != nil {
		t.Fatal(err)
	}
	// A reader that stays on its snapshot while the server writes on.
	raw, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	reader, err := raw.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	if _, err := reader.ExecContext(ctx, `BEGIN`); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := reader.QueryRowContext(ctx, `SELECT COUNT(*) FROM schema_migrations`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	defer reader.ExecContext(ctx, `ROLLBACK`) //nolint:errcheck // the test's end
	if err := write("bb"); err != nil {
		t.Fatal(err)
	}

	other, err := Open(ctx, path, Options{BusyTimeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	closed := make(chan time.Duration, 1)
	start := time.Now()
	go func() {
		other.Close()
		closed <- time.Since(start)
	}()
	time.Sleep(100 * time.Millisecond)
	wstart := time.Now()
	if err := write("ccc"); err != nil {
		t.Errorf("a write of the server while the other handle closes: %v", err)
	}
	if took := time.Since(wstart); took > time.Second {
		t.Errorf("a write of the server waited %v for the other handle's close", took)
	}
	if took := <-closed; took > time.Second {
		t.Errorf("closing the other handle took %v", took)
	}
}
