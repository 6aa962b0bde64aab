package queue

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
)

func benchBroker(b *testing.B) *Broker {
	return startBroker(b, "", func(c *Config) { c.Logger = zap.NewNop() })
}

// Acknowledged publishes from 32 goroutines (concurrent API requests).
func BenchmarkDispatchParallel(b *testing.B) {
	br := benchBroker(b)
	ctx := context.Background()
	var n atomic.Int64
	prefix := fmt.Sprintf("pdispatch-%d-", time.Now().UnixNano())
	b.SetParallelism(max(1, 32/max(1, runtime.GOMAXPROCS(0))))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := br.Dispatch(ctx, prefix+fmt.Sprint(n.Add(1))); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}
