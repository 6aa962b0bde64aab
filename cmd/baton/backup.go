package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"

	_ "modernc.org/sqlite" // the "sqlite" database/sql driver
)

func init() { register(newBackupCmd) }

func newBackupCmd() *cobra.Command {
	var dataDir string
	cmd := &cobra.Command{
		Use:   "backup FILE|-",
		Short: "Copy the database of a data directory, safely while the server runs",
		Long: `Backup writes a consistent copy of the data directory's database (baton.db:
every operation, lease, token, installation and delivery) to FILE, which
must not exist. The server may be running: the copy is the database as of
one moment, taken without stopping its writes. Copying baton.db with cp
while the server runs is not safe: the latest writes live in baton.db-wal
until they are checkpointed, and a file copied while it changes may be
torn.

The copy is written private to its owner (mode 0600), synced to disk, and
checked. To restore it, stop the server, remove baton.db-wal and
baton.db-shm from the data directory, and put the copy in place as
baton.db. The App's credentials (github-app.json and its key file) are
not in the database: copy them once, they change only when the App is
created again. The embedded JetStream store (nats/) need not be kept: the
operations it was carrying are published again from the database (a dead
letter among them runs again). See deploy/README.md, Backups, for what a
restore gives back and what it does not.

FILE "-" writes the copy to standard output instead (not to a terminal),
through a temporary file in the data directory removed at the end: for a
container, whose volume would otherwise keep the copy.`,
		Example: `  baton backup --data /var/lib/baton /backups/baton-$(date +%F).db
  podman exec baton baton backup - > baton-$(date +%F).db`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := cliFirst(dataDir, os.Getenv("BATON_DATA"), "baton-data")
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			// Interrupted (Ctrl-C, a cron job's timeout), the backup
			// removes what it had begun of FILE rather than die leaving
			// a partial file that would pass for a copy.
			// A signal the command was started ignoring (nohup, a
			// background job's SIGINT) stays ignored: Notify would
			// undo that.
			sigs := []os.Signal{syscall.SIGTERM}
			for _, sig := range []os.Signal{syscall.SIGINT, syscall.SIGHUP} {
				if !signal.Ignored(sig) {
					sigs = append(sigs, sig)
				}
			}
			ctx, stop := signal.NotifyContext(ctx, sigs...)
			defer stop()
			src := filepath.Join(dir, tokenDatabaseFile)
			if args[0] == "-" {
				return backupToStream(ctx, src, cmd.OutOrStdout())
			}
			return backupDatabase(ctx, src, args[0])
		},
	}
	cmd.Flags().StringVar(&dataDir, "data", "", "data directory of the server (env BATON_DATA; default ./baton-data)")
	cliUsageErrors(cmd)
	return cmd
}

// backupDatabase writes a consistent copy of the database at src to dst
// with VACUUM INTO: one read transaction, which in WAL mode neither waits
// for the server's writer nor holds it up. It neither creates nor migrates
// src.
func backupDatabase(ctx context.Context, src, dst string) (err error) {
	if _, err := os.Stat(src); err != nil {
		return fmt.Errorf("no baton database at %s (is --data right?)", src)
	}
	// VACUUM INTO reads its file name as a URI when it begins with
	// "file:" (the connection takes URIs): an absolute path never does.
	if dst, err = filepath.Abs(dst); err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	// VACUUM INTO writes into an empty file: made here, private, so that
	// the copy of what clients asked of GitHub is no more readable than
	// the database.
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	f.Close()
	defer func() {
		if err != nil {
			os.Remove(dst)
		}
	}()
	q := url.Values{}
	q.Set("mode", "rw") // never create src
	q.Add("_pragma", "busy_timeout(60000)")
	db, err := sql.Open("sqlite", "file:"+(&url.URL{Path: src}).EscapedPath()+"?"+q.Encode())
	if err != nil {
		return fmt.Errorf("backup: open %s: %w", src, err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	// The copy runs aside so that an interruption is answered at once,
	// even while SQLite waits for a lock held elsewhere: the process
	// ends with the removal of dst (deferred above), the copy with it.
	copied := make(chan error, 1)
	go func() {
		_, err := db.ExecContext(ctx, `VACUUM INTO ?`, dst)
		copied <- err
	}()
	select {
	case err = <-copied:
	case <-ctx.Done():
		err = context.Cause(ctx)
	}
	if err != nil {
		return fmt.Errorf("backup: copy %s: %w", src, err)
	}
	// VACUUM INTO does not sync what it wrote.
	if err := syncFile(dst); err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	if d, err := os.Open(filepath.Dir(dst)); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return checkDatabase(ctx, dst)
}

// backupToStream writes a copy of src to out, through a temporary file
// beside src (the data directory is writable, and has room for the
// database it holds) removed at the end.
func backupToStream(ctx context.Context, src string, out io.Writer) error {
	if f, ok := out.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			return cliUsage(errors.New("backup -: standard output is a terminal; redirect it to a file"))
		}
	}
	// A reader gone (| head) is a write error, not a death by SIGPIPE
	// that would leave the temporary file behind.
	pipe := make(chan os.Signal, 1)
	signal.Notify(pipe, syscall.SIGPIPE)
	defer signal.Stop(pipe)
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	tmp := filepath.Join(filepath.Dir(src), fmt.Sprintf(".backup-%x.db", rnd))
	defer os.Remove(tmp)
	if err := backupDatabase(ctx, src, tmp); err != nil {
		return err
	}
	f, err := os.Open(tmp)
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	defer f.Close()
	if _, err := io.Copy(out, ctxReader{ctx, f}); err != nil {
		return fmt.Errorf("backup: write the copy to standard output: %w", err)
	}
	return nil
}

// ctxReader is r until ctx ends: an interrupted copy stops at once.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := context.Cause(c.ctx); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

func syncFile(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	return errors.Join(f.Sync(), f.Close())
}

// checkDatabase runs SQLite's quick_check on the copy at path.
func checkDatabase(ctx context.Context, path string) error {
	db, err := sql.Open("sqlite", "file:"+(&url.URL{Path: path}).EscapedPath()+"?mode=ro")
	if err != nil {
		return fmt.Errorf("backup: check %s: %w", path, err)
	}
	defer db.Close()
	var res string
	if err := db.QueryRowContext(ctx, `PRAGMA quick_check`).Scan(&res); err != nil {
		return fmt.Errorf("backup: check %s: %w", path, err)
	}
	if res != "ok" {
		return fmt.Errorf("backup: the copy %s fails its check: %s", path, res)
	}
	return nil
}
