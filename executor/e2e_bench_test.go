package executor

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-dev/baton/app/ghsim"
	"github.com/baton-dev/baton/schema"
)

// BenchmarkEndToEnd measures operations carried out per second through the
// whole executing path — durable submit, JetStream, 32 workers taking
// leases on 200 resources, the GitHub simulator over HTTP answering at
// once (no limits, no faults, no pacing), fenced saves — from the first
// submission to the last terminal record.
func BenchmarkEndToEnd(b *testing.B) {
	s := newStack(b, stackOptions{concurrency: 32, synchronous: os.Getenv("BENCH_SYNC")})
	const resources = 200
	for n := 1; n <= resources; n++ {
		if _, err := s.sim.AddIssue("octo", "demo", ghsim.NewIssue{Number: 1000 + n, Title: "bench"}); err != nil {
			b.Fatal(err)
		}
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	var (
		next atomic.Int64
		wg   sync.WaitGroup
	)
	for c := 0; c < 32; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				sub := schema.Submission{
					IdempotencyKey: fmt.Sprintf("bench-%d", i),
					Action:         schema.ActionComment,
					Resource:       schema.Resource{Type: "issue", ID: fmt.Sprintf("octo/demo#%d", 1000+1+i%resources)},
					Payload:        json.RawMessage(`{"body":"bench"}`),
					InstallationID: 1,
				}
				if _, _, err := s.exec.Submit(ctx, "bench", sub); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	for {
		var pending int
		if err := s.db.QueryRow(ctx, `SELECT COUNT(*) FROM operations WHERE status IN ('queued', 'running')`).Scan(&pending); err != nil {
			b.Fatal(err)
		}
		if pending == 0 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
	var failed int
	_ = s.db.QueryRow(ctx, `SELECT COUNT(*) FROM operations WHERE status != 'succeeded'`).Scan(&failed)
	if failed > 0 {
		b.Errorf("%d operations did not succeed", failed)
	}
	if st := s.db.Stats(); st.Transactions > 0 {
		b.ReportMetric(float64(st.Writes)/float64(st.Transactions), "writes/txn")
		b.ReportMetric(float64(st.Run.Microseconds())/float64(st.Transactions), "µs-run/txn")
		b.ReportMetric(float64(st.Commit.Microseconds())/float64(st.Transactions), "µs-commit/txn")
	}
}
