package benchsuite

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-dev/baton/queue"
)

// startBroker starts an embedded broker with its store in a temporary
// directory, stopped when the run ends.
func startBroker(b *testing.B) *queue.Broker {
	b.Helper()
	br, err := queue.New(queue.Config{DataDir: b.TempDir()})
	if err != nil {
		fatalf(b, "%v", err)
	}
	if err := br.Start(context.Background()); err != nil {
		fatalf(b, "start the broker: %v", err)
	}
	b.Cleanup(func() { stopWithin(br.Stop) })
	return br
}

// QueuePublish measures acknowledged publishes one at a time, as the
// executor dispatches a new operation: each returns once JetStream has
// stored the message.
func QueuePublish(b *testing.B) {
	br := startBroker(b)
	ctx := context.Background()
	sequential(b, func(i int) error {
		if err := br.Dispatch(ctx, fmt.Sprintf("pub-%d", i)); err != nil {
			return fmt.Errorf("dispatch: %w", err)
		}
		return nil
	})
}

// QueueEndToEnd measures messages through JetStream: 32 goroutines publish
// (acknowledged), a consumer with 32 handlers runs a no-op handler; the
// clock stops when the last message has been handled. The latency is from
// the publish to the handler.
func QueueEndToEnd(b *testing.B) {
	br := startBroker(b)
	ctx := context.Background()
	var (
		sent    sync.Map // id → time published
		handled atomic.Int64
		lat     latencies
	)
	all := make(chan struct{})
	target := int64(b.N)
	c, err := queue.NewConsumer(br, queue.ConsumerConfig{
		Concurrency: 32,
		FetchWait:   100 * time.Millisecond,
		Handler: func(_ context.Context, id string) queue.Result {
			if t0, ok := sent.Load(id); ok {
				lat.observe(time.Since(t0.(time.Time)))
			}
			if handled.Add(1) == target {
				close(all)
			}
			return queue.Done()
		},
	})
	if err != nil {
		fatalf(b, "%v", err)
	}
	if err := c.Start(ctx); err != nil {
		fatalf(b, "start the consumer: %v", err)
	}
	b.Cleanup(func() { stopWithin(c.Stop) })
	resetTimer(b)
	spread(b, 32, nil, func(i int) error {
		id := fmt.Sprintf("e2e-%d", i)
		sent.Store(id, time.Now())
		return br.Dispatch(ctx, id)
	})
	if !awaitAll(b, all, 2*time.Minute, func() string {
		return fmt.Sprintf("%d of %d messages handled in two minutes", handled.Load(), b.N)
	}) {
		return
	}
	b.StopTimer()
	reportRate(b)
	lat.report(b)
}
