package app

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkSubmitHTTP submits comments from 32 concurrent clients over
// real HTTP to the API on the real executor, SQLite store and embedded
// queue, and reports submits per second and the latency percentiles.
func BenchmarkSubmitHTTP(b *testing.B) {
	env := newAPIEnv(b)
	tr := &http.Transport{MaxIdleConns: 64, MaxIdleConnsPerHost: 64}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	const clients = 32
	b.SetParallelism((clients + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
	var (
		seq   atomic.Int64
		mu    sync.Mutex
		lat   []time.Duration
		fails atomic.Int64
	)
	run := time.Now().UnixNano()
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		local := make([]time.Duration, 0, 1024)
		for pb.Next() {
			n := seq.Add(1)
			body := fmt.Sprintf(`{"idempotencyKey":"bench-%d-%d","action":"github.issues.comment","resource":{"type":"issue","id":"octo/demo#%d"},"payload":{"body":"bench %d"}}`,
				run, n, 10+n%3, n)
			req, _ := http.NewRequest("POST", env.URL+"/v1/operations", bytes.NewReader([]byte(body)))
			req.Header.Set("Authorization", "Bearer "+env.alice)
			req.Header.Set("Content-Type", "application/json")
			t0 := time.Now()
			resp, err := hc.Do(req)
			if err != nil {
				fails.Add(1)
				continue
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			local = append(local, time.Since(t0))
			if resp.StatusCode != http.StatusCreated {
				fails.Add(1)
			}
		}
		mu.Lock()
		lat = append(lat, local...)
		mu.Unlock()
	})
	elapsed := time.Since(start)
	b.StopTimer()
	if f := fails.Load(); f > 0 {
		b.Fatalf("%d of %d submits failed", f, b.N)
	}
	slices.Sort(lat)
	pct := func(p float64) float64 {
		if len(lat) == 0 {
			return 0
		}
		return float64(lat[min(len(lat)-1, int(float64(len(lat))*p))].Microseconds()) / 1000
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "submits/s")
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
}
