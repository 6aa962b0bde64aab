package executor

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/baton-dev/baton/app/ghsim"
	"github.com/baton-dev/baton/queue"
	"github.com/baton-dev/baton/schema"
)

// stopConsumer stops s's consumer with a 10 s deadline and returns how
// long it took.
func stopConsumer(t *testing.T, s *stack) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	if err := s.cons.Stop(ctx); err != nil {
		t.Fatalf("consumer stop: %v", err)
	}
	t.Logf("consumer stopped in %v", time.Since(start))
	return time.Since(start)
}

// ownConsumer stops s's consumer and starts one running handler in its
// place; the test stops it.
func ownConsumer(t *testing.T, s *stack, handler queue.Handler) *queue.Consumer {
	t.Helper()
	stopConsumer(t, s)
	cons, err := queue.NewConsumer(s.broker, queue.ConsumerConfig{FetchWait: 100 * time.Millisecond, Handler: handler})
	if err != nil {
		t.Fatal(err)
	}
	if err := cons.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return cons
}

// A consumer that stops while an operation waits out a Retry-After does
// not wait for it: the operation goes back to the queue for the rest of
// the wait, with no attempt spent and its lease released.
func TestStopDuringWaitRequeues(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	if _, err := s.sim.SetFault(ghsim.Fault{Route: "POST /repos/{owner}/{repo}/issues/{number}/comments", Kind: ghsim.FaultTooManyRequests,
		RetryAfter: 20 * time.Second, Count: 1}); err != nil {
		t.Fatal(err)
	}
	rec := s.submit(t, "drain-wait", schema.ActionComment, issue(10), `{"body":"later"}`)
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := s.store.Get(context.Background(), rec.OperationID)
		if err != nil {
			t.Fatal(err)
		}
		if got.NextAttemptAt != nil && len(got.AttemptLog) == 1 && got.AttemptLog[0].HTTPStatus == 429 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no 429 waited out: %+v", got)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if took := stopConsumer(t, s); took > 3*time.Second {
		t.Errorf("stop took %v with an operation waiting 20 s", took)
	}
	got, err := s.store.Get(context.Background(), rec.OperationID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != schema.StatusRunning || got.Attempts != 1 || got.NextAttemptAt == nil ||
		got.NextAttemptAt.Sub(got.AttemptLog[0].EndedAt) < 19*time.Second {
		t.Errorf("after the stop: status %s, attempts %d, next attempt at %v (429 at %v)", got.Status, got.Attempts, got.NextAttemptAt, got.AttemptLog[0].EndedAt)
	}
	if st, err := s.coord.Check(context.Background(), rec.Resource.Key()); err != nil || st.Locked {
		t.Errorf("the resource's lease after the stop: %+v, %v", st, err)
	}
}

// A worker carrying out a resource's backlog one operation after another
// stops at the end of the operation in hand when its consumer stops, and
// leaves the rest to the queue.
func TestStopEndsTheHandoffChain(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	if _, err := s.sim.SetFault(ghsim.Fault{Route: "POST /repos/{owner}/{repo}/issues/{number}/comments", Kind: ghsim.FaultLatency,
		Latency: 100 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := range 60 {
		ids = append(ids, s.submit(t, fmt.Sprint("drain-chain-", i), schema.ActionComment, issue(11), `{"body":"one of many"}`).OperationID)
	}
	s.await(t, ids[0], 10*time.Second)
	if took := stopConsumer(t, s); took > 3*time.Second {
		t.Errorf("stop took %v with a chain of 100 ms operations in hand", took)
	}
	queued := 0
	for _, id := range ids {
		got, err := s.store.Get(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status == schema.StatusQueued {
			queued++
		}
	}
	if queued < 30 {
		t.Errorf("%d of 60 operations left queued, want the chain to stop early", queued)
	}
}

// An operation a worker takes up after its consumer began to stop starts
// no call: it goes back to the queue as it was, with no attempt spent and
// its lease released.
func TestStopStartsNoNewCall(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	ready := make(chan struct{})
	results := make(chan Result, 1)
	cons := ownConsumer(t, s, func(ctx context.Context, id string) queue.Result {
		close(ready)
		<-queue.Draining(ctx) // Process begins only once the stop has
		r := s.exec.Process(ctx, id)
		results <- r
		return queue.RetryAfter(r.Delay)
	})
	rec := s.submit(t, "drain-no-call", schema.ActionComment, issue(12), `{"body":"not now"}`)
	select {
	case <-ready:
	case <-time.After(10 * time.Second):
		t.Fatal("the handler was not called")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cons.Stop(ctx); err != nil {
		t.Fatalf("consumer stop: %v", err)
	}
	if r := <-results; r.Kind != ResultRetry {
		t.Errorf("Process while draining = %v %v, want a retry", r.Kind, r.Err)
	}
	if n := len(s.sim.Effects()); n != 0 {
		t.Errorf("%d calls made to GitHub while draining", n)
	}
	got, err := s.store.Get(context.Background(), rec.OperationID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Terminal() || got.Attempts != 0 || len(got.AttemptLog) != 0 {
		t.Errorf("after the stop: status %s, attempts %d, log %+v", got.Status, got.Attempts, got.AttemptLog)
	}
	if st, err := s.coord.Check(context.Background(), rec.Resource.Key()); err != nil || st.Locked {
		t.Errorf("the resource's lease after the stop: %+v, %v", st, err)
	}
}

// A wait for a resource held by another operation of this process ends
// when the worker's consumer begins to stop.
func TestStopEndsTheLocalWait(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	ctxs, release := make(chan context.Context, 1), make(chan struct{})
	cons := ownConsumer(t, s, func(ctx context.Context, id string) queue.Result {
		ctxs <- ctx
		<-release
		return queue.Done()
	})
	s.submit(t, "drain-local-wait", schema.ActionComment, issue(12), `{"body":"x"}`)
	var hctx context.Context
	select {
	case hctx = <-ctxs:
	case <-time.After(10 * time.Second):
		t.Fatal("the handler was not called")
	}
	var turns turnstile
	leave := turns.enter("issue:octo/demo#99")
	defer leave()
	waited := make(chan time.Duration, 1)
	go func() {
		defer close(release)
		start := time.Now()
		if turns.wait(hctx, "issue:octo/demo#99", time.Minute) {
			t.Error("the wait reported the key left")
		}
		waited <- time.Since(start)
	}()
	time.Sleep(100 * time.Millisecond)
	stopped := make(chan error, 1)
	go func() { stopped <- cons.Stop(context.Background()) }()
	select {
	case d := <-waited:
		if d > 5*time.Second {
			t.Errorf("the local wait ended %v after it began", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the local wait outlived the stop by 10 s")
	}
	if err := <-stopped; err != nil {
		t.Errorf("consumer stop: %v", err)
	}
}
