package ghsim

import (
	"maps"
	"net/http"
	"testing"

	"github.com/google/go-github/v62/github"
)

func TestGetRepo(t *testing.T) {
	t.Parallel()
	e := seeded(t, Config{})
	if _, err := e.sim.AddRepo("acme", "widgets", 2); err != nil {
		t.Fatal(err)
	}
	c := ctx(t)
	cl := e.client(1)

	repo, _, err := cl.Repositories.Get(c, "octo", "demo")
	if err != nil {
		t.Fatal(err)
	}
	if repo.GetFullName() != "octo/demo" || repo.GetName() != "demo" || repo.GetOwner().GetLogin() != "octo" ||
		repo.GetDefaultBranch() != "main" || repo.GetVisibility() != "public" || repo.GetPrivate() {
		t.Errorf("GET /repos/octo/demo = %v", repo)
	}
	if repo.GetOrganization().GetLogin() != "octo" {
		t.Errorf("organization = %v, want octo", repo.GetOrganization())
	}
	// The demo installation's token may push and write issues and pull
	// requests, but administration is read only.
	if want := map[string]bool{"pull": true, "triage": true, "push": true, "maintain": false, "admin": false}; !maps.Equal(repo.GetPermissions(), want) {
		t.Errorf("permissions = %v, want %v", repo.GetPermissions(), want)
	}

	// The repository is the one /installation/repositories lists.
	listed, _, err := cl.Apps.ListRepos(c, nil)
	if err != nil || len(listed.Repositories) != 1 {
		t.Fatalf("GET /installation/repositories = %v, %v", listed, err)
	}
	l := listed.Repositories[0]
	if repo.GetID() != l.GetID() || repo.GetNodeID() != l.GetNodeID() || repo.GetURL() != l.GetURL() ||
		repo.GetHTMLURL() != l.GetHTMLURL() || !repo.GetCreatedAt().Equal(l.GetCreatedAt()) {
		t.Errorf("GET /repos/octo/demo = %v, /installation/repositories lists %v", repo, l)
	}

	// Names are case-insensitive; the answer spells them as GitHub does.
	if r, _, err := cl.Repositories.Get(c, "OCTO", "Demo"); err != nil || r.GetFullName() != "octo/demo" {
		t.Errorf("GET /repos/OCTO/Demo = %v, %v", r, err)
	}

	// A narrowed token says what it may do.
	tok, _, err := e.appClient().Apps.CreateInstallationToken(c, 1, &github.InstallationTokenOptions{
		Permissions: &github.InstallationPermissions{Metadata: ptr("read")},
	})
	if err != nil {
		t.Fatal(err)
	}
	narrow := e.gh(&tokenTransport{base: e.validating(), token: tok.GetToken()})
	if r, _, err := narrow.Repositories.Get(c, "octo", "demo"); err != nil ||
		!maps.Equal(r.GetPermissions(), map[string]bool{"pull": true, "triage": false, "push": false, "maintain": false, "admin": false}) {
		t.Errorf("metadata-only token: GET /repos/octo/demo = %v, %v", r.GetPermissions(), err)
	}

	// A repository of another installation, one that does not exist, and
	// one the App lost access to are all 404.
	_, _, err = cl.Repositories.Get(c, "acme", "widgets")
	wantStatus(t, err, http.StatusNotFound)
	if _, _, err := e.client(2).Repositories.Get(c, "acme", "widgets"); err != nil {
		t.Errorf("installation 2: GET /repos/acme/widgets: %v", err)
	}
	_, _, err = cl.Repositories.Get(c, "octo", "nope")
	wantStatus(t, err, http.StatusNotFound)
	if err := e.sim.RemoveRepo("octo", "demo"); err != nil {
		t.Fatal(err)
	}
	_, _, err = cl.Repositories.Get(c, "octo", "demo")
	wantStatus(t, err, http.StatusNotFound)
}
