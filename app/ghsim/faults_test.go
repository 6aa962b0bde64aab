package ghsim

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-github/v62/github"
)

const mergeRoute = "PUT /repos/{owner}/{repo}/pulls/{number}/merge"

func mustFault(t *testing.T, s *Sim, f Fault) string {
	t.Helper()
	id, err := s.SetFault(f)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// The refusals GitHub answers without applying the request: a merge
// after its base moved, a merge while another is being carried out, a
// token it does not take. Each fires on its count and applies nothing.
func TestFaultRefusals(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		kind    FaultKind
		status  int
		message string
	}{
		{FaultBaseModified, http.StatusMethodNotAllowed, "Base branch was modified"},
		{FaultMergeInProgress, http.StatusMethodNotAllowed, "Merge already in progress"},
		{FaultUnauthorized, http.StatusUnauthorized, "Bad credentials"},
	} {
		t.Run(string(tc.kind), func(t *testing.T) {
			t.Parallel()
			e := seeded(t, Config{})
			c := ctx(t)
			cl := e.client(1)
			mustFault(t, e.sim, Fault{Route: mergeRoute, Kind: tc.kind, Count: 1})
			_, _, err := cl.PullRequests.Merge(c, "octo", "demo", 1, "", nil)
			wantStatus(t, err, tc.status)
			if !strings.Contains(err.Error(), tc.message) {
				t.Errorf("error %v", err)
			}
			if p, _ := e.sim.Pull("octo", "demo", 1); p.Merged || len(e.sim.Effects()) != 0 {
				t.Fatal("the fault applied the merge")
			}
			if _, _, err := cl.PullRequests.Merge(c, "octo", "demo", 1, "", nil); err != nil {
				t.Fatalf("the count-1 fault fired twice: %v", err)
			}
		})
	}
}

func TestFaultStatus(t *testing.T) {
	t.Parallel()
	e := seeded(t, Config{})
	c := ctx(t)
	cl := e.client(1)
	mustFault(t, e.sim, Fault{Route: mergeRoute, Kind: FaultStatus, Status: 502, Count: 1})
	_, _, err := cl.PullRequests.Merge(c, "octo", "demo", 1, "", nil)
	wantStatus(t, err, http.StatusBadGateway)
	if p, _ := e.sim.Pull("octo", "demo", 1); p.Merged || len(e.sim.Effects()) != 0 {
		t.Fatal("a 5xx fault applied the merge")
	}
	if _, _, err := cl.PullRequests.Merge(c, "octo", "demo", 1, "", nil); err != nil {
		t.Fatalf("the count-1 fault fired twice: %v", err)
	}
	if len(e.sim.Faults()) != 0 {
		t.Error("a spent fault is still listed")
	}
}

func TestFaultTooManyRequests(t *testing.T) {
	t.Parallel()
	e := seeded(t, Config{})
	c := ctx(t)
	mustFault(t, e.sim, Fault{Route: "POST /repos/{owner}/{repo}/issues/{number}/comments", Kind: FaultTooManyRequests, RetryAfter: 2 * time.Second, Count: 1})
	_, resp, err := e.client(1).Issues.CreateComment(c, "octo", "demo", 10, &github.IssueComment{Body: ptr("x")})
	wantStatus(t, err, http.StatusTooManyRequests)
	if resp.Header.Get("Retry-After") != "2" {
		t.Errorf("Retry-After = %q", resp.Header.Get("Retry-After"))
	}
	if is, _ := e.sim.Issue("octo", "demo", 10); len(is.Comments) != 0 {
		t.Error("a 429 fault applied the comment")
	}
}

func TestFaultLatency(t *testing.T) {
	t.Parallel()
	e := seeded(t, Config{})
	c := ctx(t)
	cl := e.client(1)
	if _, _, err := cl.Issues.Get(c, "octo", "demo", 10); err != nil { // the token exchange, before timing
		t.Fatal(err)
	}
	mustFault(t, e.sim, Fault{Route: "GET /repos/octo/demo/issues/{n}", Kind: FaultLatency, Latency: 150 * time.Millisecond, Count: 1})
	start := time.Now()
	if _, _, err := cl.Issues.Get(c, "octo", "demo", 10); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Errorf("request took %v, want at least 150ms", d)
	}
}

func TestFaultDropBeforeEffect(t *testing.T) {
	t.Parallel()
	e := seeded(t, Config{})
	c := ctx(t)
	cl := e.client(1)
	mustFault(t, e.sim, Fault{Route: mergeRoute, Kind: FaultDropBefore, Count: 1})
	_, resp, err := cl.PullRequests.Merge(c, "octo", "demo", 1, "", &github.PullRequestOptions{SHA: DemoHeadSHA(1)})
	if err == nil || resp != nil {
		t.Fatalf("client saw no error: %v", err)
	}
	if p, _ := e.sim.Pull("octo", "demo", 1); p.Merged || len(e.sim.Effects()) != 0 {
		t.Fatal("the merge was applied")
	}
}

func TestFaultDropAfterEffect(t *testing.T) {
	t.Parallel()
	e := seeded(t, Config{})
	c := ctx(t)
	cl := e.client(1)
	mustFault(t, e.sim, Fault{Route: mergeRoute, Kind: FaultDropAfter, Count: 1})
	_, resp, err := cl.PullRequests.Merge(c, "octo", "demo", 1, "", &github.PullRequestOptions{SHA: DemoHeadSHA(1)})
	if err == nil || resp != nil {
		t.Fatalf("client saw no error: %v", err)
	}
	p, _ := e.sim.Pull("octo", "demo", 1)
	effects := e.sim.Effects()
	if !p.Merged || len(effects) != 1 || !effects[0].Dropped || effects[0].Status != 200 || effects[0].Resource != "pull_request:octo/demo#1" || effects[0].EndedAt.IsZero() {
		t.Fatalf("merged %v, effects %+v", p.Merged, effects)
	}
	// The client's probe sees the merge; retrying is refused.
	if merged, _, err := cl.PullRequests.IsMerged(c, "octo", "demo", 1); err != nil || !merged {
		t.Fatalf("IsMerged = %v, %v", merged, err)
	}
	_, _, err = cl.PullRequests.Merge(c, "octo", "demo", 1, "", &github.PullRequestOptions{SHA: DemoHeadSHA(1)})
	wantStatus(t, err, http.StatusMethodNotAllowed)
}

func TestFaultProbabilityIsSeeded(t *testing.T) {
	t.Parallel()
	fired := func() []bool {
		e := seeded(t, Config{Seed: 7})
		mustFault(t, e.sim, Fault{Route: "GET *", Kind: FaultStatus, Probability: 0.5})
		var out []bool
		for range 40 {
			out = append(out, e.sim.faults.pick("GET", "/x", 1).kind == FaultStatus)
		}
		return out
	}
	a, b := fired(), fired()
	n := 0
	for i := range a {
		if a[i] != b[i] {
			t.Fatal("the same seed gave different faults")
		}
		if a[i] {
			n++
		}
	}
	if n < 8 || n > 32 {
		t.Errorf("%d of 40 fired at probability 0.5", n)
	}
}

func TestFaultRoutes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	for _, tc := range []struct {
		route, method, path string
		inst                int64
		want                bool
	}{
		{mergeRoute, "PUT", "/repos/octo/demo/pulls/1/merge", 1, true},
		{mergeRoute, "GET", "/repos/octo/demo/pulls/1/merge", 1, false},
		{mergeRoute, "PUT", "/repos/octo/demo/pulls/1", 1, false},
		{"PUT /repos/octo/demo/pulls/1/merge", "PUT", "/repos/octo/demo/pulls/2/merge", 1, false},
		{"PATCH /repos/{o}/{r}/git/refs/{ref...}", "PATCH", "/repos/octo/demo/git/refs/heads/a/b", 1, true},
		{"PATCH /repos/{o}/{r}/git/refs/{ref...}", "PATCH", "/repos/octo/demo/git/refs", 1, false},
		{"* *", "DELETE", "/anything", 1, true},
		{"* /repos/{o}/{r}", "GET", "/repos/octo/demo/issues", 1, false},
	} {
		e.sim.ClearFaults()
		mustFault(t, e.sim, Fault{Route: tc.route, Kind: FaultStatus})
		if got := e.sim.faults.pick(tc.method, tc.path, tc.inst).kind == FaultStatus; got != tc.want {
			t.Errorf("%q on %s %s = %v, want %v", tc.route, tc.method, tc.path, got, tc.want)
		}
	}
	e.sim.ClearFaults()
	mustFault(t, e.sim, Fault{Route: "* *", Kind: FaultStatus, Installation: 2})
	if e.sim.faults.pick("GET", "/x", 1).kind != "" || e.sim.faults.pick("GET", "/x", 2).kind != FaultStatus {
		t.Error("installation filter")
	}
	for _, bad := range []Fault{
		{Route: "merge", Kind: FaultStatus},
		{Route: "PUT /x", Kind: "explode"},
		{Route: "PUT /x", Kind: FaultStatus, Status: 404},
		{Route: "PUT /x", Kind: FaultLatency},
		{Route: "PUT /{a...}/b", Kind: FaultDropAfter},
		{Route: "PUT /x", Kind: FaultDropAfter, Probability: 2},
	} {
		if _, err := e.sim.SetFault(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("SetFault(%+v) = %v", bad, err)
		}
	}
}
