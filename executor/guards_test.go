package executor

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-github/v62/github"

	"github.com/baton-dev/baton/internal/sqlite"
	"github.com/baton-dev/baton/schema"
)

// eventuallyTrue polls cond until it holds or within passes.
func eventuallyTrue(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %v", what, within)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// An operation sent back because its resource was busy keeps its place:
// one submitted after it on the same resource, delivered while the first
// waits out BusyDelay and the resource is free, does not run before it.
func TestBusyOperationIsNotOvertaken(t *testing.T) {
	t.Parallel()
	// BusyDelay is long: the first operation runs only when the test nudges
	// it, after the second one's delivery has been handled.
	s := newStack(t, stackOptions{exec: Config{BusyDelay: time.Minute}})
	ctx := context.Background()
	l, err := s.coord.Acquire(ctx, issue(10).Key(), "someone-else", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	a := s.submit(t, "ord-1", schema.ActionComment, issue(10), `{"body":"n1"}`)
	// a's delivery found the resource busy and went back to the queue.
	eventuallyTrue(t, 10*time.Second, "a's delivery sent back", func() bool { return s.broker.Stats().HandledRetry >= 1 })
	if rec, err := s.store.Get(ctx, a.OperationID); err != nil || rec.Status != schema.StatusQueued || rec.Attempts != 0 {
		t.Fatalf("a after the busy delivery: status=%s attempts=%d (%v)", rec.Status, rec.Attempts, err)
	}
	if err := s.coord.Release(ctx, l); err != nil {
		t.Fatal(err)
	}
	b := s.submit(t, "ord-2", schema.ActionComment, issue(10), `{"body":"n2"}`)
	// b's delivery, with the resource free and a still waiting, is handled
	// (sent back to wait for a, or — if the order were broken — run).
	eventuallyTrue(t, 10*time.Second, "b's delivery handled", func() bool {
		st := s.broker.Stats()
		return st.HandledRetry+st.HandledDone >= 2
	})
	if err := s.broker.Nudge(ctx, a.OperationID); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{a.OperationID, b.OperationID} {
		if got := s.await(t, id, 20*time.Second); got.Status != schema.StatusSucceeded {
			t.Fatalf("%s: status=%s %s %s", id, got.Status, got.LastErrorCategory, got.LastErrorMessage)
		}
	}
	is, err := s.sim.Issue("octo", "demo", 10)
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, c := range is.Comments {
		order = append(order, strings.SplitN(c.Body, "\n", 2)[0])
	}
	if strings.Join(order, ",") != "n1,n2" {
		t.Errorf("comments on the issue, in order: %q; want n1 then n2 (submission order)", order)
	}
}

// A worker that read the record before another worker saved an attempt
// (which may have been applied) must not mark the operation running from
// its old copy: that would erase the attempt, skip the probe it calls
// for, and call GitHub a second time.
func TestStaleCopyDoesNotOverwriteAnAttempt(t *testing.T) {
	t.Parallel()
	// BusyDelay is long: the queue's own delivery, sent back because the
	// resource is busy, does not come again during the test.
	s := newStack(t, stackOptions{exec: Config{BusyDelay: time.Minute}})
	ctx := context.Background()
	l, err := s.coord.Acquire(ctx, issue(10).Key(), "other-worker", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	sub := s.submit(t, "stale-1", schema.ActionComment, issue(10), `{"body":"once"}`)
	eventuallyTrue(t, 10*time.Second, "the queue's delivery sent back", func() bool { return s.broker.Stats().HandledRetry >= 1 })

	stale, err := s.store.Get(ctx, sub.OperationID)
	if err != nil {
		t.Fatal(err)
	}
	if stale.Status != schema.StatusQueued || stale.Attempts != 0 {
		t.Fatalf("before: status=%s attempts=%d", stale.Status, stale.Attempts)
	}

	// The other worker, holding the lease, marks it running and records an
	// attempt that ended ambiguously (the connection dropped) — after
	// GitHub applied it: its comment is there, posted by the App.
	newer := stale.Clone()
	now := time.Now()
	newer.Status, newer.StartedAt, newer.UpdatedAt = schema.StatusRunning, &now, now
	newer.Attempts = 1
	newer.AppendAttempt(schema.Attempt{Number: 1, StartedAt: now, EndedAt: now, ErrorCategory: CategoryNetwork, ErrorMessage: "connection reset"})
	newer.LastErrorCategory, newer.LastErrorMessage = CategoryNetwork, "connection reset"
	save, err := s.store.SaveFunc(&newer, true)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.coord.Fenced(ctx, l, func(tx *sqlite.Tx) error { return save(tx) }); err != nil {
		t.Fatal(err)
	}
	c := installationClient(t, s.gh)
	body := "once\n\n" + CommentMarker(sub.OperationID)
	if _, _, err := c.Issues.CreateComment(ctx, "octo", "demo", 10, &github.IssueComment{Body: &body}); err != nil {
		t.Fatal(err)
	}
	// The other worker is gone; the resource is free.
	if err := s.coord.Release(ctx, l); err != nil {
		t.Fatal(err)
	}

	// The worker with the old copy: its save is refused, it holds no lease
	// and calls nothing.
	res, isStale := s.exec.process(ctx, &stale, false)
	if !isStale {
		t.Errorf("process of a stale copy: result %v (err %v), want it found stale", res, res.Err)
	}
	if st, err := s.coord.Check(ctx, issue(10).Key()); err != nil || st.Locked {
		t.Errorf("lease after the stale try: %+v (%v)", st, err)
	}

	// Reading again, it probes the ambiguous attempt and finds the comment.
	if r := s.exec.Process(ctx, sub.OperationID); r.Kind != ResultDone {
		t.Fatalf("Process: %v (%v)", r, r.Err)
	}
	got := s.await(t, sub.OperationID, 10*time.Second)
	calls, probes := callsAndProbes(got)
	if got.Status != schema.StatusSucceeded || got.Attempts != 1 || calls != 1 || probes != 1 ||
		got.AttemptLog[0].ErrorCategory != CategoryNetwork {
		t.Errorf("status=%s attempts=%d calls=%d probes=%d log=%+v; want the other worker's attempt kept and probed",
			got.Status, got.Attempts, calls, probes, got.AttemptLog)
	}
	if is, _ := s.sim.Issue("octo", "demo", 10); len(is.Comments) != 1 {
		t.Errorf("issue has %d comments, want 1", len(is.Comments))
	}
}
