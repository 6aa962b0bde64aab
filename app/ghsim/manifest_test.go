package ghsim

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/bradleyfalzon/ghinstallation/v2"
)

// TestManifestFlow plays GitHub's App manifest flow: the form post on the
// "github.com" side, the redirect with a code, the conversion, and the new
// App authenticating with the key it was given.
func TestManifestFlow(t *testing.T) {
	t.Parallel()
	e := seeded(t, Config{})
	rc := newReceiver(e)
	c := ctx(t)

	m, _ := json.Marshal(map[string]any{
		"name": "baton test", "url": "https://baton.example", "redirect_url": "http://127.0.0.1:9/setup/callback",
		"hook_attributes":     map[string]any{"url": rc.srv.URL},
		"default_permissions": map[string]string{"pull_requests": "write", "issues": "write", "contents": "write", "statuses": "write", "checks": "read"},
		"default_events":      []string{"pull_request", "issue_comment"},
	})
	noFollow := &http.Client{Transport: e.tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	page, err := noFollow.Get(e.sim.URL() + "/settings/apps/new")
	if err != nil || page.StatusCode != http.StatusOK || !strings.HasPrefix(page.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("form page = %v, %v", page, err)
	}
	page.Body.Close()
	resp, err := noFollow.PostForm(e.sim.URL()+"/organizations/octo/settings/apps/new?state=s123", url.Values{"manifest": {string(m)}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	loc, _ := url.Parse(resp.Header.Get("Location"))
	if resp.StatusCode != http.StatusFound || loc.Path != "/setup/callback" || loc.Query().Get("state") != "s123" || loc.Query().Get("code") == "" {
		t.Fatalf("redirect = %d %s", resp.StatusCode, loc)
	}
	bad, err := noFollow.PostForm(e.sim.URL()+"/settings/apps/new", url.Values{"manifest": {"{not json"}})
	if err != nil || bad.StatusCode != http.StatusUnprocessableEntity {
		t.Fatalf("bad manifest = %v, %v", bad, err)
	}
	bad.Body.Close()

	code := loc.Query().Get("code")
	cfg, resp2, err := e.anonClient().Apps.CompleteAppManifest(c, code)
	if err != nil || resp2.StatusCode != http.StatusCreated {
		t.Fatalf("conversion = %v, %v", cfg, err)
	}
	if cfg.GetID() == 1 || cfg.GetSlug() != "baton-test" || cfg.GetPEM() == "" || cfg.GetWebhookSecret() == "" || cfg.GetClientSecret() == "" || cfg.GetOwner().GetLogin() != "octo" {
		t.Fatalf("conversion = %+v", cfg)
	}
	_, _, err = e.anonClient().Apps.CompleteAppManifest(c, code)
	wantStatus(t, err, http.StatusNotFound)

	// The new App is the simulator's App now, with the installations.
	if e.sim.AppID() != cfg.GetID() || e.sim.WebhookSecret() != cfg.GetWebhookSecret() {
		t.Fatalf("primary App %d, want %d", e.sim.AppID(), cfg.GetID())
	}
	itr, err := ghinstallation.New(e.validating(), cfg.GetID(), 1, []byte(cfg.GetPEM()))
	if err != nil {
		t.Fatal(err)
	}
	itr.BaseURL = e.sim.URL()
	pr, _, err := e.gh(itr).PullRequests.Get(c, "octo", "demo", 1)
	if err != nil || pr.GetNumber() != 1 {
		t.Fatalf("new App's installation token: %v, %v", pr, err)
	}
	// Its webhook is the manifest's, signed with the new secret.
	rc.secret = cfg.GetWebhookSecret()
	if _, err := e.sim.AddComment("octo", "demo", 1, "hello", ""); err != nil {
		t.Fatal(err)
	}
	if got := rc.wait(1); got[0].Event != "issue_comment" {
		t.Fatalf("delivery %s", got[0].Event)
	}
}
