package main

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/sqlite"
)

// backup takes data directories and FILEs whose paths SQLite's URI syntax
// would read otherwise: spaces, '?', '#', '%', and a relative FILE that
// begins with "file:".
func TestBackupOddPaths(t *testing.T) {
	for _, name := range []string{"with space", "q?mode=ro", "h#frag", "pct%41", "file:x"} {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			data := filepath.Join(root, name)
			if err := os.MkdirAll(data, 0o700); err != nil {
				t.Fatal(err)
			}
			db, err := sqlite.Open(context.Background(), filepath.Join(data, tokenDatabaseFile), sqlite.Options{})
			if err != nil {
				t.Fatal(err)
			}
			db.Close()
			t.Chdir(root)
			out := name + ".db"
			r := cliRun(t, "", "backup", "--data", name, out)
			if r.code != 0 {
				t.Fatalf("backup --data %q %q: exit %d, stderr %q", name, out, r.code, r.stderr)
			}
			fi, err := os.Stat(filepath.Join(root, out))
			if err != nil || fi.Size() == 0 {
				t.Fatalf("no copy at %q: %v", out, err)
			}
			ents, _ := os.ReadDir(root)
			for _, e := range ents {
				if e.Name() != name && e.Name() != out {
					t.Errorf("stray file %q beside the copy", e.Name())
				}
			}
		})
	}
}

// backup interrupted (Ctrl-C, a cron job's timeout) leaves no FILE behind:
// a partial or empty file under the backup's name would pass for a backup
// and stop the next run, which refuses an existing FILE.
func TestBackupInterruptedLeavesNoFile(t *testing.T) {
	bin := cliBuildBaton(t)
	data := t.TempDir()
	path := filepath.Join(data, tokenDatabaseFile)
	db, err := sqlite.Open(context.Background(), path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	// Another process holds the database exclusively, so the copy waits.
	raw, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	ctx := context.Background()
	c, err := raw.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, q := range []string{`PRAGMA locking_mode=EXCLUSIVE`, `BEGIN EXCLUSIVE`, `INSERT INTO api_tokens (hash, actor, created_at) VALUES (randomblob(32), 'ci', 1)`} {
		if _, err := c.ExecContext(ctx, q); err != nil {
			t.Fatal(q, err)
		}
	}
	out := filepath.Join(t.TempDir(), "copy.db")
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		p := cliStartBaton(t, bin, nil, "backup", "--data", data, out)
		time.Sleep(700 * time.Millisecond)
		if err := p.cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		code := p.wait(t, 10*time.Second)
		if code == 0 {
			t.Errorf("%v: backup exited 0", sig)
		} else {
			t.Logf("%v: exit %d, stderr %q", sig, code, p.stderr.String())
		}
		if _, err := os.Stat(out); !os.IsNotExist(err) {
			t.Errorf("%v: %s is left behind after an interrupted backup (%v), exit %d, stderr %q", sig, out, err, code, p.stderr.String())
			os.Remove(out)
		}
	}
}
