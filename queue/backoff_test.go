package queue

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// A consumer failure is retried after FailureBackoff·2^(n−1): the message
// put back after the first failure is due FailureBackoff after it was
// stored, the one after the second twice that, and so on up to
// MaxFailureBackoff.
func TestFailureBackoffDoubles(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := startBroker(t, "")
	rec := newRecorder()
	rec.result = func(string, int) Result { return Failed(errors.New("store unavailable")) }
	const first = 2 * time.Second
	startConsumer(t, b, ConsumerConfig{Handler: rec.handle, FailureBackoff: first, MaxFailureBackoff: time.Minute, MaxFailures: 5})
	dispatch(t, b, "flaky")
	eventually(t, 10*time.Second, "the first failure", func() bool { return rec.count("flaky") == 1 })
	var failures int
	var due time.Duration
	eventually(t, 5*time.Second, "the failure recorded on the message", func() bool {
		raw, err := b.sess.Load().ops.GetLastMsgForSubject(ctx, OperationSubject("flaky"))
		if err != nil {
			return false
		}
		failures, _ = strconv.Atoi(raw.Header.Get(HeaderFailures))
		at, err := time.Parse(time.RFC3339Nano, raw.Header.Get(HeaderRetryAt))
		if err != nil {
			return false
		}
		due = at.Sub(raw.Time)
		return failures == 1
	})
	if due < first-500*time.Millisecond || due > first+500*time.Millisecond {
		t.Errorf("after the first failure the message is due %v after it was stored, want about %v", due, first)
	}
	for n, want := range map[int]time.Duration{1: first, 2: 2 * first, 3: 4 * first, 7: time.Minute, 40: time.Minute} {
		c := &Consumer{cfg: ConsumerConfig{FailureBackoff: first, MaxFailureBackoff: time.Minute}}
		if got := c.backoff(n); got != want {
			t.Errorf("backoff after failure %d = %v, want %v", n, got, want)
		}
	}
}

// A copy whose Retry-At lies beyond MaxFailureBackoff (the clock was set
// back since it was stored) waits MaxFailureBackoff once, on its first
// delivery, and is handled on the next: two deliveries, not more.
func TestClockSetBackCostsOneBackoff(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := startBroker(t, "")
	rec := newRecorder()
	rec.result = func(string, int) Result { return Done() }
	m := operationMsg("stepped", retryMsgID("stepped", 1, 1))
	m.Header.Set(HeaderFailures, "1")
	m.Header.Set(HeaderRetryAt, time.Now().Add(time.Hour).UTC().Format(time.RFC3339Nano))
	if _, err := b.sess.Load().js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	c := startConsumer(t, b, ConsumerConfig{Handler: rec.handle, MaxFailureBackoff: 200 * time.Millisecond})
	eventually(t, 10*time.Second, "the operation handled", func() bool { return rec.count("stepped") == 1 })
	info, err := c.cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := info.Delivered.Consumer; n != 2 {
		t.Errorf("%d deliveries, want 2 (one backoff, then the handling)", n)
	}
}

// The backoff is waited out: a failed operation is not handled again
// before its Retry-At.
func TestFailureBackoffIsWaitedOut(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "")
	const backoff = 700 * time.Millisecond
	calls := make(chan time.Time, 4)
	var n atomic.Int32
	startConsumer(t, b, ConsumerConfig{FailureBackoff: backoff, MaxFailureBackoff: time.Minute, Handler: func(context.Context, string) Result {
		calls <- time.Now()
		if n.Add(1) > 1 {
			return Done()
		}
		return Failed(errors.New("store unavailable"))
	}})
	dispatch(t, b, "flaky")
	var at [2]time.Time
	for i := range at {
		select {
		case at[i] = <-calls:
		case <-time.After(10 * time.Second):
			t.Fatalf("call %d never came", i+1)
		}
	}
	if gap := at[1].Sub(at[0]); gap < backoff-50*time.Millisecond {
		t.Errorf("handled again %v after the failure, want at least the backoff %v", gap, backoff)
	}
}

// A failure whose copy JetStream already holds (the original's ack was
// lost after the copy was stored, so the message came back and failed
// again) stores nothing new: it is not counted as a published retry.
func TestDuplicateRetryIsNotCounted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := startBroker(t, "")
	dispatch(t, b, "again")
	// The copy the first attempt stored from the dispatch (sequence 1),
	// still waiting out its backoff.
	m := operationMsg("again", retryMsgID("again", 1, 1))
	m.Header.Set(HeaderFailures, "1")
	m.Header.Set(HeaderRetryAt, time.Now().Add(30*time.Second).UTC().Format(time.RFC3339Nano))
	if _, err := b.sess.Load().js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	rec.result = func(string, int) Result { return Failed(errors.New("store unavailable")) }
	startConsumer(t, b, ConsumerConfig{Handler: rec.handle, MaxFailureBackoff: time.Minute})
	eventually(t, 10*time.Second, "the failure recorded", func() bool { return b.Stats().HandledFailed == 1 })
	st, err := b.sess.Load().js.Stream(ctx, StreamOperations)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the original acknowledged", func() bool { return streamMsgs(t, st) == 1 })
	if n := b.Stats().RetriesPublished; n != 0 {
		t.Errorf("retries published = %d, want 0: JetStream stored nothing new", n)
	}
}
