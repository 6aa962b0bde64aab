package executor

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/baton-dev/baton/app/ghsim"
	"github.com/baton-dev/baton/coordinator"
	"github.com/baton-dev/baton/internal/sqlite"
	"github.com/baton-dev/baton/queue"
	"github.com/baton-dev/baton/schema"
)

// stack is baton's executing path with real parts: SQLite store and
// leases, embedded JetStream, the executor, and the GitHub simulator over
// HTTP with the App's JWT exchange.
type stack struct {
	db     *sqlite.DB
	store  *SQLiteStore
	coord  *coordinator.Coordinator
	broker *queue.Broker
	exec   *Executor
	cons   *queue.Consumer
	sim    *ghsim.Sim
	gh     *GitHubClients
}

type stackOptions struct {
	sim         ghsim.Config
	exec        Config // Store, Dispatcher, Leases, GitHub are filled in
	concurrency int
	logger      *zap.Logger
	// front, if set, returns the address baton is to reach the simulator
	// at (a proxy in front of it).
	front func(t testing.TB, simURL string) string
	// transport, if set, wraps the transport of baton's GitHub clients
	// (to act on a request as it is sent).
	transport func(http.RoundTripper) http.RoundTripper
	// leases, if set, wraps the coordinator the executor takes its
	// leases from (to act at a precise moment of Process).
	leases func(*coordinator.Coordinator) Leases
	// handler, if set, wraps the queue's handler (to fail some messages).
	handler func(queue.Handler) queue.Handler
	// maxFailures is the consumer's MaxFailures (0: its default).
	maxFailures int
	// ghTimeout, if set, is the bound on each GitHub call.
	ghTimeout time.Duration
}

func newStack(t testing.TB, o stackOptions) *stack {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	log := o.logger
	if log == nil {
		log = zap.NewNop()
	}
	db, err := sqlite.Open(ctx, filepath.Join(dir, "baton.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	coord, err := coordinator.New(coordinator.Config{DB: db, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	broker, err := queue.New(queue.Config{DataDir: dir, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	if err := broker.Start(ctx); err != nil {
		t.Fatal(err)
	}
	sim, gh := newSim(t, o.sim)
	if o.front != nil || o.transport != nil || o.ghTimeout != 0 {
		base := sim.URL()
		if o.front != nil {
			base = o.front(t, base)
		}
		var rt http.RoundTripper
		if o.transport != nil {
			rt = o.transport(newTransport())
		}
		gh, err = NewGitHubClients(GitHubConfig{BaseURL: base, AppID: sim.AppID(), PrivateKey: sim.PrivateKeyPEM(), Transport: rt, Timeout: o.ghTimeout})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(gh.Close)
	}
	store := NewSQLiteStore(db, nil)
	cfg := o.exec
	cfg.Store, cfg.Dispatcher, cfg.Leases, cfg.GitHub, cfg.Logger = store, broker, coord, gh, log
	if o.leases != nil {
		cfg.Leases = o.leases(coord)
	}
	if cfg.Pacing.MinInterval == 0 && cfg.Pacing.ContentLimits == nil {
		cfg.Pacing.Disabled = true
	}
	exec, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := exec.Start(ctx); err != nil {
		t.Fatal(err)
	}
	handler := QueueHandler(exec)
	if o.handler != nil {
		handler = o.handler(handler)
	}
	cons, err := queue.NewConsumer(broker, queue.ConsumerConfig{
		Concurrency: max(o.concurrency, 32),
		Handler:     handler,
		MaxFailures: o.maxFailures,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := cons.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := cons.Stop(sctx); err != nil {
			buf := make([]byte, 1<<22)
			t.Errorf("consumer stop: %v\n%s", err, buf[:runtime.Stack(buf, true)])
		}
		if err := exec.Stop(sctx); err != nil {
			t.Errorf("executor stop: %v", err)
		}
		if err := broker.Stop(sctx); err != nil {
			t.Errorf("broker stop: %v", err)
		}
		db.Close()
	})
	return &stack{db: db, store: store, coord: coord, broker: broker, exec: exec, cons: cons, sim: sim, gh: gh}
}

// QueueHandler adapts Process to the queue's handler, the way the server's
// wiring does.
func QueueHandler(e *Executor) queue.Handler {
	return func(ctx context.Context, id string) queue.Result {
		r := e.Process(ctx, id)
		switch r.Kind {
		case ResultDone:
			return queue.Done()
		case ResultRetry:
			return queue.RetryAfter(r.Delay)
		}
		return queue.Failed(r.Err)
	}
}

func (s *stack) submit(t testing.TB, key, action string, res schema.Resource, payload string, mod ...func(*schema.Submission)) schema.Record {
	t.Helper()
	sub := schema.Submission{IdempotencyKey: key, Action: action, Resource: res, Payload: json.RawMessage(payload), InstallationID: 1}
	for _, m := range mod {
		m(&sub)
	}
	rec, _, err := s.exec.Submit(context.Background(), "tester", sub)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// await polls until the operation is terminal.
func (s *stack) await(t testing.TB, id string, within time.Duration) schema.Record {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		rec, err := s.store.Get(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Terminal() {
			return rec
		}
		if time.Now().After(deadline) {
			b, _ := json.MarshalIndent(rec, "", "  ")
			t.Fatalf("operation not terminal after %v:\n%s", within, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func issue(n int) schema.Resource {
	return schema.Resource{Type: "issue", ID: fmt.Sprintf("octo/demo#%d", n)}
}

func itoa(i int) string { return fmt.Sprint(i) }

func fmtSscan(body string, n *int) (int, error) { return fmt.Sscanf(body, "n%d", n) }
