package benchsuite

import (
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/sqlite"
)

// latencies collects the latency of each op. Goroutines that time their
// own ops keep them and add them once (add), so that measuring costs no
// lock per op; callbacks that see one op at a time add it alone (observe).
type latencies struct {
	mu  sync.Mutex
	all []time.Duration
}

func (l *latencies) add(local []time.Duration) {
	l.mu.Lock()
	l.all = append(l.all, local...)
	l.mu.Unlock()
}

func (l *latencies) observe(d time.Duration) {
	l.mu.Lock()
	l.all = append(l.all, d)
	l.mu.Unlock()
}

// report reports the p50 and p99 in milliseconds.
func (l *latencies) report(b *testing.B) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.all) == 0 {
		return
	}
	slices.Sort(l.all)
	b.ReportMetric(percentileMs(l.all, 0.50), "p50-ms")
	b.ReportMetric(percentileMs(l.all, 0.99), "p99-ms")
}

func percentileMs(sorted []time.Duration, p float64) float64 {
	return float64(Percentile(sorted, p).Microseconds()) / 1000
}

// Percentile returns the p-th percentile (0 < p <= 1) of sorted durations
// by the nearest-rank method: the smallest value with at least p of the
// values at or below it, sorted[ceil(n·p)-1]. The p99 of 160 values is the
// 159th. It returns 0 for no values.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	// The tolerance keeps a product that should be whole (0.99 × 1000)
	// from rounding up past it in floating point.
	rank := int(math.Ceil(float64(n)*p - 1e-9))
	return sorted[max(0, min(rank-1, n-1))]
}

// reportRate reports ops/s over the benchmark's measured time, and the
// process's CPU per op since resetTimer.
func reportRate(b *testing.B) {
	if s := b.Elapsed().Seconds(); s > 0 {
		b.ReportMetric(float64(b.N)/s, "ops/s")
	}
	reportCPU(b)
}

// sequential runs op(i) for i in [0, b.N) one after the other, timing
// each, and reports the rate and the latencies. It resets the timer.
func sequential(b *testing.B, op func(i int) error) {
	var lat latencies
	local := make([]time.Duration, 0, b.N)
	resetTimer(b)
	for i := range b.N {
		t0 := time.Now()
		if err := op(i); err != nil {
			fatalf(b, "%v", err)
		}
		local = append(local, time.Since(t0))
	}
	b.StopTimer()
	lat.add(local)
	reportRate(b)
	lat.report(b)
}

// reportWriter reports what db's writer did per transaction since before:
// the mean group-commit batch (writes/txn), and the time spent running the
// write functions (µs-run/txn) and committing them, the fsync among it
// (µs-commit/txn).
func reportWriter(b *testing.B, db *sqlite.DB, before sqlite.Stats) {
	after := db.Stats()
	txns := float64(after.Transactions - before.Transactions)
	if txns <= 0 {
		return
	}
	b.ReportMetric(float64(after.Writes-before.Writes)/txns, "writes/txn")
	b.ReportMetric(float64((after.Run-before.Run).Microseconds())/txns, "µs-run/txn")
	b.ReportMetric(float64((after.Commit-before.Commit).Microseconds())/txns, "µs-commit/txn")
}

// spread runs op(i) for i in [0, b.N) from workers goroutines and records
// each op's latency in lat (nil: nowhere).
func spread(b *testing.B, workers int, lat *latencies, op func(i int) error) {
	var (
		next = make(chan int, workers)
		wg   sync.WaitGroup
	)
	if lat == nil {
		lat = new(latencies) // recorded, never reported
	}
	for range workers {
		wg.Go(func() {
			local := make([]time.Duration, 0, b.N/workers+1)
			defer func() { lat.add(local) }()
			for i := range next {
				t0 := time.Now()
				if err := op(i); err != nil {
					errorf(b, "op %d: %v", i, err)
					for range next {
					}
					return
				}
				local = append(local, time.Since(t0))
			}
		})
	}
	for i := range b.N {
		next <- i
	}
	close(next)
	wg.Wait()
}
