package queue

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Five consumer failures (a panic among them) give exactly one dead letter
// with the last reason; replaying it runs the operation once more, even
// inside the dedupe window of its first dispatch.
func TestDeadLetterAndReplay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := startBroker(t, "")
	var healed atomic.Bool
	rec := newRecorder()
	rec.result = func(id string, call int) Result {
		switch {
		case id != "poison" || healed.Load():
			return Done()
		case call == 3:
			panic("nil map")
		default:
			return Failed(fmt.Errorf("store unavailable (call %d)", call))
		}
	}
	startConsumer(t, b, ConsumerConfig{Handler: rec.handle})
	dispatch(t, b, "poison", "healthy")

	var dls []DeadLetter
	eventually(t, 10*time.Second, "a dead letter", func() bool {
		var err error
		dls, err = b.DeadLetters(ctx, 0, 0)
		return err == nil && len(dls) > 0
	})
	eventually(t, 5*time.Second, "poison gone from OPERATIONS", func() bool { return streamMsgs(t, b.sess.Load().ops) == 0 })
	dls, err := b.DeadLetters(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(dls) != 1 {
		t.Fatalf("dead letters: %+v, want exactly one", dls)
	}
	dl := dls[0]
	if dl.OperationID != "poison" || dl.Failures != 5 || dl.Reason != "store unavailable (call 5)" ||
		time.Since(dl.Time) > time.Minute || dl.Sequence == 0 {
		t.Errorf("dead letter = %+v", dl)
	}
	if n := rec.count("poison"); n != 5 {
		t.Errorf("handler called %d times for poison, want 5", n)
	}
	if n := rec.count("healthy"); n != 1 {
		t.Errorf("handler called %d times for healthy, want 1", n)
	}
	if got, err := b.DeadLetter(ctx, dl.Sequence); err != nil || got != dl {
		t.Errorf("DeadLetter(%d) = %+v, %v", dl.Sequence, got, err)
	}
	if n, err := b.DeadLetterCount(ctx); err != nil || n != 1 {
		t.Errorf("DeadLetterCount = %d, %v; want 1", n, err)
	}
	if got, err := b.DeadLetterOf(ctx, "poison"); err != nil || got != dl {
		t.Errorf("DeadLetterOf(poison) = %+v, %v; want %+v", got, err, dl)
	}
	if _, err := b.DeadLetterOf(ctx, "healthy"); !errors.Is(err, ErrDeadLetterNotFound) {
		t.Errorf("DeadLetterOf(healthy) = %v, want ErrDeadLetterNotFound", err)
	}

	healed.Store(true)
	if _, err := b.ReplayDeadLetter(ctx, dl.Sequence); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "replayed operation handled", func() bool { return rec.count("poison") == 6 })
	eventually(t, 5*time.Second, "stream empty", func() bool { return streamMsgs(t, b.sess.Load().ops) == 0 })
	if dls, err := b.DeadLetters(ctx, 0, 0); err != nil || len(dls) != 0 {
		t.Errorf("dead letters after replay: %+v, %v", dls, err)
	}
	if n, err := b.DeadLetterCount(ctx); err != nil || n != 0 {
		t.Errorf("DeadLetterCount after replay = %d, %v; want 0", n, err)
	}
	if _, err := b.ReplayDeadLetter(ctx, dl.Sequence); !errors.Is(err, ErrDeadLetterNotFound) {
		t.Errorf("second replay = %v, want ErrDeadLetterNotFound", err)
	}
	if _, err := b.DeadLetterOf(ctx, "poison"); !errors.Is(err, ErrDeadLetterNotFound) {
		t.Errorf("DeadLetterOf(poison) after replay = %v, want ErrDeadLetterNotFound", err)
	}
	if n := rec.count("poison"); n != 6 {
		t.Errorf("handler called %d times for poison, want 6 (five failures, one replay)", n)
	}
	if s := b.Stats(); s.DeadLettered != 1 || s.Replayed != 1 {
		t.Errorf("stats: dead-lettered %d, replayed %d; want 1, 1", s.DeadLettered, s.Replayed)
	}
}

// Listing pages by sequence; purge empties the stream.
func TestDeadLetterListAndPurge(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := startBroker(t, "")
	s := b.sess.Load()
	for i, id := range opIDs("dead", 5) {
		if err := s.deadLetter(ctx, id, 5, "reason "+id, uint64(i+1)); err != nil {
			t.Fatal(err)
		}
	}
	// Storing the same dead letter again (a crash before the ack), or
	// another for the same operation, adds nothing.
	for _, from := range []uint64{1, 77} {
		if err := s.deadLetter(ctx, "dead-0000", 5, "again", from); !errors.Is(err, errDeadLetterExists) {
			t.Fatalf("second dead letter from %d: %v, want errDeadLetterExists", from, err)
		}
	}
	first, err := b.DeadLetters(ctx, 0, 3)
	if err != nil || len(first) != 3 {
		t.Fatalf("first page: %+v, %v", first, err)
	}
	rest, err := b.DeadLetters(ctx, first[2].Sequence, 3)
	if err != nil || len(rest) != 2 || rest[1].OperationID != "dead-0004" {
		t.Fatalf("second page: %+v, %v", rest, err)
	}
	if first[0].Reason != "reason dead-0000" {
		t.Errorf("reason %q", first[0].Reason)
	}
	if none, err := b.DeadLetters(ctx, math.MaxUint64, 3); err != nil || len(none) != 0 {
		t.Errorf("page after the last sequence: %+v, %v", none, err)
	}
	if _, err := b.ReplayDeadLetter(ctx, 999); !errors.Is(err, ErrDeadLetterNotFound) {
		t.Errorf("replay of an unknown sequence = %v, want ErrDeadLetterNotFound", err)
	}
	if err := b.PurgeDeadLetters(ctx); err != nil {
		t.Fatal(err)
	}
	if all, err := b.DeadLetters(ctx, 0, 0); err != nil || len(all) != 0 {
		t.Errorf("after purge: %+v, %v", all, err)
	}
}

// A removed dead letter is gone, and its operation can be dead-lettered
// again (a later operation with the same ID).
func TestRemoveDeadLetter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := startBroker(t, "")
	s := b.sess.Load()
	if err := s.deadLetter(ctx, "gone-0000", 5, "reason", 1); err != nil {
		t.Fatal(err)
	}
	all, err := b.DeadLetters(ctx, 0, 0)
	if err != nil || len(all) != 1 {
		t.Fatalf("dead letters: %+v, %v", all, err)
	}
	if err := b.RemoveDeadLetter(ctx, all[0].Sequence); err != nil {
		t.Fatal(err)
	}
	if err := b.RemoveDeadLetter(ctx, all[0].Sequence); !errors.Is(err, ErrDeadLetterNotFound) {
		t.Errorf("second removal = %v, want ErrDeadLetterNotFound", err)
	}
	if left, err := b.DeadLetters(ctx, 0, 0); err != nil || len(left) != 0 {
		t.Errorf("after removal: %+v, %v", left, err)
	}
	if err := s.deadLetter(ctx, "gone-0000", 5, "again", 2); err != nil {
		t.Errorf("dead letter after removal: %v", err)
	}
	// A replay and the sweep racing: each found the dead letter, then the
	// other deleted it first. The one that comes second hears "not found",
	// not JetStream's "deletion unsuccessful".
	again, err := b.DeadLetters(ctx, 0, 0)
	if err != nil || len(again) != 1 {
		t.Fatalf("dead letters: %+v, %v", again, err)
	}
	if err := s.deleteDeadLetter(ctx, again[0].Sequence); err != nil {
		t.Fatal(err)
	}
	if err := s.deleteDeadLetter(ctx, again[0].Sequence); !errors.Is(err, ErrDeadLetterNotFound) {
		t.Errorf("deleting a deleted dead letter = %v, want ErrDeadLetterNotFound", err)
	}
}

// An operation with two messages (its dispatch and a nudge) that keeps
// failing gets one dead letter, not one per message.
func TestOneDeadLetterPerOperation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := startBroker(t, "")
	rec := newRecorder()
	rec.result = func(id string, call int) Result { return Failed(fmt.Errorf("store unavailable (call %d)", call)) }
	dispatch(t, b, "twice")
	if err := b.Nudge(ctx, "twice"); err != nil {
		t.Fatal(err)
	}
	startConsumer(t, b, ConsumerConfig{Handler: rec.handle})
	eventually(t, 20*time.Second, "both messages settled", func() bool {
		return rec.count("twice") >= 10 && streamMsgs(t, b.sess.Load().ops) == 0
	})
	dls, err := b.DeadLetters(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(dls) != 1 || dls[0].OperationID != "twice" {
		t.Fatalf("dead letters: %+v, want one for the operation", dls)
	}
	if s := b.Stats(); s.DeadLettered != 1 {
		t.Errorf("stats: dead-lettered %d, want 1", s.DeadLettered)
	}
	// Replayed and failing again, it gets a dead letter again.
	if _, err := b.ReplayDeadLetter(ctx, dls[0].Sequence); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "a second dead letter", func() bool {
		again, err := b.DeadLetters(ctx, 0, 0)
		return err == nil && len(again) == 1 && again[0].Sequence != dls[0].Sequence
	})
}

func TestReasonText(t *testing.T) {
	t.Parallel()
	if got := reasonText(errors.New("line one\r\nline two\tend")); got != "line one line two end" {
		t.Errorf("reasonText folded to %q", got)
	}
	long := reasonText(errors.New(strings.Repeat("é", 600)))
	if len(long) > maxReasonBytes+len("…") || !strings.HasSuffix(long, "…") {
		t.Errorf("long reason: %d bytes", len(long))
	}
}

// Replays of one dead letter at once (two admins, a retried request) are
// one replay: exactly one of them is answered as the replay, the others
// find the dead letter gone, and the operation is delivered once more, not
// once per caller.
func TestConcurrentReplaysReplayOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := startBroker(t, "")
	var healed atomic.Bool
	rec := newRecorder()
	rec.result = func(string, int) Result {
		if healed.Load() {
			return Done()
		}
		return Failed(errors.New("store unavailable"))
	}
	startConsumer(t, b, ConsumerConfig{Handler: rec.handle, MaxFailures: 1})
	dispatch(t, b, "poison")
	dls := oneDeadLetter(t, b)
	healed.Store(true)
	const callers = 8
	var (
		wg           sync.WaitGroup
		ok, notFound atomic.Int32
		start        = make(chan struct{})
	)
	for range callers {
		wg.Go(func() {
			<-start
			_, err := b.ReplayDeadLetter(ctx, dls[0].Sequence)
			switch {
			case err == nil:
				ok.Add(1)
			case errors.Is(err, ErrDeadLetterNotFound):
				notFound.Add(1)
			default:
				t.Error(err)
			}
		})
	}
	close(start)
	wg.Wait()
	if ok.Load() != 1 || notFound.Load() != callers-1 {
		t.Errorf("%d replays succeeded and %d found no dead letter; want 1 and %d", ok.Load(), notFound.Load(), callers-1)
	}
	if s := b.Stats(); s.Replayed != 1 {
		t.Errorf("stats: replayed %d, want 1", s.Replayed)
	}
	eventually(t, 5*time.Second, "replayed operation handled", func() bool { return rec.count("poison") == 2 })
	eventually(t, 5*time.Second, "stream empty", func() bool { return streamMsgs(t, b.sess.Load().ops) == 0 })
	if n := rec.count("poison"); n != 2 {
		t.Errorf("handler called %d times for poison, want 2 (one failure, one replay)", n)
	}
}

// oneDeadLetter waits for the broker's dead-letter stream to hold exactly
// one dead letter, and returns it (as the list).
func oneDeadLetter(t *testing.T, b *Broker) []DeadLetter {
	t.Helper()
	var dls []DeadLetter
	eventually(t, 10*time.Second, "a dead letter", func() bool {
		var err error
		dls, err = b.DeadLetters(context.Background(), 0, 0)
		return err == nil && len(dls) == 1
	})
	return dls
}
