package queue

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// An operation kept waiting (RetryAfter, again and again: behind a dead
// letter on its resource, or a lease held outside) while the others flow
// does not make the embedded server keep everything the stream took
// meanwhile: JetStream frees a stream's storage only behind its oldest
// message, and that message is replaced by a fresh copy every MaxHold.
// Before, the stream's directory held thousands of message blocks after
// 40,000 operations, and the server hundreds of megabytes of memory.
func TestConsumerLongWaitDoesNotPinStream(t *testing.T) {
	dir := t.TempDir()
	b := startBroker(t, dir)
	rec := newRecorder()
	rec.result = func(id string, call int) Result {
		if id == "waiting" {
			return RetryAfter(20 * time.Millisecond)
		}
		return Done()
	}
	startConsumer(t, b, ConsumerConfig{Handler: rec.handle, MaxHold: 200 * time.Millisecond})
	dispatch(t, b, "waiting")
	const total = 40000
	for _, id := range opIDs("flow", total) {
		if err := b.Dispatch(context.Background(), id); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 120*time.Second, "every operation handled", func() bool { return rec.seen() == total+1 })
	if n := rec.count("waiting"); n < 10 {
		t.Fatalf("the waiting operation was handled %d times: the test measures nothing", n)
	}
	// The waiting operation has one message, never none nor two.
	eventually(t, 5*time.Second, "one message left", func() bool { return streamMsgs(t, b.sess.Load().ops) == 1 })
	blocks, err := filepath.Glob(filepath.Join(StoreDir(dir), "jetstream", "*", "streams", StreamOperations, "msgs", "*.blk"))
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) == 0 {
		entries, _ := os.ReadDir(StoreDir(dir))
		t.Fatalf("no message blocks found under %s (%v): the test measures nothing", StoreDir(dir), entries)
	}
	if len(blocks) > 10 {
		names := make([]string, 0, 5)
		for _, p := range blocks[:5] {
			names = append(names, filepath.Base(p))
		}
		t.Errorf("%d message blocks kept after %d operations went through (%s, …), want at most 10",
			len(blocks), total, strings.Join(names, " "))
	}
	t.Logf("%d message blocks; the waiting operation handled %d times", len(blocks), rec.count("waiting"))
}

// The copy that replaces a message kept waiting carries its failure
// count: an operation that failed twice, then waited through several
// copies, is dead-lettered at its fifth failure, not its seventh.
func TestConsumerHoldCopyKeepsFailures(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "")
	var (
		mu       sync.Mutex
		failures int
		waitEnd  time.Time
	)
	handler := func(_ context.Context, id string) Result {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case failures == 2 && waitEnd.IsZero():
			waitEnd = time.Now().Add(time.Second) // five MaxHolds
			fallthrough
		case failures == 2 && time.Now().Before(waitEnd):
			return RetryAfter(20 * time.Millisecond)
		}
		failures++
		return Failed(errors.New("store unavailable"))
	}
	startConsumer(t, b, ConsumerConfig{Handler: handler, MaxHold: 200 * time.Millisecond})
	dispatch(t, b, "op-1")
	var dl DeadLetter
	eventually(t, 30*time.Second, "dead-lettered", func() bool {
		var err error
		dl, err = b.DeadLetterOf(context.Background(), "op-1")
		return err == nil
	})
	mu.Lock()
	defer mu.Unlock()
	if failures != 5 || dl.Failures != 5 {
		t.Errorf("dead-lettered after %d failures (the letter counts %d), want 5", failures, dl.Failures)
	}
}

// A message's age is the server's timestamp read by this machine's clock.
// With the server's clock behind this one by more than MaxHold (an
// external server), every message looks that old, the copy stored a
// moment ago too: the waiting operation must still wait out its delay
// between handler calls, not be copied and handed over again at once,
// as fast as the server answers.
func TestConsumerHoldWithServerClockBehind(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "")
	rec := newRecorder()
	rec.result = func(string, int) Result { return RetryAfter(100 * time.Millisecond) }
	startConsumer(t, b, ConsumerConfig{Handler: rec.handle, MaxHold: 200 * time.Millisecond}, func(c *Consumer) {
		c.now = func() time.Time { return time.Now().Add(time.Hour) } // the server an hour behind
	})
	dispatch(t, b, "waiting")
	time.Sleep(2 * time.Second)
	// A delay of 100 ms, each copy sent back once before it is replaced:
	// two calls per delay at most, some 40 in two seconds.
	if n := rec.count("waiting"); n > 80 || n < 5 {
		t.Errorf("the waiting operation was handled %d times in 2 s with a delay of 100 ms, want 5 to 80", n)
	}
	eventually(t, 5*time.Second, "one message left", func() bool { return streamMsgs(t, b.sess.Load().ops) == 1 })
}
