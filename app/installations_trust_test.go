package app

import (
	"encoding/json"
	"errors"
	"net/http"
	"testing"
)

// A signed installation or installation_repositories event about an
// installation GitHub does not know (a replayed body of an installation
// removed since, or one never installed) grants nothing: the repository
// stays with the installation GitHub lists it in, and no installation is
// recorded on the event's word. Only what takes away is applied.
func TestInstallationEventsOfAnInstallationGitHubDoesNotKnowGrantNothing(t *testing.T) {
	t.Parallel()
	e := newHookEnv(t, hookEnvOptions{})
	ctx := hookCtx(t)
	e.waitSettled(ctx)
	if err := e.inst.Resync(ctx); err != nil {
		t.Fatal(err)
	}
	wantInstallationOf(t, ctx, e.inst, "octo", "demo", 1, "")
	post := func(event, id string, p map[string]any) {
		t.Helper()
		body, _ := json.Marshal(p)
		if resp := e.post("s3cret", event, id, body); resp.StatusCode != http.StatusAccepted {
			t.Fatalf("post %s: %d", id, resp.StatusCode)
		}
		e.waitSettled(ctx)
		if rec, _ := e.ledger.Get(ctx, id); rec.State != DeliveryHandled {
			t.Errorf("%s: %+v", id, rec)
		}
	}
	repo := map[string]any{"id": 1, "full_name": "octo/demo"}
	inst := map[string]any{"id": 999, "account": map[string]any{"id": 9201, "login": "octo", "type": "Organization"},
		"repository_selection": "selected", "permissions": map[string]any{"contents": "write"}}
	post("installation_repositories", "forged-added", map[string]any{"action": "added", "installation": inst,
		"repository_selection": "selected", "repositories_added": []any{repo}, "repositories_removed": []any{}})
	wantInstallationOf(t, ctx, e.inst, "octo", "demo", 1, "")
	post("installation", "forged-created", map[string]any{"action": "created", "installation": inst, "repositories": []any{repo}})
	wantInstallationOf(t, ctx, e.inst, "octo", "demo", 1, "")
	post("installation", "forged-unsuspend", map[string]any{"action": "unsuspend", "installation": inst})
	if got, err := e.inst.Installation(ctx, 999); err == nil {
		t.Errorf("installation 999, unknown to GitHub, recorded: %+v", got)
	}
	// A removal is applied all the same: it grants nothing. (Installation
	// 98 is recorded as sent by a registry without an App client.)
	asSent, err := NewInstallations(InstallationsConfig{DB: e.db})
	if err != nil {
		t.Fatal(err)
	}
	gone := `{"action":"created","installation":{"id":98,"account":{"login":"gone","type":"User"}},"repositories":[{"id":7,"full_name":"gone/x"},{"id":8,"full_name":"gone/y"}]}`
	if err := asSent.HandleEvent(ctx, Delivery{ID: "x", Event: "installation", Action: "created", Payload: []byte(gone)}); err != nil {
		t.Fatal(err)
	}
	post("installation_repositories", "removed-98", map[string]any{"action": "removed", "installation": map[string]any{"id": 98},
		"repository_selection": "selected", "repositories_added": []any{map[string]any{"id": 1, "full_name": "octo/demo"}},
		"repositories_removed": []any{map[string]any{"id": 7, "full_name": "gone/x"}}})
	wantInstallationOf(t, ctx, e.inst, "gone", "x", 0, "baton is not installed on gone/x")
	wantInstallationOf(t, ctx, e.inst, "gone", "y", 98, "")
	wantInstallationOf(t, ctx, e.inst, "octo", "demo", 1, "")
	post("installation", "forged-deleted", map[string]any{"action": "deleted", "installation": inst})
	if _, err := e.inst.Installation(ctx, 999); !errors.Is(err, ErrInstallationUnavailable) {
		t.Errorf("installation 999 after deleted: %v", err)
	}
	wantInstallationOf(t, ctx, e.inst, "octo", "demo", 1, "")
}

// A signed repository event naming a repository of another account than
// its installation's (GitHub sends an installation only events about its
// own account's repositories) does not move the repository there.
func TestRepositoryEventsOfAnotherAccountMoveNothing(t *testing.T) {
	t.Parallel()
	e := newHookEnv(t, hookEnvOptions{})
	ctx := hookCtx(t)
	e.addAcme(t, ctx)
	demoID := e.simRepoID(t, "octo/demo")
	post := repositoryEvents(t, ctx, e, "octo", "demo")
	for _, action := range []string{"created", "renamed", "transferred"} {
		var changes map[string]any
		if action == "renamed" {
			changes = renamedFrom("old")
		}
		post("other-account-"+action, action, "octo/demo", demoID, 2, changes)
		wantInstallationOf(t, ctx, e.inst, "octo", "demo", 1, "")
		if rec, _ := e.ledger.Get(ctx, "other-account-"+action); rec.State != DeliveryHandled {
			t.Errorf("%s: %+v", action, rec)
		}
	}
	post("other-account-deleted", "deleted", "octo/demo", demoID, 2, nil)
	wantInstallationOf(t, ctx, e.inst, "octo", "demo", 1, "")
	// Its own account's repositories it follows as before.
	post("own-created", "created", "acme/fresh", 9301, 2, nil)
	wantInstallationOf(t, ctx, e.inst, "acme", "fresh", 2, "")
}

// A signed installation deleted event about an installation GitHub still
// has (a body sent again, or not GitHub's) does not remove it: the
// registry records GitHub's state of it instead. One GitHub no longer
// has is removed.
func TestInstallationDeletedIsCheckedWithGitHub(t *testing.T) {
	t.Parallel()
	e := newHookEnv(t, hookEnvOptions{})
	ctx := hookCtx(t)
	e.addAcme(t, ctx)
	body, _ := json.Marshal(map[string]any{"action": "deleted", "installation": map[string]any{"id": 1,
		"account": map[string]any{"id": 9201, "login": "octo", "type": "Organization"}}})
	if resp := e.post("s3cret", "installation", "deleted-1", body); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("post: %d", resp.StatusCode)
	}
	e.waitSettled(ctx)
	wantInstallationOf(t, ctx, e.inst, "octo", "demo", 1, "")
	if _, err := e.inst.Installation(ctx, 1); err != nil {
		t.Errorf("installation 1: %v", err)
	}
	// Events about it are followed still.
	if _, err := e.sim.AddRepo("octo", "later", 1); err != nil {
		t.Fatal(err)
	}
	e.waitSettled(ctx)
	wantInstallationOf(t, ctx, e.inst, "octo", "later", 1, "")
	// Removed on GitHub, it is removed.
	if err := e.sim.DeleteInstallation(2); err != nil {
		t.Fatal(err)
	}
	e.waitSettled(ctx)
	if _, err := e.inst.Installation(ctx, 2); !errors.Is(err, ErrInstallationUnavailable) {
		t.Errorf("installation 2 after GitHub removed it: %v", err)
	}
}
