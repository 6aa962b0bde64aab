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

func benchIDs(prefix string, n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%d-%d", prefix, time.Now().UnixNano(), i)
	}
	return ids
}

// Acknowledged publishes, one at a time, as the executor dispatches.
func BenchmarkDispatch(b *testing.B) {
	br := benchBroker(b)
	ids := benchIDs("dispatch", b.N)
	ctx := context.Background()
	b.ResetTimer()
	for i := range b.N {
		if err := br.Dispatch(ctx, ids[i]); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
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

// End to end: a producer publishing asynchronously, a consumer of
// concurrency 32 running a no-op handler; the clock stops when the last
// message has been handled.
func BenchmarkEndToEnd(b *testing.B) {
	br := benchBroker(b)
	ids := benchIDs("e2e", b.N)
	var handled atomic.Int64
	all := make(chan struct{})
	target := int64(b.N)
	startConsumer(b, br, ConsumerConfig{
		Concurrency: 32,
		Handler: func(context.Context, string) Result {
			if handled.Add(1) == target {
				close(all)
			}
			return Done()
		},
	})
	js := br.sess.Load().js
	b.ResetTimer()
	for _, id := range ids {
		if _, err := js.PublishMsgAsync(operationMsg(id, id)); err != nil {
			b.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(time.Minute):
		b.Fatal("publishes not acknowledged in a minute")
	}
	select {
	case <-all:
	case <-time.After(time.Minute):
		b.Fatalf("%d of %d handled in a minute", handled.Load(), b.N)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}
