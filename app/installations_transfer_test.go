package app

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
)

// repository.transferred is sent to the installation of the account the
// repository moved to (only there: GitHub does not tell the old one), with
// the repository under its new name. The registry then has it in that
// installation, and no longer under its old name.
func TestInstallationsFollowATransferredRepository(t *testing.T) {
	t.Parallel()
	e := newHookEnv(t, hookEnvOptions{})
	ctx := hookCtx(t)
	if err := e.sim.AddInstallation(2, "acme"); err != nil {
		t.Fatal(err)
	}
	e.waitSettled(ctx)
	if err := e.inst.Resync(ctx); err != nil {
		t.Fatal(err)
	}
	post := repositoryEventPoster(t, ctx, e)
	post("t-1", "created", "octo", "before", 1, nil)
	post("t-1b", "renamed", "octo", "moving", 1, map[string]any{"repository": map[string]any{"name": map[string]any{"from": "before"}}})
	wantInstallationOf(t, ctx, e.inst, "octo", "moving", 1, "")
	wantInstallationOf(t, ctx, e.inst, "octo", "before", 1, "")
	old, err := e.inst.Installation(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	post("t-2", "transferred", "acme", "moving", 2, map[string]any{"owner": map[string]any{"from": map[string]any{
		"organization": map[string]any{"login": "octo", "id": 9201}}}})
	wantInstallationOf(t, ctx, e.inst, "acme", "moving", 2, "")
	// The old names were octo's: they are not carried to acme's
	// installation.
	wantInstallationOf(t, ctx, e.inst, "octo", "moving", 0, "baton is not installed on octo/moving")
	wantInstallationOf(t, ctx, e.inst, "octo", "before", 0, "baton is not installed on octo/before")
	// The installation that lost it is marked changed: a resync that read
	// GitHub before the event must not put the old name back.
	if now, err := e.inst.Installation(ctx, 1); err != nil || !now.UpdatedAt.After(old.UpdatedAt) {
		t.Errorf("installation 1 updated at %v, before the transfer %v (%v)", now.UpdatedAt, old.UpdatedAt, err)
	}
	if rec, _ := e.ledger.Get(ctx, "t-2"); rec.State != DeliveryHandled {
		t.Errorf("t-2: %+v", rec)
	}
}

// repositoryEventPoster returns a function that posts a signed repository
// event for repository 9101 (the fields GitHub sends, taken from a real
// delivery of the simulator) and waits for it to be handled.
func repositoryEventPoster(t *testing.T, ctx context.Context, e *hookEnv) func(id, action, owner, name string, installation float64, changes map[string]any) {
	t.Helper()
	if _, err := e.sim.AddComment("octo", "demo", 10, "hello", ""); err != nil {
		t.Fatal(err)
	}
	e.waitSettled(ctx)
	base := lastSimPayload(t, e.sim, "issue_comment")
	return func(id, action, owner, name string, installation float64, changes map[string]any) {
		t.Helper()
		repo := map[string]any{}
		for k, v := range base["repository"].(map[string]any) {
			repo[k] = v
		}
		repo["full_name"], repo["name"], repo["id"] = owner+"/"+name, name, float64(9101)
		repo["owner"] = map[string]any{"login": owner, "id": 9200 + installation, "type": "Organization"}
		p := map[string]any{"action": action, "repository": repo, "sender": base["sender"],
			"installation": map[string]any{"id": installation, "node_id": "MDIzOkludGVncmF0aW9uSW5zdGFsbGF0aW9uMQ=="}}
		if changes != nil {
			p["changes"] = changes
		}
		body, _ := json.Marshal(p)
		if resp := e.post("s3cret", "repository", id, body); resp.StatusCode != http.StatusAccepted {
			t.Fatalf("post %s: %d", id, resp.StatusCode)
		}
		e.waitSettled(ctx)
	}
}

// A repository transferred to an installation baton does not know yet
// (its installation event is still to come) leaves the installation that
// had it at once; the resync adds it to the new one later.
func TestInstallationsTransferToAnUnknownInstallation(t *testing.T) {
	t.Parallel()
	e := newHookEnv(t, hookEnvOptions{})
	ctx := hookCtx(t)
	e.waitSettled(ctx)
	if err := e.inst.Resync(ctx); err != nil {
		t.Fatal(err)
	}
	post := repositoryEventPoster(t, ctx, e)
	post("u-1", "created", "octo", "moving", 1, nil)
	wantInstallationOf(t, ctx, e.inst, "octo", "moving", 1, "")
	post("u-2", "transferred", "acme", "moving", 77, nil)
	wantInstallationOf(t, ctx, e.inst, "octo", "moving", 0, "baton is not installed on octo/moving")
	if rec, _ := e.ledger.Get(ctx, "u-2"); rec.State != DeliveryHandled {
		t.Errorf("u-2: %+v", rec)
	}
}

// A transferred event delivered late (the repository has come back since,
// or a failed delivery redelivered) does not take the repository from the
// installation GitHub lists it in now, known receiving installation or
// not.
func TestInstallationsLateTransferKeepsTheRepository(t *testing.T) {
	t.Parallel()
	e := newHookEnv(t, hookEnvOptions{})
	ctx := hookCtx(t)
	if err := e.sim.AddInstallation(2, "acme"); err != nil {
		t.Fatal(err)
	}
	e.waitSettled(ctx)
	if err := e.inst.Resync(ctx); err != nil {
		t.Fatal(err)
	}
	var demoID int64
	for _, r := range e.sim.Repos() {
		if r.FullName == "octo/demo" {
			demoID = r.ID
		}
	}
	if _, err := e.sim.AddComment("octo", "demo", 10, "hello", ""); err != nil {
		t.Fatal(err)
	}
	e.waitSettled(ctx)
	base := lastSimPayload(t, e.sim, "issue_comment")
	for i, installation := range []float64{77, 2} {
		repo := map[string]any{}
		for k, v := range base["repository"].(map[string]any) {
			repo[k] = v
		}
		repo["full_name"], repo["name"], repo["id"] = "acme/demo", "demo", float64(demoID)
		repo["owner"] = map[string]any{"login": "acme", "id": 9300, "type": "Organization"}
		body, _ := json.Marshal(map[string]any{"action": "transferred", "repository": repo, "sender": base["sender"],
			"installation": map[string]any{"id": installation, "node_id": "MDIzOkludGVncmF0aW9uSW5zdGFsbGF0aW9uMQ=="},
			"changes":      map[string]any{"owner": map[string]any{"from": map[string]any{"organization": map[string]any{"login": "octo", "id": 9201}}}}})
		id := "late-transfer-" + string(rune('a'+i))
		if resp := e.post("s3cret", "repository", id, body); resp.StatusCode != http.StatusAccepted {
			t.Fatalf("post %s: %d", id, resp.StatusCode)
		}
		e.waitSettled(ctx)
		if rec, _ := e.ledger.Get(ctx, id); rec.State != DeliveryHandled {
			t.Errorf("%s: %+v", id, rec)
		}
		// GitHub lists octo/demo in installation 1: it stays there.
		wantInstallationOf(t, ctx, e.inst, "octo", "demo", 1, "")
	}
}

// A transferred event delivered late keeps the repository's former names
// too: they lead to the installation that has it under the same owner,
// even while another installation has it too (a late event to a known
// installation adds it there on the event's word until the resync).
func TestInstallationsLateTransferKeepsFormerNames(t *testing.T) {
	t.Parallel()
	e := newHookEnv(t, hookEnvOptions{})
	ctx := hookCtx(t)
	if err := e.sim.AddInstallation(2, "acme"); err != nil {
		t.Fatal(err)
	}
	e.waitSettled(ctx)
	if err := e.inst.Resync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.sim.RenameRepo("octo", "demo", "renamed", ""); err != nil {
		t.Fatal(err)
	}
	if err := e.inst.Resync(ctx); err != nil {
		t.Fatal(err)
	}
	wantInstallationOf(t, ctx, e.inst, "octo", "demo", 1, "")
	var id int64
	for _, r := range e.sim.Repos() {
		if r.FullName == "octo/renamed" {
			id = r.ID
		}
	}
	if _, err := e.sim.AddComment("octo", "renamed", 10, "hello", ""); err != nil {
		t.Fatal(err)
	}
	e.waitSettled(ctx)
	base := lastSimPayload(t, e.sim, "issue_comment")
	for _, installation := range []float64{77, 2} {
		repo := map[string]any{}
		for k, v := range base["repository"].(map[string]any) {
			repo[k] = v
		}
		repo["full_name"], repo["name"], repo["id"] = "acme/renamed", "renamed", float64(id)
		repo["owner"] = map[string]any{"login": "acme", "id": 9300, "type": "Organization"}
		body, _ := json.Marshal(map[string]any{"action": "transferred", "repository": repo, "sender": base["sender"],
			"installation": map[string]any{"id": installation, "node_id": "MDIzOkludGVncmF0aW9uSW5zdGFsbGF0aW9uMg=="}})
		delivery := fmt.Sprintf("late-transfer-%v", installation)
		if resp := e.post("s3cret", "repository", delivery, body); resp.StatusCode != http.StatusAccepted {
			t.Fatalf("post %s: %d", delivery, resp.StatusCode)
		}
		e.waitSettled(ctx)
		wantInstallationOf(t, ctx, e.inst, "octo", "renamed", 1, "")
		wantInstallationOf(t, ctx, e.inst, "octo", "demo", 1, "")
	}
}
