package app

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-github/v62/github"

	"github.com/baton-dev/baton/app/ghsim"
	"github.com/baton-dev/baton/internal/sqlite"
)

type staleRT func(*http.Request) (*http.Response, error)

func (f staleRT) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// onListInstallations makes in's App client call fn once, right after
// GitHub answered the resync's GET /app/installations: a webhook handled
// between the resync's snapshot and its writes.
func onListInstallations(e *hookEnv, in *Installations, fn func()) {
	base := e.clients.App().Client().Transport
	var once sync.Once
	app := github.NewClient(&http.Client{Transport: staleRT(func(r *http.Request) (*http.Response, error) {
		resp, err := base.RoundTrip(r)
		if err == nil && r.Method == "GET" && strings.HasSuffix(r.URL.Path, "/app/installations") {
			once.Do(fn)
		}
		return resp, err
	})})
	app.BaseURL = e.clients.App().BaseURL
	in.cfg.App = app
}

func newSleepyEnv(t *testing.T) (*hookEnv, context.Context, *Installations) {
	e := newHookEnv(t, hookEnvOptions{noDispatcher: true, before: func(sim *ghsim.Sim) {
		if err := sim.AddInstallation(3, "sleepy"); err != nil {
			t.Fatal(err)
		}
		if _, err := sim.AddRepo("sleepy", "zzz", 3); err != nil {
			t.Fatal(err)
		}
	}})
	ctx, in := hookCtx(t), e.inst
	if err := in.Resync(ctx); err != nil {
		t.Fatal(err)
	}
	return e, ctx, in
}

// An unsuspend handled while a resync runs is not undone by the resync's
// older snapshot (which said suspended).
func TestResyncDoesNotOverwriteNewerUnsuspend(t *testing.T) {
	t.Parallel()
	e, ctx, in := newSleepyEnv(t)
	if err := e.sim.SuspendInstallation(3, true); err != nil {
		t.Fatal(err)
	}
	if err := in.Resync(ctx); err != nil {
		t.Fatal(err)
	}
	wantInstallationOf(t, ctx, in, "sleepy", "zzz", 0, "installation 3 is suspended")
	onListInstallations(e, in, func() {
		if err := e.sim.SuspendInstallation(3, false); err != nil {
			t.Error(err)
		}
		p := `{"action":"unsuspend","installation":{"id":3,"account":{"login":"sleepy","type":"User"},"permissions":{},"events":[],"suspended_at":null}}`
		if err := in.HandleEvent(ctx, Delivery{ID: "u", Event: "installation", Action: "unsuspend", Payload: []byte(p)}); err != nil {
			t.Error(err)
		}
	})
	if err := in.Resync(ctx); err != nil {
		t.Errorf("resync: %v", err)
	}
	wantInstallationOf(t, ctx, in, "sleepy", "zzz", 3, "")
}

// A suspend handled while a resync runs is not undone by the resync's
// older snapshot (which said not suspended), and the resync does not ask
// for the repositories of the installation, now suspended.
func TestResyncDoesNotOverwriteNewerSuspend(t *testing.T) {
	t.Parallel()
	e, ctx, in := newSleepyEnv(t)
	onListInstallations(e, in, func() {
		if err := e.sim.SuspendInstallation(3, true); err != nil {
			t.Error(err)
		}
		p := `{"action":"suspend","installation":{"id":3,"account":{"login":"sleepy","type":"User"},"permissions":{},"events":[],"suspended_at":"2026-11-30T10:00:00Z"}}`
		if err := in.HandleEvent(ctx, Delivery{ID: "s", Event: "installation", Action: "suspend", Payload: []byte(p)}); err != nil {
			t.Error(err)
		}
	})
	if err := in.Resync(ctx); err != nil {
		t.Errorf("resync: %v", err)
	}
	wantInstallationOf(t, ctx, in, "sleepy", "zzz", 0, "installation 3 is suspended")
}

// A removal handled while a resync runs is not undone by the resync's
// older snapshot (which listed the installation).
func TestResyncDoesNotUndoNewerDeletion(t *testing.T) {
	t.Parallel()
	e, ctx, in := newSleepyEnv(t)
	onListInstallations(e, in, func() {
		if err := e.sim.DeleteInstallation(3); err != nil {
			t.Error(err)
		}
		p := `{"action":"deleted","installation":{"id":3,"account":{"login":"sleepy","type":"User"},"permissions":{},"events":[]}}`
		if err := in.HandleEvent(ctx, Delivery{ID: "d", Event: "installation", Action: "deleted", Payload: []byte(p)}); err != nil {
			t.Error(err)
		}
	})
	// The removed installation's repositories are not asked for (GitHub
	// would refuse): the resync succeeds.
	if err := in.Resync(ctx); err != nil {
		t.Errorf("resync: %v", err)
	}
	wantInstallationOf(t, ctx, in, "sleepy", "zzz", 0, "baton is not installed on sleepy/zzz")
	var ue *InstallationUnavailableError
	if _, err := in.Installation(ctx, 3); !errors.As(err, &ue) || ue.Reason != "deleted" {
		t.Errorf("Installation(3) after the resync: %v; want removed", err)
	}
}

// A late copy of a suspend (redelivered after the unsuspend that followed
// it) leaves the installation as GitHub has it: unsuspended.
func TestStaleSuspendAfterUnsuspend(t *testing.T) {
	t.Parallel()
	e := newHookEnv(t, hookEnvOptions{noDispatcher: true, noSeed: true, before: func(sim *ghsim.Sim) {
		// GitHub now: installation 7 on o, not suspended, granting o/r.
		if err := sim.AddInstallation(7, "o"); err != nil {
			t.Fatal(err)
		}
		if _, err := sim.AddRepo("o", "r", 7); err != nil {
			t.Fatal(err)
		}
	}})
	ctx, in := hookCtx(t), e.inst
	ev := func(id, action, inst string, extra string) {
		p := `{"action":"` + action + `","installation":{"id":7,"account":{"login":"o","type":"User"},"permissions":{},"events":[]` + inst + `}` + extra + `}`
		if err := in.HandleEvent(ctx, Delivery{ID: id, Event: "installation", Action: action, Payload: []byte(p)}); err != nil {
			t.Fatal(err)
		}
	}
	ev("a", "created", ``, `,"repositories":[{"id":1,"full_name":"o/r"}]`)
	ev("b", "unsuspend", `,"suspended_at":null,"updated_at":"2026-11-30T11:00:00Z"`, ``)
	ev("c", "suspend", `,"suspended_at":"2026-11-30T10:00:00Z","updated_at":"2026-11-30T10:00:00Z"`, ``) // late redelivery
	wantInstallationOf(t, ctx, in, "o", "r", 7, "")
}

// A late copy of installation_repositories.removed does not take away a
// repository GitHub grants again.
func TestStaleRepositoriesRemoved(t *testing.T) {
	t.Parallel()
	_, ctx, in := newSleepyEnv(t)
	p := `{"action":"removed","installation":{"id":3,"account":{"login":"sleepy","type":"Organization"},"permissions":{},"events":[]},` +
		`"repository_selection":"selected","repositories_added":[],"repositories_removed":[{"id":1,"full_name":"sleepy/zzz"}]}`
	if err := in.HandleEvent(ctx, Delivery{ID: "late", Event: "installation_repositories", Action: "removed", Payload: []byte(p)}); err != nil {
		t.Fatal(err)
	}
	wantInstallationOf(t, ctx, in, "sleepy", "zzz", 3, "")
}

// installation_target.renamed as GitHub sends it when the account of an
// installation is renamed.
func installationTargetRenamed(id int64, from, to string) Delivery {
	p := `{"action":"renamed","account":{"login":"` + to + `","id":90,"node_id":"O_90","avatar_url":"https://avatars.githubusercontent.com/u/90",` +
		`"html_url":"https://github.com/` + to + `","type":"Organization"},"changes":{"login":{"from":"` + from + `"},"slug":{"from":"` + from + `"}},` +
		`"installation":{"id":` + strconv.FormatInt(id, 10) + `,"node_id":"MDIzOkludGVncmF0aW9uSW5zdGFsbGF0aW9u"},"target_type":"Organization",` +
		`"sender":{"login":"octocat","id":1,"type":"User"}}`
	return Delivery{ID: "rename-" + to, Event: "installation_target", Action: "renamed", Payload: []byte(p)}
}

// The account was renamed: with an App client the registry reads the
// installation again, and its repositories are known by their new names.
func TestInstallationTargetRenamedResyncs(t *testing.T) {
	t.Parallel()
	e := newHookEnv(t, hookEnvOptions{noDispatcher: true, noSeed: true, before: func(sim *ghsim.Sim) {
		// GitHub after the rename.
		if err := sim.AddInstallation(3, "neworg"); err != nil {
			t.Fatal(err)
		}
		if _, err := sim.AddRepo("neworg", "zzz", 3); err != nil {
			t.Fatal(err)
		}
	}})
	ctx, in := hookCtx(t), e.inst
	if err := in.Resync(ctx); err != nil {
		t.Fatal(err)
	}
	// The registry as it was before the rename.
	if err := in.write(ctx, func(tx *sqlite.Tx) error {
		if _, err := tx.Exec(`UPDATE installations SET account = 'oldorg' WHERE id = 3`); err != nil {
			return err
		}
		_, err := tx.Exec(`UPDATE installation_repositories SET name_key = 'oldorg/zzz', full_name = 'oldorg/zzz' WHERE installation_id = 3`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	wantInstallationOf(t, ctx, in, "oldorg", "zzz", 3, "")
	if err := in.HandleEvent(ctx, installationTargetRenamed(3, "oldorg", "neworg")); err != nil {
		t.Fatal(err)
	}
	wantInstallationOf(t, ctx, in, "neworg", "zzz", 3, "")
	wantInstallationOf(t, ctx, in, "oldorg", "zzz", 0, "baton is not installed on oldorg/zzz")
	if inst, err := in.Installation(ctx, 3); err != nil || inst.Account != "neworg" {
		t.Errorf("Installation(3) = %+v, %v; want account neworg", inst, err)
	}
}

// Without an App client, the registry renames the account and the owner
// of its repositories as the event says.
func TestInstallationTargetRenamedWithoutApp(t *testing.T) {
	t.Parallel()
	ctx := hookCtx(t)
	in, err := NewInstallations(InstallationsConfig{DB: openHookDB(t, sqlite.Options{})})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(in.Events(), ","), "installation_target") {
		t.Errorf("Events() = %v: installation_target not followed", in.Events())
	}
	created := `{"action":"created","installation":{"id":4,"account":{"login":"OldOrg","type":"Organization"},"permissions":{},"events":[]},` +
		`"repositories":[{"id":11,"full_name":"OldOrg/a"},{"id":12,"full_name":"OldOrg/b"}]}`
	if err := in.HandleEvent(ctx, Delivery{ID: "c", Event: "installation", Action: "created", Payload: []byte(created)}); err != nil {
		t.Fatal(err)
	}
	if err := in.HandleEvent(ctx, installationTargetRenamed(4, "OldOrg", "NewOrg")); err != nil {
		t.Fatal(err)
	}
	wantInstallationOf(t, ctx, in, "neworg", "a", 4, "")
	wantInstallationOf(t, ctx, in, "NewOrg", "b", 4, "")
	wantInstallationOf(t, ctx, in, "oldorg", "a", 0, "baton is not installed on oldorg/a")
	inst, err := in.Installation(ctx, 4)
	if err != nil || inst.Account != "NewOrg" || strings.Join(inst.Repositories, ",") != "NewOrg/a,NewOrg/b" {
		t.Errorf("Installation(4) = %+v, %v", inst, err)
	}
	// A late copy of a rename from a login the account no longer has
	// changes nothing.
	if err := in.HandleEvent(ctx, installationTargetRenamed(4, "Elsewhere", "Other")); err != nil {
		t.Fatal(err)
	}
	wantInstallationOf(t, ctx, in, "neworg", "a", 4, "")
}

// A call to GitHub that stalls ends at CallTimeout: an installation event
// handled under the registry's lock fails (and is retried by the
// dispatcher) instead of holding every other installation event.
func TestInstallationCallsTimeOut(t *testing.T) {
	t.Parallel()
	e, ctx, in := newSleepyEnv(t)
	if _, err := e.sim.SetFault(ghsim.Fault{Route: "GET /app/installations/{id}", Kind: ghsim.FaultLatency, Latency: time.Minute}); err != nil {
		t.Fatal(err)
	}
	in.cfg.CallTimeout = 200 * time.Millisecond
	p := `{"action":"unsuspend","installation":{"id":3,"account":{"login":"sleepy","type":"User"},"permissions":{},"events":[],"suspended_at":null}}`
	start := time.Now()
	err := in.HandleEvent(ctx, Delivery{ID: "stalled", Event: "installation", Action: "unsuspend", Payload: []byte(p)})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("event with GitHub stalled: %v, want the call's deadline", err)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("the event took %s with a 200ms call timeout", d)
	}
}
