package proof

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/baton-dev/baton/app"
	"github.com/baton-dev/baton/app/client"
	"github.com/baton-dev/baton/app/ghsim"
)

// inProcess is baton's server (app.NewServer, the wiring `baton serve`
// uses) running in the test process against a simulator seeded with
// installation 1 and octo/demo.
type inProcess struct {
	sim    *ghsim.Sim
	srv    *app.Server
	dir    string
	tokens *app.TokenStore
}

// startDemoSim starts a simulated GitHub with no primary rate limit,
// seeded with the demo account, closed at the end of the test.
func startDemoSim(t *testing.T, ctx context.Context) *ghsim.Sim {
	t.Helper()
	sim, err := ghsim.New(ghsim.Config{Limits: ghsim.Limits{PrimaryLimit: -1}})
	if err != nil {
		t.Fatal(err)
	}
	if err := sim.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sim.Close() })
	if err := sim.SeedDemo(); err != nil {
		t.Fatal(err)
	}
	return sim
}

func newInProcess(t *testing.T) *inProcess {
	t.Helper()
	ctx := context.Background()
	sim := startDemoSim(t, ctx)
	off := false
	dir := filepath.Join(t.TempDir(), "data")
	cfg := app.Config{
		DataDir:       dir,
		Listen:        "127.0.0.1:0",
		GitHubURL:     sim.URL(),
		AppID:         sim.AppID(),
		PrivateKey:    sim.PrivateKeyPEM(),
		WebhookSecret: sim.WebhookSecret(),
		Pacing:        &off,
		Logger:        zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)),
	}
	srv, err := app.NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := srv.Stop(sctx); err != nil {
			t.Errorf("server stop: %v", err)
		}
	})
	p := &inProcess{sim: sim, srv: srv, dir: dir, tokens: srv.Tokens()}
	// The installations registry learns of octo/demo from GitHub.
	admin := p.client(t, p.token(t, app.TokenSpec{Actor: "setup", Admin: true}))
	if !poll(ctx, 30*time.Second, 20*time.Millisecond, func() bool {
		insts, err := admin.Installations(ctx)
		return err == nil && len(insts) > 0 && len(insts[0].Repositories) > 0
	}) {
		t.Fatal("the installations registry did not learn of octo/demo")
	}
	return p
}

func (p *inProcess) token(t *testing.T, spec app.TokenSpec) string {
	t.Helper()
	tok, _, err := p.tokens.CreateToken(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func (p *inProcess) client(t *testing.T, token string) *client.Client {
	t.Helper()
	c, err := client.New(p.srv.URL(), client.WithToken(token))
	if err != nil {
		t.Fatal(err)
	}
	return c
}
