package app

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/coordinator"
	"github.com/baton-dev/baton/executor"
	"github.com/baton-dev/baton/internal/sqlite"
	"github.com/baton-dev/baton/schema"
)

// seedOperations writes operations into the database of data directory
// dir before a server opens it. Each is a comment created at created;
// one given cancelAt is cancelled then (its last update).
type seedOperations struct {
	t     *testing.T
	db    *sqlite.DB
	store *executor.SQLiteStore
	at    time.Time // the store's clock: when a cancellation happens
}

func newSeedOperations(t *testing.T, dir string) *seedOperations {
	t.Helper()
	db, err := sqlite.Open(context.Background(), filepath.Join(dir, DatabaseFile), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s := &seedOperations{t: t, db: db}
	s.store = executor.NewSQLiteStore(db, func() time.Time { return s.at })
	return s
}

func (s *seedOperations) add(key string, created time.Time, cancelAt *time.Time) string {
	s.t.Helper()
	ctx := context.Background()
	rec, err := executor.NewRecord("alice", schema.Submission{IdempotencyKey: key, Action: schema.ActionComment,
		Resource: schema.Resource{Type: schema.ResourceIssue, ID: "octo/demo#10"},
		Payload:  json.RawMessage(`{"body":"hi"}`)}, created)
	if err != nil {
		s.t.Fatal(err)
	}
	if _, _, err := s.store.Create(ctx, rec); err != nil {
		s.t.Fatal(err)
	}
	if cancelAt != nil {
		s.at = *cancelAt
		if r, err := s.store.RequestCancel(ctx, rec.OperationID); err != nil || r.Status != schema.StatusCancelled {
			s.t.Fatalf("cancel %s: %v %v", key, r.Status, err)
		}
	}
	return rec.OperationID
}

// lease takes and releases key at.
func (s *seedOperations) lease(key string, at time.Time) {
	s.t.Helper()
	ctx := context.Background()
	leases := coordinator.NewSQLiteStore(s.db, coordinator.NewFakeClock(at))
	g, err := leases.Acquire(ctx, coordinator.AcquireRequest{Key: key, Owner: "ci", TTL: time.Minute}, nil)
	if err != nil {
		s.t.Fatal(err)
	}
	if err := leases.Release(ctx, g.Fence, nil); err != nil {
		s.t.Fatal(err)
	}
}

func (s *seedOperations) close() {
	if err := s.db.Close(); err != nil {
		s.t.Fatal(err)
	}
}

// metricsOf returns the server's /metrics page.
func metricsOf(t *testing.T, srv *Server) string {
	t.Helper()
	resp, err := http.Get(srv.URL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("metrics: %d %v", resp.StatusCode, err)
	}
	return string(b)
}

// A server prunes, as it starts, the operations that finished longer than
// the retention ago, and keeps the unfinished and the recent ones.
func TestServerPrunesFinishedOperations(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const retention = 7 * 24 * time.Hour
	old, recent := time.Now().Add(-retention-time.Hour), time.Now().Add(-time.Hour)
	seed := newSeedOperations(t, dir)
	oldDone := seed.add("old-finished", old, &old)
	oldQueued := seed.add("old-unfinished", old, nil)
	lateDone := seed.add("old-finished-recently", old, &recent)
	seed.lease("issue:octo/demo#10", old)
	seed.lease("issue:octo/demo#11", recent)
	seed.close()

	srv := startServer(t, Config{DataDir: dir, OperationRetention: retention})
	ctx := context.Background()
	deadline := time.Now().Add(10 * time.Second)
	for {
		// Operations are pruned first, then lease histories.
		_, err := srv.store.Get(ctx, oldDone)
		h, herr := srv.coord.History(ctx, "issue:octo/demo#10")
		if errors.Is(err, schema.ErrNotFound) && herr == nil && len(h) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the old finished operation (%v) or the idle lease's history (%d events, %v) is still there", err, len(h), herr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, id := range []string{oldQueued, lateDone} {
		if _, err := srv.store.Get(ctx, id); err != nil {
			t.Errorf("%s: %v", id, err)
		}
	}
	if h, err := srv.coord.History(ctx, "issue:octo/demo#11"); err != nil || len(h) != 2 {
		t.Errorf("history of the recent lease: %d events, %v; want 2", len(h), err)
	}
	// The counters move just after the deletes.
	for _, line := range []string{"\nbaton_operations_pruned_total 1\n", "\nbaton_lease_histories_pruned_total 1\n"} {
		for !strings.Contains(metricsOf(t, srv), line) {
			if time.Now().After(deadline) {
				t.Fatalf("/metrics lacks %q", strings.TrimSpace(line))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// A negative retention keeps every record: the server runs no pruning
// (it exports no counter of it).
func TestServerKeepsOperationsForever(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	old := time.Now().Add(-10 * DefaultOperationRetention)
	seed := newSeedOperations(t, dir)
	id := seed.add("k", old, &old)
	seed.close()

	srv := startServer(t, Config{DataDir: dir, OperationRetention: -1})
	if got, err := srv.store.Get(context.Background(), id); err != nil || got.Status != schema.StatusCancelled {
		t.Errorf("kept record: %v %v", got.Status, err)
	}
	if strings.Contains(metricsOf(t, srv), "baton_operations_pruned_total") {
		t.Errorf("/metrics counts pruned operations with pruning off")
	}
}
