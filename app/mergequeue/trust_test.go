package mergequeue_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-dev/baton/app"
	"github.com/baton-dev/baton/app/ghsim"
	"github.com/baton-dev/baton/app/mergequeue"
)

// postSigned sends body to the stack's webhook receiver as GitHub would,
// signed with the App's webhook secret, and waits until the delivery is
// handled.
func (s *stack) postSigned(t *testing.T, event, id string, body []byte) {
	t.Helper()
	mac := hmac.New(sha256.New, []byte(webhookSecret))
	mac.Write(body)
	req, err := http.NewRequest(http.MethodPost, s.hook.URL+"/webhooks/github", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-GitHub-Event", event)
	req.Header.Set("X-GitHub-Delivery", id)
	req.Header.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(mac.Sum(nil)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("post %s: %d", id, resp.StatusCode)
	}
	waitFor(t, 15*time.Second, id+" handled", func() bool {
		rec, err := s.ledger.Get(context.Background(), id)
		return err == nil && rec.State != app.DeliveryPending
	})
}

// The queue works on a repository as the installation that has it, as
// the installations registry knows it, not as the one a delivery's
// payload names: a signed pull_request event naming another installation
// (another account's, whose token GitHub would refuse on the repository)
// for a repository is not acted on, and the queue's state is not made to
// name that installation.
func TestEventNamingAnotherInstallationIsIgnored(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// The installations registry, as the server wires it.
	var registry atomic.Pointer[app.Installations]
	s := newStack(t, stackOptions{noWebhooks: true, mq: func(c *mergequeue.Config) {
		c.Installations = registryResolver{&registry}
	}})
	if err := s.sim.AddInstallation(2, "acme"); err != nil {
		t.Fatal(err)
	}
	const repo = "claimed"
	s.repo(t, repo, 1, []string{"ci"})
	in, err := app.NewInstallations(app.InstallationsConfig{DB: s.db, App: s.gh.App(), Installation: s.gh.Installation})
	if err != nil {
		t.Fatal(err)
	}
	registry.Store(in)
	// As webhooks and the resync keep it: octo/claimed is installation
	// 1's.
	if err := in.Resync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.sim.AddLabel("octo", repo, 1, "baton:queue", "monalisa"); err != nil {
		t.Fatal(err)
	}
	ev := labelEvent(repo, 1, "labeled", "claimed-2")
	var p map[string]any
	if err := json.Unmarshal(ev.Payload, &p); err != nil {
		t.Fatal(err)
	}
	p["installation"] = map[string]any{"id": 2}
	body, _ := json.Marshal(p)
	s.postSigned(t, "pull_request", "claimed-2", body)
	st, err := s.q.Entries(ctx, "octo", repo)
	if err != nil {
		t.Fatal(err)
	}
	if st.InstallationID == 2 || len(st.Entries) != 0 {
		t.Errorf("after an event naming installation 2: installation %d, entries %+v", st.InstallationID, st.Entries)
	}
	// The same event naming the repository's installation is acted on.
	p["installation"] = map[string]any{"id": ghsim.DemoInstallationID}
	body, _ = json.Marshal(p)
	s.postSigned(t, "pull_request", "claimed-1", body)
	if st, err = s.q.Entries(ctx, "octo", repo); err != nil || st.InstallationID != ghsim.DemoInstallationID || len(st.Entries) != 1 {
		t.Errorf("after an event naming installation 1: %+v, %v", st, err)
	}
}

// registryResolver is the registry's CurrentNames, once the registry is
// made (after the stack, whose database and clients it uses).
type registryResolver struct {
	in *atomic.Pointer[app.Installations]
}

func (r registryResolver) InstallationOf(ctx context.Context, owner, repo string) (int64, error) {
	return r.in.Load().CurrentNames().InstallationOf(ctx, owner, repo)
}
