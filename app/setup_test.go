package app

import (
	"context"
	"encoding/json"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/baton-dev/baton/app/ghsim"
	"github.com/baton-dev/baton/executor"
)

// deploy/github-app-manifest.json is the manifest the setup page posts.
func TestAppManifestMatchesDeploy(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join("..", "deploy", "github-app-manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var file, built map[string]any
	if err := json.Unmarshal(b, &file); err != nil {
		t.Fatal(err)
	}
	nb, _ := json.Marshal(NewAppManifest("baton", "https://baton.example.com/"))
	if err := json.Unmarshal(nb, &built); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(file, built) {
		t.Errorf("deploy/github-app-manifest.json differs from NewAppManifest:\nfile  %s\nbuilt %s", b, nb)
	}
	m := NewAppManifest("baton", "https://baton.example.com/")
	if m.HookAttributes.URL != "https://baton.example.com/webhooks/github" || m.RedirectURL != "https://baton.example.com/setup/callback" ||
		m.Public || m.DefaultPermissions["administration"] != "read" || m.DefaultPermissions["contents"] != "write" {
		t.Errorf("manifest %+v", m)
	}
}

// setupEnv is baton's setup pages on a real HTTP server and the simulator
// as GitHub.
type setupEnv struct {
	t       *testing.T
	sim     *ghsim.Sim
	srv     *httptest.Server
	setup   *Setup
	dataDir string
	tr      *http.Transport

	mu         sync.Mutex
	configured []AppCredentials
}

func newSetupEnv(t *testing.T, cfg SetupConfig, onConfigured error) *setupEnv {
	t.Helper()
	e := &setupEnv{t: t, dataDir: cfg.DataDir, tr: &http.Transport{}}
	if e.dataDir == "" {
		e.dataDir = filepath.Join(t.TempDir(), "data")
	}
	t.Cleanup(e.tr.CloseIdleConnections)
	sim := startDemoSim(t, ghsim.Config{PrivateKey: hookAppKey()})
	e.sim = sim
	var h http.Handler = http.NotFoundHandler()
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h.ServeHTTP(w, r) }))
	t.Cleanup(e.srv.Close)
	cfg.DataDir = e.dataDir
	cfg.PublicURL = e.srv.URL
	cfg.GitHubWebURL = sim.URL()
	cfg.GitHubAPIURL = sim.URL()
	cfg.HTTPClient = &http.Client{Transport: e.tr}
	cfg.OnConfigured = func(_ context.Context, c AppCredentials) error {
		e.mu.Lock()
		defer e.mu.Unlock()
		e.configured = append(e.configured, c)
		return onConfigured
	}
	var err error
	if e.setup, err = NewSetup(cfg); err != nil {
		t.Fatal(err)
	}
	h = e.setup
	return e
}

// checkCredentials checks what the flow stored, and that the App
// authenticates with it: an installation token exchange against "GitHub".
func (e *setupEnv) checkCredentials(ctx context.Context) AppCredentials {
	t := e.t
	t.Helper()
	creds, ok, err := LoadAppCredentials(e.dataDir)
	if err != nil || !ok {
		t.Fatalf("LoadAppCredentials: %v, %v", ok, err)
	}
	if creds.PrivateKeyFile != AppPrivateKeyFileOf(creds.AppID) {
		t.Errorf("key file %q, want %q", creds.PrivateKeyFile, AppPrivateKeyFileOf(creds.AppID))
	}
	for _, name := range []string{AppCredentialsFile, creds.PrivateKeyFile} {
		fi, err := os.Stat(filepath.Join(e.dataDir, name))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, mode %v", name, err, fi.Mode())
		}
	}
	if creds.AppID != e.sim.AppID() || creds.Slug != "baton" || creds.WebhookSecret == "" || creds.WebhookSecret != e.sim.WebhookSecret() ||
		creds.ClientID == "" || creds.ClientSecret == "" || creds.WebURL != e.sim.URL() {
		t.Errorf("stored credentials %v: %+v", creds, creds)
	}
	if strings.Contains(creds.String(), creds.WebhookSecret) || strings.Contains(creds.String(), "PRIVATE") {
		t.Errorf("String() shows secrets: %s", creds)
	}
	e.mu.Lock()
	if len(e.configured) != 1 || e.configured[0].AppID != creds.AppID || string(e.configured[0].PrivateKey) != string(creds.PrivateKey) {
		t.Errorf("OnConfigured calls: %d", len(e.configured))
	}
	e.mu.Unlock()
	// The simulator sends the App's webhooks to the manifest's URL.
	if got := e.sim.WebhookURL(); got != e.srv.URL+"/webhooks/github" {
		t.Errorf("App webhook %s", got)
	}
	clients, err := executor.NewGitHubClients(executor.GitHubConfig{BaseURL: e.sim.URL(), AppID: creds.AppID, PrivateKey: creds.PrivateKey, Transport: e.tr})
	if err != nil {
		t.Fatal(err)
	}
	c, err := clients.Installation(ghsim.DemoInstallationID)
	if err != nil {
		t.Fatal(err)
	}
	repos, _, err := c.Apps.ListRepos(ctx, nil)
	if err != nil || len(repos.Repositories) != 1 || repos.Repositories[0].GetFullName() != "octo/demo" {
		t.Fatalf("as the new App: %+v, %v", repos, err)
	}
	return creds
}

var (
	formActionRE = regexp.MustCompile(`<form id="manifest-form" method="post" action="([^"]+)">`)
	manifestRE   = regexp.MustCompile(`<input type="hidden" name="manifest" value="([^"]+)">`)
)

// The whole flow over HTTP, as a browser without script makes it: the page,
// the form posted to "GitHub", the redirect back, the callback.
func TestSetupFlowOverHTTP(t *testing.T) {
	t.Parallel()
	e := newSetupEnv(t, SetupConfig{}, ErrRestartRequired)
	ctx := hookCtx(t)
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Transport: e.tr, Jar: jar}

	page := setupGet(t, browser, e.srv.URL+"/setup", http.StatusOK)
	m := formActionRE.FindStringSubmatch(page)
	mf := manifestRE.FindStringSubmatch(page)
	if m == nil || mf == nil {
		t.Fatalf("no manifest form in\n%s", page)
	}
	action, manifest := html.UnescapeString(m[1]), html.UnescapeString(mf[1])
	if !strings.HasPrefix(action, e.sim.URL()+"/settings/apps/new?state=") {
		t.Errorf("form action %s", action)
	}
	var posted AppManifest
	if err := json.Unmarshal([]byte(manifest), &posted); err != nil || !reflect.DeepEqual(posted, e.setup.Manifest()) {
		t.Errorf("posted manifest %s, %v", manifest, err)
	}
	resp, err := browser.PostForm(action, url.Values{"manifest": {manifest}})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `id="restart"`) || !strings.Contains(string(body), "Restart baton") {
		t.Fatalf("callback page %d:\n%s", resp.StatusCode, body)
	}
	creds := e.checkCredentials(ctx)
	if !strings.Contains(string(body), `href="`+e.sim.URL()+"/apps/baton/installations/new"+`"`) {
		t.Errorf("no installation link in\n%s", body)
	}

	// Configured: no second App, on the page or through the callback.
	page = setupGet(t, browser, e.srv.URL+"/setup", http.StatusOK)
	if strings.Contains(page, "manifest-form") || !strings.Contains(page, `id="configured"`) || !strings.Contains(page, creds.Name) {
		t.Errorf("configured page offers a new App:\n%s", page)
	}
	// Whoever reached /setup first made the App: the page names its
	// owner before it offers to install it.
	if creds.Owner == "" || !strings.Contains(page, `<strong id="app-owner">`+creds.Owner+`</strong>`) ||
		!strings.Contains(string(body), `<strong id="app-owner">`+creds.Owner+`</strong>`) {
		t.Errorf("the pages do not name the App's owner %q:\n%s\n%s", creds.Owner, body, page)
	}
	page = setupGet(t, browser, e.srv.URL+"/setup/callback?code=abc&state=def", http.StatusBadRequest)
	if !strings.Contains(page, "not from a setup started here") {
		t.Errorf("foreign callback:\n%s", page)
	}

	// A restart finds the credentials and says so too.
	again, err := NewSetup(SetupConfig{DataDir: e.dataDir, PublicURL: e.srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	again.ServeHTTP(rec, httptest.NewRequest("GET", "/setup", nil))
	if !strings.Contains(rec.Body.String(), `id="configured"`) {
		t.Errorf("after a restart:\n%s", rec.Body)
	}
	// Forced, it offers a new App and says it replaces the current one.
	forced, err := NewSetup(SetupConfig{DataDir: e.dataDir, PublicURL: e.srv.URL, Force: true})
	if err != nil {
		t.Fatal(err)
	}
	rec = httptest.NewRecorder()
	forced.ServeHTTP(rec, httptest.NewRequest("GET", "/setup", nil))
	if !strings.Contains(rec.Body.String(), "manifest-form") || !strings.Contains(rec.Body.String(), `id="replace-note"`) {
		t.Errorf("forced page:\n%s", rec.Body)
	}
}

func setupGet(t *testing.T, c *http.Client, u string, want int) string {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("GET %s: %d, want %d\n%s", u, resp.StatusCode, want, b)
	}
	return string(b)
}

// The callback takes only a state this server issued to this browser,
// once.
func TestSetupCallbackChecksState(t *testing.T) {
	t.Parallel()
	e := newSetupEnv(t, SetupConfig{Organization: "octo"}, nil)
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Transport: e.tr, Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	page := setupGet(t, browser, e.srv.URL+"/setup", http.StatusOK)
	m := formActionRE.FindStringSubmatch(page)
	if m == nil {
		t.Fatal("no form")
	}
	action, _ := url.Parse(html.UnescapeString(m[1]))
	if action.Path != "/organizations/octo/settings/apps/new" {
		t.Errorf("organisation form action %s", action)
	}
	state := action.Query().Get("state")

	// Another browser (no cookie) with the right state is refused.
	stranger := &http.Client{Transport: e.tr}
	setupGet(t, stranger, e.srv.URL+"/setup/callback?code=abc&state="+state, http.StatusBadRequest)
	// The right browser with a state never issued is refused.
	setupGet(t, browser, e.srv.URL+"/setup/callback?code=abc&state=0123", http.StatusBadRequest)
	// A bad code with the right state fails at GitHub, and uses the state up.
	page = setupGet(t, browser, e.srv.URL+"/setup/callback?code=nosuchcode&state="+state, http.StatusBadGateway)
	if !strings.Contains(page, "GitHub answered 404") {
		t.Errorf("bad code page:\n%s", page)
	}
	setupGet(t, browser, e.srv.URL+"/setup/callback?code=nosuchcode&state="+state, http.StatusBadRequest)
	if _, ok, _ := LoadAppCredentials(e.dataDir); ok {
		t.Error("credentials stored after failures")
	}
}

// Everything shown is escaped.
func TestSetupPageEscapes(t *testing.T) {
	t.Parallel()
	s, err := NewSetup(SetupConfig{DataDir: t.TempDir(), PublicURL: `https://baton.example.com/x"><script>alert(1)</script>`, AppName: `<b>baton</b>`})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest("GET", "/setup", nil))
	body := rec.Body.String()
	if strings.Contains(body, "<script>") || strings.Contains(body, "<b>baton") {
		t.Errorf("unescaped input in\n%s", body)
	}
	if csp := rec.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "form-action 'self' https://github.com") || !strings.Contains(csp, "default-src 'none'") {
		t.Errorf("CSP %q", csp)
	}
	for name, cfg := range map[string]SetupConfig{
		"no data dir":    {PublicURL: "https://x"},
		"no public URL":  {DataDir: "d"},
		"relative URL":   {DataDir: "d", PublicURL: "/baton"},
		"bad org":        {DataDir: "d", PublicURL: "https://x", Organization: "a/b"},
		"long app name":  {DataDir: "d", PublicURL: "https://x", AppName: strings.Repeat("n", 35)},
		"ftp GitHub URL": {DataDir: "d", PublicURL: "https://x", GitHubWebURL: "ftp://github.com"},
	} {
		if _, err := NewSetup(cfg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	ghes, err := NewSetup(SetupConfig{DataDir: t.TempDir(), PublicURL: "https://x", GitHubWebURL: "https://ghe.example.com/"})
	if err != nil || ghes.apiURL.String() != "https://ghe.example.com/api/v3/" {
		t.Errorf("GHES API URL: %v, %v", ghes, err)
	}
}

func TestLoadAppCredentials(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if _, ok, err := LoadAppCredentials(dir); ok || err != nil {
		t.Fatalf("empty dir: %v, %v", ok, err)
	}
	if err := os.WriteFile(filepath.Join(dir, AppCredentialsFile), []byte(`{"appId":1,"webhookSecret":"s","privateKeyFile":"k.pem"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LoadAppCredentials(dir); err == nil {
		t.Error("missing key accepted")
	}
	if err := os.WriteFile(filepath.Join(dir, "k.pem"), []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LoadAppCredentials(dir); err == nil {
		t.Error("bad key accepted")
	}
	if err := os.WriteFile(filepath.Join(dir, AppCredentialsFile), []byte(`{`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LoadAppCredentials(dir); err == nil {
		t.Error("bad JSON accepted")
	}
	sim, err := ghsim.New(ghsim.Config{PrivateKey: hookAppKey()})
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	want := AppCredentials{AppID: 9, Slug: "b", Name: "b", WebhookSecret: "w", PrivateKey: sim.PrivateKeyPEM(), WebURL: "https://github.com"}
	if err := storeAppCredentials(filepath.Join(dir, "new"), want); err != nil {
		t.Fatal(err)
	}
	got, ok, err := LoadAppCredentials(filepath.Join(dir, "new"))
	if err != nil || !ok || got.AppID != 9 || string(got.PrivateKey) != string(want.PrivateKey) || got.PrivateKeyFile != AppPrivateKeyFileOf(9) {
		t.Errorf("round trip: %+v, %v, %v", got, ok, err)
	}
	if got.InstallURL() != "https://github.com/apps/b/installations/new" {
		t.Error(got.InstallURL())
	}
}

// Given only GitHub Enterprise Server's API URL (--github-url), the setup
// creates the App on that server's web pages, not on github.com: there
// the manifest (baton's public URL) would go to another GitHub, an App
// would be created there, and its code could not be exchanged at the
// API given.
func TestSetupGHESWebURLFromTheAPIURL(t *testing.T) {
	t.Parallel()
	for api, web := range map[string]string{
		"https://ghe.example.com/api/v3/":       "https://ghe.example.com",
		"https://ghe.example.com/api/v3":        "https://ghe.example.com",
		"http://ghe.example.com:8443/api/v3/":   "http://ghe.example.com:8443",
		"https://api.github.com/":               "https://github.com",
		"https://proxy.example.com/github-api/": "https://github.com",
	} {
		s, err := NewSetup(SetupConfig{DataDir: t.TempDir(), PublicURL: "https://x", GitHubAPIURL: api})
		if err != nil {
			t.Fatal(err)
		}
		if s.cfg.GitHubWebURL != web {
			t.Errorf("API %s: the App is created at %s, want %s", api, s.cfg.GitHubWebURL, web)
		}
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, httptest.NewRequest("GET", "/setup", nil))
		if !strings.Contains(rec.Body.String(), `action="`+web+`/settings/apps/new?state=`) {
			t.Errorf("API %s: the page's form does not post to %s", api, web)
		}
	}
}
