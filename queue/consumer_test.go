package queue

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A busy resource sends the operation back after about the delay asked
// for, however many times, and never counts toward dead-lettering; the
// failures between busy rounds are still counted.
func TestRetryIsNotAFailure(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "")
	var mu sync.Mutex
	var at []time.Time
	rec := newRecorder()
	rec.result = func(_ string, call int) Result {
		mu.Lock()
		at = append(at, time.Now())
		mu.Unlock()
		switch call {
		case 1, 9:
			return Failed(errors.New("store unavailable"))
		case 2, 3:
			return RetryAfter(time.Second)
		case 11:
			return Done()
		default:
			return RetryAfter(20 * time.Millisecond)
		}
	}
	startConsumer(t, b, ConsumerConfig{Handler: rec.handle, MaxFailures: 3})
	dispatch(t, b, "busy")

	eventually(t, 10*time.Second, "the operation is done", func() bool { return b.Stats().HandledDone == 1 })
	if n := rec.count("busy"); n != 11 {
		t.Fatalf("handler called %d times, want 11", n)
	}
	mu.Lock()
	// The gaps after the two 1 s retries. The upper bound only tells a
	// delayed redelivery from one after the AckWait (a minute); it is loose
	// because a loaded machine (the race detector, two CPUs) adds latency.
	for _, call := range []int{2, 3} {
		gap := at[call].Sub(at[call-1])
		if gap < 900*time.Millisecond || gap > 5*time.Second {
			t.Errorf("redelivery %d came %s after RetryAfter(1s), want about 1s", call+1, gap)
		}
	}
	mu.Unlock()
	dls, err := b.DeadLetters(context.Background(), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(dls) != 0 {
		t.Errorf("dead letters %v: 8 busy rounds and 2 failures must not dead-letter with MaxFailures 3", dls)
	}
	if s := b.Stats(); s.HandledRetry != 8 || s.HandledFailed != 2 || s.RetriesPublished != 2 {
		t.Errorf("stats: retry %d, failed %d, retries published %d; want 8, 2, 2", s.HandledRetry, s.HandledFailed, s.RetriesPublished)
	}
}

// While a handler runs longer than AckWait, the message is kept in
// progress and not delivered again.
func TestInProgressWhileRunning(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "")
	release := make(chan struct{})
	var calls atomic.Int32
	startConsumer(t, b, ConsumerConfig{
		Concurrency: 4, // idle workers would take a redelivery
		AckWait:     time.Second,
		Handler: func(ctx context.Context, _ string) Result {
			calls.Add(1)
			select {
			case <-release:
			case <-ctx.Done():
			}
			return Done()
		},
	})
	dispatch(t, b, "long")
	eventually(t, 5*time.Second, "handler called", func() bool { return calls.Load() == 1 })
	// Three ack waits without a redelivery.
	hold := time.NewTimer(3 * time.Second)
	<-hold.C
	if n := calls.Load(); n != 1 {
		t.Fatalf("handler called %d times while the first call ran past AckWait, want 1", n)
	}
	close(release)
	eventually(t, 5*time.Second, "stream empty", func() bool { return streamMsgs(t, b.sess.Load().ops) == 0 })
	if n := calls.Load(); n != 1 {
		t.Errorf("handler called %d times, want 1", n)
	}
}

// At most Concurrency handlers run at once.
func TestConcurrencyBound(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "")
	var active, peak, done atomic.Int32
	startConsumer(t, b, ConsumerConfig{
		Concurrency: 4,
		Handler: func(ctx context.Context, _ string) Result {
			n := active.Add(1)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
			work := time.NewTimer(5 * time.Millisecond) // the operation's work
			select {
			case <-work.C:
			case <-ctx.Done():
			}
			active.Add(-1)
			done.Add(1)
			return Done()
		},
	})
	dispatch(t, b, opIDs("bound", 60)...)
	eventually(t, 10*time.Second, "all handled", func() bool { return done.Load() == 60 })
	if p := peak.Load(); p > 4 || p < 2 {
		t.Errorf("peak concurrency %d, want between 2 and 4", p)
	}
}

// A handler that blocks until its context is done does not keep Stop past
// its deadline, and its message is redelivered at once, uncounted.
func TestStopDeadlineCancelsHandlers(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "")
	started := make(chan string, 1)
	c, err := NewConsumer(b, ConsumerConfig{
		FetchWait: 100 * time.Millisecond,
		Handler: func(ctx context.Context, id string) Result {
			started <- id
			<-ctx.Done()
			return Failed(ctx.Err())
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	dispatch(t, b, "stuck")
	select {
	case <-started:
	case <-time.After(5 * time.Second):
		t.Fatal("handler not called")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	err = c.Stop(ctx)
	if elapsed := time.Since(t0); elapsed > 1500*time.Millisecond {
		t.Errorf("Stop took %s with a 200ms deadline", elapsed)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Stop = %v, want context.DeadlineExceeded", err)
	}
	if err := c.Ready(); !errors.Is(err, ErrNotRunning) {
		t.Errorf("Ready after Stop = %v", err)
	}

	// Nak'ed, so the next consumer gets it now rather than after AckWait (60s).
	rec := newRecorder()
	startConsumer(t, b, ConsumerConfig{Handler: rec.handle})
	eventually(t, 5*time.Second, "redelivered to the next consumer", func() bool { return rec.count("stuck") == 1 })
	if s := b.Stats(); s.RetriesPublished != 0 || s.DeadLettered != 0 {
		t.Errorf("an interrupted handler was counted as a failure: %+v", s)
	}
}

// Draining tells a handler that its consumer is stopping, before any
// deadline: a handler that gives its message back then lets Stop end at
// once, and the message comes back after the delay it asked for.
func TestDrainingSignalsStop(t *testing.T) {
	t.Parallel()
	if Draining(context.Background()) != nil {
		t.Error("Draining of a context no consumer made is not nil")
	}
	b := startBroker(t, "")
	started := make(chan struct{}, 1)
	c := startConsumer(t, b, ConsumerConfig{
		Handler: func(ctx context.Context, id string) Result {
			started <- struct{}{}
			select {
			case <-Draining(ctx):
				return RetryAfter(time.Second)
			case <-ctx.Done():
				return Failed(ctx.Err())
			}
		},
	})
	dispatch(t, b, "waiting")
	select {
	case <-started:
	case <-time.After(5 * time.Second):
		t.Fatal("handler not called")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	t0 := time.Now()
	if err := c.Stop(ctx); err != nil {
		t.Errorf("Stop = %v", err)
	}
	if elapsed := time.Since(t0); elapsed > 3*time.Second {
		t.Errorf("Stop took %s with a handler watching Draining", elapsed)
	}
	rec := newRecorder()
	startConsumer(t, b, ConsumerConfig{Handler: rec.handle})
	eventually(t, 5*time.Second, "redelivered to the next consumer", func() bool { return rec.count("waiting") == 1 })
}

// Stop lets running handlers finish when they do so before the deadline.
func TestStopWaitsForHandlers(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "")
	started, release := make(chan struct{}), make(chan struct{})
	var finished atomic.Bool
	c, err := NewConsumer(b, ConsumerConfig{
		FetchWait: 100 * time.Millisecond,
		Handler: func(context.Context, string) Result {
			close(started)
			<-release
			finished.Store(true)
			return Done()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	dispatch(t, b, "finishing")
	<-started
	stopped := make(chan error, 1)
	go func() { stopped <- c.Stop(context.Background()) }()
	close(release)
	if err := <-stopped; err != nil {
		t.Fatalf("Stop = %v", err)
	}
	if !finished.Load() {
		t.Error("Stop returned before the running handler finished")
	}
	eventually(t, 5*time.Second, "acknowledged", func() bool { return streamMsgs(t, b.sess.Load().ops) == 0 })
}

// The consumer deleted behind baton's back is set up again; so is the
// stream, at the next start of a consumer (what was lost with it is the
// reconciler's to publish again).
func TestConsumerRecoversDeletedConsumerAndStream(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := startBroker(t, "")
	s := b.sess.Load()
	rec := newRecorder()
	c := startConsumer(t, b, ConsumerConfig{Handler: rec.handle})
	dispatch(t, b, "before")
	eventually(t, 5*time.Second, "first operation handled", func() bool { return rec.count("before") == 1 })

	if err := s.js.DeleteConsumer(ctx, StreamOperations, "baton-operations"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "consumer set up again", func() bool {
		_, err := s.js.Consumer(ctx, StreamOperations, "baton-operations")
		return err == nil
	})
	dispatch(t, b, "after-consumer")
	eventually(t, 10*time.Second, "handled after the consumer came back", func() bool { return rec.count("after-consumer") == 1 })
	eventually(t, 5*time.Second, "consumer ready", func() bool { return c.Ready() == nil })

	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.js.DeleteStream(ctx, StreamOperations); err != nil {
		t.Fatal(err)
	}
	if err := b.Dispatch(ctx, "into-the-void"); err == nil {
		t.Error("Dispatch without the stream: no error")
	}
	startConsumer(t, b, ConsumerConfig{Handler: rec.handle})
	dispatch(t, b, "after-stream")
	eventually(t, 10*time.Second, "handled after the stream came back", func() bool { return rec.count("after-stream") == 1 })
}

// A failed operation's copy carries the end of its backoff as a time
// (Baton-Retry-At), read back by the wall clock. A clock set back after
// the copy was stored (an NTP step) must not stretch the backoff by the
// step: the wait is never longer than MaxFailureBackoff.
func TestFailureBackoffSurvivesAClockSetBack(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "")
	rec := newRecorder()
	rec.result = func(string, int) Result { return Done() }
	// The copy as fail stores it, its backoff ending an hour from now as
	// this clock reads it: the clock was set back an hour since.
	m := operationMsg("stepped", retryMsgID("stepped", 1, 1))
	m.Header.Set(HeaderFailures, "1")
	m.Header.Set(HeaderRetryAt, time.Now().Add(time.Hour).UTC().Format(time.RFC3339Nano))
	if _, err := b.sess.Load().js.PublishMsg(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	startConsumer(t, b, ConsumerConfig{Handler: rec.handle, MaxFailureBackoff: 200 * time.Millisecond})
	eventually(t, 10*time.Second, "the operation handled within its longest backoff", func() bool { return rec.count("stepped") == 1 })
}
