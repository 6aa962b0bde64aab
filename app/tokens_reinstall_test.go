package app

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/baton-dev/baton/app/client"
	"github.com/baton-dev/baton/app/ghsim"
	"github.com/baton-dev/baton/schema"
)

// reinstallEnv is a server running as the App of a standalone simulator
// seeded with the demo data (octo/demo in installation 1 of account octo),
// its webhooks delivered to the server.
type reinstallEnv struct {
	t   *testing.T
	sim *ghsim.Sim
	srv *Server
}

func newReinstallEnv(t *testing.T) *reinstallEnv {
	t.Helper()
	sim := startDemoSim(t, ghsim.Config{Limits: ghsim.Limits{PrimaryLimit: -1}})
	srv := startServer(t, Config{GitHubURL: sim.URL(), AppID: sim.AppID(), PrivateKey: sim.PrivateKeyPEM(),
		WebhookSecret: sim.WebhookSecret()})
	sim.SetWebhook(srv.URL()+"/webhooks/github", sim.WebhookSecret())
	e := &reinstallEnv{t: t, sim: sim, srv: srv}
	e.waitInstallation("octo", "demo", 1)
	return e
}

// waitInstallation waits until the server's registry resolves owner/name
// to installation want (0: to no installation).
func (e *reinstallEnv) waitInstallation(owner, name string, want int64) {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		id, err := e.srv.installs.InstallationOf(context.Background(), owner, name)
		if (want == 0 && err != nil) || (want != 0 && err == nil && id == want) {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%s/%s resolves to installation %d (%v), want %d", owner, name, id, err, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// reinstallDemo uninstalls the App from octo (installation 1) and installs
// it again as installation 7, with octo/demo, and waits until the server
// resolves octo/demo to each in turn.
func (e *reinstallEnv) reinstallDemo() {
	e.t.Helper()
	if err := e.sim.DeleteInstallation(1); err != nil {
		e.t.Fatal(err)
	}
	e.waitInstallation("octo", "demo", 0)
	if err := e.sim.AddInstallation(7, "octo"); err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.sim.AddRepo("octo", "demo", 7); err != nil {
		e.t.Fatal(err)
	}
	e.waitInstallation("octo", "demo", 7)
}

func (e *reinstallEnv) client(spec TokenSpec) *client.Client {
	e.t.Helper()
	token, _, err := e.srv.Tokens().CreateToken(context.Background(), spec)
	if err != nil {
		e.t.Fatal(err)
	}
	c, err := client.New(e.srv.URL(), client.WithToken(token))
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

// comment submits a comment on issue 10 of repo with c.
func (e *reinstallEnv) comment(c *client.Client, key, repo string) (client.Operation, error) {
	op, _, err := c.Submit(context.Background(), client.SubmitRequest{IdempotencyKey: key, Action: schema.ActionComment,
		Resource: schema.Resource{Type: "issue", ID: repo + "#10"}, Payload: json.RawMessage(`{"body":"hello"}`)})
	return op, err
}

func wantForbidden(t *testing.T, what string, err error) {
	t.Helper()
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != http.StatusForbidden || ce.Code != "forbidden" {
		t.Errorf("%s: %v, want 403 forbidden", what, err)
	}
}

// The App is uninstalled from an account and installed again: GitHub gives
// the new installation another ID. A token bound to the first installation
// goes on acting on the account's repositories (its binding follows the
// account), as an operator who re-installed the App expects of every CI
// secret made with it.
func TestTokenFollowsAccountAcrossReinstall(t *testing.T) {
	t.Parallel()
	e := newReinstallEnv(t)
	if _, err := e.sim.AddRepo("acme", "site", 3); err != nil {
		t.Fatal(err)
	}
	e.waitInstallation("acme", "site", 3)
	ci := e.client(TokenSpec{Actor: "ci", Installations: []int64{1}})
	acme := e.client(TokenSpec{Actor: "ci", Installations: []int64{3}})
	before, err := e.comment(ci, "before", "octo/demo")
	if err != nil || before.InstallationID != 1 {
		t.Fatalf("submit before the reinstall: %+v %v", before, err)
	}
	_, err = e.comment(ci, "acme-before", "acme/site")
	wantForbidden(t, "octo's token on acme/site", err)

	e.reinstallDemo()

	op, err := e.comment(ci, "after", "octo/demo")
	if err != nil || op.InstallationID != 7 {
		t.Fatalf("submit after the reinstall with the token of installation 1: %+v %v", op, err)
	}
	done, err := ci.Wait(context.Background(), op.OperationID, 20*time.Second)
	if err != nil || done.Status != schema.StatusSucceeded {
		t.Fatalf("operation after the reinstall: %+v %v", done, err)
	}

	// The token sees the account's operations and installations of before
	// and after; a token made for the new installation, those of before.
	ctx := context.Background()
	list, err := ci.List(ctx, client.ListOptions{})
	if err != nil || len(list.Operations) != 2 {
		t.Errorf("the token of installation 1 lists %+v, %v; want both operations", list.Operations, err)
	}
	if ins, err := ci.Installations(ctx); err != nil || len(ins) != 1 || ins[0].ID != 7 {
		t.Errorf("the token of installation 1 sees installations %+v, %v; want 7", ins, err)
	}
	ci7 := e.client(TokenSpec{Actor: "ci", Installations: []int64{7}})
	if got, err := ci7.Get(ctx, before.OperationID); err != nil || got.InstallationID != 1 {
		t.Errorf("the token of installation 7 reads the operation of installation 1: %+v %v", got, err)
	}

	// Another account stays out of reach, both ways.
	_, err = e.comment(ci, "acme-after", "acme/site")
	wantForbidden(t, "octo's token on acme/site after the reinstall", err)
	_, err = e.comment(acme, "octo-after", "octo/demo")
	wantForbidden(t, "acme's token on octo/demo after the reinstall", err)
	if _, err := acme.Get(ctx, before.OperationID); err == nil {
		t.Error("acme's token of the same actor reads octo's operation")
	}
	if ins, err := acme.Installations(ctx); err != nil || len(ins) != 1 || ins[0].ID != 3 {
		t.Errorf("acme's token sees installations %+v, %v; want 3", ins, err)
	}
}

// writeVersion6DB writes, at path, a database as baton left it before it
// recorded installations' account IDs (schema version 6): installation 1
// of octo with octo/demo, installation 5 of octo removed, and a token
// bound to each. It returns the tokens.
func writeVersion6DB(t *testing.T, path string) (tok1, tok5 string) {
	t.Helper()
	ms, err := schema.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := db.Exec(q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	exec(`CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)`)
	for _, m := range ms {
		if m.Version > 6 {
			break
		}
		exec(m.SQL)
		exec(`INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, 0)`, m.Version, m.Name)
	}
	now := time.Now().UnixMicro()
	exec(`INSERT INTO installations (id, account, account_type, updated_at) VALUES (1, 'octo', 'Organization', ?)`, now)
	exec(`INSERT INTO installations (id, account, account_type, deleted_at, updated_at) VALUES (5, 'octo', 'Organization', ?, ?)`, now, now)
	exec(`INSERT INTO installation_repositories (name_key, full_name, installation_id) VALUES ('octo/demo', 'octo/demo', 1)`)
	for i, id := range []int64{1, 5} {
		plain := TokenPrefix + base64.RawURLEncoding.EncodeToString(bytes.Repeat([]byte{byte(i + 1)}, tokenRandomBytes))
		hash := sha256.Sum256([]byte(plain))
		exec(`INSERT INTO api_tokens (hash, actor, installations, created_at) VALUES (?, 'ci', ?, ?)`, hash[:], "["+strconv.FormatInt(id, 10)+"]", now)
		if id == 1 {
			tok1 = plain
		} else {
			tok5 = plain
		}
	}
	return tok1, tok5
}

// A token made before baton recorded account IDs works as it did after
// the upgrade, and, once the registry has read its installation's account
// from GitHub (the resync at start), follows the account across a
// reinstall. One bound to an installation removed before the upgrade
// stays bound by its ID alone: nobody can tell its account any more.
func TestTokenFromBeforeAccountIDsAfterUpgrade(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tok1, tok5 := writeVersion6DB(t, filepath.Join(dir, DatabaseFile))
	sim := startDemoSim(t, ghsim.Config{Limits: ghsim.Limits{PrimaryLimit: -1}})
	srv := startServer(t, Config{DataDir: dir, GitHubURL: sim.URL(), AppID: sim.AppID(), PrivateKey: sim.PrivateKeyPEM(),
		WebhookSecret: sim.WebhookSecret()})
	sim.SetWebhook(srv.URL()+"/webhooks/github", sim.WebhookSecret())
	e := &reinstallEnv{t: t, sim: sim, srv: srv}
	c1, _ := client.New(srv.URL(), client.WithToken(tok1))
	c5, _ := client.New(srv.URL(), client.WithToken(tok5))

	if op, err := e.comment(c1, "old-1", "octo/demo"); err != nil || op.InstallationID != 1 {
		t.Fatalf("the old token of installation 1 after the upgrade: %+v %v", op, err)
	}
	_, err := e.comment(c5, "old-5", "octo/demo")
	wantForbidden(t, "the old token of removed installation 5", err)

	// The resync at start recorded installation 1's account.
	deadline := time.Now().Add(10 * time.Second)
	for {
		toks, err := srv.Tokens().ListTokens(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(toks[0].Accounts) == 1 && toks[0].Accounts[0].Login == "octo" && len(toks[1].Accounts) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("tokens' accounts: %+v", toks)
		}
		time.Sleep(20 * time.Millisecond)
	}

	if err := sim.DeleteInstallation(1); err != nil {
		t.Fatal(err)
	}
	e.waitInstallation("octo", "demo", 0)
	if _, err := sim.AddRepo("octo", "demo", 7); err != nil {
		t.Fatal(err)
	}
	e.waitInstallation("octo", "demo", 7)
	if op, err := e.comment(c1, "old-1-after", "octo/demo"); err != nil || op.InstallationID != 7 {
		t.Fatalf("the old token of installation 1 after a reinstall: %+v %v", op, err)
	}
	_, err = e.comment(c5, "old-5-after", "octo/demo")
	wantForbidden(t, "the old token of removed installation 5 after a reinstall", err)
}
