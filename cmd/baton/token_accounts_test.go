package main

import (
	"context"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/baton-dev/baton/app"
	"github.com/baton-dev/baton/internal/sqlite"
)

// token list shows the GitHub accounts of a token's installations that the
// registry knows (the binding follows them across reinstalls), the login
// the account has now, and none for an installation baton has not heard
// of.
func TestCLITokenListShowsAccounts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	db, err := sqlite.Open(ctx, filepath.Join(dir, tokenDatabaseFile), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	in, err := app.NewInstallations(app.InstallationsConfig{DB: db})
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range []string{
		`{"action":"created","installation":{"id":1,"account":{"id":42,"login":"octo","type":"Organization"},"permissions":{},"events":[]},"repositories":[]}`,
		`{"action":"deleted","installation":{"id":1,"account":{"id":42,"login":"octo","type":"Organization"},"permissions":{},"events":[]}}`,
		`{"action":"created","installation":{"id":5,"account":{"id":42,"login":"octo-renamed","type":"Organization"},"permissions":{},"events":[]},"repositories":[]}`,
	} {
		action := "created"
		if strings.Contains(p, `"deleted"`) {
			action = "deleted"
		}
		if err := in.HandleEvent(ctx, app.Delivery{ID: string(rune('a' + i)), Event: "installation", Action: action, Payload: []byte(p)}); err != nil {
			t.Fatal(err)
		}
	}
	if r := cliRun(t, "", "token", "create", "--actor", "ci", "--installation", "1", "--installation", "9", "--data", dir); r.code != 0 {
		t.Fatalf("token create: %+v", r)
	}
	if r := cliRun(t, "", "token", "create", "--actor", "ops", "--all-installations", "--data", dir); r.code != 0 {
		t.Fatalf("token create: %+v", r)
	}
	if r := cliRun(t, "", "token", "create", "--actor", "new", "--installation", "9", "--data", dir); r.code != 0 {
		t.Fatalf("token create: %+v", r)
	}
	r := cliRun(t, "", "token", "list", "--data", dir)
	if r.code != 0 || !strings.Contains(r.stdout, "ACCOUNTS") || !regexp.MustCompile(`(?m)^1\s+ci\s+no\s+1,9\s+octo-renamed \(42\)\s`).MatchString(r.stdout) ||
		!regexp.MustCompile(`(?m)^2\s+ops\s+no\s+all\s+all\s`).MatchString(r.stdout) ||
		!regexp.MustCompile(`(?m)^3\s+new\s+no\s+9\s+-\s`).MatchString(r.stdout) {
		t.Errorf("token list:\n%s%s", r.stdout, r.stderr)
	}
	r = cliRun(t, "", "token", "list", "--json", "--data", dir)
	var toks []app.Token
	cliDecodeJSON(t, r.stdout, &toks)
	if r.code != 0 || len(toks) != 3 || len(toks[0].Accounts) != 1 || toks[0].Accounts[0] != (app.TokenAccount{ID: 42, Login: "octo-renamed"}) ||
		toks[2].Accounts == nil || len(toks[2].Accounts) != 0 {
		t.Errorf("token list --json: %+v", r)
	}
}
