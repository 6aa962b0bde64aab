package executor

import (
	"context"
	"testing"
	"time"

	"github.com/baton-dev/baton/app/ghsim"
	"github.com/baton-dev/baton/schema"
)

// GitHub refuses an App JWT issued in its future, or expired by its clock,
// with 401. With this machine's clock minutes off GitHub's, the token
// exchange was refused and every operation failed as if its installation
// were gone; baton now learns GitHub's clock from the refusal's Date and
// issues its JWTs on it.
func TestAppJWTFollowsGitHubClock(t *testing.T) {
	t.Parallel()
	for _, off := range []time.Duration{-3 * time.Minute, 10 * time.Minute} {
		t.Run(off.String(), func(t *testing.T) {
			t.Parallel()
			github := func() time.Time { return time.Now().Add(off) }
			s := newStack(t, stackOptions{sim: ghsim.Config{Now: github, JWTNow: github}})
			rec := s.submit(t, "k", schema.ActionComment, issue(10), `{"body":"x"}`)
			got := s.await(t, rec.OperationID, 20*time.Second)
			if got.Status != schema.StatusSucceeded || got.Attempts != 1 {
				t.Fatalf("status=%s attempts=%d category=%s %s", got.Status, got.Attempts, got.LastErrorCategory, got.LastErrorMessage)
			}
			if learned := time.Duration(s.gh.skew.Load()); (learned - off).Abs() > 2*time.Second {
				t.Errorf("learned GitHub's clock %v off, want %v", learned, off)
			}
			// Remembered: the App's own routes and a later exchange are
			// signed on GitHub's clock at once.
			tokens := s.sim.TokensIssued()
			s.gh.Forget(1)
			if _, _, err := installationClient(t, s.gh).Issues.Get(context.Background(), "octo", "demo", 10); err != nil {
				t.Fatal(err)
			}
			if _, _, err := s.gh.App().Apps.Get(context.Background(), ""); err != nil {
				t.Fatal(err)
			}
			if n := s.sim.TokensIssued() - tokens; n != 1 {
				t.Errorf("%d tokens issued, want 1", n)
			}
		})
	}
}
