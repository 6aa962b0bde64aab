package executor

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-github/v62/github"

	"github.com/baton-dev/baton/app/ghsim"
)

// A secondary limit that names no wait (no Retry-After) costs the
// installation a minute, as GitHub documents, not the time until the
// primary budget's x-ratelimit-reset, which every answer carries and which
// may be an hour away.
func TestSecondaryLimitWithoutRetryAfterWaitsAMinute(t *testing.T) {
	t.Parallel()
	_, gh := newSim(t, ghsim.Config{Limits: ghsim.Limits{SecondaryLimit: 1}})
	c, err := gh.Installation(1)
	if err != nil {
		t.Fatal(err)
	}
	comment := func() (Classification, *github.Response) {
		body := "hello"
		_, resp, err := c.Issues.CreateComment(context.Background(), "octo", "demo", 10, &github.IssueComment{Body: &body})
		return Classify(err, time.Now()), resp
	}
	if cl, _ := comment(); cl.Category != "" {
		t.Fatalf("first comment: %+v", cl)
	}
	cl, resp := comment()
	if cl.Category != CategorySecondaryRateLimit || cl.NotSent {
		t.Fatalf("second comment: %+v, want a secondary limit from GitHub", cl)
	}
	if resp.Header.Get("X-Ratelimit-Reset") == "" {
		t.Fatal("the refusal carries no x-ratelimit-reset: the case this test is about is not met")
	}
	if cl.Wait != DefaultSecondaryWait || !cl.PauseInstallation {
		t.Errorf("secondary limit without Retry-After: wait %v (pause %v), want %v", cl.Wait, cl.PauseInstallation, DefaultSecondaryWait)
	}
	// go-github now refuses the installation's requests itself until the
	// wait it recorded: a minute at most, not the primary reset.
	cl, _ = comment()
	if !cl.NotSent || cl.Wait > DefaultSecondaryWait {
		t.Errorf("request after the limit: %+v, want a local refusal of at most %v", cl, DefaultSecondaryWait)
	}
}
