package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/coordinator"
	"github.com/baton-dev/baton/executor"
	"github.com/baton-dev/baton/internal/sqlite"
	"github.com/baton-dev/baton/queue"
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
		waitMetric(t, srv, line, deadline)
	}
}

// waitMetric waits until srv's /metrics holds line, at most until
// deadline.
func waitMetric(t *testing.T, srv *Server, line string, deadline time.Time) {
	t.Helper()
	for !strings.Contains(metricsOf(t, srv), line) {
		if time.Now().After(deadline) {
			t.Fatalf("/metrics lacks %q", strings.TrimSpace(line))
		}
		time.Sleep(20 * time.Millisecond)
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

// seedDeadLetters dead-letters the operations ids in the queue of data
// directory dir before a server opens it, as a consumer that keeps
// failing leaves them.
func seedDeadLetters(t *testing.T, dir string, ids ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := queue.New(queue.Config{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := b.Stop(ctx); err != nil {
			t.Fatal(err)
		}
	}()
	c, err := queue.NewConsumer(b, queue.ConsumerConfig{
		Handler:     func(context.Context, string) queue.Result { return queue.Failed(errors.New("store unavailable")) },
		MaxFailures: 1, FetchWait: 100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if err := b.Dispatch(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	for {
		dls, err := b.DeadLetters(ctx, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(dls) == len(ids) {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("%d dead letters of %d", len(dls), len(ids))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
}

// waitDeadLetters waits until the dead letters left in srv's queue are
// those of the operations want, and /metrics counts removed of them
// removed.
func waitDeadLetters(t *testing.T, srv *Server, removed int, want ...string) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(10 * time.Second)
	var left []string
	for {
		dls, err := srv.broker.DeadLetters(ctx, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		left = left[:0]
		for _, dl := range dls {
			left = append(left, dl.OperationID)
		}
		slices.Sort(left)
		slices.Sort(want)
		if slices.Equal(left, want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("dead letters left: %v, want %v", left, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
	waitMetric(t, srv, fmt.Sprintf("\nbaton_queue_dead_letters_removed_total %d\n", removed), deadline)
}

// A dead-lettered operation that was cancelled (not replayed) loses its
// dead letter: the dead-letter stream does not keep letters of operations
// nobody waits for, which baton_queue_dead_letters would count as waiting,
// nor, forever, letters of operations whose records were pruned. Dead
// letters of unfinished operations stay.
func TestServerPrunesDeadLettersWithTheirOperations(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const retention = 7 * 24 * time.Hour
	old, recent := time.Now().Add(-retention-time.Hour), time.Now().Add(-time.Hour)
	seed := newSeedOperations(t, dir)
	oldCancelled := seed.add("old-cancelled", old, &old)
	oldQueued := seed.add("old-unfinished", old, nil)
	recentCancelled := seed.add("recently-cancelled", old, &recent)
	seed.close()
	seedDeadLetters(t, dir, oldCancelled, oldQueued, recentCancelled)

	srv := startServer(t, Config{DataDir: dir, OperationRetention: retention})
	waitDeadLetters(t, srv, 2, oldQueued)
}

// Records kept forever (no retention): the dead letter of a cancelled
// operation goes all the same.
func TestServerRemovesDeadLettersOfCancelledOperations(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	at := time.Now().Add(-time.Hour)
	seed := newSeedOperations(t, dir)
	cancelled := seed.add("cancelled", at, &at)
	queued := seed.add("unfinished", at, nil)
	seed.close()
	seedDeadLetters(t, dir, cancelled, queued)

	srv := startServer(t, Config{DataDir: dir, OperationRetention: -1})
	waitDeadLetters(t, srv, 1, queued)
}

// fakeDeadLetters is a dead-letter stream in memory.
type fakeDeadLetters struct{ dls []queue.DeadLetter }

func (f *fakeDeadLetters) DeadLetters(_ context.Context, after uint64, limit int) ([]queue.DeadLetter, error) {
	var out []queue.DeadLetter
	for _, dl := range f.dls {
		if dl.Sequence > after && len(out) < limit {
			out = append(out, dl)
		}
	}
	return out, nil
}

func (f *fakeDeadLetters) RemoveDeadLetter(_ context.Context, seq uint64) error {
	f.dls = slices.DeleteFunc(f.dls, func(dl queue.DeadLetter) bool { return dl.Sequence == seq })
	return nil
}

// A dead letter older than its operation's record belongs to an earlier
// operation with the same ID (its record was pruned, and the key used
// again): it goes, so the later operation can be dead-lettered itself and
// is not taken for dead-lettered by the reconciler.
func TestPruneDeadLettersOfEarlierOperations(t *testing.T) {
	t.Parallel()
	now := time.Now()
	q := &fakeDeadLetters{}
	for i := range 250 { // more than a page
		q.dls = append(q.dls, queue.DeadLetter{Sequence: uint64(i + 1), OperationID: fmt.Sprintf("op-%d", i%5), Time: now.Add(-40 * 24 * time.Hour)})
	}
	q.dls = append(q.dls, queue.DeadLetter{Sequence: 300, OperationID: "op-4", Time: now.Add(-time.Hour)})
	records := map[string]schema.Record{
		"op-1": {CreatedAt: now.Add(-41 * 24 * time.Hour)}, // still the same operation
		"op-2": {CreatedAt: now.Add(-2 * time.Hour)},       // a later one with the same ID
		"op-4": {CreatedAt: now.Add(-2 * time.Hour)},
	}
	get := func(_ context.Context, id string) (schema.Record, error) {
		if r, ok := records[id]; ok {
			return r, nil
		}
		return schema.Record{}, schema.ErrNotFound
	}
	n, err := pruneDeadLetters(context.Background(), q, get)
	if err != nil {
		t.Fatal(err)
	}
	// op-0 and op-3 are gone, op-2's and op-4's old letters are stale.
	if n != 200 {
		t.Errorf("pruned %d, want 200", n)
	}
	for _, dl := range q.dls {
		if dl.OperationID != "op-1" && dl.Sequence != 300 {
			t.Fatalf("left %+v", dl)
		}
	}
	if len(q.dls) != 51 {
		t.Errorf("%d left, want 51", len(q.dls))
	}
}
