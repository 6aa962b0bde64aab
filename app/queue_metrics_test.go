package app

import (
	"context"
	"strings"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"

	"github.com/baton-dev/baton/queue"
)

// While NATS cannot be reached, /metrics still shows the dead letters last
// counted: an alert on baton_queue_dead_letters > 0 must not resolve (nor
// an absent() fire) because the count cannot be read for a while.
func TestDeadLettersGaugeKeptWhileNATSIsUnreachable(t *testing.T) {
	t.Parallel()
	ns, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	t.Cleanup(ns.Shutdown)
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	ctx := context.Background()
	b, err := queue.New(queue.Config{URL: ns.ClientURL(), PublishTimeout: 500 * time.Millisecond, ReconnectWait: 50 * time.Millisecond, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = b.Stop(sctx)
	})
	cons, err := queue.NewConsumer(b, queue.ConsumerConfig{MaxFailures: 1, Handler: func(context.Context, string) queue.Result {
		return queue.Failed(context.DeadlineExceeded)
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := cons.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Dispatch(ctx, strings.Repeat("d", 64)); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(newQueueCollector(b))
	want := `
# HELP baton_queue_dead_letters Dead letters waiting in the OPERATIONS_DLQ stream (neither replayed nor purged): each holds its resource's later operations.
# TYPE baton_queue_dead_letters gauge
baton_queue_dead_letters 1
`
	deadline := time.Now().Add(10 * time.Second)
	for testutil.GatherAndCompare(reg, strings.NewReader(want), "baton_queue_dead_letters") != nil {
		if time.Now().After(deadline) {
			t.Fatal("the dead letter never showed on the gauge")
		}
		time.Sleep(20 * time.Millisecond)
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := cons.Stop(sctx); err != nil {
		t.Fatal(err)
	}
	ns.Shutdown()
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "baton_queue_dead_letters"); err != nil {
		t.Errorf("with NATS unreachable: %v", err)
	}
}
