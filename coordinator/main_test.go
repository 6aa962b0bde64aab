package coordinator

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/baton-dev/baton/internal/sqlite"
)

func TestMain(m *testing.M) {
	if os.Getenv(historyChildEnv) != "" {
		historyChild()
		return
	}
	goleak.VerifyTestMain(m)
}

// epoch is where fake clocks start.
var epoch = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// bundle is what a test needs: a real database file, the SQLite store, a
// fake clock, the coordinator, and its log lines.
type bundle struct {
	db    *sqlite.DB
	clock *FakeClock
	store *SQLiteStore
	c     *Coordinator
	logs  *observer.ObservedLogs
}

type setup struct {
	store func(Store) Store // wraps the SQLite store (a seam for tests)
	cfg   func(*Config)
}

func newBundle(t testing.TB, opts ...setup) *bundle {
	t.Helper()
	db := openDB(t, filepath.Join(t.TempDir(), "baton.db"))
	clock := NewFakeClock(epoch)
	store := NewSQLiteStore(db, clock)
	core, logs := observer.New(zap.DebugLevel)
	cfg := Config{Store: store, Clock: clock, Logger: zap.New(core)}
	for _, o := range opts {
		if o.store != nil {
			cfg.Store = o.store(store)
		}
		if o.cfg != nil {
			o.cfg(&cfg)
		}
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &bundle{db: db, clock: clock, store: store, c: c, logs: logs}
}

func openDB(t testing.TB, path string) *sqlite.DB {
	t.Helper()
	db, err := sqlite.Open(context.Background(), path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// waitCtx bounds a test's waits on signals.
func waitCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func stringField(key, value string) zap.Field { return zap.String(key, value) }
