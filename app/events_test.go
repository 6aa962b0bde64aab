package app

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/baton-dev/baton/internal/sqlite"
)

// dispatchEnv is a ledger and a dispatcher on it, fed directly (the
// receiver is tested on its own).
type dispatchEnv struct {
	t      *testing.T
	db     *sqlite.DB
	ledger *DeliveryLedger
	disp   *EventDispatcher
	cfg    EventDispatcherConfig
}

func newDispatchEnv(t *testing.T, db *sqlite.DB, tweak func(*EventDispatcherConfig), handlers map[string]EventHandler) *dispatchEnv {
	t.Helper()
	if db == nil {
		db = openHookDB(t, sqlite.Options{Synchronous: "NORMAL"})
	}
	l, err := NewDeliveryLedger(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := EventDispatcherConfig{Ledger: l, Logger: zaptest.NewLogger(t), RetryBase: 2 * time.Millisecond, RetryMax: 20 * time.Millisecond}
	if tweak != nil {
		tweak(&cfg)
	}
	d, err := NewEventDispatcher(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for name, h := range handlers {
		if err := d.Subscribe(name, h); err != nil {
			t.Fatal(err)
		}
	}
	return &dispatchEnv{t: t, db: db, ledger: l, disp: d, cfg: cfg}
}

func (e *dispatchEnv) start() {
	e.t.Helper()
	if err := e.disp.Start(context.Background()); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { e.stop() })
}

func (e *dispatchEnv) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.disp.Stop(ctx); err != nil {
		e.t.Errorf("stop: %v", err)
	}
}

func (e *dispatchEnv) record(ctx context.Context, id, event, repo string) {
	e.t.Helper()
	body := fmt.Sprintf(`{"action":"x","repository":{"full_name":%q},"installation":{"id":1}}`, repo)
	d := Delivery{ID: id, Event: event, Action: "x", Repository: repo, InstallationID: 1, Payload: []byte(body)}
	if repo == "" {
		d.InstallationID = 0
	}
	if _, err := e.ledger.Record(ctx, d); err != nil {
		e.t.Fatal(err)
	}
}

func (e *dispatchEnv) waitState(ctx context.Context, id string, want DeliveryState) DeliveryRecord {
	e.t.Helper()
	var rec DeliveryRecord
	hookEventually(e.t, ctx, "delivery "+id+" "+string(want), func() bool {
		var err error
		rec, err = e.ledger.Get(ctx, id)
		return err == nil && rec.State == want
	})
	return rec
}

// Deliveries of one repository are handled one at a time, in the order
// received; different repositories run in parallel.
func TestDispatcherOrdersPerRepository(t *testing.T) {
	t.Parallel()
	const repos, perRepo = 6, 15
	var (
		mu        sync.Mutex
		order     = map[string][]int{}
		inRepo    = map[string]int{}
		overlap   atomic.Bool
		running   atomic.Int64
		maxActive atomic.Int64
		together  = make(chan struct{}) // closed once two handlers run at the same time
		once      sync.Once
	)
	h := EventHandlerFunc{On: []string{"pull_request"}, Func: func(ctx context.Context, d Delivery) error {
		mu.Lock()
		inRepo[d.Repository]++
		if inRepo[d.Repository] > 1 {
			overlap.Store(true)
		}
		mu.Unlock()
		n := running.Add(1)
		for {
			m := maxActive.Load()
			if n <= m || maxActive.CompareAndSwap(m, n) {
				break
			}
		}
		if n >= 2 {
			once.Do(func() { close(together) })
		}
		// Until a second handler runs beside this one, hold: with
		// deliveries handled one at a time this never returns.
		select {
		case <-together:
		case <-ctx.Done():
			running.Add(-1)
			return ctx.Err()
		}
		running.Add(-1)
		var seq int
		fmt.Sscanf(d.ID[strings.LastIndex(d.ID, "-")+1:], "%d", &seq)
		mu.Lock()
		inRepo[d.Repository]--
		order[d.Repository] = append(order[d.Repository], seq)
		mu.Unlock()
		return nil
	}}
	e := newDispatchEnv(t, nil, func(c *EventDispatcherConfig) { c.Workers = 4 }, map[string]EventHandler{"h": h})
	ctx := hookCtx(t)
	// Recorded before Start (a restart finds them) and after.
	for i := range perRepo {
		for r := range repos {
			if i == perRepo/2 && r == 0 {
				e.start()
			}
			e.record(ctx, fmt.Sprintf("r%d-%d", r, i), "pull_request", fmt.Sprintf("octo/repo%d", r))
		}
	}
	for r := range repos {
		e.waitState(ctx, fmt.Sprintf("r%d-%d", r, perRepo-1), DeliveryHandled)
	}
	if overlap.Load() {
		t.Error("two deliveries of one repository ran at once")
	}
	mu.Lock()
	defer mu.Unlock()
	for r := range repos {
		got := order[fmt.Sprintf("octo/repo%d", r)]
		if len(got) != perRepo {
			t.Fatalf("repo%d: handled %v", r, got)
		}
		for i, seq := range got {
			if seq != i {
				t.Fatalf("repo%d handled out of order: %v", r, got)
			}
		}
	}
	if m := maxActive.Load(); m > 4 {
		t.Errorf("%d deliveries ran at once with 4 workers", m)
	}
}

// A handler that asks to retry later is run again, not counted as
// failing, and the repository's next delivery waits behind it.
func TestDispatcherRetryAfterHoldsOrder(t *testing.T) {
	t.Parallel()
	var (
		mu      sync.Mutex
		calls   []string
		holding = 3
	)
	h := EventHandlerFunc{On: []string{"*"}, Func: func(_ context.Context, d Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, d.ID)
		if d.ID == "first" && holding > 0 {
			holding--
			return RetryAfter(5*time.Millisecond, errors.New("lease repo:octo/app is held"))
		}
		return nil
	}}
	e := newDispatchEnv(t, nil, func(c *EventDispatcherConfig) { c.MaxAttempts = 1 }, map[string]EventHandler{"mq": h})
	ctx := hookCtx(t)
	e.start()
	e.record(ctx, "first", "pull_request", "octo/app")
	e.record(ctx, "second", "pull_request", "octo/app")
	first := e.waitState(ctx, "first", DeliveryHandled)
	e.waitState(ctx, "second", DeliveryHandled)
	if first.Attempts != 0 || first.Outcome["mq"] != "handled" {
		t.Errorf("first: %+v (retries are not failures)", first)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"first", "first", "first", "first", "second"}
	if strings.Join(calls, ",") != strings.Join(want, ",") {
		t.Errorf("calls %v, want %v", calls, want)
	}
}

// A failing handler is retried with backoff; after MaxAttempts the
// delivery is failed, visible with its error, and the repository moves
// on. A handler that succeeded is not run again on the retries.
func TestDispatcherFailuresAndGivingUp(t *testing.T) {
	t.Parallel()
	var okRuns, badRuns, flakyRuns atomic.Int64
	ok := EventHandlerFunc{On: []string{"issues"}, Func: func(context.Context, Delivery) error { okRuns.Add(1); return nil }}
	bad := EventHandlerFunc{On: []string{"issues"}, Func: func(_ context.Context, d Delivery) error {
		if d.ID == "doomed" {
			badRuns.Add(1)
			return errors.New("GitHub is down")
		}
		return nil
	}}
	flaky := EventHandlerFunc{On: []string{"issues"}, Func: func(_ context.Context, d Delivery) error {
		if d.ID == "flaky" && flakyRuns.Add(1) < 3 {
			panic("a bug")
		}
		return nil
	}}
	e := newDispatchEnv(t, nil, func(c *EventDispatcherConfig) { c.MaxAttempts = 4 },
		map[string]EventHandler{"ok": ok, "bad": bad, "flaky": flaky})
	ctx := hookCtx(t)
	e.start()
	e.record(ctx, "doomed", "issues", "octo/app")
	e.record(ctx, "flaky", "issues", "octo/app")
	e.record(ctx, "after", "issues", "octo/app")

	doomed := e.waitState(ctx, "doomed", DeliveryFailed)
	if doomed.Attempts != 4 || badRuns.Load() != 4 || doomed.Outcome["bad"] != "failed" || doomed.Outcome["ok"] != "handled" ||
		!strings.Contains(doomed.LastError, "GitHub is down") || doomed.HandledAt == nil {
		t.Errorf("doomed: %+v after %d runs", doomed, badRuns.Load())
	}
	flakyRec := e.waitState(ctx, "flaky", DeliveryHandled)
	if flakyRec.Attempts != 2 || !strings.Contains(flakyRec.LastError, "panicked") {
		t.Errorf("flaky: %+v", flakyRec)
	}
	e.waitState(ctx, "after", DeliveryHandled)
	if n := okRuns.Load(); n != 3 {
		t.Errorf("the handler that succeeded ran %d times on 3 deliveries", n)
	}

	// Replay gives the failed delivery a new chance; the handler that had
	// handled it is not run again.
	if err := e.disp.Replay(ctx, "flaky"); err == nil {
		t.Error("replaying a handled delivery was accepted")
	}
	if err := e.disp.Replay(ctx, "doomed"); err != nil {
		t.Fatal(err)
	}
	hookEventually(t, ctx, "the replayed delivery fails again", func() bool {
		r, err := e.ledger.Get(ctx, "doomed")
		return err == nil && r.State == DeliveryFailed && badRuns.Load() == 8
	})
	if n := okRuns.Load(); n != 3 {
		t.Errorf("replay ran the handler that had succeeded (%d runs)", n)
	}
}

// A replay of an older delivery while a newer one of the same repository
// runs goes ahead of the deliveries still waiting, and the repository's
// deliveries keep flowing once the running one ends.
func TestDispatcherReplayWhileRunning(t *testing.T) {
	t.Parallel()
	var failOld atomic.Bool
	failOld.Store(true)
	started, release := make(chan struct{}), make(chan struct{})
	var (
		mu    sync.Mutex
		order []string
	)
	h := EventHandlerFunc{On: []string{"issues"}, Func: func(ctx context.Context, d Delivery) error {
		switch {
		case d.ID == "old" && failOld.Load():
			return Permanent(errors.New("not yet"))
		case d.ID == "slow":
			close(started)
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		mu.Lock()
		order = append(order, d.ID)
		mu.Unlock()
		return nil
	}}
	e := newDispatchEnv(t, nil, nil, map[string]EventHandler{"h": h})
	ctx := hookCtx(t)
	e.start()
	e.record(ctx, "old", "issues", "octo/app")
	e.waitState(ctx, "old", DeliveryFailed)
	failOld.Store(false)
	e.record(ctx, "slow", "issues", "octo/app")
	<-started
	if err := e.disp.Replay(ctx, "old"); err != nil {
		t.Fatal(err)
	}
	e.record(ctx, "after", "issues", "octo/app")
	close(release)
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for _, id := range []string{"slow", "old", "after"} {
		e.waitState(wctx, id, DeliveryHandled)
	}
	mu.Lock()
	defer mu.Unlock()
	if got := strings.Join(order, ","); got != "slow,old,after" {
		t.Errorf("handled in the order %s, want slow,old,after", got)
	}
}

// Permanent errors fail the delivery at once.
func TestDispatcherPermanentError(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	h := EventHandlerFunc{On: []string{"push"}, Func: func(context.Context, Delivery) error {
		runs.Add(1)
		return Permanent(errors.New("payload without a ref"))
	}}
	e := newDispatchEnv(t, nil, nil, map[string]EventHandler{"h": h})
	ctx := hookCtx(t)
	e.start()
	e.record(ctx, "p", "push", "octo/app")
	rec := e.waitState(ctx, "p", DeliveryFailed)
	if runs.Load() != 1 || rec.Attempts != 0 || !strings.Contains(rec.LastError, "payload without a ref") {
		t.Errorf("%+v after %d runs", rec, runs.Load())
	}
}

// Deliveries accepted before a crash are handled after the restart, each
// once: the handler that finished before the crash is not run again.
func TestDispatcherResumesAfterRestart(t *testing.T) {
	t.Parallel()
	db := openHookDB(t, sqlite.Options{Synchronous: "NORMAL"})
	ctx := hookCtx(t)
	started := make(chan struct{})
	var first atomic.Int64
	block := EventHandlerFunc{On: []string{"*"}, Func: func(ctx context.Context, d Delivery) error {
		if first.Add(1) == 1 {
			close(started)
		}
		<-ctx.Done() // the process "dies" while the handler runs
		return ctx.Err()
	}}
	e1 := newDispatchEnv(t, db, nil, map[string]EventHandler{"h": block})
	e1.start()
	for i := range 5 {
		e1.record(ctx, fmt.Sprintf("d%d", i), "issues", fmt.Sprintf("octo/r%d", i%2))
	}
	<-started
	e1.stop()

	var mu sync.Mutex
	handled := map[string]int{}
	count := EventHandlerFunc{On: []string{"*"}, Func: func(_ context.Context, d Delivery) error {
		mu.Lock()
		handled[d.ID]++
		mu.Unlock()
		return nil
	}}
	e2 := newDispatchEnv(t, db, nil, map[string]EventHandler{"h": count})
	e2.start()
	for i := range 5 {
		rec := e2.waitState(ctx, fmt.Sprintf("d%d", i), DeliveryHandled)
		if rec.Attempts != 0 {
			t.Errorf("%s: an interrupted run counted as a failure: %+v", rec.ID, rec)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for i := range 5 {
		if n := handled[fmt.Sprintf("d%d", i)]; n != 1 {
			t.Errorf("d%d handled %d times after the restart", i, n)
		}
	}
}

// Handled deliveries lose their payload; old ones are pruned, pending ones
// never.
func TestLedgerPrune(t *testing.T) {
	t.Parallel()
	// The dispatcher's own pruning (at start) must leave them to the
	// test's.
	e := newDispatchEnv(t, nil, func(c *EventDispatcherConfig) { c.Retention = 30 * 24 * time.Hour }, nil)
	ctx := hookCtx(t)
	now := time.Now()
	old := now.Add(-8 * 24 * time.Hour)
	for i, at := range []time.Time{old, old, now} {
		if _, err := e.ledger.Record(ctx, Delivery{ID: fmt.Sprintf("p%d", i), Event: "ping", ReceivedAt: at, Payload: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	e.start()
	e.waitState(ctx, "p0", DeliveryHandled)
	e.waitState(ctx, "p1", DeliveryHandled)
	e.waitState(ctx, "p2", DeliveryHandled)
	var bodies int
	if err := e.db.QueryRow(ctx, `SELECT COUNT(*) FROM webhook_deliveries WHERE body IS NOT NULL`).Scan(&bodies); err != nil || bodies != 0 {
		t.Errorf("payloads kept after handling: %d, %v", bodies, err)
	}
	if _, err := e.ledger.Record(ctx, Delivery{ID: "pending-old", Event: "ping", ReceivedAt: old, Payload: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	e.stop() // keep it pending
	n, err := e.ledger.Prune(ctx, now.Add(-7*24*time.Hour))
	if err != nil || n != 2 {
		t.Fatalf("pruned %d, %v", n, err)
	}
	all := ledgerAll(t, ctx, e.ledger)
	if len(all) != 2 || all[0].ID != "p2" || all[1].ID != "pending-old" {
		t.Errorf("left %+v", all)
	}
}

// The ledger is pruned as the dispatcher starts, not only an interval
// later: a server restarted more often than that would otherwise keep
// every delivery it ever received.
func TestLedgerPrunedAtStart(t *testing.T) {
	t.Parallel()
	// A first run that keeps them, so they are seen handled.
	e := newDispatchEnv(t, nil, func(c *EventDispatcherConfig) { c.Retention = 30 * 24 * time.Hour }, nil)
	ctx := hookCtx(t)
	old := time.Now().Add(-8 * 24 * time.Hour)
	for _, id := range []string{"old-1", "old-2"} {
		if _, err := e.ledger.Record(ctx, Delivery{ID: id, Event: "ping", ReceivedAt: old, Payload: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	e.start()
	e.waitState(ctx, "old-1", DeliveryHandled)
	e.waitState(ctx, "old-2", DeliveryHandled)
	e.stop()

	// The next start of the server, with the default retention (7 days)
	// and PruneInterval (1h).
	next := newDispatchEnv(t, e.db, nil, nil)
	next.start()
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	hookEventually(t, pctx, "old deliveries pruned at start", func() bool {
		return len(ledgerAll(t, ctx, next.ledger)) == 0
	})
}

func TestDeliveryKey(t *testing.T) {
	t.Parallel()
	d := Delivery{ID: "72d3162e-cc78-11e3-81ab-4c9367dc0958"}
	if got := DeliveryKey(d, "mergequeue", "octo/app#42"); got != "delivery:72d3162e-cc78-11e3-81ab-4c9367dc0958:mergequeue:octo/app#42" {
		t.Errorf("key %s", got)
	}
	if DeliveryKey(d, "a") == DeliveryKey(Delivery{ID: "other"}, "a") || DeliveryKey(d, "a") == DeliveryKey(d, "b") {
		t.Error("keys collide")
	}
	long := DeliveryKey(d, strings.Repeat("x", 300))
	if len(long) > 255 || !strings.HasPrefix(long, "delivery:"+d.ID+":sha256:") || long == DeliveryKey(d, strings.Repeat("y", 300)) {
		t.Errorf("long key %q", long)
	}
	if WebhookActor(42) != "github:42" {
		t.Error(WebhookActor(42))
	}
}

func TestDispatcherConfigAndLifecycle(t *testing.T) {
	t.Parallel()
	db := openHookDB(t, sqlite.Options{Synchronous: "NORMAL"})
	l, _ := NewDeliveryLedger(db, nil)
	for name, cfg := range map[string]EventDispatcherConfig{
		"no ledger":       {},
		"short retention": {Ledger: l, Retention: time.Hour},
		"retry max":       {Ledger: l, RetryBase: time.Minute, RetryMax: time.Second},
		"workers":         {Ledger: l, Workers: -1},
	} {
		if _, err := NewEventDispatcher(cfg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	d, err := NewEventDispatcher(EventDispatcherConfig{Ledger: l})
	if err != nil {
		t.Fatal(err)
	}
	h := EventHandlerFunc{On: []string{"*"}, Func: func(context.Context, Delivery) error { return nil }}
	if d.Subscribe("Bad Name", h) == nil || d.Subscribe("ok", nil) == nil {
		t.Error("bad subscriptions accepted")
	}
	if err := d.Subscribe("ok", h); err != nil {
		t.Fatal(err)
	}
	if d.Subscribe("ok", h) == nil {
		t.Error("duplicate name accepted")
	}
	ctx := hookCtx(t)
	if err := d.Stop(ctx); err != nil { // before Start
		t.Fatal(err)
	}
	if d.Start(ctx) == nil {
		t.Error("Start after Stop accepted")
	}
	d2, _ := NewEventDispatcher(EventDispatcherConfig{Ledger: l})
	if err := d2.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if d2.Subscribe("late", h) == nil {
		t.Error("Subscribe after Start accepted")
	}
	if err := d2.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := d2.Stop(ctx); err != nil { // twice
		t.Fatal(err)
	}
}
