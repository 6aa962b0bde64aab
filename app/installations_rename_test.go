package app

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/app/client"
	"github.com/baton-dev/baton/schema"
)

// After GitHub renames a repository (repository.renamed), an automation
// that still uses the old name keeps working, as it does against GitHub,
// which redirects the old name: its operation resolves to the repository's
// installation, and the call lands on the repository.
func TestRenamedRepositoryOldNameStillRuns(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv := startServer(t, Config{Dev: true, DataDir: dir})
	sim := srv.Simulator()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var dev DevInfo
	if b, err := os.ReadFile(filepath.Join(dir, DevFile)); err != nil || json.Unmarshal(b, &dev) != nil {
		t.Fatalf("dev.json: %v", err)
	}
	c, err := client.New(dev.Server, client.WithToken(dev.Token))
	if err != nil {
		t.Fatal(err)
	}
	var demoID int64
	for _, r := range sim.Repos() {
		if r.FullName == "octo/demo" {
			demoID = r.ID
		}
	}
	if err := sim.RenameRepo("octo", "demo", "renamed", ""); err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(map[string]any{
		"action":       "renamed",
		"changes":      map[string]any{"repository": map[string]any{"name": map[string]any{"from": "demo"}}},
		"repository":   map[string]any{"id": demoID, "name": "renamed", "full_name": "octo/renamed", "owner": map[string]any{"login": "octo", "type": "Organization"}},
		"installation": map[string]any{"id": 1},
		"sender":       map[string]any{"login": "monalisa", "id": 1, "type": "User"},
	})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL()+"/webhooks/github", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-GitHub-Event", "repository")
	req.Header.Set("X-GitHub-Delivery", "rename-1")
	req.Header.Set("X-Hub-Signature-256", webhookSignature(sim.WebhookSecret(), body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("repository.renamed: %d", resp.StatusCode)
	}
	for {
		ins, err := c.Installations(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(ins) == 1 && slices.Equal(ins[0].Repositories, []string{"octo/renamed"}) {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the registry never learnt of the rename: %+v", ins)
		}
		time.Sleep(20 * time.Millisecond)
	}

	submit := func(key, id, text string) {
		t.Helper()
		op, _, err := c.Submit(ctx, client.SubmitRequest{IdempotencyKey: key, Action: schema.ActionComment,
			Resource: schema.Resource{Type: "issue", ID: id}, Payload: json.RawMessage(`{"body":"` + text + `"}`)})
		if err != nil {
			t.Fatalf("submit on %s: %v", id, err)
		}
		done, err := c.Wait(ctx, op.OperationID, 20*time.Second)
		if err != nil || done.Status != schema.StatusSucceeded || done.InstallationID != 1 {
			t.Fatalf("operation on %s: %+v %v", id, done, err)
		}
	}
	submit("old-name", "octo/demo#10", "under the old name")
	submit("new-name", "octo/renamed#10", "under the new name")
	// A token bound to the repository's installation may use the old
	// name; one bound to another installation may not.
	for inst, wantOK := range map[int64]bool{1: true, 2: false} {
		tok, _, err := srv.Tokens().CreateToken(ctx, TokenSpec{Actor: "automation", Installations: []int64{inst}})
		if err != nil {
			t.Fatal(err)
		}
		bound, err := client.New(dev.Server, client.WithToken(tok))
		if err != nil {
			t.Fatal(err)
		}
		_, _, err = bound.Submit(ctx, client.SubmitRequest{IdempotencyKey: fmt.Sprintf("bound-%d", inst), Action: schema.ActionComment,
			Resource: schema.Resource{Type: "issue", ID: "octo/demo#10"}, Payload: json.RawMessage(`{"body":"bound"}`)})
		if (err == nil) != wantOK {
			t.Errorf("token bound to installation %d, under the old name: %v", inst, err)
		}
	}
	is, err := sim.Issue("octo", "renamed", 10)
	if err != nil {
		t.Fatal(err)
	}
	var bodies []string
	for _, cm := range is.Comments {
		text, _, _ := strings.Cut(cm.Body, "\n")
		bodies = append(bodies, text)
	}
	if !slices.Contains(bodies, "under the old name") || !slices.Contains(bodies, "under the new name") {
		t.Errorf("comments of octo/renamed#10 = %q", bodies)
	}

	// The merge queue keeps its state per repository name: it knows the
	// repository by its name now only, and leaves a queue under the old
	// name alone rather than work it through the redirect beside the new
	// name's.
	if _, err := c.Queue(ctx, "octo", "renamed"); err != nil {
		t.Errorf("queue of octo/renamed: %v", err)
	}
	if _, err := c.Queue(ctx, "octo", "demo"); err == nil || !strings.Contains(err.Error(), "not installed on octo/demo") {
		t.Errorf("queue of octo/demo after the rename: %v, want not installed", err)
	}
	if _, err := srv.installs.CurrentNames().InstallationOf(ctx, "octo", "demo"); schema.ErrorCode(err) != schema.CodeForbidden {
		t.Errorf("CurrentNames().InstallationOf(octo/demo) = %v, want forbidden", err)
	}

	// The hourly resync keeps the old name: GitHub still redirects it.
	if err := srv.installs.Resync(ctx); err != nil {
		t.Fatal(err)
	}
	if id, err := srv.installs.InstallationOf(ctx, "octo", "demo"); err != nil || id != 1 {
		t.Errorf("octo/demo after a resync: %d, %v", id, err)
	}
	// Once another repository takes the name, GitHub no longer redirects
	// it, and the name is that repository's.
	if _, err := sim.AddRepo("octo", "demo", 7); err != nil {
		t.Fatal(err)
	}
	for {
		id, err := srv.installs.InstallationOf(ctx, "octo", "demo")
		if err == nil && id == 7 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("octo/demo after a new repository took the name: %d, %v", id, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A rename whose webhook was missed is found by the resync (the repository
// is listed under another name with the same ID), and the old name is kept
// as an alias all the same. The alias ends with the repository's stay in
// the installation, and is not carried to another account.
func TestInstallationsRenameAliasesFromResync(t *testing.T) {
	t.Parallel()
	e := newHookEnv(t, hookEnvOptions{})
	ctx := hookCtx(t)
	if err := e.inst.Resync(ctx); err != nil {
		t.Fatal(err)
	}
	wantInstallationOf(t, ctx, e.inst, "octo", "demo", 1, "")
	// The simulator does not send repository events to this App: the
	// rename's webhook is as good as missed.
	if err := e.sim.RenameRepo("octo", "demo", "renamed", ""); err != nil {
		t.Fatal(err)
	}
	if err := e.inst.Resync(ctx); err != nil {
		t.Fatal(err)
	}
	wantInstallationOf(t, ctx, e.inst, "octo", "renamed", 1, "")
	wantInstallationOf(t, ctx, e.inst, "OCTO", "Demo", 1, "")
	if inst, err := e.inst.Installation(ctx, 1); err != nil || !slices.Equal(inst.Repositories, []string{"octo/renamed"}) {
		t.Errorf("installation 1 = %+v, %v; the alias is not one of its repositories", inst, err)
	}
	// Renamed again: both former names lead to it.
	if err := e.sim.RenameRepo("octo", "renamed", "third", ""); err != nil {
		t.Fatal(err)
	}
	if err := e.inst.Resync(ctx); err != nil {
		t.Fatal(err)
	}
	wantInstallationOf(t, ctx, e.inst, "octo", "demo", 1, "")
	wantInstallationOf(t, ctx, e.inst, "octo", "renamed", 1, "")
	wantInstallationOf(t, ctx, e.inst, "octo", "third", 1, "")

	// The repository leaves the installation: its names with it.
	if err := e.sim.RemoveRepo("octo", "third"); err != nil {
		t.Fatal(err)
	}
	e.waitSettled(ctx)
	for _, name := range []string{"demo", "renamed", "third"} {
		wantInstallationOf(t, ctx, e.inst, "octo", name, 0, "baton is not installed on octo/"+name)
	}
	// And coming back under its name now brings back none of the old.
	if _, err := e.sim.AddRepo("octo", "third", 1); err != nil {
		t.Fatal(err)
	}
	e.waitSettled(ctx)
	wantInstallationOf(t, ctx, e.inst, "octo", "third", 1, "")
	wantInstallationOf(t, ctx, e.inst, "octo", "demo", 0, "baton is not installed on octo/demo")
}

// GitHub does not deliver in order: a repository created under a name
// that another repository of the installation gave up can arrive before
// that repository's rename. The rename then takes nothing from the new
// repository.
func TestInstallationsRenameAfterTheNameWasTaken(t *testing.T) {
	t.Parallel()
	e := newHookEnv(t, hookEnvOptions{})
	ctx := hookCtx(t)
	if err := e.inst.Resync(ctx); err != nil {
		t.Fatal(err)
	}
	post := repositoryEvents(t, ctx, e, "octo", "demo")
	post("n-1", "created", "octo/fresh", 9001, 1, nil)
	post("n-2", "created", "octo/fresh", 9003, 1, nil)                    // took the name: delivered before…
	post("n-3", "renamed", "octo/renamed", 9001, 1, renamedFrom("fresh")) // …the rename that freed it
	inst, err := e.inst.Installation(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"octo/demo", "octo/fresh", "octo/renamed"}; !slices.Equal(inst.Repositories, want) {
		t.Errorf("repositories = %q, want %q", inst.Repositories, want)
	}
	var id int64
	if err := e.db.QueryRow(ctx, `SELECT repository_id FROM installation_repositories WHERE name_key = 'octo/fresh'`).Scan(&id); err != nil || id != 9003 {
		t.Errorf("octo/fresh is repository %d (%v), want 9003", id, err)
	}

	// Likewise a repository deleted and another created under its name at
	// once, the creation delivered first: the deletion takes nothing from
	// the new repository.
	post("n-4", "created", "octo/again", 9005, 1, nil)
	post("n-5", "created", "octo/again", 9007, 1, nil) // delivered before…
	post("n-6", "deleted", "octo/again", 9005, 1, nil) // …the deletion of the one before
	wantInstallationOf(t, ctx, e.inst, "octo", "again", 1, "")
	if err := e.db.QueryRow(ctx, `SELECT repository_id FROM installation_repositories WHERE name_key = 'octo/again'`).Scan(&id); err != nil || id != 9007 {
		t.Errorf("octo/again is repository %d (%v), want 9007", id, err)
	}
}

// A rename delivered late (after a later rename of the same repository)
// does not take the repository's name now from the registry: both names
// of the late event are former names, and stay aliases.
func TestInstallationsRenameDeliveredLate(t *testing.T) {
	t.Parallel()
	e := newHookEnv(t, hookEnvOptions{})
	ctx := hookCtx(t)
	if err := e.inst.Resync(ctx); err != nil {
		t.Fatal(err)
	}
	post := repositoryEvents(t, ctx, e, "octo", "demo")
	r, err := e.sim.AddRepo("octo", "first", 1)
	if err != nil {
		t.Fatal(err)
	}
	e.waitSettled(ctx)
	wantInstallationOf(t, ctx, e.inst, "octo", "first", 1, "")
	// Renamed twice on GitHub; the simulator sends this App no repository
	// events, so they are posted here, the second one first.
	for _, n := range [][2]string{{"first", "second"}, {"second", "third"}} {
		if err := e.sim.RenameRepo("octo", n[0], n[1], ""); err != nil {
			t.Fatal(err)
		}
	}
	post("l-3", "renamed", "octo/third", r.ID, 1, renamedFrom("second")) // delivered before…
	post("l-2", "renamed", "octo/second", r.ID, 1, renamedFrom("first")) // …the rename before it
	inst, err := e.inst.Installation(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"octo/demo", "octo/third"}; !slices.Equal(inst.Repositories, want) {
		t.Errorf("repositories = %q, want %q", inst.Repositories, want)
	}
	for _, name := range []string{"first", "second", "third"} {
		wantInstallationOf(t, ctx, e.inst, "octo", name, 1, "")
	}
	if _, err := e.inst.CurrentNames().InstallationOf(ctx, "octo", "third"); err != nil {
		t.Errorf("CurrentNames().InstallationOf(octo/third) = %v", err)
	}
}
