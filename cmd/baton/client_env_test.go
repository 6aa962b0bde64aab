package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/app"
	"github.com/baton-dev/baton/app/client"
	"github.com/baton-dev/baton/coordinator"
	"github.com/baton-dev/baton/executor"
	"github.com/baton-dev/baton/internal/sqlite"
	"github.com/baton-dev/baton/queue"
	"github.com/baton-dev/baton/schema"
)

// cliEnv is an API server on real parts (SQLite, the embedded queue, the
// executor's store, the lease coordinator on a fake clock) for the client
// subcommands to talk to.
type cliEnv struct {
	URL     string
	dataDir string
	db      *sqlite.DB
	store   *executor.SQLiteStore
	broker  *queue.Broker
	coord   *coordinator.Coordinator
	clock   *coordinator.FakeClock
	tokens  *app.TokenStore

	admin, alice, bob string
}

type cliEnvOptions struct {
	// complete runs queued operations to success, standing in for the
	// executor's worker.
	complete bool
	// poison fails every operation's message, so that it is
	// dead-lettered at its first failure.
	poison bool
}

// cliInstallations: octo/* is installation 1, the only repositories baton
// may act on; ListInstallations (client_test.go) also lists acme (7),
// suspended, whose repositories InstallationOf refuses.
type cliInstallations struct{}

func (cliInstallations) InstallationOf(_ context.Context, owner, repo string) (int64, error) {
	if owner == "octo" {
		return 1, nil
	}
	return 0, schema.Errorf(schema.CodeForbidden, "baton is not installed on %s/%s", owner, repo)
}

func newCLIEnv(t *testing.T, o cliEnvOptions) *cliEnv {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	db, err := sqlite.Open(ctx, filepath.Join(dir, tokenDatabaseFile), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	env := &cliEnv{dataDir: dir, db: db}
	env.broker, err = queue.New(queue.Config{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := env.broker.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = env.broker.Stop(ctx)
	})
	env.store = executor.NewSQLiteStore(db, nil)
	exec, err := executor.New(executor.Config{Store: env.store, Dispatcher: env.broker})
	if err != nil {
		t.Fatal(err)
	}
	if err := exec.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = exec.Stop(context.Background()) })
	if o.complete {
		c, err := queue.NewConsumer(env.broker, queue.ConsumerConfig{FetchWait: 100 * time.Millisecond,
			Handler: func(ctx context.Context, id string) queue.Result {
				if err := cliCompleteOperation(ctx, env.store, id); err != nil {
					return queue.Failed(err)
				}
				return queue.Done()
			}})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if o.poison {
		c, err := queue.NewConsumer(env.broker, queue.ConsumerConfig{FetchWait: 100 * time.Millisecond, MaxFailures: 1,
			Handler: func(context.Context, string) queue.Result { return queue.Failed(errors.New("store unavailable")) }})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
	}
	env.clock = coordinator.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	env.coord, err = coordinator.New(coordinator.Config{DB: db, Clock: env.clock})
	if err != nil {
		t.Fatal(err)
	}
	leases, err := app.NewCoordinatorLeases(env.coord)
	if err != nil {
		t.Fatal(err)
	}
	env.tokens, err = app.NewTokenStore(db, app.TokenStoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tk := range []struct {
		dst  *string
		spec app.TokenSpec
	}{
		{&env.admin, app.TokenSpec{Actor: "root", Admin: true}},
		{&env.alice, app.TokenSpec{Actor: "alice", Installations: []int64{1}}},
		{&env.bob, app.TokenSpec{Actor: "bob", Installations: []int64{1}}},
	} {
		if *tk.dst, _, err = env.tokens.CreateToken(ctx, tk.spec); err != nil {
			t.Fatal(err)
		}
	}
	api, err := app.NewAPI(app.APIConfig{
		Operations: exec, Leases: leases, DeadLetters: env.broker, Installations: cliInstallations{},
		Tokens: env.tokens, WaitPollInterval: 10 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	env.URL = srv.URL
	return env
}

// cliCompleteOperation runs a queued operation to success in the store, the
// way the executor would after a successful call to GitHub.
func cliCompleteOperation(ctx context.Context, store *executor.SQLiteStore, id string) error {
	rec, err := store.Get(ctx, id)
	if err != nil || rec.Terminal() {
		return err
	}
	now := time.Now().UTC()
	rec.Status, rec.StartedAt, rec.UpdatedAt = schema.StatusRunning, &now, now
	if err := store.Save(ctx, &rec); err != nil {
		return err
	}
	end := time.Now().UTC()
	rec.Status, rec.Outcome, rec.CompletedAt, rec.UpdatedAt, rec.Attempts = schema.StatusSucceeded, schema.OutcomeSucceeded, &end, end, 1
	return store.Save(ctx, &rec)
}

// apiClient returns a Go client of the env's server.
func (e *cliEnv) apiClient(t *testing.T, token string) *client.Client {
	t.Helper()
	c, err := client.New(e.URL, client.WithToken(token))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// cliResult is what one run of the CLI printed and returned.
type cliResult struct {
	stdout, stderr string
	code           int
}

// cliRun runs baton in this process with args, the way main does.
func cliRun(t *testing.T, stdin string, args ...string) cliResult {
	t.Helper()
	root := newRootCmd()
	// Locked: `lease run` writes its messages while the copy of its
	// guard's output (exec's goroutine) writes to the same stderr.
	var out, errb cliLockedBuffer
	root.SetOut(&out)
	root.SetErr(&errb)
	root.SetIn(strings.NewReader(stdin))
	root.SetArgs(args)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := root.ExecuteContext(ctx)
	code := 0
	if err != nil {
		code = 1
		var ee *exitError
		if errors.As(err, &ee) {
			code = ee.code
		}
		_, _ = errb.Write([]byte("baton: " + err.Error() + "\n"))
	}
	return cliResult{stdout: out.String(), stderr: errb.String(), code: code}
}

// as runs the CLI as the holder of token against the env.
func (e *cliEnv) as(t *testing.T, token string, args ...string) cliResult {
	t.Helper()
	return cliRun(t, "", append(args, "--server", e.URL, "--token", token)...)
}

func cliDecodeJSON(t *testing.T, s string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(s), v); err != nil {
		t.Fatalf("decode %q: %v", s, err)
	}
}
