package benchsuite

import (
	"slices"
	"sync"
	"testing"
	"time"
)

// latencies collects the latency of each op; goroutines keep their own
// and add them once, so that measuring costs no lock per op.
type latencies struct {
	mu  sync.Mutex
	all []time.Duration
}

func (l *latencies) add(local []time.Duration) {
	l.mu.Lock()
	l.all = append(l.all, local...)
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
	i := int(float64(len(sorted))*p+0.5) - 1
	d := sorted[max(0, min(i, len(sorted)-1))]
	return float64(d.Microseconds()) / 1000
}

// reportRate reports ops/s over the benchmark's measured time.
func reportRate(b *testing.B) {
	if s := b.Elapsed().Seconds(); s > 0 {
		b.ReportMetric(float64(b.N)/s, "ops/s")
	}
}

// spread runs op(i) for i in [0, b.N) from workers goroutines and records
// each op's latency.
func spread(b *testing.B, workers int, lat *latencies, op func(i int) error) {
	var (
		next = make(chan int, workers)
		wg   sync.WaitGroup
	)
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
