package executor

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
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

// concurrently runs b.N calls of do from exactly callers goroutines (unlike
// b.RunParallel, whose goroutines are a multiple of GOMAXPROCS), passing
// each call its number from 1 to b.N.
func concurrently(b *testing.B, callers int, do func(i int64) error) {
	var (
		next atomic.Int64
		wg   sync.WaitGroup
	)
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
				if err := do(i); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// benchRunning creates a record with a comment of bodyBytes bytes and
// marks it running, ready to be saved again and again.
func benchRunning(b *testing.B, st storeBundle, i int64, bodyBytes int) *schema.Record {
	b.Helper()
	rec := benchRecord(b, i)
	if bodyBytes > 0 {
		p, err := schema.Canonical([]byte(`{"body":` + mustJSON(strings.Repeat("é", bodyBytes/2)) + `}`))
		if err != nil {
			b.Fatal(err)
		}
		rec.Payload = p
		if rec.IdempotencyHash, err = IdempotencyHash(rec.Actor, rec.Action, rec.Resource, p); err != nil {
			b.Fatal(err)
		}
	}
	stored, _, err := st.store.Create(context.Background(), rec)
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now().UTC()
	stored.Status, stored.StartedAt, stored.Attempts = schema.StatusRunning, &now, 1
	if err := st.store.Save(context.Background(), &stored); err != nil {
		b.Fatal(err)
	}
	return &stored
}

func benchSave(b *testing.B, callers, bodyBytes int) {
	st := newTestStore(b)
	ctx := context.Background()
	// Each caller saves its own record; a pool hands them out.
	pool := make(chan *schema.Record, callers)
	for i := range callers {
		pool <- benchRunning(b, st, int64(i), bodyBytes)
	}
	b.ReportAllocs()
	b.ResetTimer()
	concurrently(b, callers, func(int64) error {
		rec := <-pool
		defer func() { pool <- rec }()
		rec.UpdatedAt = time.Now().UTC()
		return st.store.Save(ctx, rec)
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "saves/s")
}

// BenchmarkSave measures durable Saves of a running record from one
// caller; BenchmarkSaveConcurrent32 from 32 callers, each saving its own
// record; BenchmarkSaveLargePayload32 the same with a 64 KB comment,
// where checking the record's identity costs most.
func BenchmarkSave(b *testing.B)               { benchSave(b, 1, 0) }
func BenchmarkSaveConcurrent32(b *testing.B)   { benchSave(b, 32, 0) }
func BenchmarkSaveLargePayload32(b *testing.B) { benchSave(b, 32, 64000) }

// BenchmarkCheckIdentity measures the identity check every save makes, on
// a record as read back from the store (the fast path, hashAsIs) and on one
// whose payload is not in canonical form (the full path), for a small and
// a 64 KB comment.
func BenchmarkCheckIdentity(b *testing.B) {
	for _, size := range []struct {
		name  string
		bytes int
	}{{"small", 0}, {"64KB", 64000}} {
		st := newTestStore(b)
		rec := benchRunning(b, st, 1, size.bytes)
		loose := rec.Clone()
		loose.Payload = append(json.RawMessage(" "), rec.Payload...)
		for _, c := range []struct {
			name string
			rec  *schema.Record
		}{{"stored", rec}, {"noncanonical", &loose}} {
			b.Run(size.name+"/"+c.name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if err := checkIdentity(c.rec); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
