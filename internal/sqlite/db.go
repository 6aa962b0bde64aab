package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	driver "modernc.org/sqlite" // registers the "sqlite" database/sql driver
	sqlite3 "modernc.org/sqlite/lib"
)

// ErrClosed is returned by Write after Close.
var ErrClosed = errors.New("sqlite: database closed")

// errTxLost marks a batch whose transaction is gone: a savepoint could not
// be rolled back or released, because SQLite rolled back the whole
// transaction (SQLITE_FULL, IOERR, NOMEM, INSERT OR ROLLBACK, ...) or the
// connection no longer holds it in a known state.
var errTxLost = errors.New("sqlite: batch transaction rolled back")

// Options configure Open.
type Options struct {
	// Synchronous is SQLite's synchronous setting: "FULL" (every commit is
	// fsynced before Write returns) or "NORMAL" (a commit may be lost in a
	// power cut, never corrupted). Defaults to "FULL".
	Synchronous string
	// BusyTimeout is how long a connection waits for a lock held by another
	// process before failing. Defaults to 10s.
	BusyTimeout time.Duration
	// ReadConns is the size of the read pool. Defaults to
	// max(4, 2*GOMAXPROCS).
	ReadConns int
	// MaxBatch is the most write functions grouped in one transaction.
	// Defaults to 512.
	MaxBatch int
	// Logger receives commit failures. Defaults to zap.NewNop().
	Logger *zap.Logger
}

// DB is baton's SQLite database: one writer with group commit and a read
// pool. It is safe for concurrent use.
type DB struct {
	path   string
	opts   Options
	log    *zap.Logger
	writer *sql.DB
	reader *sql.DB
	ckpt   *sql.DB // one connection that checkpoints the WAL in the background

	reqs   chan *request
	quit   chan struct{}
	done   chan struct{} // closed when the writer has stopped
	ckdone chan struct{} // closed when the checkpointer has stopped

	closeOnce sync.Once
	mu        sync.RWMutex // guards closed against concurrent Write
	closed    bool

	wstmts map[string]*sql.Stmt // writer goroutine only

	batches     atomic.Int64 // transactions committed or rolled back by the writer
	requests    atomic.Int64 // write functions run
	runNanos    atomic.Int64 // time spent running write functions
	commitNanos atomic.Int64 // time spent committing
	rstmts      sync.Map     // query → *sql.Stmt on the read pool

	// failure is the last write the store itself could not keep (a full
	// disk, an I/O error, a read-only file), until a probe of Ready
	// commits; nil while writes succeed.
	failure atomic.Pointer[storageFailure]
}

// storageFailure is a write SQLite could not keep for want of storage.
type storageFailure struct {
	err error
	at  time.Time
}

type request struct {
	ctx  context.Context
	fn   func(*Tx) error
	done chan error
	// alone runs fn in a transaction of its own, batched with no other
	// write: a write that may fail in SQLite itself (Ready's probe on a
	// full disk), whose failure would roll back every write batched with
	// it.
	alone bool
}

// Open opens (creating if needed) the database file at path, applies the
// pending migrations, and starts the writer.
func Open(ctx context.Context, path string, opts Options) (*DB, error) {
	opts.Synchronous = strings.ToUpper(cmp.Or(opts.Synchronous, "FULL"))
	if opts.Synchronous != "FULL" && opts.Synchronous != "NORMAL" && opts.Synchronous != "EXTRA" {
		return nil, fmt.Errorf("sqlite: synchronous must be FULL, EXTRA or NORMAL, not %q", opts.Synchronous)
	}
	opts.BusyTimeout = cmp.Or(opts.BusyTimeout, 10*time.Second)
	opts.ReadConns = cmp.Or(opts.ReadConns, max(4, 2*runtime.GOMAXPROCS(0)))
	opts.MaxBatch = cmp.Or(opts.MaxBatch, 512)
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if path == "" {
		return nil, errors.New("sqlite: empty database path")
	}
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("sqlite: create data directory: %w", err)
		}
	}
	// A new database is created private to its owner (SQLite would
	// create it, and its -wal and -shm files after it, with the process's
	// umask: readable by everyone, usually). It holds what clients asked
	// of GitHub, payloads included, on repositories that may be private.
	// An existing file keeps the mode it has.
	if f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600); err == nil {
		f.Close()
	} else if !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("sqlite: create %s: %w", path, err)
	}
	writer, err := sql.Open("sqlite", dsn(path, opts, false))
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	// Only the writer goroutine begins transactions, so at most one write
	// transaction exists at a time. The second connection lets a statement
	// be prepared (on the database, for reuse across transactions) while
	// the transaction holds the first; Tx.Stmt then prepares it once more
	// on the transaction's connection and database/sql keeps both.
	writer.SetMaxOpenConns(2)
	writer.SetMaxIdleConns(2)
	writer.SetConnMaxLifetime(0)
	writer.SetConnMaxIdleTime(0)
	if err := migrateRetrying(ctx, writer, opts.BusyTimeout); err != nil {
		writer.Close()
		return nil, err
	}
	reader, err := sql.Open("sqlite", dsn(path, opts, true))
	if err != nil {
		writer.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	reader.SetMaxOpenConns(opts.ReadConns)
	reader.SetMaxIdleConns(opts.ReadConns)
	reader.SetConnMaxIdleTime(0)
	reader.SetConnMaxLifetime(0)
	ckpt, err := sql.Open("sqlite", dsn(path, opts, false))
	if err != nil {
		writer.Close()
		reader.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	ckpt.SetMaxOpenConns(1)
	db := &DB{
		ckpt:   ckpt,
		path:   path,
		opts:   opts,
		log:    opts.Logger.With(zap.String("subsystem", "sqlite")),
		writer: writer,
		reader: reader,
		reqs:   make(chan *request, 4*opts.MaxBatch),
		quit:   make(chan struct{}),
		done:   make(chan struct{}),
		ckdone: make(chan struct{}),
		wstmts: make(map[string]*sql.Stmt),
	}
	go db.run()
	go db.checkpoint()
	return db, nil
}

// migrateRetrying runs migrate, again while it fails with SQLITE_BUSY, for
// up to busyTimeout. Two processes opening a new file at once can get
// SQLITE_BUSY without SQLite's busy wait (turning the file to WAL needs an
// exclusive lock, which SQLite does not wait for); migrate is idempotent.
func migrateRetrying(ctx context.Context, db *sql.DB, busyTimeout time.Duration) error {
	deadline := time.Now().Add(busyTimeout)
	for pause := 5 * time.Millisecond; ; pause = min(2*pause, 200*time.Millisecond) {
		err := migrate(ctx, db)
		var se *driver.Error
		if err == nil || !errors.As(err, &se) || se.Code()&0xff != sqlite3.SQLITE_BUSY || time.Now().After(deadline) {
			return err
		}
		select {
		case <-time.After(pause):
		case <-ctx.Done():
			return err
		}
	}
}

// walSizeLimit is the size the WAL file is cut back to when it is reset:
// above what the autocheckpoint lets it reach in steady use (10,000 pages
// of 4 KiB), so that steady use does not pay for shrinking and growing it.
const walSizeLimit = 64 << 20

func dsn(path string, opts Options, readOnly bool) string {
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", opts.BusyTimeout.Milliseconds()))
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous("+opts.Synchronous+")")
	q.Add("_pragma", "foreign_keys(ON)")
	q.Add("_pragma", "temp_store(MEMORY)")
	// The background checkpointer keeps the WAL short; the writer only
	// checkpoints by itself if the WAL grows past ~40 MB (the checkpointer
	// cannot keep up, or readers pin old frames), so commits rarely pay
	// for copying pages into the database file.
	q.Add("_pragma", "wal_autocheckpoint(10000)")
	// SQLite reuses the WAL from its start once it is checkpointed, but
	// never shrinks the file: after a spike (a long read holding back the
	// checkpoints while writes went on, a large prune) the WAL would keep
	// its peak size for as long as the server runs. It is cut back to
	// walSizeLimit whenever it is reset.
	q.Add("_pragma", fmt.Sprintf("journal_size_limit(%d)", walSizeLimit))
	if readOnly {
		q.Add("_pragma", "query_only(ON)")
	} else {
		q.Set("_txlock", "immediate")
	}
	return "file:" + (&url.URL{Path: path}).EscapedPath() + "?" + q.Encode()
}

// Stats counts the writer's work since Open.
type Stats struct {
	// Transactions is how many transactions the writer ran.
	Transactions int64
	// Writes is how many write functions they held; Writes/Transactions is
	// the mean group-commit batch.
	Writes int64
	// Run is the time spent running write functions, Commit the time
	// spent committing (the fsync among it).
	Run, Commit time.Duration
}

// Stats returns the writer's counters.
func (db *DB) Stats() Stats {
	return Stats{Transactions: db.batches.Load(), Writes: db.requests.Load(),
		Run: time.Duration(db.runNanos.Load()), Commit: time.Duration(db.commitNanos.Load())}
}

// Path returns the database file's path.
func (db *DB) Path() string { return db.path }

// Write runs fn inside a write transaction, grouped with the writes of other
// callers waiting at the same time, and returns once that transaction has
// committed (fn's error, or the commit's). fn runs in its own savepoint: if
// it returns an error or panics, its changes are rolled back and the other
// functions of the batch still commit. If SQLite rolls back the whole
// transaction instead (a full disk, an I/O error, INSERT OR ROLLBACK), every
// write of the batch returns an error wrapping the cause.
//
// If ctx ends before fn has started, fn is not run and ctx's error is
// returned. Once fn has started, Write waits for the commit whatever ctx
// says, so that nil always means durable and an error always means nothing
// of fn was kept.
func (db *DB) Write(ctx context.Context, fn func(*Tx) error) error {
	return db.write(ctx, fn, false)
}

// write is Write, in a transaction of its own when alone.
func (db *DB) write(ctx context.Context, fn func(*Tx) error, alone bool) error {
	req := &request{ctx: ctx, fn: fn, done: make(chan error, 1), alone: alone}
	db.mu.RLock()
	if db.closed {
		db.mu.RUnlock()
		return ErrClosed
	}
	select {
	case db.reqs <- req:
	case <-ctx.Done():
		db.mu.RUnlock()
		return ctx.Err()
	}
	db.mu.RUnlock()
	return <-req.done
}

// Close stops the writer after the writes already accepted have committed,
// and closes both pools. It is safe to call more than once.
func (db *DB) Close() error {
	var err error
	db.closeOnce.Do(func() {
		db.mu.Lock()
		db.closed = true
		db.mu.Unlock()
		close(db.quit)
		<-db.done
		<-db.ckdone
		for _, s := range db.wstmts {
			s.Close()
		}
		db.rstmts.Range(func(_, v any) bool {
			v.(*sql.Stmt).Close()
			return true
		})
		// A last full checkpoint leaves the database file complete, if it
		// can be had at once. Without waiting: another process may have
		// the file open (the server, while `baton token` or `baton
		// backup` closes), and a TRUNCATE checkpoint that waits for its
		// readers blocks its writers all the while, for up to the busy
		// timeout. Whoever closes the file last checkpoints it anyway.
		_, _ = db.ckpt.Exec(`PRAGMA busy_timeout = 0`)
		_, _ = db.ckpt.Exec(`PRAGMA wal_checkpoint(TRUNCATE)`)
		err = errors.Join(db.reader.Close(), db.writer.Close(), db.ckpt.Close())
	})
	return err
}

// run is the writer goroutine: it takes every request waiting, runs them
// in one transaction, and answers each.
func (db *DB) run() {
	defer close(db.done)
	batch := make([]*request, 0, db.opts.MaxBatch)
	// held is a request to run alone that fill took off the queue: it is
	// the next batch.
	var held *request
	for {
		first := held
		held = nil
		if first == nil {
			select {
			case first = <-db.reqs:
			case <-db.quit:
				// Write no longer accepts requests; finish the ones queued
				// (quit stays closed: each round comes back here).
				select {
				case first = <-db.reqs:
				default:
					return
				}
			}
		}
		batch = append(batch[:0], first)
		if !first.alone {
			batch, held = db.fill(batch)
		}
		db.commit(batch)
	}
}

// checkpoint copies committed WAL frames into the database file from its
// own connection, off the writer's path: a PASSIVE checkpoint takes no
// lock that blocks the writer or the readers.
func (db *DB) checkpoint() {
	defer close(db.ckdone)
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	last := db.batches.Load()
	for {
		select {
		case <-db.quit:
			return
		case <-t.C:
		}
		if n := db.batches.Load(); n != last {
			last = n
			if _, err := db.ckpt.Exec(`PRAGMA wal_checkpoint(PASSIVE)`); err != nil {
				db.log.Warn("checkpoint failed", zap.String("event", "sqlite.checkpoint_failed"), zap.Error(err))
			}
		}
	}
}

// fill adds the requests already waiting, up to MaxBatch.
func (db *DB) fill(batch []*request) (_ []*request, alone *request) {
	for len(batch) < db.opts.MaxBatch {
		select {
		case r := <-db.reqs:
			if r.alone {
				return batch, r
			}
			batch = append(batch, r)
		default:
			return batch, nil
		}
	}
	return batch, nil
}

// commit runs one batch in one transaction and answers every request.
func (db *DB) commit(batch []*request) {
	db.batches.Add(1)
	db.requests.Add(int64(len(batch)))
	errs := make([]error, len(batch))
	ran := false
	tx, err := db.writer.BeginTx(context.Background(), nil)
	if err != nil {
		err = fmt.Errorf("sqlite: begin: %w", err)
		for _, r := range batch {
			r.done <- err
		}
		return
	}
	single := len(batch) == 1
	t0 := time.Now()
	var lost error
	for i, r := range batch {
		if err := r.ctx.Err(); err != nil {
			errs[i] = err
			continue
		}
		t := &Tx{tx: tx, db: db, ctx: r.ctx}
		if single {
			errs[i] = call(r.fn, t)
		} else if errs[i] = db.inSavepoint(t, r.fn); errors.Is(errs[i], errTxLost) {
			// The writes before this one are gone with the transaction,
			// and the ones after would each run and commit on their own
			// outside it (SAVEPOINT outside a transaction begins one,
			// RELEASE commits it). Run no more of the batch.
			lost = errs[i]
			break
		}
		ran = ran || errs[i] == nil
	}
	t1 := time.Now()
	db.runNanos.Add(int64(t1.Sub(t0)))
	if lost != nil {
		// Nothing of the batch is kept: every write that has not failed on
		// its own gets the cause. The rollback ends the transaction if it
		// is still open and fails harmlessly if SQLite has ended it; either
		// way the connection is back in autocommit for the next batch.
		_ = tx.Rollback()
		db.log.Error("batch transaction lost", zap.String("event", "sqlite.transaction_lost"), zap.Error(lost), zap.Int("batch", len(batch)))
		for i := range errs {
			if errs[i] == nil {
				errs[i] = fmt.Errorf("sqlite: write not kept: another write of its batch lost the transaction: %w", lost)
			}
		}
	} else if single && errs[0] != nil || !ran {
		_ = tx.Rollback()
	} else if cerr := tx.Commit(); cerr != nil {
		cerr = fmt.Errorf("sqlite: commit: %w", cerr)
		db.log.Error("commit failed", zap.String("event", "sqlite.commit_failed"), zap.Error(cerr), zap.Int("batch", len(batch)))
		for i := range errs {
			if errs[i] == nil {
				errs[i] = cerr
			}
		}
	}
	db.commitNanos.Add(int64(time.Since(t1)))
	for i, r := range batch {
		if storageError(errs[i]) {
			db.failure.Store(&storageFailure{err: errs[i], at: time.Now()})
		}
		r.done <- errs[i]
	}
}

// IsStorageError reports whether err is SQLite failing to store (a full
// disk, an I/O error, a read-only file): the caller did nothing wrong, and
// the same write may succeed once the storage is back.
func IsStorageError(err error) bool { return storageError(err) }

// IsBusy reports whether err is SQLite waiting in vain for a lock another
// process holds (SQLITE_BUSY after the busy timeout, SQLITE_LOCKED): a
// `baton token` command, a backup or an operator's sqlite3 session kept
// the database's write lock for longer than the timeout. Nothing of the
// write was kept; the same write may succeed once the lock is let go.
func IsBusy(err error) bool {
	var se *driver.Error
	if err == nil || !errors.As(err, &se) {
		return false
	}
	switch se.Code() & 0xff {
	case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
		return true
	}
	return false
}

// storageError reports whether err is SQLite failing to store: a full disk
// (or database), an I/O error, a read-only or unopenable file, corruption.
func storageError(err error) bool {
	var se *driver.Error
	if err == nil || !errors.As(err, &se) {
		return false
	}
	switch se.Code() & 0xff {
	case sqlite3.SQLITE_FULL, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_READONLY, sqlite3.SQLITE_CANTOPEN,
		sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB:
		return true
	}
	return false
}

// Ready reports whether the database answers reads and takes writes. While
// writes succeed it costs one read. Once a write failed in SQLite itself
// for want of storage (a full disk, an I/O error, a read-only file), Ready
// returns that failure until a probe write of its own — a row of a few
// pages, written and deleted in one committed transaction — succeeds, so
// that it says ready again as soon as the store takes writes, even on a
// server nobody writes to; a small write that happens to fit does not
// clear it.
func (db *DB) Ready(ctx context.Context) error {
	var one int
	if err := db.QueryRow(ctx, `SELECT 1`).Scan(&one); err != nil {
		return fmt.Errorf("sqlite: read: %w", err)
	}
	f := db.failure.Load()
	if f == nil {
		return nil
	}
	// Alone: on a full disk the probe fails in SQLite itself, which rolls
	// back the whole transaction, and would take down every write batched
	// with it, small ones that fit included.
	err := db.write(ctx, func(tx *Tx) error {
		// schema_migrations has no reader that could see the row: it is
		// gone before the transaction commits.
		if _, err := tx.Exec(`INSERT OR REPLACE INTO schema_migrations (version, name, applied_at) VALUES (-1, zeroblob(16384), 0)`); err != nil {
			return err
		}
		_, err := tx.Exec(`DELETE FROM schema_migrations WHERE version = -1`)
		return err
	}, true)
	if err == nil {
		db.failure.CompareAndSwap(f, nil)
		return nil
	}
	if storageError(err) {
		return fmt.Errorf("sqlite: writes fail (since %s): %w", f.at.UTC().Format(time.RFC3339), err)
	}
	return fmt.Errorf("sqlite: writes failed at %s (%w); checking again: %w", f.at.UTC().Format(time.RFC3339), f.err, err)
}

// inSavepoint runs fn in a savepoint of the batch's transaction, rolled
// back if fn fails. If the savepoint cannot be rolled back or released, the
// transaction is lost (see errTxLost) and the error wraps errTxLost, fn's
// error and the savepoint's.
func (db *DB) inSavepoint(t *Tx, fn func(*Tx) error) error {
	if _, err := t.Exec("SAVEPOINT batch_item"); err != nil {
		return fmt.Errorf("sqlite: savepoint: %w", err)
	}
	if err := call(fn, t); err != nil {
		if _, rerr := t.Exec("ROLLBACK TO batch_item"); rerr != nil {
			return errors.Join(err, fmt.Errorf("%w: rollback to savepoint: %w", errTxLost, rerr))
		}
		if _, rerr := t.Exec("RELEASE batch_item"); rerr != nil {
			return errors.Join(err, fmt.Errorf("%w: release savepoint: %w", errTxLost, rerr))
		}
		return err
	}
	if _, err := t.Exec("RELEASE batch_item"); err != nil {
		return fmt.Errorf("%w: release savepoint: %w", errTxLost, err)
	}
	return nil
}

// call runs fn, turning a panic into an error so that one caller's bug
// cannot take the writer down with everybody's writes.
func call(fn func(*Tx) error, t *Tx) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("sqlite: write function panicked: %v", p)
		}
	}()
	return fn(t)
}

// writerStmt returns the writer's prepared statement for query, preparing
// it once. Only the writer goroutine calls it.
func (db *DB) writerStmt(query string) (*sql.Stmt, error) {
	if s, ok := db.wstmts[query]; ok {
		return s, nil
	}
	s, err := db.writer.Prepare(query)
	if err != nil {
		return nil, err
	}
	db.wstmts[query] = s
	return s, nil
}

func (db *DB) readerStmt(ctx context.Context, query string) (*sql.Stmt, error) {
	if s, ok := db.rstmts.Load(query); ok {
		return s.(*sql.Stmt), nil
	}
	s, err := db.reader.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	if prev, loaded := db.rstmts.LoadOrStore(query, s); loaded {
		s.Close()
		return prev.(*sql.Stmt), nil
	}
	return s, nil
}

// QueryRow runs a read-only query on the read pool.
func (db *DB) QueryRow(ctx context.Context, query string, args ...any) *sql.Row {
	s, err := db.readerStmt(ctx, query)
	if err != nil {
		// Let the error surface through Row.Scan.
		return db.reader.QueryRowContext(ctx, query, args...)
	}
	return s.QueryRowContext(ctx, args...)
}

// Query runs a read-only query on the read pool.
func (db *DB) Query(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	s, err := db.readerStmt(ctx, query)
	if err != nil {
		return nil, err
	}
	return s.QueryContext(ctx, args...)
}

// Tx is the transaction a write function runs in. Its statements are
// prepared once per query text and reused.
type Tx struct {
	tx  *sql.Tx
	db  *DB
	ctx context.Context
}

// Context is the context of the caller of Write.
func (t *Tx) Context() context.Context { return t.ctx }

// Exec runs a statement in the transaction.
func (t *Tx) Exec(query string, args ...any) (sql.Result, error) {
	s, err := t.db.writerStmt(query)
	if err != nil {
		return nil, err
	}
	return t.tx.Stmt(s).Exec(args...)
}

// QueryRow runs a query in the transaction.
func (t *Tx) QueryRow(query string, args ...any) *sql.Row {
	s, err := t.db.writerStmt(query)
	if err != nil {
		return t.tx.QueryRow(query, args...)
	}
	return t.tx.Stmt(s).QueryRow(args...)
}

// Query runs a query in the transaction.
func (t *Tx) Query(query string, args ...any) (*sql.Rows, error) {
	s, err := t.db.writerStmt(query)
	if err != nil {
		return nil, err
	}
	return t.tx.Stmt(s).Query(args...)
}
