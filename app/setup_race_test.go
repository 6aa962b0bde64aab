package app

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-dev/baton/executor"
)

// Two setups finished at once (two tabs, two people): one App is created
// and stored, the other callback is refused, and the stored ID and key are
// one App's.
func TestSetupConcurrentCallbacks(t *testing.T) {
	t.Parallel()
	e := newSetupEnv(t, SetupConfig{}, ErrRestartRequired)
	ctx := hookCtx(t)

	// The code exchanges go through here: the first waits (a bounded
	// while) for the second to reach GitHub too, and the keys GitHub
	// hands out are kept by App ID.
	var (
		exchanges atomic.Int32
		second    = make(chan struct{})
		keysMu    sync.Mutex
		keys      = map[int64]string{}
	)
	e.setup.cfg.HTTPClient = &http.Client{Transport: staleRT(func(r *http.Request) (*http.Response, error) {
		if !strings.HasSuffix(r.URL.Path, "/conversions") {
			return e.tr.RoundTrip(r)
		}
		if exchanges.Add(1) == 1 {
			select {
			case <-second:
			case <-time.After(500 * time.Millisecond):
			}
		} else {
			close(second)
		}
		resp, err := e.tr.RoundTrip(r)
		if err != nil {
			return resp, err
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return nil, err
		}
		var app struct {
			ID  int64  `json:"id"`
			PEM string `json:"pem"`
		}
		if json.Unmarshal(body, &app) == nil && app.ID > 0 {
			keysMu.Lock()
			keys[app.ID] = app.PEM
			keysMu.Unlock()
		}
		resp.Body = io.NopCloser(strings.NewReader(string(body)))
		return resp, nil
	})}

	// Two browsers each create an App on "GitHub" and hold its way back.
	type browser struct {
		c        *http.Client
		callback string
	}
	var bs [2]browser
	for i := range bs {
		jar, _ := cookiejar.New(nil)
		c := &http.Client{Transport: e.tr, Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		page := setupGet(t, c, e.srv.URL+"/setup", http.StatusOK)
		m, mf := formActionRE.FindStringSubmatch(page), manifestRE.FindStringSubmatch(page)
		if m == nil || mf == nil {
			t.Fatalf("no manifest form in\n%s", page)
		}
		resp, err := c.PostForm(html.UnescapeString(m[1]), url.Values{"manifest": {html.UnescapeString(mf[1])}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		bs[i] = browser{c: c, callback: resp.Header.Get("Location")}
		if !strings.HasPrefix(bs[i].callback, e.srv.URL+"/setup/callback?") {
			t.Fatalf("GitHub redirected to %q (%d)", bs[i].callback, resp.StatusCode)
		}
	}

	var (
		wg       sync.WaitGroup
		statuses [2]int
		bodies   [2]string
	)
	for i := range bs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := bs[i].c.Get(bs[i].callback)
			if err != nil {
				t.Error(err)
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			statuses[i], bodies[i] = resp.StatusCode, string(b)
		}()
	}
	wg.Wait()
	ok, refused := 0, 0
	for i, s := range statuses {
		switch s {
		case http.StatusOK:
			ok++
		case http.StatusConflict:
			refused++
			// GitHub created that App too: the person is told to delete
			// it, not that no second App was made.
			if !strings.Contains(bodies[i], "delete it on GitHub") {
				t.Errorf("the refused callback does not say its App exists on GitHub:\n%s", bodies[i])
			}
		}
	}
	if ok != 1 || refused != 1 {
		t.Errorf("callback statuses %v: want one 200 and one 409", statuses)
	}
	creds, found, err := LoadAppCredentials(e.dataDir)
	if err != nil || !found {
		t.Fatalf("LoadAppCredentials: %v, %v", found, err)
	}
	keysMu.Lock()
	want := keys[creds.AppID]
	keysMu.Unlock()
	if string(creds.PrivateKey) != want {
		t.Errorf("stored App %d with another App's key", creds.AppID)
	}
	// The stored credentials work as the App.
	clients, err := executor.NewGitHubClients(executor.GitHubConfig{BaseURL: e.sim.URL(), AppID: creds.AppID, PrivateKey: creds.PrivateKey, Transport: e.tr})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := clients.App().Apps.Get(ctx, ""); err != nil {
		t.Errorf("GET /app as the stored App: %v", err)
	}
	e.mu.Lock()
	if len(e.configured) != 1 {
		t.Errorf("OnConfigured called %d times", len(e.configured))
	}
	e.mu.Unlock()
}

func testAppKeyPEM(t *testing.T) []byte {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)})
}

// Credentials are stored so that, whatever happens between the writes of
// the key and of the credentials, the stored App ID comes with its own
// key; and the layout of earlier versions (github-app.pem) is still read,
// and replaced.
func TestStoreAppCredentialsKeepsIDWithItsKey(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	oldKey, newKey := testAppKeyPEM(t), testAppKeyPEM(t)

	// An earlier version's data directory.
	if err := os.WriteFile(filepath.Join(dir, AppPrivateKeyFile), oldKey, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, AppCredentialsFile), []byte(`{"appId":9,"slug":"b","webhookSecret":"w","privateKeyFile":"github-app.pem"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	got, ok, err := LoadAppCredentials(dir)
	if err != nil || !ok || got.AppID != 9 || string(got.PrivateKey) != string(oldKey) {
		t.Fatalf("earlier layout: %+v, %v, %v", got, ok, err)
	}

	// A leftover of an interrupted write of the credentials is in the way
	// (it made the store of earlier versions fail after the key was
	// replaced).
	if err := os.Mkdir(filepath.Join(dir, AppCredentialsFile+".tmp"), 0o700); err != nil {
		t.Fatal(err)
	}
	storeErr := storeAppCredentials(dir, AppCredentials{AppID: 10, Slug: "c", Name: "c", WebhookSecret: "w2", PrivateKey: newKey, WebURL: "https://github.com"})
	got, ok, err = LoadAppCredentials(dir)
	if err != nil || !ok {
		t.Fatalf("after the store (%v): %v, %v", storeErr, ok, err)
	}
	switch {
	case got.AppID == 9 && string(got.PrivateKey) == string(oldKey):
		t.Logf("store failed (%v); App 9 kept with its key", storeErr)
	case got.AppID == 10 && string(got.PrivateKey) == string(newKey) && storeErr == nil:
	default:
		t.Errorf("stored App %d with another App's key (store: %v)", got.AppID, storeErr)
	}
	if storeErr == nil {
		if got.PrivateKeyFile != AppPrivateKeyFileOf(10) {
			t.Errorf("key file %q", got.PrivateKeyFile)
		}
		if _, err := os.Stat(filepath.Join(dir, AppPrivateKeyFile)); !os.IsNotExist(err) {
			t.Errorf("the replaced App's key is left: %v", err)
		}
	}

	// A store cut short after the key (a crash) leaves App 10 with its key.
	if err := writeSecretFile(filepath.Join(dir, AppPrivateKeyFileOf(11)), oldKey); err != nil {
		t.Fatal(err)
	}
	if got, ok, err := LoadAppCredentials(dir); err != nil || !ok || got.AppID != 10 || string(got.PrivateKey) != string(newKey) {
		t.Errorf("after a cut-short store: %+v, %v, %v", got, ok, err)
	}
}
