package app

import (
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/baton-dev/baton/app/ghsim"
)

// Behind a reverse proxy that serves baton under a path
// (--public-url https://host/baton), the flow comes back to
// PUBLIC/setup/callback with the browser's state cookie: a cookie scoped
// to /setup alone would not be sent there, and every setup would be
// refused as not started here.
func TestSetupUnderAPathPrefix(t *testing.T) {
	t.Parallel()
	sim := startDemoSim(t, ghsim.Config{PrivateKey: hookAppKey()})
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	var h http.Handler = http.NotFoundHandler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h.ServeHTTP(w, r) }))
	t.Cleanup(srv.Close)
	dataDir := filepath.Join(t.TempDir(), "data")
	s, err := NewSetup(SetupConfig{DataDir: dataDir, PublicURL: srv.URL + "/baton", GitHubWebURL: sim.URL(), GitHubAPIURL: sim.URL(),
		HTTPClient: &http.Client{Transport: tr}})
	if err != nil {
		t.Fatal(err)
	}
	// The proxy: /baton/… is baton's /….
	h = http.StripPrefix("/baton", s)

	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Transport: tr, Jar: jar}
	page := setupGet(t, browser, srv.URL+"/baton/setup", http.StatusOK)
	m, mf := formActionRE.FindStringSubmatch(page), manifestRE.FindStringSubmatch(page)
	if m == nil || mf == nil {
		t.Fatalf("no manifest form in\n%s", page)
	}
	resp, err := browser.PostForm(html.UnescapeString(m[1]), url.Values{"manifest": {html.UnescapeString(mf[1])}})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `id="install-link"`) {
		t.Fatalf("callback at %s: %d\n%s", resp.Request.URL, resp.StatusCode, body)
	}
	if _, ok, err := LoadAppCredentials(dataDir); !ok || err != nil {
		t.Errorf("credentials not stored: %v, %v", ok, err)
	}
	// The error page's way back is under the prefix too.
	page = setupGet(t, &http.Client{Transport: tr}, srv.URL+"/baton/setup/callback?code=a&state=b", http.StatusBadRequest)
	if !strings.Contains(page, `href="`+srv.URL+`/baton/setup"`) {
		t.Errorf("the error page does not link back to %s/baton/setup:\n%s", srv.URL, page)
	}
}
