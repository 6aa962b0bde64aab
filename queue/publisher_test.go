package queue

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
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

// Ready reports publishes JetStream refuses (here a stream full by its
// limits, as a store that cannot write is), while the connection is up,
// and is ready again once a publish is stored. A publish its caller gave
// up on says nothing of the queue.
func TestReadyReportsFailingPublishes(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "")
	s := b.sess.Load()
	ctx := context.Background()
	dispatch(t, b, "op-a")
	if err := b.Ready(); err != nil {
		t.Fatalf("ready at start: %v", err)
	}
	limit := func(max int64) {
		info, err := s.ops.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		cfg := info.Config
		cfg.MaxMsgs, cfg.Discard = max, jetstream.DiscardNew
		if _, err := s.js.UpdateStream(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}
	limit(1)
	if err := b.Dispatch(ctx, "op-b"); err == nil {
		t.Fatal("a dispatch into a full stream succeeded")
	}
	err := b.Ready()
	if err == nil || !strings.Contains(err.Error(), "publishes fail") {
		t.Errorf("ready while publishes fail: %v", err)
	}
	limit(-1)
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := b.Dispatch(cancelled, "op-c"); err == nil {
		t.Fatal("a dispatch with a cancelled context succeeded")
	}
	if err := b.Ready(); err == nil {
		t.Error("a cancelled dispatch cleared the failure")
	}
	// A failure nothing contradicted is reported for publishFailureFor
	// only: with nothing more to publish it would be reported for ever.
	b.publishFailureFor = 50 * time.Millisecond
	time.Sleep(100 * time.Millisecond)
	if err := b.Ready(); err != nil {
		t.Errorf("ready once the failure is old: %v", err)
	}
	b.publishFailureFor = time.Minute
	dispatch(t, b, "op-b")
	if err := b.Ready(); err != nil {
		t.Errorf("ready once a publish is stored: %v", err)
	}
	if err := b.Dispatch(cancelled, "op-d"); err == nil {
		t.Fatal("a dispatch with a cancelled context succeeded")
	}
	if err := b.Ready(); err != nil {
		t.Errorf("a cancelled dispatch made the queue unready: %v", err)
	}
}
