package benchsuite

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-dev/baton/executor"
	"github.com/baton-dev/baton/internal/sqlite"
	"github.com/baton-dev/baton/schema"
)

// openDB opens a durable (synchronous=FULL) database in a temporary
// directory, closed when the benchmark's run ends.
func openDB(b *testing.B) *sqlite.DB {
	b.Helper()
	db, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "baton.db"), sqlite.Options{})
	if err != nil {
		fatalf(b, "open the database: %v", err)
	}
	b.Cleanup(func() { db.Close() })
	return db
}

// newRecord is the i-th record of a run: a comment of actor "bench" on one
// of 200 issues.
func newRecord(run string, i int64) (*schema.Record, error) {
	return executor.NewRecord("bench", schema.Submission{
		IdempotencyKey: fmt.Sprintf("bench-%s-%d", run, i),
		Action:         schema.ActionComment,
		Resource:       schema.Resource{Type: schema.ResourceIssue, ID: fmt.Sprintf("octo/app#%d", i%200+1)},
		Payload:        json.RawMessage(`{"body":"benchmark comment"}`),
	}, time.Now())
}

// StoreCreate measures durable Creates from one caller: each waits for
// its own commit (one fsync). Each op, and so its latency, also builds the
// record (canonical JSON and its hashes, a few µs), as in
// StoreCreateConcurrent.
func StoreCreate(b *testing.B) {
	store := executor.NewSQLiteStore(openDB(b), nil)
	ctx := context.Background()
	sequential(b, func(i int) error {
		rec, err := newRecord("seq", int64(i))
		if err != nil {
			return err
		}
		if _, _, err := store.Create(ctx, rec); err != nil {
			return fmt.Errorf("create: %w", err)
		}
		return nil
	})
}

// StoreCreateConcurrent measures durable Creates from 32 concurrent
// callers, which group commit folds into shared transactions.
func StoreCreateConcurrent(b *testing.B) {
	db := openDB(b)
	store := executor.NewSQLiteStore(db, nil)
	ctx := context.Background()
	var lat latencies
	before := db.Stats()
	resetTimer(b)
	spread(b, 32, &lat, func(i int) error {
		rec, err := newRecord("par", int64(i))
		if err != nil {
			return err
		}
		_, _, err = store.Create(ctx, rec)
		return err
	})
	b.StopTimer()
	reportRate(b)
	lat.report(b)
	reportWriter(b, db, before)
}

// seed creates n records and returns their IDs.
func seed(b *testing.B, store *executor.SQLiteStore, n int) []string {
	b.Helper()
	ctx := context.Background()
	ids := make([]string, n)
	for i := range ids {
		rec, err := newRecord("seed", int64(i))
		if err != nil {
			fatalf(b, "%v", err)
		}
		stored, _, err := store.Create(ctx, rec)
		if err != nil {
			fatalf(b, "seed: %v", err)
		}
		ids[i] = stored.OperationID
	}
	return ids
}

// StoreGet measures Gets by operation ID among 1,000 records, from
// GOMAXPROCS goroutines (reads use the read pool, not the writer).
func StoreGet(b *testing.B) {
	store := executor.NewSQLiteStore(openDB(b), nil)
	ids := seed(b, store, 1000)
	ctx := context.Background()
	var (
		lat  latencies
		next atomic.Int64
	)
	resetTimer(b)
	b.RunParallel(func(pb *testing.PB) {
		var local []time.Duration
		defer func() { lat.add(local) }()
		for pb.Next() {
			id := ids[int(next.Add(1))%len(ids)]
			t0 := time.Now()
			if _, err := store.Get(ctx, id); err != nil {
				errorf(b, "get: %v", err)
				return
			}
			local = append(local, time.Since(t0))
		}
	})
	b.StopTimer()
	reportRate(b)
	lat.report(b)
}

// StoreList measures Lists of the newest 50 records of one actor among
// 1,000.
func StoreList(b *testing.B) {
	store := executor.NewSQLiteStore(openDB(b), nil)
	seed(b, store, 1000)
	ctx := context.Background()
	sequential(b, func(int) error {
		recs, _, err := store.List(ctx, executor.ListFilter{Actor: "bench", Limit: 50})
		if err != nil || len(recs) != 50 {
			return fmt.Errorf("list: %d records, %v", len(recs), err)
		}
		return nil
	})
}
