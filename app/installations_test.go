package app

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/baton-dev/baton/app/ghsim"
	"github.com/baton-dev/baton/schema"
)

func wantInstallationOf(t *testing.T, ctx context.Context, in *Installations, owner, repo string, want int64, wantMsg string) {
	t.Helper()
	got, err := in.InstallationOf(ctx, owner, repo)
	if wantMsg == "" {
		if err != nil || got != want {
			t.Errorf("InstallationOf(%s/%s) = %d, %v; want %d", owner, repo, got, err, want)
		}
		return
	}
	if schema.ErrorCode(err) != schema.CodeForbidden || schema.PublicMessage(err) != wantMsg || err.Error() != wantMsg {
		t.Errorf("InstallationOf(%s/%s) = %d, %v; want forbidden %q", owner, repo, got, err, wantMsg)
	}
}

// lastSimPayload returns the last event of that kind the simulator
// delivered, to replay it modified (GitHub's shape, from the simulator
// whose payloads are checked against GitHub's description).
func lastSimPayload(t *testing.T, sim *ghsim.Sim, event string) map[string]any {
	t.Helper()
	ds := sim.Deliveries()
	for i := len(ds) - 1; i >= 0; i-- {
		if ds[i].Event == event {
			var m map[string]any
			if err := json.Unmarshal(ds[i].Payload, &m); err != nil {
				t.Fatal(err)
			}
			return m
		}
	}
	t.Fatalf("no %s delivery", event)
	return nil
}

// The installation lifecycle, from the webhooks "GitHub" sends as it
// happens: created, repositories added and removed, suspended and
// unsuspended, permissions accepted, deleted.
func TestInstallationLifecycleFromWebhooks(t *testing.T) {
	t.Parallel()
	e := newHookEnv(t, hookEnvOptions{noSeed: true})
	ctx := hookCtx(t)
	in := e.inst
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}

	must(e.sim.AddInstallation(5, "acme"))
	_, err := e.sim.AddRepo("acme", "widgets", 5)
	must(err)
	_, err = e.sim.AddRepo("acme", "Gadgets", 5)
	must(err)
	e.waitSettled(ctx)
	list, err := in.ListInstallations(ctx)
	must(err)
	if len(list) != 1 {
		t.Fatalf("installations %+v", list)
	}
	got := list[0]
	if got.ID != 5 || got.Account != "acme" || got.AccountType != "Organization" || got.Suspended ||
		!slices.Equal(got.Repositories, []string{"acme/Gadgets", "acme/widgets"}) ||
		got.Permissions["pull_requests"] != "write" || got.Permissions["checks"] != "read" ||
		!slices.Contains(got.Events, "pull_request") || got.UpdatedAt.IsZero() {
		t.Errorf("installation %+v", got)
	}
	wantInstallationOf(t, ctx, in, "acme", "widgets", 5, "")
	wantInstallationOf(t, ctx, in, "ACME", "gadgets", 5, "")
	wantInstallationOf(t, ctx, in, "acme", "nope", 0, "baton is not installed on acme/nope")
	wantInstallationOf(t, ctx, in, "octo", "demo", 0, "baton is not installed on octo/demo")

	must(e.sim.RemoveRepo("acme", "Gadgets"))
	e.waitSettled(ctx)
	wantInstallationOf(t, ctx, in, "acme", "gadgets", 0, "baton is not installed on acme/gadgets")

	must(e.sim.SuspendInstallation(5, true))
	e.waitSettled(ctx)
	wantInstallationOf(t, ctx, in, "acme", "widgets", 0, "installation 5 is suspended")
	_, err = in.InstallationOf(ctx, "acme", "widgets")
	if !errors.Is(err, ErrInstallationUnavailable) {
		t.Errorf("suspended InstallationOf: %v does not match ErrInstallationUnavailable", err)
	}
	inst, err := in.Installation(ctx, 5)
	var ue *InstallationUnavailableError
	if !errors.As(err, &ue) || ue.Reason != "suspended" || !errors.Is(err, ErrInstallationUnavailable) || !inst.Suspended ||
		schema.ErrorCode(err) != schema.CodeForbidden {
		t.Errorf("suspended Installation: %+v, %v", inst, err)
	}
	if !slices.Contains(e.changes(), 5) {
		t.Errorf("OnChange not called on suspension: %v", e.changes())
	}

	must(e.sim.SuspendInstallation(5, false))
	e.waitSettled(ctx)
	wantInstallationOf(t, ctx, in, "acme", "widgets", 5, "")
	if _, err := in.Installation(ctx, 5); err != nil {
		t.Errorf("unsuspended: %v", err)
	}

	// The owner accepts new permissions (GitHub's new_permissions_accepted:
	// the installation event's shape with the new permissions; GitHub
	// holds them, and the registry reads them from there).
	before := len(e.changes())
	simPerms := maps.Clone(e.sim.Installations()[0].Permissions)
	simPerms["members"] = "read"
	must(e.sim.SetInstallationPermissions(5, simPerms))
	p := lastSimPayload(t, e.sim, "installation")
	p["action"] = "new_permissions_accepted"
	instObj := p["installation"].(map[string]any)
	perms := instObj["permissions"].(map[string]any)
	perms["members"] = "read"
	instObj["suspended_at"], instObj["suspended_by"] = nil, nil
	body, _ := json.Marshal(p)
	if resp := e.post("s3cret", "installation", "perm-1", body); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("post: %d", resp.StatusCode)
	}
	e.waitSettled(ctx)
	inst, err = in.Installation(ctx, 5)
	if err != nil || inst.Permissions["members"] != "read" {
		t.Errorf("after new_permissions_accepted: %+v, %v", inst, err)
	}
	if len(e.changes()) != before+1 {
		t.Errorf("OnChange calls %v: want one more for the permissions", e.changes())
	}

	must(e.sim.DeleteInstallation(5))
	e.waitSettled(ctx)
	if list, _ := in.ListInstallations(ctx); len(list) != 0 {
		t.Errorf("after deletion: %+v", list)
	}
	if _, err := in.Installation(ctx, 5); !errors.As(err, &ue) || ue.Reason != "deleted" || !errors.Is(err, ErrInstallationUnavailable) {
		t.Errorf("deleted Installation: %v", err)
	}
	wantInstallationOf(t, ctx, in, "acme", "widgets", 0, "baton is not installed on acme/widgets")

	// A late copy of an older event does not bring it back.
	p = lastSimPayload(t, e.sim, "installation_repositories")
	body, _ = json.Marshal(p)
	if resp := e.post("s3cret", "installation_repositories", "late-1", body); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("post: %d", resp.StatusCode)
	}
	e.waitSettled(ctx)
	if rec, _ := e.ledger.Get(ctx, "late-1"); rec.State != DeliveryHandled {
		t.Errorf("late event: %+v", rec)
	}
	wantInstallationOf(t, ctx, in, "acme", "widgets", 0, "baton is not installed on acme/widgets")
	if _, err := in.Installation(ctx, 5); !errors.Is(err, ErrInstallationUnavailable) {
		t.Errorf("deleted installation back after a late event: %v", err)
	}

	if _, err := in.Installation(ctx, 999); schema.ErrorCode(err) != schema.CodeNotFound {
		t.Errorf("unknown installation: %v", err)
	}
	// Every delivery went through the registry.
	for _, r := range ledgerAll(t, ctx, e.ledger) {
		if r.State != DeliveryHandled || r.Outcome["installations"] != "handled" {
			t.Errorf("delivery %s: %+v", r.ID, r)
		}
	}
}

// The resync rebuilds the registry from GitHub's lists (all pages), skips
// the repositories of suspended installations, and removes what GitHub no
// longer lists.
func TestInstallationsResync(t *testing.T) {
	t.Parallel()
	e := newHookEnv(t, hookEnvOptions{noDispatcher: true, before: func(sim *ghsim.Sim) {
		for _, err := range []error{sim.AddInstallation(2, "acme"), sim.AddInstallation(3, "sleepy")} {
			if err != nil {
				t.Fatal(err)
			}
		}
		for _, name := range []string{"r0", "r1", "r2", "r3", "r4"} {
			if _, err := sim.AddRepo("acme", name, 2); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := sim.AddRepo("sleepy", "zzz", 3); err != nil {
			t.Fatal(err)
		}
		if err := sim.SuspendInstallation(3, true); err != nil {
			t.Fatal(err)
		}
	}})
	ctx := hookCtx(t)
	in := e.inst
	in.pageSize = 2
	// An installation baton heard of that GitHub no longer has (recorded
	// as sent by a registry without an App client: one with it asks
	// GitHub, which does not know it, and records nothing).
	stale := `{"action":"created","installation":{"id":99,"account":{"login":"gone","type":"User"},"permissions":{},"events":[]},"repositories":[{"id":1,"full_name":"gone/repo"}]}`
	asSent, err := NewInstallations(InstallationsConfig{DB: e.db})
	if err != nil {
		t.Fatal(err)
	}
	if err := asSent.HandleEvent(ctx, Delivery{ID: "x", Event: "installation", Action: "created", Payload: []byte(stale)}); err != nil {
		t.Fatal(err)
	}
	wantInstallationOf(t, ctx, in, "gone", "repo", 99, "")

	if err := in.Resync(ctx); err != nil {
		t.Fatal(err)
	}
	list, err := in.ListInstallations(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]int64, 0, len(list))
	for _, i := range list {
		ids = append(ids, i.ID)
	}
	if !slices.Equal(ids, []int64{1, 2, 3}) {
		t.Fatalf("installations %v", ids)
	}
	if !slices.Equal(list[0].Repositories, []string{"octo/demo"}) || list[0].Account != "octo" ||
		len(list[1].Repositories) != 5 || !list[2].Suspended || list[1].Permissions["contents"] != "write" {
		t.Errorf("after resync: %+v", list)
	}
	wantInstallationOf(t, ctx, in, "acme", "r4", 2, "")
	wantInstallationOf(t, ctx, in, "gone", "repo", 0, "baton is not installed on gone/repo")
	if _, err := in.Installation(ctx, 99); !errors.Is(err, ErrInstallationUnavailable) {
		t.Errorf("installation 99: %v", err)
	}
	if !slices.Contains(e.changes(), 99) {
		t.Errorf("OnChange not called for the removed installation: %v", e.changes())
	}

	// A webhook lost (the dispatcher is not running): the next resync
	// repairs it.
	if err := e.sim.RemoveRepo("acme", "r0"); err != nil {
		t.Fatal(err)
	}
	if err := e.sim.SuspendInstallation(3, false); err != nil {
		t.Fatal(err)
	}
	if err := in.Resync(ctx); err != nil {
		t.Fatal(err)
	}
	wantInstallationOf(t, ctx, in, "acme", "r0", 0, "baton is not installed on acme/r0")
	wantInstallationOf(t, ctx, in, "sleepy", "zzz", 3, "")
}

// Start resyncs at once and Stop ends the loop; without an App client the
// registry only follows webhooks.
func TestInstallationsStartStop(t *testing.T) {
	t.Parallel()
	e := newHookEnv(t, hookEnvOptions{noDispatcher: true})
	ctx := hookCtx(t)
	if err := e.inst.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if e.inst.Start(ctx) == nil {
		t.Error("second Start accepted")
	}
	hookEventually(t, ctx, "the first resync", func() bool {
		id, err := e.inst.InstallationOf(ctx, "octo", "demo")
		return err == nil && id == ghsim.DemoInstallationID
	})
	for range 2 {
		if err := e.inst.Stop(ctx); err != nil {
			t.Fatal(err)
		}
	}
	bare, err := NewInstallations(InstallationsConfig{DB: e.db})
	if err != nil {
		t.Fatal(err)
	}
	if err := bare.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if bare.Resync(ctx) == nil {
		t.Error("resync without an App client")
	}
	if err := bare.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := NewInstallations(InstallationsConfig{DB: e.db, App: e.clients.App()}); err == nil {
		t.Error("App without Installation accepted")
	}
}

// A resync that fails (GitHub unreachable at start) is tried again soon,
// not an interval later: a registry left empty would refuse every
// submission ("baton is not installed on ...") for an hour.
func TestInstallationsResyncRetriesAfterFailure(t *testing.T) {
	t.Parallel()
	e := newHookEnv(t, hookEnvOptions{noDispatcher: true})
	ctx := hookCtx(t)
	if _, err := e.sim.SetFault(ghsim.Fault{Route: "GET /app/installations", Kind: ghsim.FaultStatus, Status: 502, Count: 2}); err != nil {
		t.Fatal(err)
	}
	in, err := NewInstallations(InstallationsConfig{DB: e.db, App: e.clients.App(), Installation: e.clients.Installation,
		ResyncRetry: 50 * time.Millisecond, Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer in.Stop(ctx) //nolint:errcheck
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	hookEventually(t, wctx, "a resync after two failed ones", func() bool {
		id, err := in.InstallationOf(ctx, "octo", "demo")
		return err == nil && id == ghsim.DemoInstallationID
	})
	if n := len(e.sim.Faults()); n != 0 {
		t.Errorf("%d faults left: the failed resyncs were not tried again", n)
	}
}

// Repositories created, renamed and deleted in an installation that grants
// every repository arrive as repository events (GitHub sends no
// installation_repositories for them).
func TestInstallationsFollowRepositoryEvents(t *testing.T) {
	t.Parallel()
	e := newHookEnv(t, hookEnvOptions{})
	ctx := hookCtx(t)
	if err := e.inst.Resync(ctx); err != nil {
		t.Fatal(err)
	}
	post := repositoryEvents(t, ctx, e, "octo", "demo")
	post("r-1", "created", "octo/fresh", 9001, 1, nil)
	wantInstallationOf(t, ctx, e.inst, "octo", "fresh", 1, "")
	post("r-2", "renamed", "octo/renamed", 9001, 1, renamedFrom("fresh"))
	wantInstallationOf(t, ctx, e.inst, "octo", "renamed", 1, "")
	// GitHub redirects the old name to the repository: it still resolves.
	wantInstallationOf(t, ctx, e.inst, "octo", "fresh", 1, "")
	post("r-3", "deleted", "octo/renamed", 9001, 1, nil)
	wantInstallationOf(t, ctx, e.inst, "octo", "renamed", 0, "baton is not installed on octo/renamed")
	wantInstallationOf(t, ctx, e.inst, "octo", "fresh", 0, "baton is not installed on octo/fresh")
	post("r-4", "created", "elsewhere/x", 9002, 77, nil) // an installation baton does not know
	wantInstallationOf(t, ctx, e.inst, "elsewhere", "x", 0, "baton is not installed on elsewhere/x")
	wantInstallationOf(t, ctx, e.inst, "octo", "demo", 1, "")
	for _, id := range []string{"r-1", "r-2", "r-3", "r-4"} {
		if rec, _ := e.ledger.Get(ctx, id); rec.State != DeliveryHandled {
			t.Errorf("%s: %+v", id, rec)
		}
	}
}

// repositoryEvents returns a function that posts GitHub's repository event
// (action, repository, installation and, where given, changes) signed to
// the receiver, and waits for it to be handled. The repository object is
// the simulator's, as an event about owner/name carried it, with the
// name, ID and owner's login of the event's repository.
func repositoryEvents(t *testing.T, ctx context.Context, e *hookEnv, owner, name string) func(delivery, action, fullName string, repoID, installation int64, changes map[string]any) {
	t.Helper()
	if _, err := e.sim.AddComment(owner, name, 10, "hello", ""); err != nil {
		t.Fatal(err)
	}
	e.waitSettled(ctx)
	base := lastSimPayload(t, e.sim, "issue_comment")
	return func(delivery, action, fullName string, repoID, installation int64, changes map[string]any) {
		t.Helper()
		repoOwner, repoName, _ := strings.Cut(fullName, "/")
		repo := maps.Clone(base["repository"].(map[string]any))
		repo["full_name"], repo["name"], repo["id"] = fullName, repoName, repoID
		ownerObj := maps.Clone(repo["owner"].(map[string]any))
		ownerObj["login"] = repoOwner
		repo["owner"] = ownerObj
		p := map[string]any{"action": action, "repository": repo, "sender": base["sender"],
			"installation": map[string]any{"id": installation, "node_id": "MDIzOkludGVncmF0aW9uSW5zdGFsbGF0aW9uMQ=="}}
		if changes != nil {
			p["changes"] = changes
		}
		body, _ := json.Marshal(p)
		if resp := e.post("s3cret", "repository", delivery, body); resp.StatusCode != http.StatusAccepted {
			t.Fatalf("post %s: %d", delivery, resp.StatusCode)
		}
		e.waitSettled(ctx)
	}
}

// renamedFrom is a repository renamed event's changes: its former name.
func renamedFrom(name string) map[string]any {
	return map[string]any{"repository": map[string]any{"name": map[string]any{"from": name}}}
}
