package queue

import (
	"context"
	"fmt"
	"os"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(crashChildEnv); dir != "" {
		runCrashChild(dir) // never returns: the parent test kills it
	}
	goleak.VerifyTestMain(m)
}

// testLogger logs to the test's output at info level and above.
func testLogger(t testing.TB) *zap.Logger {
	return zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel))
}

// startBroker starts an embedded Broker on dir (a new temporary directory
// if empty) and stops it when the test ends.
func startBroker(t testing.TB, dir string, mods ...func(*Config)) *Broker {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	cfg := Config{DataDir: dir, Logger: testLogger(t)}
	for _, m := range mods {
		m(&cfg)
	}
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := b.Stop(ctx); err != nil {
			t.Errorf("broker stop: %v", err)
		}
	})
	return b
}

// startConsumer starts a consumer with test-friendly defaults (short
// fetches and backoff), after mods have changed it, and stops it when the
// test ends.
func startConsumer(t testing.TB, b *Broker, cfg ConsumerConfig, mods ...func(*Consumer)) *Consumer {
	t.Helper()
	if cfg.FetchWait == 0 {
		cfg.FetchWait = 100 * time.Millisecond
	}
	if cfg.FailureBackoff == 0 {
		cfg.FailureBackoff = 20 * time.Millisecond
	}
	c, err := NewConsumer(b, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, mod := range mods {
		mod(c)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.Stop(ctx); err != nil {
			t.Errorf("consumer stop: %v", err)
		}
	})
	return c
}

// eventually polls cond every 10 ms until it holds or timeout passes.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %s", timeout, what)
		}
		tick := time.NewTimer(10 * time.Millisecond)
		<-tick.C
	}
}

// streamMsgs is the number of messages stored in a stream.
func streamMsgs(t testing.TB, st jetstream.Stream) uint64 {
	t.Helper()
	info, err := st.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

func dispatch(t testing.TB, b *Broker, ids ...string) {
	t.Helper()
	for _, id := range ids {
		if err := b.Dispatch(context.Background(), id); err != nil {
			t.Fatal(err)
		}
	}
}

func opIDs(prefix string, n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%04d", prefix, i)
	}
	return ids
}

// recorder is a handler that counts calls per operation and answers with
// a fixed Result (Done by default).
type recorder struct {
	mu     sync.Mutex
	calls  map[string]int
	result func(id string, call int) Result
}

func newRecorder() *recorder { return &recorder{calls: map[string]int{}} }

func (r *recorder) handle(_ context.Context, id string) Result {
	r.mu.Lock()
	r.calls[id]++
	n := r.calls[id]
	f := r.result
	r.mu.Unlock()
	if f != nil {
		return f(id, n)
	}
	return Done()
}

func (r *recorder) count(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls[id]
}

// seen is how many distinct operations reached the handler.
func (r *recorder) seen() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.calls)
}

func (r *recorder) total() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.calls {
		n += c
	}
	return n
}

// fakeStore stands in for the record store in reconciler tests.
type fakeStore struct {
	mu  sync.Mutex
	ops map[string]*fakeRecord
}

type fakeRecord struct {
	created, dispatched time.Time
	done                bool
}

func newFakeStore() *fakeStore { return &fakeStore{ops: map[string]*fakeRecord{}} }

func (s *fakeStore) add(id string, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ops[id] = &fakeRecord{created: at}
}

func (s *fakeStore) finish(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.ops[id]; r != nil {
		r.done = true
	}
}

func (s *fakeStore) pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, r := range s.ops {
		if !r.done {
			n++
		}
	}
	return n
}

func (s *fakeStore) candidates(_ context.Context, before time.Time, limit int) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []string
	for id, r := range s.ops {
		if r.done {
			continue
		}
		if (r.dispatched.IsZero() && r.created.Before(before)) || (!r.dispatched.IsZero() && r.dispatched.Before(before)) {
			ids = append(ids, id)
		}
	}
	sort.Slice(ids, func(i, j int) bool { return s.ops[ids[i]].dispatched.Before(s.ops[ids[j]].dispatched) })
	if len(ids) > limit {
		ids = ids[:limit]
	}
	return ids, nil
}

func (s *fakeStore) markDispatched(_ context.Context, ids []string, at time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		if r := s.ops[id]; r != nil {
			r.dispatched = at
		}
	}
	return nil
}
