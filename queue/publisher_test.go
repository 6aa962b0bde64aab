package queue

import (
	"context"
	"errors"
	"testing"
	"time"
)

// The same operation dispatched twice inside the dedupe window is one
// message, and reaches the handler once.
func TestDispatchDeduplicates(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "")
	ops := b.sess.Load().ops

	dispatch(t, b, "op-a", "op-a", "op-b", "op-a")
	if got := streamMsgs(t, ops); got != 2 {
		t.Fatalf("stream holds %d messages after dispatching op-a thrice and op-b once, want 2", got)
	}

	rec := newRecorder()
	startConsumer(t, b, ConsumerConfig{Handler: rec.handle})
	eventually(t, 5*time.Second, "both operations handled", func() bool { return rec.seen() == 2 })
	eventually(t, 5*time.Second, "stream empty", func() bool { return streamMsgs(t, ops) == 0 })
	if n := rec.count("op-a"); n != 1 {
		t.Errorf("op-a handled %d times, want 1", n)
	}
	if s := b.Stats(); s.Dispatched != 2 || s.HandledDone != 2 {
		t.Errorf("stats: dispatched %d, done %d; want 2 (stored), 2", s.Dispatched, s.HandledDone)
	}
}

func TestDispatchRejectsBadIDs(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "")
	for _, id := range []string{"", "a.b", "a*", "a>", "a b", string(make([]byte, 129))} {
		if err := b.Dispatch(context.Background(), id); !errors.Is(err, ErrInvalidOperationID) {
			t.Errorf("Dispatch(%q) = %v, want ErrInvalidOperationID", id, err)
		}
	}
}
