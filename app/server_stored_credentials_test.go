package app

import (
	"bytes"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/baton-dev/baton/app/ghsim"
)

// With the App's credentials stored by the setup flow, a private key and
// a webhook secret given to the server (BATON_PRIVATE_KEY,
// BATON_WEBHOOK_SECRET[_FILE], documented with "the setup flow's" as
// their default) are the ones used: rotating them on GitHub and giving
// the new ones (the old secret as the previous) must not leave baton
// signing with a deleted key, or refusing every delivery with the stored,
// old secret.
func TestServerGivenSecretOverridesStoredOne(t *testing.T) {
	t.Parallel()
	sim := startDemoSim(t, ghsim.Config{Limits: ghsim.Limits{PrimaryLimit: -1}})
	dir := filepath.Join(t.TempDir(), "data")
	// The stored key is one GitHub no longer takes (deleted after a new
	// one was made).
	if err := storeAppCredentials(dir, AppCredentials{AppID: sim.AppID(), Slug: "baton", Name: "baton", WebhookSecret: "old-secret",
		PrivateKey: testAppKeyPEM(t), WebURL: sim.URL(), APIURL: sim.URL(), CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	srv := startServer(t, Config{DataDir: dir, GitHubURL: sim.URL(), PrivateKey: sim.PrivateKeyPEM(),
		WebhookSecret: "new-secret", PreviousWebhookSecret: "old-secret"})

	for i, secret := range []string{"new-secret", "old-secret"} {
		body := []byte(`{"zen":"Keep it logically awesome.","hook_id":1}`)
		req, err := http.NewRequest("POST", srv.URL()+"/webhooks/github", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range signedHook(secret, "ping", "rotation-"+string(rune('a'+i)), body) {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			t.Errorf("a delivery signed with the %s: %d", secret, resp.StatusCode)
		}
	}
}
