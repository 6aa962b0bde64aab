package app

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/baton-dev/baton/app/ghsim"
	"github.com/baton-dev/baton/executor"
	"github.com/baton-dev/baton/internal/sqlite"
)

var (
	hookKeyOnce sync.Once
	hookKey     *rsa.PrivateKey
)

// hookAppKey is one App key for every test: RSA keys are slow to make.
func hookAppKey() *rsa.PrivateKey {
	hookKeyOnce.Do(func() {
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			panic(err)
		}
		hookKey = k
	})
	return hookKey
}

func hookCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// openHookDB opens baton's database in a temporary directory.
func openHookDB(t testing.TB, opts sqlite.Options) *sqlite.DB {
	t.Helper()
	db, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "baton.db"), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// hookEnv is a baton webhook side wired as serve wires it — ledger,
// receiver on a real HTTP server, dispatcher, installations registry —
// and the simulator delivering to it.
type hookEnv struct {
	t       *testing.T
	db      *sqlite.DB
	ledger  *DeliveryLedger
	recv    *WebhookReceiver
	disp    *EventDispatcher
	inst    *Installations
	srv     *httptest.Server
	sim     *ghsim.Sim
	clients *executor.GitHubClients
	tr      *http.Transport

	changedMu sync.Mutex
	changed   []int64 // OnChange calls
}

type hookEnvOptions struct {
	// handlers are subscribed besides the installations registry.
	handlers map[string]EventHandler
	// dispatcher tweaks the dispatcher's config.
	dispatcher func(*EventDispatcherConfig)
	// noDispatcher leaves the dispatcher unstarted.
	noDispatcher bool
	// noSeed leaves "GitHub" empty.
	noSeed bool
	// before shapes "GitHub" before its webhooks reach baton.
	before func(*ghsim.Sim)
}

func newHookEnv(t *testing.T, o hookEnvOptions) *hookEnv {
	t.Helper()
	e := &hookEnv{t: t, db: openHookDB(t, sqlite.Options{}), tr: &http.Transport{MaxIdleConnsPerHost: 32}}
	t.Cleanup(e.tr.CloseIdleConnections)
	var err error
	if e.ledger, err = NewDeliveryLedger(e.db, nil); err != nil {
		t.Fatal(err)
	}
	sim, err := ghsim.New(ghsim.Config{PrivateKey: hookAppKey(), WebhookSecret: "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	e.sim = sim
	if err := sim.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := sim.Close(); err != nil {
			t.Errorf("close simulator: %v", err)
		}
	})
	if e.clients, err = executor.NewGitHubClients(executor.GitHubConfig{
		BaseURL: sim.URL(), AppID: sim.AppID(), PrivateKey: sim.PrivateKeyPEM(), Transport: e.tr,
	}); err != nil {
		t.Fatal(err)
	}
	log := zaptest.NewLogger(t)
	replay := func(ctx context.Context, id string) error { return e.disp.Replay(ctx, id) } // e.disp is made below
	if e.recv, err = NewWebhookReceiver(WebhookConfig{Ledger: e.ledger, Secret: "s3cret", Replay: replay, Logger: log}); err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/webhooks/github", specCheckedHook(t, e.recv))
	e.srv = httptest.NewServer(mux)
	t.Cleanup(e.srv.Close)
	// Before the receiver closes (cleanups run last first), the
	// simulator's deliveries still in flight are let finish: one the close
	// cut short would fail specCheckedHook's read of its body.
	t.Cleanup(func() {
		sim.SetWebhook("", "")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := sim.WaitDeliveries(ctx); err != nil {
			t.Errorf("the simulator's deliveries did not end: %v", err)
		}
	})

	if e.inst, err = NewInstallations(InstallationsConfig{
		DB: e.db, App: e.clients.App(), Installation: e.clients.Installation, Logger: log,
		OnChange: func(id int64) {
			e.changedMu.Lock()
			e.changed = append(e.changed, id)
			e.changedMu.Unlock()
			e.clients.Forget(id)
		},
	}); err != nil {
		t.Fatal(err)
	}
	dcfg := EventDispatcherConfig{Ledger: e.ledger, Logger: log, RetryBase: 5 * time.Millisecond, RetryMax: 50 * time.Millisecond}
	if o.dispatcher != nil {
		o.dispatcher(&dcfg)
	}
	if e.disp, err = NewEventDispatcher(dcfg); err != nil {
		t.Fatal(err)
	}
	if err := e.disp.Subscribe("installations", e.inst); err != nil {
		t.Fatal(err)
	}
	for name, h := range o.handlers {
		if err := e.disp.Subscribe(name, h); err != nil {
			t.Fatal(err)
		}
	}
	if !o.noDispatcher {
		e.startDispatcher()
	}
	if !o.noSeed {
		if err := sim.SeedDemo(); err != nil {
			t.Fatal(err)
		}
	}
	if o.before != nil {
		o.before(sim)
	}
	sim.SetWebhook(e.srv.URL+"/webhooks/github", "")
	return e
}

// specCheckedHook serves h and fails t unless every exchange matches the
// OpenAPI description of POST /webhooks/github, so that the simulator's
// deliveries, shaped and signed as GitHub's, are checked against it too.
// It reads the whole body before h does, outside h's in-flight budget
// (TestWebhookInFlightBudget tests that budget without it).
func specCheckedHook(t testing.TB, h http.Handler) http.Handler {
	spec := loadAPISpec(t)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("read a webhook body: %v", err)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		maps.Copy(w.Header(), rec.Header())
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
		if err := spec.check(r, body, rec.Code, rec.Header(), rec.Body.Bytes()); err != nil {
			t.Errorf("OpenAPI: %v", err)
		}
	})
}

func (e *hookEnv) startDispatcher() {
	e.t.Helper()
	if err := e.disp.Start(context.Background()); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := e.disp.Stop(ctx); err != nil {
			e.t.Errorf("stop dispatcher: %v", err)
		}
	})
}

func (e *hookEnv) changes() []int64 {
	e.changedMu.Lock()
	defer e.changedMu.Unlock()
	return append([]int64(nil), e.changed...)
}

// post sends a delivery to the receiver, signed with secret ("" leaves the
// signature out).
func (e *hookEnv) post(secret, event, id string, body []byte) *http.Response {
	e.t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.srv.URL+"/webhooks/github", bytes.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-GitHub-Event", event)
	req.Header.Set("X-GitHub-Delivery", id)
	if secret != "" {
		req.Header.Set("X-Hub-Signature-256", webhookSignature(secret, body))
	}
	resp, err := (&http.Client{Transport: e.tr, Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

// waitDeliveries waits until the simulator has attempted every delivery it
// queued.
func (e *hookEnv) waitDeliveries(ctx context.Context) {
	e.t.Helper()
	if err := e.sim.WaitDeliveries(ctx); err != nil {
		e.t.Fatal(err)
	}
}

// waitSettled waits until the ledger has no pending delivery.
func (e *hookEnv) waitSettled(ctx context.Context) {
	e.t.Helper()
	e.waitDeliveries(ctx)
	hookEventually(e.t, ctx, "every delivery handled", func() bool {
		pending, err := e.ledger.List(ctx, DeliveryFilter{State: DeliveryPending, Limit: 1})
		return err == nil && len(pending) == 0
	})
}

// hookEventually polls cond every few milliseconds until it holds or ctx ends.
func hookEventually(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-tick.C:
		}
	}
}

// ledgerAll returns every delivery of the ledger, oldest first.
func ledgerAll(t *testing.T, ctx context.Context, l *DeliveryLedger) []DeliveryRecord {
	t.Helper()
	var all []DeliveryRecord
	before := int64(0)
	for {
		page, err := l.List(ctx, DeliveryFilter{Before: before, Limit: 500})
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, page...)
		if len(page) < 500 {
			break
		}
		before = page[len(page)-1].Seq
	}
	for i, j := 0, len(all)-1; i < j; i, j = i+1, j-1 {
		all[i], all[j] = all[j], all[i]
	}
	return all
}

// addAcme installs the App on a second account, acme (installation 2), in
// the simulator and has the registry learn it.
func (e *hookEnv) addAcme(t *testing.T, ctx context.Context) {
	t.Helper()
	if err := e.sim.AddInstallation(2, "acme"); err != nil {
		t.Fatal(err)
	}
	e.waitSettled(ctx)
	if err := e.inst.Resync(ctx); err != nil {
		t.Fatal(err)
	}
}

// simRepoID is the simulator's ID of repository full ("owner/name").
func (e *hookEnv) simRepoID(t *testing.T, full string) int64 {
	t.Helper()
	for _, r := range e.sim.Repos() {
		if r.FullName == full {
			return r.ID
		}
	}
	t.Fatalf("the simulator has no repository %s", full)
	return 0
}
