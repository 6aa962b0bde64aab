package main

import (
	"context"
	"database/sql"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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
	// Another process holds the database exclusively, so the copy waits.
	data, _ := exclusiveDataDir(t)
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

// backup - writes the copy to standard output (podman exec ... > FILE),
// so that a container's volume does not keep a copy that its image, with
// no shell, cannot remove and that the next run would refuse to replace;
// the data directory is left as it was.
func TestBackupToStandardOutput(t *testing.T) {
	data := t.TempDir()
	db, err := sqlite.Open(context.Background(), filepath.Join(data, tokenDatabaseFile), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Write(context.Background(), func(tx *sqlite.Tx) error {
		_, err := tx.Exec(`INSERT INTO api_tokens (hash, actor, created_at) VALUES (randomblob(32), 'ci', 1)`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	before, _ := os.ReadDir(data)
	cwd := t.TempDir()
	t.Chdir(cwd)
	for range 2 {
		r := cliRun(t, "", "backup", "--data", data, "-")
		if r.code != 0 {
			t.Fatalf("backup -: exit %d, stderr %q", r.code, r.stderr)
		}
		out := filepath.Join(t.TempDir(), "copy.db")
		if err := os.WriteFile(out, []byte(r.stdout), 0o600); err != nil {
			t.Fatal(err)
		}
		cp, err := sql.Open("sqlite", out)
		if err != nil {
			t.Fatal(err)
		}
		var n int
		err = cp.QueryRow(`SELECT COUNT(*) FROM api_tokens`).Scan(&n)
		cp.Close()
		if err != nil || n != 1 {
			t.Fatalf("the copy on standard output (%d bytes): %d tokens, %v", len(r.stdout), n, err)
		}
	}
	if ents, _ := os.ReadDir(cwd); len(ents) != 0 {
		t.Errorf("backup - left %v in the working directory", ents)
	}
	if after, _ := os.ReadDir(data); len(after) != len(before) {
		t.Errorf("the data directory held %v, and after backup - %v", before, after)
	}
}

// backup - whose reader goes away (| head) fails, and leaves no temporary
// file in the data directory: SIGPIPE does not kill it before it cleans up.
func TestBackupToAClosedPipe(t *testing.T) {
	bin := cliBuildBaton(t)
	data := t.TempDir()
	db, err := sqlite.Open(context.Background(), filepath.Join(data, tokenDatabaseFile), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Write(context.Background(), func(tx *sqlite.Tx) error {
		_, err := tx.Exec(`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n WHERE i < 400)
			INSERT INTO api_tokens (hash, actor, created_at) SELECT randomblob(32), hex(randomblob(500)), 1 FROM n`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	cmd := exec.Command(bin, "backup", "--data", data, "-")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	head := make([]byte, 16)
	if _, err := io.ReadFull(stdout, head); err != nil {
		t.Fatal(err)
	}
	stdout.Close()
	err = cmd.Wait()
	if err == nil {
		t.Errorf("backup - to a closed pipe: exit 0")
	}
	ents, _ := os.ReadDir(data)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".backup-") {
			t.Errorf("%s left in the data directory (%v, stderr %q)", e.Name(), err, stderr.String())
		}
	}
}

// backup started under nohup (SIGHUP ignored) goes on when the terminal
// hangs up: the signals it is started ignoring stay ignored.
func TestBackupUnderNohupSurvivesHangup(t *testing.T) {
	bin := cliBuildBaton(t)
	data, unlock := exclusiveDataDir(t)
	out := filepath.Join(t.TempDir(), "copy.db")
	p := cliStartBaton(t, "sh", nil, "-c", `trap "" HUP; exec "$0" "$@"`, bin, "backup", "--data", data, out)
	time.Sleep(700 * time.Millisecond)
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	select {
	case <-p.done:
		t.Fatalf("backup under nohup ended on SIGHUP: exit %d, stderr %q", p.code, p.stderr.String())
	default:
	}
	unlock()
	if code := p.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("backup: exit %d, stderr %q", code, p.stderr.String())
	}
	if _, err := os.Stat(out); err != nil {
		t.Error(err)
	}
}

// exclusiveDataDir makes a data directory whose database another process
// holds exclusively (a write transaction open in EXCLUSIVE locking mode),
// so that a backup of it waits, until unlock commits and lets it go.
func exclusiveDataDir(t *testing.T) (data string, unlock func()) {
	t.Helper()
	data = t.TempDir()
	path := filepath.Join(data, tokenDatabaseFile)
	db, err := sqlite.Open(context.Background(), path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	raw, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	ctx := context.Background()
	c, err := raw.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	for _, q := range []string{`PRAGMA locking_mode=EXCLUSIVE`, `BEGIN EXCLUSIVE`, `INSERT INTO api_tokens (hash, actor, created_at) VALUES (randomblob(32), 'ci', 1)`} {
		if _, err := c.ExecContext(ctx, q); err != nil {
			t.Fatal(q, err)
		}
	}
	return data, func() {
		if _, err := c.ExecContext(ctx, `COMMIT`); err != nil {
			t.Fatal(err)
		}
		c.Close()
		raw.Close()
	}
}
