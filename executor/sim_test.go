package executor

import (
	"context"
	"testing"

	"github.com/google/go-github/v62/github"

	"github.com/baton-dev/baton/app/ghsim"
)

// newSim starts a GitHub simulator seeded with installation 1 and
// octo/demo, and a client factory authenticated as its App (real RS256
// JWT, real installation-token exchange).
func newSim(t testing.TB, cfg ghsim.Config) (*ghsim.Sim, *GitHubClients) {
	t.Helper()
	if cfg.Limits.PrimaryLimit == 0 {
		cfg.Limits.PrimaryLimit = -1
	}
	sim, err := ghsim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := sim.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sim.Close() })
	if err := sim.SeedDemo(); err != nil {
		t.Fatal(err)
	}
	gh, err := NewGitHubClients(GitHubConfig{BaseURL: sim.URL(), AppID: sim.AppID(), PrivateKey: sim.PrivateKeyPEM()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gh.Close)
	return sim, gh
}

// installationClient returns gh's client of the simulator's demo
// installation.
func installationClient(t testing.TB, gh *GitHubClients) *github.Client {
	t.Helper()
	c, err := gh.Installation(1)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
