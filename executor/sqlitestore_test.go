package executor

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/sqlite"
	"github.com/baton-dev/baton/schema"
)

type storeBundle struct {
	db    *sqlite.DB
	store *SQLiteStore
	path  string
}

func newTestStore(t testing.TB) storeBundle {
	t.Helper()
	path := filepath.Join(t.TempDir(), "baton.db")
	db, err := sqlite.Open(context.Background(), path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return storeBundle{db: db, store: NewSQLiteStore(db, nil), path: path}
}

// newRecord builds a valid queued record for actor and key, the way Submit
// does.
func newRecord(t testing.TB, actor, key, body string) *schema.Record {
	t.Helper()
	s := schema.Submission{
		IdempotencyKey: key,
		Action:         schema.ActionComment,
		Resource:       schema.Resource{Type: schema.ResourceIssue, ID: "octo/app#1"},
		Payload:        json.RawMessage(`{"body":` + mustJSON(body) + `}`),
	}
	rec, err := NewRecord(actor, s, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func TestCreateFirstWriteWins(t *testing.T) {
	t.Parallel()
	b := newTestStore(t)
	ctx := context.Background()
	rec := newRecord(t, "alice", "k-1", "hi")
	got, created, err := b.store.Create(ctx, rec)
	if err != nil || !created {
		t.Fatalf("Create = %v, %v", created, err)
	}
	if got.OperationID != "566c82f0f50c5505326f0276d5a9de507000b8529cbd5c565554b6de903ea904" {
		t.Errorf("operationId = %s", got.OperationID)
	}
	// Same input, later: the existing record, not a new one.
	again := newRecord(t, "alice", "k-1", "hi")
	got2, created, err := b.store.Create(ctx, again)
	if err != nil || created {
		t.Fatalf("second Create = %v, %v", created, err)
	}
	if !got2.CreatedAt.Equal(got.CreatedAt) {
		t.Errorf("second Create returned a different record")
	}
	// Same key, other input: conflict naming the existing operation.
	other := newRecord(t, "alice", "k-1", "bye")
	_, _, err = b.store.Create(ctx, other)
	if !errors.Is(err, schema.ErrIdempotencyConflict) {
		t.Fatalf("conflicting Create = %v", err)
	}
	if schema.ErrorDetails(err)["operationId"] != got.OperationID {
		t.Errorf("conflict details = %v", schema.ErrorDetails(err))
	}
	stored, err := b.store.Get(ctx, got.OperationID)
	if err != nil || string(stored.Payload) != `{"body":"hi"}` {
		t.Errorf("stored record changed: %s %v", stored.Payload, err)
	}
	// Another actor with the same key is another operation.
	if _, created, err := b.store.Create(ctx, newRecord(t, "bob", "k-1", "bye")); err != nil || !created {
		t.Errorf("bob's Create = %v, %v", created, err)
	}
}

func TestCreateConcurrentSameKey(t *testing.T) {
	t.Parallel()
	b := newTestStore(t)
	ctx := context.Background()
	const n = 64
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		created int
		ids     = map[string]int{}
		times   = map[time.Time]int{}
	)
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			rec, c, err := b.store.Create(ctx, newRecord(t, "alice", "same", "hi"))
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				t.Errorf("Create: %v", err)
				return
			}
			if c {
				created++
			}
			ids[rec.OperationID]++
			times[rec.CreatedAt]++
		}()
	}
	close(start)
	wg.Wait()
	if created != 1 || len(ids) != 1 || len(times) != 1 {
		t.Errorf("created=%d ids=%d createdAt values=%d; want 1, 1, 1", created, len(ids), len(times))
	}
	assertCount(t, b, 1)
}

func TestCreateConcurrentConflicts(t *testing.T) {
	t.Parallel()
	b := newTestStore(t)
	ctx := context.Background()
	const n = 64
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		winners   []string
		conflicts int
	)
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := fmt.Sprintf("payload %d", i)
			rec := newRecord(t, "alice", "contended", body)
			<-start
			_, c, err := b.store.Create(ctx, rec)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil && c:
				winners = append(winners, body)
			case errors.Is(err, schema.ErrIdempotencyConflict):
				conflicts++
			default:
				t.Errorf("Create = %v, %v", c, err)
			}
		}()
	}
	close(start)
	wg.Wait()
	if len(winners) != 1 || conflicts != n-1 {
		t.Fatalf("winners=%d conflicts=%d", len(winners), conflicts)
	}
	id, _ := OperationID("alice", "contended")
	stored, err := b.store.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if string(stored.Payload) != `{"body":`+mustJSON(winners[0])+`}` {
		t.Errorf("stored payload %s is not the winner's %q", stored.Payload, winners[0])
	}
	assertCount(t, b, 1)
}

func assertCount(t *testing.T, b storeBundle, want int) {
	t.Helper()
	var n int
	if err := b.db.QueryRow(context.Background(), `SELECT COUNT(*) FROM operations`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != want {
		t.Errorf("operations stored = %d, want %d", n, want)
	}
}

func TestSaveRules(t *testing.T) {
	t.Parallel()
	b := newTestStore(t)
	ctx := context.Background()
	rec, _, err := b.store.Create(ctx, newRecord(t, "alice", "save", "hi"))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()

	// An invalid record is refused.
	bad := rec.Clone()
	bad.Status = schema.StatusRunning // no startedAt
	if err := b.store.Save(ctx, &bad); schema.ErrorCode(err) != schema.CodeInvalidRequest {
		t.Errorf("invalid save = %v", err)
	}

	running := rec.Clone()
	running.Status, running.StartedAt, running.Attempts = schema.StatusRunning, &now, 1
	if err := b.store.Save(ctx, &running); err != nil {
		t.Fatal(err)
	}

	// A cancellation requested while running is kept by a later save that
	// did not know about it.
	if r, err := b.store.RequestCancel(ctx, rec.OperationID); err != nil || r.Status != schema.StatusRunning || !r.CancellationRequested {
		t.Fatalf("RequestCancel on running = %+v, %v", r.Status, err)
	}
	stale := running.Clone()
	stale.Attempts = 2
	if err := b.store.Save(ctx, &stale); err != nil {
		t.Fatal(err)
	}
	if !stale.CancellationRequested {
		t.Error("Save did not report the kept cancellation back")
	}
	got, _ := b.store.Get(ctx, rec.OperationID)
	if !got.CancellationRequested || got.Attempts != 2 {
		t.Errorf("after stale save: cancellationRequested=%v attempts=%d", got.CancellationRequested, got.Attempts)
	}

	// A terminal record without completedAt/outcome is refused.
	done := got.Clone()
	done.Status = schema.StatusSucceeded
	if err := b.store.Save(ctx, &done); err == nil {
		t.Error("terminal record without completedAt saved")
	}
	done.CompletedAt, done.Outcome = &now, schema.OutcomeSucceeded
	done.Result = json.RawMessage(`{"commentId":1}`)
	if err := b.store.Save(ctx, &done); err != nil {
		t.Fatal(err)
	}
	// Nothing leaves a terminal state, not even to the same state.
	back := done.Clone()
	back.Status, back.CompletedAt, back.Outcome = schema.StatusRunning, nil, ""
	if err := b.store.Save(ctx, &back); !errors.Is(err, schema.ErrAlreadyTerminal) {
		t.Errorf("leaving terminal = %v", err)
	}
	if err := b.store.Save(ctx, &done); !errors.Is(err, schema.ErrAlreadyTerminal) {
		t.Errorf("re-saving terminal = %v", err)
	}
	if _, err := b.store.RequestCancel(ctx, rec.OperationID); !errors.Is(err, schema.ErrAlreadyTerminal) {
		t.Errorf("cancel terminal = %v", err)
	}
	// Saving what does not exist.
	ghost := newRecord(t, "alice", "ghost", "x")
	if err := b.store.Save(ctx, ghost); !errors.Is(err, schema.ErrNotFound) {
		t.Errorf("save of unknown = %v", err)
	}
	// A guard that refuses prevents the write.
	g := got.Clone()
	g.Attempts = 3
	refuse := errors.New("not yours")
	if err := b.store.SaveGuarded(ctx, &g, func(*sqlite.Tx) error { return refuse }); !errors.Is(err, refuse) {
		t.Errorf("guarded save = %v", err)
	}
}

// A save cannot change what identifies the operation: its actor, key,
// action, resource, payload, hashes or creation time. Each such save is
// refused and leaves the stored record as it was.
func TestSaveRefusesIdentityChange(t *testing.T) {
	t.Parallel()
	b := newTestStore(t)
	ctx := context.Background()
	rehash := func(r *schema.Record) {
		h, err := IdempotencyHash(r.Actor, r.Action, r.Resource, r.Payload)
		if err != nil {
			t.Fatal(err)
		}
		r.IdempotencyHash = h
	}
	changes := []struct {
		name   string
		change func(r *schema.Record)
	}{
		{"actor", func(r *schema.Record) { r.Actor = "mallory" }},
		{"actor with its hash", func(r *schema.Record) { r.Actor = "mallory"; rehash(r) }},
		{"resource", func(r *schema.Record) { r.Resource.ID = "octo/app#2" }},
		{"resource with its hash", func(r *schema.Record) { r.Resource.ID = "octo/app#2"; rehash(r) }},
		{"action with its hash", func(r *schema.Record) {
			r.Action, r.Payload = schema.ActionAddLabels, json.RawMessage(`{"labels":["x"]}`)
			rehash(r)
		}},
		{"payload", func(r *schema.Record) { r.Payload = json.RawMessage(`{"body":"pwned"}`) }},
		{"payload with its hash", func(r *schema.Record) { r.Payload = json.RawMessage(`{"body":"pwned"}`); rehash(r) }},
		{"idempotency key", func(r *schema.Record) { r.IdempotencyKey = "other" }},
		{"idempotency hash", func(r *schema.Record) { r.IdempotencyHash = strings.Repeat("0", 64) }},
		{"createdAt", func(r *schema.Record) { r.CreatedAt = r.CreatedAt.Add(-time.Hour) }},
		{"createdAt by a microsecond", func(r *schema.Record) { r.CreatedAt = r.CreatedAt.Add(time.Microsecond) }},
		{"actor, resource, payload, key and createdAt at once", func(r *schema.Record) {
			r.Actor, r.Resource.ID = "mallory", "octo/app#2"
			r.Payload = json.RawMessage(`{"body":"pwned"}`)
			r.IdempotencyKey, r.CreatedAt = "other", r.CreatedAt.Add(-time.Hour)
		}},
	}
	for i, c := range changes {
		// Each case on its own record, so that a save wrongly let through
		// does not hide the next case.
		orig, _, err := b.store.Create(ctx, newRecord(t, "alice", fmt.Sprintf("who-%d", i), "hi"))
		if err != nil {
			t.Fatal(err)
		}
		r := orig.Clone()
		c.change(&r)
		if err := b.store.Save(ctx, &r); !errors.Is(err, ErrIdentityChanged) {
			t.Errorf("save changing the %s = %v, want ErrIdentityChanged", c.name, err)
		}
		got, err := b.store.Get(ctx, orig.OperationID)
		if err != nil {
			t.Fatal(err)
		}
		if a, b := mustJSON(got), mustJSON(orig); a != b || got.Version != orig.Version {
			t.Errorf("save changing the %s changed the record:\n%s\n%s", c.name, a, b)
		}
		for _, actor := range []string{"alice", "mallory"} {
			recs, _, err := b.store.List(ctx, ListFilter{Actor: actor})
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range recs {
				if l.Actor != actor {
					t.Errorf("after the %s save, List{Actor: %s} returned a record of %s", c.name, actor, l.Actor)
				}
			}
		}
	}
	// The records can still be saved with their identity unchanged.
	orig, err := b.store.Get(ctx, mustID(t, "alice", "who-0"))
	if err != nil {
		t.Fatal(err)
	}
	ok := orig.Clone()
	ok.CorrelationID = "c-1"
	if err := b.store.Save(ctx, &ok); err != nil {
		t.Fatalf("honest save = %v", err)
	}
}

func mustID(t *testing.T, actor, key string) string {
	t.Helper()
	id, err := OperationID(actor, key)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func TestRequestCancelQueued(t *testing.T) {
	t.Parallel()
	b := newTestStore(t)
	ctx := context.Background()
	rec, _, _ := b.store.Create(ctx, newRecord(t, "alice", "c", "hi"))
	got, err := b.store.RequestCancel(ctx, rec.OperationID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != schema.StatusCancelled || got.Outcome != schema.OutcomeCancelled || got.CompletedAt == nil {
		t.Errorf("cancelled record = %+v", got)
	}
	// The executor, which read the record while it was queued, cannot start it.
	running := rec.Clone()
	now := time.Now()
	running.Status, running.StartedAt = schema.StatusRunning, &now
	if err := b.store.Save(ctx, &running); !errors.Is(err, schema.ErrAlreadyTerminal) {
		t.Errorf("starting a cancelled operation = %v", err)
	}
	if _, err := b.store.RequestCancel(ctx, strings.Repeat("0", 64)); !errors.Is(err, schema.ErrNotFound) {
		t.Errorf("cancel unknown = %v", err)
	}
}

func TestListFiltersAndCursor(t *testing.T) {
	t.Parallel()
	b := newTestStore(t)
	ctx := context.Background()
	for i := 0; i < 25; i++ {
		actor := "alice"
		if i%5 == 0 {
			actor = "bob"
		}
		if _, _, err := b.store.Create(ctx, newRecord(t, actor, fmt.Sprintf("k%02d", i), "hi")); err != nil {
			t.Fatal(err)
		}
	}
	var (
		all    []string
		cursor string
	)
	for page := 0; ; page++ {
		recs, next, err := b.store.List(ctx, ListFilter{Actor: "alice", Limit: 7, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			if r.Actor != "alice" {
				t.Errorf("filter leaked actor %s", r.Actor)
			}
			all = append(all, r.IdempotencyKey)
		}
		// A record created between pages does not shift the pages.
		if page == 0 {
			if _, _, err := b.store.Create(ctx, newRecord(t, "alice", "late", "hi")); err != nil {
				t.Fatal(err)
			}
		}
		if next == "" {
			break
		}
		cursor = next
	}
	if len(all) != 20 || all[0] != "k24" || all[19] != "k01" {
		t.Errorf("pages = %v", all)
	}
	seen := map[string]bool{}
	for _, k := range all {
		if seen[k] {
			t.Errorf("%s listed twice", k)
		}
		seen[k] = true
	}
	recs, _, err := b.store.List(ctx, ListFilter{Status: schema.StatusQueued, Action: schema.ActionComment,
		ResourceType: "issue", ResourceID: "octo/app#1", Actor: "bob"})
	if err != nil || len(recs) != 5 {
		t.Errorf("combined filter = %d records, %v", len(recs), err)
	}
	for _, bad := range []ListFilter{{Cursor: "nope"}, {Limit: 501}, {Status: "paused"}} {
		if _, _, err := b.store.List(ctx, bad); schema.ErrorCode(err) != schema.CodeInvalidRequest {
			t.Errorf("List(%+v) = %v", bad, err)
		}
	}
}

func TestDispatchBookkeeping(t *testing.T) {
	t.Parallel()
	b := newTestStore(t)
	ctx := context.Background()
	r1, _, _ := b.store.Create(ctx, newRecord(t, "alice", "d1", "hi"))
	r2, _, _ := b.store.Create(ctx, newRecord(t, "alice", "d2", "hi"))
	if ids, _ := b.store.Undispatched(ctx, r1.CreatedAt.Add(-time.Second), 10); len(ids) != 0 {
		t.Errorf("records created after the threshold listed: %v", ids)
	}
	t0 := time.Now()
	ids, err := b.store.Undispatched(ctx, t0, 10)
	if err != nil || len(ids) != 2 {
		t.Fatalf("Undispatched = %v, %v", ids, err)
	}
	if err := b.store.MarkDispatched(ctx, []string{r1.OperationID}, t0); err != nil {
		t.Fatal(err)
	}
	ids, _ = b.store.Undispatched(ctx, t0, 10)
	if len(ids) != 1 || ids[0] != r2.OperationID {
		t.Errorf("after dispatch of r1: %v", ids)
	}
	// Dispatched long enough ago counts again.
	ids, _ = b.store.Undispatched(ctx, t0.Add(time.Second), 10)
	if len(ids) != 2 {
		t.Errorf("with a later threshold: %v", ids)
	}
	got, _ := b.store.Get(ctx, r1.OperationID)
	if got.DispatchedAt == nil {
		t.Error("DispatchedAt not read back")
	}
}

func TestSynchronousFull(t *testing.T) {
	t.Parallel()
	b := newTestStore(t)
	var mode int
	if err := b.db.QueryRow(context.Background(), `PRAGMA synchronous`).Scan(&mode); err != nil {
		t.Fatal(err)
	}
	var journal string
	if err := b.db.QueryRow(context.Background(), `PRAGMA journal_mode`).Scan(&journal); err != nil {
		t.Fatal(err)
	}
	if mode != 2 || journal != "wal" {
		t.Errorf("synchronous=%d journal=%s; want 2 (FULL) and wal", mode, journal)
	}
}

const crashChildEnv = "BATON_TEST_CRASH_CHILD_DB"

// crashChild runs in a child process: it creates records from 8
// goroutines as fast as it can and prints each operation ID once its Create
// has returned.
func crashChild() {
	db, err := sqlite.Open(context.Background(), os.Getenv(crashChildEnv), sqlite.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	store := NewSQLiteStore(db, nil)
	out := make(chan string, 1024)
	for g := 0; g < 8; g++ {
		go func() {
			for i := 0; ; i++ {
				s := schema.Submission{
					IdempotencyKey: fmt.Sprintf("crash-%d-%d", g, i),
					Action:         schema.ActionComment,
					Resource:       schema.Resource{Type: schema.ResourceIssue, ID: "octo/app#1"},
					Payload:        json.RawMessage(`{"body":"crash"}`),
				}
				rec, err := NewRecord("crasher", s, time.Now())
				if err != nil {
					panic(err)
				}
				if _, _, err := store.Create(context.Background(), rec); err != nil {
					panic(err)
				}
				out <- rec.OperationID
			}
		}()
	}
	w := bufio.NewWriter(os.Stdout)
	for id := range out {
		fmt.Fprintln(w, id)
		if len(out) == 0 {
			w.Flush()
		}
	}
}

// A child process creating records is killed with SIGKILL; every record
// whose Create had returned is found, valid, after reopening.
func TestCreateSurvivesKill(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "baton.db")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+path)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var acked []string
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		acked = append(acked, sc.Text())
		if len(acked) == 2000 {
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	_ = cmd.Wait()
	if len(acked) < 2000 {
		t.Fatalf("child stopped after %d records", len(acked))
	}
	db, err := sqlite.Open(context.Background(), path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	store := NewSQLiteStore(db, nil)
	for _, id := range acked {
		rec, err := store.Get(context.Background(), id)
		if err != nil {
			t.Fatalf("record %s acknowledged before the kill is gone: %v", id, err)
		}
		if err := rec.Validate(); err != nil {
			t.Fatalf("record %s invalid after the kill: %v", id, err)
		}
	}
	t.Logf("%d acknowledged records all present after SIGKILL", len(acked))
}
