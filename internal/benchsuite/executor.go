package benchsuite

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-dev/baton/app"
	"github.com/baton-dev/baton/app/ghsim"
	"github.com/baton-dev/baton/coordinator"
	"github.com/baton-dev/baton/executor"
	"github.com/baton-dev/baton/queue"
	"github.com/baton-dev/baton/schema"
)

// e2eResources is how many issues the executor benchmark spreads its
// operations over.
const e2eResources = 200

// ExecutorEndToEnd measures operations carried out per second through the
// whole executing path: a durable submit (executor.Submit), JetStream,
// 32 workers taking leases on 200 resources, the GitHub simulator over HTTP
// (real App JWT and installation token) answering at once, pacing off,
// fenced saves of the terminal records. The clock runs from the first
// submission to the last terminal record; the latency is each record's
// completedAt − createdAt.
func ExecutorEndToEnd(b *testing.B) {
	ctx := context.Background()
	db := openDB(b)

	gh := startSimulator(b)

	coord, err := coordinator.New(coordinator.Config{DB: db})
	if err != nil {
		fatalf(b, "%v", err)
	}
	br := startBroker(b)
	var (
		finished atomic.Int64
		failed   atomic.Int64
		lat      latencies
	)
	all := make(chan struct{})
	target := int64(b.N)
	exec, err := executor.New(executor.Config{
		Store: executor.NewSQLiteStore(db, nil), Dispatcher: br, Leases: coord, GitHub: gh,
		Pacing: executor.PacingConfig{Disabled: true},
		OnFinished: func(rec schema.Record) {
			if rec.Status != schema.StatusSucceeded {
				failed.Add(1)
			}
			if rec.CompletedAt != nil {
				lat.observe(rec.CompletedAt.Sub(rec.CreatedAt))
			}
			if finished.Add(1) == target {
				close(all)
			}
		},
	})
	if err != nil {
		fatalf(b, "%v", err)
	}
	if err := exec.Start(ctx); err != nil {
		fatalf(b, "start the executor: %v", err)
	}
	b.Cleanup(func() { stopWithin(exec.Stop) })
	cons, err := queue.NewConsumer(br, queue.ConsumerConfig{
		Concurrency: 32,
		Handler:     app.QueueHandler(exec),
	})
	if err != nil {
		fatalf(b, "%v", err)
	}
	if err := cons.Start(ctx); err != nil {
		fatalf(b, "start the consumer: %v", err)
	}
	b.Cleanup(func() { stopWithin(cons.Stop) })
	before := db.Stats()
	resetTimer(b)
	spread(b, 32, nil, func(i int) error {
		_, _, err := exec.Submit(ctx, "bench", schema.Submission{
			IdempotencyKey: fmt.Sprintf("bench-%d", i),
			Action:         schema.ActionComment,
			Resource:       schema.Resource{Type: schema.ResourceIssue, ID: fmt.Sprintf("%s/%s#%d", ghsim.DemoOwner, ghsim.DemoRepo, 1001+i%e2eResources)},
			Payload:        json.RawMessage(`{"body":"bench"}`),
			InstallationID: ghsim.DemoInstallationID,
		})
		return err
	})
	if !awaitAll(b, all, 5*time.Minute, func() string {
		return fmt.Sprintf("%d of %d operations finished in five minutes", finished.Load(), b.N)
	}) {
		return
	}
	b.StopTimer()
	if n := failed.Load(); n > 0 {
		errorf(b, "%d operations did not succeed", n)
		return
	}
	reportRate(b)
	lat.report(b)
	reportWriter(b, db, before)
}

// stopWithin stops a service, waiting at most 30 seconds.
func stopWithin(stop func(context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = stop(ctx)
}

// awaitAll waits until all is closed (every op the benchmark made has been
// carried out), and reports whether it was. When an op could not be made
// (spread failed the benchmark), all will never close: it returns false at
// once rather than after limit; after limit, it fails the benchmark with
// timedOut's message.
func awaitAll(b *testing.B, all <-chan struct{}, limit time.Duration, timedOut func() string) bool {
	if b.Failed() {
		return false
	}
	select {
	case <-all:
		return true
	case <-time.After(limit):
		errorf(b, "%s", timedOut())
		return false
	}
}
