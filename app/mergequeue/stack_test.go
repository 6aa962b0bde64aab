package mergequeue_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/baton-dev/baton/app"
	"github.com/baton-dev/baton/app/ghsim"
	"github.com/baton-dev/baton/app/mergequeue"
	"github.com/baton-dev/baton/coordinator"
	"github.com/baton-dev/baton/executor"
	"github.com/baton-dev/baton/internal/sqlite"
	"github.com/baton-dev/baton/queue"
	"github.com/baton-dev/baton/schema"
)

const webhookSecret = "s3cret"

// appKey is the simulated App's key, made once: 2048-bit keys are slow to
// generate under the race detector.
var appKey = sync.OnceValue(func() *rsa.PrivateKey {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	return k
})

// stack is baton's path from GitHub's webhooks to GitHub's merges, on real
// parts: the simulator over HTTP (real App JWT exchange), signed webhooks
// into the real receiver, ledger and dispatcher, SQLite, the coordinator,
// the embedded JetStream queue, the executor, and the merge queue.
type stack struct {
	db     *sqlite.DB
	coord  *coordinator.Coordinator
	clock  *coordinator.FakeClock // nil: the system clock
	store  *executor.SQLiteStore
	exec   *executor.Executor
	broker *queue.Broker
	sim    *ghsim.Sim
	gh     *executor.GitHubClients
	ledger *app.DeliveryLedger
	q      *mergequeue.Queue
	mqCfg  mergequeue.Config // the queue's config, for a queue started again
	hook   *httptest.Server
}

type stackOptions struct {
	// fakeClock runs the coordinator and the queue on a fake clock.
	fakeClock bool
	// noWebhooks leaves the simulator's webhook off.
	noWebhooks bool
	// mq adjusts the queue's config.
	mq func(*mergequeue.Config)
	// noWorkers leaves the operations the queue submits in the queue
	// (JetStream), unprocessed: for tests about the queue's own state.
	noWorkers bool
	// failMerges has every run of a merge operation fail in the
	// consumer's handler, so that the operation is dead-lettered at once.
	failMerges bool
	// permissions, when set, are what installation 1 grants instead of
	// what baton asks for.
	permissions map[string]string
}

func newStack(t *testing.T, o stackOptions) *stack {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	log := zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
	s := &stack{}
	var stops []func(context.Context) error
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		for i := len(stops) - 1; i >= 0; i-- {
			if err := stops[i](sctx); err != nil {
				t.Errorf("stop: %v", err)
			}
		}
	})
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	var err error
	s.db, err = sqlite.Open(ctx, filepath.Join(dir, "baton.db"), sqlite.Options{})
	must(err)
	stops = append(stops, func(context.Context) error { return s.db.Close() })

	var clock coordinator.Clock
	if o.fakeClock {
		s.clock = coordinator.NewFakeClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
		clock = s.clock
	}
	s.coord, err = coordinator.New(coordinator.Config{DB: s.db, Clock: clock, Logger: log})
	must(err)

	s.sim, err = ghsim.New(ghsim.Config{PrivateKey: appKey(), Limits: ghsim.Limits{PrimaryLimit: -1}, WebhookSecret: webhookSecret})
	must(err)
	must(s.sim.Start(ctx))
	stops = append(stops, func(context.Context) error { return s.sim.Close() })
	must(s.sim.SeedDemo())
	if o.permissions != nil {
		must(s.sim.SetInstallationPermissions(ghsim.DemoInstallationID, o.permissions))
	}
	s.gh, err = executor.NewGitHubClients(executor.GitHubConfig{BaseURL: s.sim.URL(), AppID: s.sim.AppID(), PrivateKey: s.sim.PrivateKeyPEM()})
	must(err)
	stops = append(stops, func(context.Context) error { s.gh.Close(); return nil })

	broker, err := queue.New(queue.Config{DataDir: dir, Logger: log})
	must(err)
	must(broker.Start(ctx))
	s.broker = broker
	stops = append(stops, broker.Stop)

	s.store = executor.NewSQLiteStore(s.db, nil)
	var mq *mergequeue.Queue
	s.exec, err = executor.New(executor.Config{
		Store: s.store, Dispatcher: broker, Leases: s.coord, GitHub: s.gh, Logger: log,
		Pacing:    executor.PacingConfig{Disabled: true},
		BusyDelay: 50 * time.Millisecond, OrderDelay: 200 * time.Millisecond, BaseBackoff: 20 * time.Millisecond,
		OnFinished: func(r schema.Record) { mq.OnOperationFinished(r) },
	})
	must(err)

	cfg := mergequeue.Config{
		DB: s.db, Leases: s.coord, Operations: s.exec, DeadLetters: broker, GitHub: s.gh.Installation, Logger: log,
		BusyDelay: 50 * time.Millisecond, Clock: clock,
	}
	if o.mq != nil {
		o.mq(&cfg)
	}
	mq, err = mergequeue.New(cfg)
	must(err)
	s.q, s.mqCfg = mq, cfg

	must(s.exec.Start(ctx))
	stops = append(stops, s.exec.Stop)
	ccfg := queue.ConsumerConfig{Concurrency: 32, Logger: log, Handler: app.QueueHandler(s.exec)}
	if o.failMerges {
		run := ccfg.Handler
		ccfg.MaxFailures, ccfg.FailureBackoff = 1, 10*time.Millisecond
		ccfg.Handler = func(ctx context.Context, id string) queue.Result {
			if rec, err := s.exec.Get(ctx, id); err == nil && rec.Action == schema.ActionMerge {
				return queue.Failed(errors.New("the handler fails every merge"))
			}
			return run(ctx, id)
		}
	}
	cons, err := queue.NewConsumer(broker, ccfg)
	must(err)
	if !o.noWorkers {
		must(cons.Start(ctx))
		stops = append(stops, cons.Stop)
	}

	must(mq.Start(ctx))
	stops = append(stops, mq.Stop)

	s.ledger, err = app.NewDeliveryLedger(s.db, nil)
	must(err)
	disp, err := app.NewEventDispatcher(app.EventDispatcherConfig{Ledger: s.ledger, Workers: 32, Logger: log,
		RetryBase: 20 * time.Millisecond, RetryMax: 200 * time.Millisecond})
	must(err)
	must(disp.Subscribe("mergequeue", app.MergeQueueHandler(mq)))
	must(disp.Start(ctx))
	stops = append(stops, disp.Stop)
	recv, err := app.NewWebhookReceiver(app.WebhookConfig{Ledger: s.ledger, Secret: webhookSecret, Logger: log})
	must(err)
	mux := http.NewServeMux()
	mux.Handle("/webhooks/github", recv)
	s.hook = httptest.NewServer(mux)
	stops = append(stops, func(context.Context) error {
		s.sim.SetWebhook("", "") // no deliveries into a closed server
		s.hook.Close()
		return nil
	})
	if !o.noWebhooks {
		s.sim.SetWebhook(s.hook.URL+"/webhooks/github", "")
	}
	return s
}

// repo creates octo/<name> in installation 1 with n open pull requests
// and, unless required is nil, the required checks of main.
func (s *stack) repo(t tester, name string, n int, required []string) []int {
	t.Helper()
	if _, err := s.sim.AddRepo("octo", name, ghsim.DemoInstallationID); err != nil {
		t.Fatal(err)
	}
	// monalisa, who labels and pushes in the tests, may write.
	if err := s.sim.SetPermission("octo", name, "monalisa", "write"); err != nil {
		t.Fatal(err)
	}
	if required != nil {
		if err := s.sim.SetRequiredChecks("octo", name, "main", required, false); err != nil {
			t.Fatal(err)
		}
	}
	var prs []int
	for i := range n {
		num, err := s.sim.AddPull("octo", name, ghsim.NewPull{Title: fmt.Sprintf("change %d", i+1)})
		if err != nil {
			t.Fatal(err)
		}
		prs = append(prs, num)
	}
	return prs
}

func (s *stack) pull(t tester, repo string, n int) ghsim.Pull {
	t.Helper()
	p, err := s.sim.Pull("octo", repo, n)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func (s *stack) entries(t tester, repo string) []mergequeue.Entry {
	t.Helper()
	st, err := s.q.Entries(context.Background(), "octo", repo)
	if err != nil {
		t.Fatal(err)
	}
	return st.Entries
}

func (s *stack) audit(t tester, repo string) []mergequeue.AuditRecord {
	t.Helper()
	a, err := s.q.AuditLog(context.Background(), "octo", repo)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func (s *stack) events(t tester, repo string) []mergequeue.EventRecord {
	t.Helper()
	ev, err := s.q.EventLog(context.Background(), "octo", repo)
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

// entryOf returns pull request n's entry, if it is in the queue.
func (s *stack) entryOf(t tester, repo string, n int) (mergequeue.Entry, bool) {
	for _, e := range s.entries(t, repo) {
		if e.PRNumber == n {
			return e, true
		}
	}
	return mergequeue.Entry{}, false
}

// queueOrder returns the pull requests in line, in order.
func (s *stack) queueOrder(t tester, repo string) []int {
	var out []int
	for _, e := range s.entries(t, repo) {
		if e.Position > 0 {
			out = append(out, e.PRNumber)
		}
	}
	return out
}

// tester is the part of *testing.T the helpers use; goTester implements
// it for goroutines of a test.
type tester interface {
	Helper()
	Errorf(format string, args ...any)
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

// goTester reports through t from a goroutine the test started: Fatal
// records the failure and ends that goroutine (t.FailNow may only be
// called from the test's own goroutine).
type goTester struct {
	t    *testing.T
	name string
}

func (g goTester) Helper() {}

func (g goTester) Errorf(format string, args ...any) { g.t.Errorf(g.name+": "+format, args...) }

func (g goTester) Fatalf(format string, args ...any) {
	g.t.Errorf(g.name+": "+format, args...)
	runtime.Goexit()
}

func (g goTester) Fatal(args ...any) {
	g.t.Error(append([]any{g.name + ":"}, args...)...)
	runtime.Goexit()
}

// waitFor polls cond until it holds, failing the test after within. The
// polls space out (5 ms to 100 ms): several tests poll at once.
func waitFor(t tester, within time.Duration, what string, cond func() bool) {
	t.Helper()
	pollFor(t, within, 100*time.Millisecond, what, cond)
}

// pollFor is waitFor with polls spaced out to at most maxWait.
func pollFor(t tester, within, maxWait time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	wait := 5 * time.Millisecond
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %s", within, what)
		}
		time.Sleep(wait)
		wait = min(2*wait, maxWait)
	}
}

// auditOf returns the audit entries of one action, in order.
func auditOf(a []mergequeue.AuditRecord, action string) []mergequeue.AuditRecord {
	var out []mergequeue.AuditRecord
	for _, r := range a {
		if r.Action == action {
			out = append(out, r)
		}
	}
	return out
}

func prsOf(a []mergequeue.AuditRecord) []int {
	out := []int{}
	for _, r := range a {
		out = append(out, r.PRNumber)
	}
	return out
}

// mergeEffects returns the merges the simulator applied in repo, in the
// order it applied them.
func (s *stack) mergeEffects(repo string) []ghsim.Effect {
	var out []ghsim.Effect
	for _, e := range s.sim.Effects() {
		if e.Method == http.MethodPut && strings.HasPrefix(e.Path, "/repos/octo/"+repo+"/pulls/") && strings.HasSuffix(e.Path, "/merge") && e.Status == http.StatusOK {
			out = append(out, e)
		}
	}
	return out
}

// mergeOps returns the merge operations of pull request n, newest first.
func (s *stack) mergeOps(t tester, repo string, n int) []schema.Record {
	t.Helper()
	recs, _, err := s.exec.List(context.Background(), executor.ListFilter{Action: schema.ActionMerge,
		ResourceType: schema.ResourcePullRequest, ResourceID: fmt.Sprintf("octo/%s#%d", repo, n), Limit: 500})
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// mergeOp returns the merge operation of n at sha, failing unless there
// is exactly one. It gives the operation up to 30 s to be terminal: GitHub
// merges (and the closed webhook empties the queue) a moment before the
// executor saves the outcome.
func (s *stack) mergeOp(t tester, repo string, n int, sha string) schema.Record {
	t.Helper()
	var out []schema.Record
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		out = out[:0]
		for _, r := range s.mergeOps(t, repo, n) {
			if payloadSHA(t, r) == sha {
				out = append(out, r)
			}
		}
		if len(out) != 1 || out[0].Terminal() || time.Now().After(deadline) {
			break
		}
	}
	if len(out) != 1 {
		t.Fatalf("%d merge operations of #%d at %s", len(out), n, sha)
	}
	return out[0]
}

func payloadSHA(t tester, rec schema.Record) string {
	var p schema.MergePayload
	if err := json.Unmarshal(rec.Payload, &p); err != nil {
		t.Fatal(err)
	}
	return p.SHA
}

func hasStatus(s *stack, repo, sha, desc string) bool {
	sts, err := s.sim.Statuses("octo", repo, sha)
	if err != nil {
		return false
	}
	return slices.ContainsFunc(sts, func(st ghsim.StatusInfo) bool { return st.Context == "baton/queue" && st.Description == desc })
}

func fmtSscan(s string, n *int) (int, error) { return fmt.Sscan(s, n) }

// deadLettered reports whether operation id has a dead letter.
func (s *stack) deadLettered(id string) bool {
	_, err := s.broker.DeadLetterOf(context.Background(), id)
	return err == nil
}
