package app

import (
	"fmt"
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
	e.addAcme(t, ctx)
	post := repositoryEvents(t, ctx, e, "octo", "demo")
	post("t-1", "created", "octo/before", 9101, 1, nil)
	post("t-1b", "renamed", "octo/moving", 9101, 1, renamedFrom("before"))
	wantInstallationOf(t, ctx, e.inst, "octo", "moving", 1, "")
	wantInstallationOf(t, ctx, e.inst, "octo", "before", 1, "")
	old, err := e.inst.Installation(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	post("t-2", "transferred", "acme/moving", 9101, 2, map[string]any{"owner": map[string]any{"from": map[string]any{
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
	post := repositoryEvents(t, ctx, e, "octo", "demo")
	post("u-1", "created", "octo/moving", 9101, 1, nil)
	wantInstallationOf(t, ctx, e.inst, "octo", "moving", 1, "")
	post("u-2", "transferred", "acme/moving", 9101, 77, nil)
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
	e.addAcme(t, ctx)
	demoID := e.simRepoID(t, "octo/demo")
	post := repositoryEvents(t, ctx, e, "octo", "demo")
	for i, installation := range []int64{77, 2} {
		id := "late-transfer-" + string(rune('a'+i))
		post(id, "transferred", "acme/demo", demoID, installation,
			map[string]any{"owner": map[string]any{"from": map[string]any{"organization": map[string]any{"login": "octo", "id": 9201}}}})
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
	e.addAcme(t, ctx)
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
	post := repositoryEvents(t, ctx, e, "octo", "renamed")
	for _, installation := range []int64{77, 2} {
		post(fmt.Sprintf("late-transfer-%v", installation), "transferred", "acme/renamed", id, installation, nil)
		wantInstallationOf(t, ctx, e.inst, "octo", "renamed", 1, "")
		wantInstallationOf(t, ctx, e.inst, "octo", "demo", 1, "")
	}
}
