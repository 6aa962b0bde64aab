package ghsim

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/go-github/v62/github"
)

// A renamed repository keeps its ID and content, and, as on GitHub, the
// REST API redirects its old name to it (301 for reads, 307 for writes,
// which the client repeats with its body) until another repository takes
// the old name.
func TestRenamedRepoRedirects(t *testing.T) {
	t.Parallel()
	e := seeded(t, Config{})
	c := ctx(t)
	cl := e.client(1)
	before, _, err := cl.Repositories.Get(c, "octo", "demo")
	if err != nil {
		t.Fatal(err)
	}
	hooks := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	t.Cleanup(hooks.Close)
	e.sim.SetWebhook(hooks.URL, "")
	// Subscribed to repository events, as baton's App is.
	e.sim.mu.Lock()
	inst := e.sim.installations[1]
	inst.events = append(append([]string(nil), inst.events...), "repository")
	e.sim.mu.Unlock()
	if err := e.sim.RenameRepo("octo", "demo", "renamed", ""); err != nil {
		t.Fatal(err)
	}
	if err := e.sim.RenameRepo("octo", "demo", "again", ""); !errors.Is(err, ErrNotFound) {
		t.Errorf("rename of the old name = %v, want not found", err)
	}
	// The repository's webhook says what it was called.
	var p struct {
		Repository struct {
			ID       int64  `json:"id"`
			FullName string `json:"full_name"`
		} `json:"repository"`
		Changes struct {
			Repository struct {
				Name struct {
					From string `json:"from"`
				} `json:"name"`
			} `json:"repository"`
		} `json:"changes"`
	}
	for deadline := time.Now().Add(10 * time.Second); p.Repository.ID == 0 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for _, d := range e.sim.Deliveries() {
			if d.Event == "repository" && d.Action == "renamed" {
				_ = json.Unmarshal(d.Payload, &p)
			}
		}
	}
	if p.Repository.ID != before.GetID() || p.Repository.FullName != "octo/renamed" || p.Changes.Repository.Name.From != "demo" {
		t.Errorf("repository renamed payload = %+v", p)
	}

	got, _, err := cl.Repositories.Get(c, "octo", "demo")
	if err != nil || got.GetID() != before.GetID() || got.GetFullName() != "octo/renamed" {
		t.Fatalf("GET /repos/octo/demo after the rename = %v, %v", got, err)
	}
	// A write under the old name lands on the repository, body and all.
	if _, _, err := cl.Issues.CreateComment(c, "octo", "demo", 10, &github.IssueComment{Body: github.String("via the old name")}); err != nil {
		t.Fatalf("comment under the old name: %v", err)
	}
	is, err := e.sim.Issue("octo", "renamed", 10)
	if err != nil || len(is.Comments) == 0 || is.Comments[len(is.Comments)-1].Body != "via the old name" {
		t.Fatalf("issue 10 of octo/renamed = %+v, %v", is, err)
	}

	// The redirect itself, as GitHub answers it.
	noFollow := &http.Client{Transport: e.tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	tok, _, err := e.appClient().Apps.CreateInstallationToken(c, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	for method, want := range map[string]int{"GET": http.StatusMovedPermanently, "POST": http.StatusTemporaryRedirect} {
		req, _ := http.NewRequest(method, e.sim.URL()+"/repos/octo/demo/issues/10/comments?per_page=5", nil)
		req.Header.Set("Authorization", "token "+tok.GetToken())
		resp, err := noFollow.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if loc := resp.Header.Get("Location"); resp.StatusCode != want || loc != e.sim.URL()+"/repos/octo/renamed/issues/10/comments?per_page=5" {
			t.Errorf("%s under the old name = %d %q, want %d to octo/renamed", method, resp.StatusCode, loc, want)
		}
	}

	// A new repository under the old name ends the redirect.
	if _, err := e.sim.AddRepo("octo", "demo", 1); err != nil {
		t.Fatal(err)
	}
	if got, _, err := cl.Repositories.Get(c, "octo", "demo"); err != nil || got.GetID() == before.GetID() || got.GetFullName() != "octo/demo" {
		t.Errorf("GET /repos/octo/demo after a new repository took the name = %v, %v", got, err)
	}
}

// A repository renamed while archived says "archived": false once it is
// unarchived: a rename renders its representations again, and the rendering
// of the unarchived form must not keep the state of the moment.
func TestRepoRenamedWhileArchivedUnarchives(t *testing.T) {
	t.Parallel()
	e := seeded(t, Config{})
	c := ctx(t)
	cl := e.client(1)
	if err := e.sim.ArchiveRepo("octo", "demo", true, ""); err != nil {
		t.Fatal(err)
	}
	if err := e.sim.RenameRepo("octo", "demo", "renamed", ""); err != nil {
		t.Fatal(err)
	}
	// A pull request carries the repository as it is now.
	if pr, _, err := cl.PullRequests.Get(c, "octo", "renamed", 1); err != nil || !pr.GetBase().GetRepo().GetArchived() {
		t.Fatalf("pull request's base repository while archived = %v, %v; want archived", pr.GetBase().GetRepo().GetArchived(), err)
	}
	if err := e.sim.ArchiveRepo("octo", "renamed", false, ""); err != nil {
		t.Fatal(err)
	}
	if pr, _, err := cl.PullRequests.Get(c, "octo", "renamed", 1); err != nil || pr.GetBase().GetRepo().GetArchived() {
		t.Errorf("pull request's base repository after unarchiving = archived %v, %v; want not archived", pr.GetBase().GetRepo().GetArchived(), err)
	}
	if _, _, err := cl.Issues.CreateComment(c, "octo", "renamed", 10, &github.IssueComment{Body: github.String("writable again")}); err != nil {
		t.Errorf("comment after unarchiving: %v", err)
	}
}
