package executor

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-dev/baton/schema"
)

func benchRecord(b *testing.B, i int64) *schema.Record {
	s := schema.Submission{
		IdempotencyKey: fmt.Sprintf("bench-%d", i),
		Action:         schema.ActionComment,
		Resource:       schema.Resource{Type: schema.ResourceIssue, ID: fmt.Sprintf("octo/app#%d", i%200+1)},
		Payload:        json.RawMessage(`{"body":"benchmark comment"}`),
	}
	rec, err := NewRecord("bench", s, time.Now())
	if err != nil {
		b.Fatal(err)
	}
	return rec
}

// BenchmarkCreate measures durable (synchronous=FULL) Creates from one
// caller: each waits for its own commit.
func BenchmarkCreate(b *testing.B) {
	st := newTestStore(b)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, _, err := st.store.Create(ctx, benchRecord(b, int64(i))); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "creates/s")
}

// BenchmarkCreateConcurrent32 measures durable Creates from 32 concurrent
// callers, which group commit folds into shared transactions.
func BenchmarkCreateConcurrent32(b *testing.B) {
	st := newTestStore(b)
	ctx := context.Background()
	var n atomic.Int64
	b.SetParallelism(32) // 32 × GOMAXPROCS goroutines at least 32
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, _, err := st.store.Create(ctx, benchRecord(b, n.Add(1))); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "creates/s")
	if s := st.db.Stats(); s.Transactions > 0 {
		b.ReportMetric(float64(s.Writes)/float64(s.Transactions), "writes/txn")
	}
}

func seedStore(b *testing.B, st storeBundle, n int) []string {
	ctx := context.Background()
	ids := make([]string, n)
	for i := range ids {
		rec, _, err := st.store.Create(ctx, benchRecord(b, int64(i)))
		if err != nil {
			b.Fatal(err)
		}
		ids[i] = rec.OperationID
	}
	return ids
}

func BenchmarkGet(b *testing.B) {
	st := newTestStore(b)
	ids := seedStore(b, st, 1000)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			if _, err := st.store.Get(ctx, ids[i%len(ids)]); err != nil {
				b.Error(err)
				return
			}
			i++
		}
	})
}

func BenchmarkList50(b *testing.B) {
	st := newTestStore(b)
	seedStore(b, st, 1000)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		recs, _, err := st.store.List(ctx, ListFilter{Actor: "bench", Limit: 50})
		if err != nil || len(recs) != 50 {
			b.Fatal(len(recs), err)
		}
	}
}
