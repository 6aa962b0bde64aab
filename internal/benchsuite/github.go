package benchsuite

import (
	"context"
	"fmt"
	"testing"

	"github.com/baton-dev/baton/app/ghsim"
	"github.com/baton-dev/baton/executor"
	"github.com/google/go-github/v62/github"
)

// GitHubComment measures the GitHub call of a comment operation alone: 32
// goroutines create comments on 200 issues through the client baton's
// executor uses (go-github over the installation transport, its token
// from the real App JWT exchange, taken once before the clock starts) on
// the GitHub simulator over HTTP, answering at once. Nothing of baton's
// own path (records, leases, queue) runs: its CPU per op is what the call
// costs the machine, client and simulator together, in any operation that
// makes it.
func GitHubComment(b *testing.B) {
	ctx := context.Background()
	gh := startSimulator(b)
	client, err := gh.Installation(ghsim.DemoInstallationID)
	if err != nil {
		fatalf(b, "%v", err)
	}
	comment := func(i int) error {
		body := "bench"
		if _, _, err := client.Issues.CreateComment(ctx, ghsim.DemoOwner, ghsim.DemoRepo, 1001+i%e2eResources,
			&github.IssueComment{Body: &body}); err != nil {
			return fmt.Errorf("create a comment: %w", err)
		}
		return nil
	}
	// The installation token is exchanged here, before the clock starts,
	// as a running executor has it cached.
	if err := comment(0); err != nil {
		fatalf(b, "%v", err)
	}
	var lat latencies
	resetTimer(b)
	spread(b, 32, &lat, comment)
	b.StopTimer()
	reportRate(b)
	lat.report(b)
}

// startSimulator starts the GitHub simulator with e2eResources issues
// (#1001 on) in octo/demo and no rate limits, and returns the executor's
// GitHub clients for it (the App's key, the real JWT exchange), both
// closed when the run ends.
func startSimulator(b *testing.B) *executor.GitHubClients {
	b.Helper()
	ctx := context.Background()
	sim, err := ghsim.New(ghsim.Config{Limits: ghsim.Limits{PrimaryLimit: -1}})
	if err != nil {
		fatalf(b, "%v", err)
	}
	if err := sim.Start(ctx); err != nil {
		fatalf(b, "start the simulator: %v", err)
	}
	b.Cleanup(func() { _ = sim.Close() })
	if err := sim.SeedDemo(); err != nil {
		fatalf(b, "%v", err)
	}
	for n := 1; n <= e2eResources; n++ {
		if _, err := sim.AddIssue(ghsim.DemoOwner, ghsim.DemoRepo, ghsim.NewIssue{Number: 1000 + n, Title: "bench"}); err != nil {
			fatalf(b, "%v", err)
		}
	}
	gh, err := executor.NewGitHubClients(executor.GitHubConfig{BaseURL: sim.URL(), AppID: sim.AppID(), PrivateKey: sim.PrivateKeyPEM()})
	if err != nil {
		fatalf(b, "%v", err)
	}
	b.Cleanup(gh.Close)
	return gh
}
