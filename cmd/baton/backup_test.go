package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/baton-dev/baton/internal/sqlite"
)

// backup copies the database of a data directory whose server is writing
// (the database open in WAL mode, its latest commits in baton.db-wal, not
// yet in baton.db): the copy holds every write committed before it began,
// passes SQLite's check, opens on its own, and is private to its owner.
func TestBackupCopiesALiveDatabase(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	db, err := sqlite.Open(ctx, filepath.Join(dir, tokenDatabaseFile), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var committed atomic.Int64
	write := func() error {
		err := db.Write(ctx, func(tx *sqlite.Tx) error {
			_, err := tx.Exec(`INSERT INTO api_tokens (hash, actor, created_at) VALUES (randomblob(32), 'ci', 1)`)
			return err
		})
		if err == nil {
			committed.Add(1)
		}
		return err
	}
	for range 200 {
		if err := write(); err != nil {
			t.Fatal(err)
		}
	}
	// The server goes on writing during the backup.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := write(); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	before := committed.Load()
	out := filepath.Join(t.TempDir(), "copy.db")
	r := cliRun(t, "", "backup", "--data", dir, out)
	close(stop)
	wg.Wait()
	if r.code != 0 {
		t.Fatalf("backup: exit %d, stderr %q", r.code, r.stderr)
	}
	fi, err := os.Stat(out)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("backup mode %v, want 0600", fi.Mode().Perm())
	}
	// The copy alone, restored as a data directory's database.
	restored := filepath.Join(t.TempDir(), tokenDatabaseFile)
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(restored, b, 0o600); err != nil {
		t.Fatal(err)
	}
	cp, err := sqlite.Open(ctx, restored, sqlite.Options{})
	if err != nil {
		t.Fatalf("the restored copy does not open: %v", err)
	}
	defer cp.Close()
	var n int64
	if err := cp.QueryRow(ctx, `SELECT COUNT(*) FROM api_tokens`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n < before {
		t.Errorf("the copy holds %d tokens, %d were committed before the backup began", n, before)
	}
}

// backup of a data directory without a database fails and creates none.
func TestBackupRefusesAMissingDatabase(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "typo")
	out := filepath.Join(t.TempDir(), "copy.db")
	r := cliRun(t, "", "backup", "--data", dir, out)
	if r.code == 0 || !strings.Contains(r.stderr, "no baton database at") {
		t.Fatalf("backup of a missing database: exit %d, stderr %q", r.code, r.stderr)
	}
	for _, p := range []string{dir, out} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s exists after a failed backup (%v)", p, err)
		}
	}
	// An existing FILE is not overwritten.
	data := t.TempDir()
	db, err := sqlite.Open(context.Background(), filepath.Join(data, tokenDatabaseFile), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	if err := os.WriteFile(out, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := cliRun(t, "", "backup", "--data", data, out); r.code == 0 {
		t.Errorf("backup over an existing file: exit 0")
	}
	if b, err := os.ReadFile(out); err != nil || string(b) != "keep" {
		t.Errorf("the existing file became %q (%v)", b, err)
	}
}
