package proof

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-dev/baton/app/client"
	"github.com/baton-dev/baton/app/ghsim"
	"github.com/baton-dev/baton/schema"
)

// The repository of the workload, in installation 1 of the simulator.
const (
	fixtureOwner = "octo"
	fixtureRepo  = "proof"
	fixtureInst  = int64(1)
)

// The resources of the workload: 50 in all.
const (
	fixtureIssues   = 20 // comments and labels
	fixturePulls    = 10 // merges
	fixtureBranches = 10 // fast-forward ref updates
	fixtureCommits  = 10 // commit statuses
	mergesPerPull   = 2  // two automations ask to merge the same pull request
)

// fixture is the "GitHub" the workload acts on.
type fixture struct {
	issues   []int
	pulls    []pullFixture
	branches []branchFixture
	commits  []string
}

type pullFixture struct {
	number int
	head   string
}

// branchFixture is a branch and a chain of commits, each the child of the
// one before: chain[0] is where the branch points at first, and the i-th
// ref update of the workload moves it from chain[i-1] to chain[i].
type branchFixture struct {
	name  string
	chain []string
}

// newFixture shapes the simulator: the repository, its issues, pull
// requests, branches with commit chains of chainLen commits, and commits
// to set statuses on.
func newFixture(t testing.TB, sim *ghsim.Sim, chainLen int) *fixture {
	t.Helper()
	if _, err := sim.AddRepo(fixtureOwner, fixtureRepo, fixtureInst); err != nil {
		t.Fatal(err)
	}
	f := &fixture{}
	for i := range fixtureIssues {
		n, err := sim.AddIssue(fixtureOwner, fixtureRepo, ghsim.NewIssue{Title: fmt.Sprintf("proof issue %d", i+1)})
		if err != nil {
			t.Fatal(err)
		}
		f.issues = append(f.issues, n)
	}
	for i := range fixturePulls {
		n, err := sim.AddPull(fixtureOwner, fixtureRepo, ghsim.NewPull{Title: fmt.Sprintf("proof pull %d", i+1)})
		if err != nil {
			t.Fatal(err)
		}
		p, err := sim.Pull(fixtureOwner, fixtureRepo, n)
		if err != nil {
			t.Fatal(err)
		}
		f.pulls = append(f.pulls, pullFixture{number: n, head: p.HeadSHA})
	}
	main, err := sim.Ref(fixtureOwner, fixtureRepo, "heads/main")
	if err != nil {
		t.Fatal(err)
	}
	for i := range fixtureBranches {
		b := branchFixture{name: fmt.Sprintf("train-%d", i+1), chain: []string{main}}
		for j := range chainLen {
			sha, err := sim.AddCommit(fixtureOwner, fixtureRepo, ghsim.Commit{Parents: []string{b.chain[j]}, Message: fmt.Sprintf("%s step %d", b.name, j+1)})
			if err != nil {
				t.Fatal(err)
			}
			b.chain = append(b.chain, sha)
		}
		if err := sim.SetRef(fixtureOwner, fixtureRepo, "heads/"+b.name, main, ""); err != nil {
			t.Fatal(err)
		}
		f.branches = append(f.branches, b)
	}
	for i := range fixtureCommits {
		sha, err := sim.AddCommit(fixtureOwner, fixtureRepo, ghsim.Commit{Parents: []string{main}, Message: fmt.Sprintf("status target %d", i+1)})
		if err != nil {
			t.Fatal(err)
		}
		f.commits = append(f.commits, sha)
	}
	return f
}

// plannedOp is one operation of the workload.
type plannedOp struct {
	seq      int // position in the workload
	key      string
	action   string
	resource schema.Resource
	payload  json.RawMessage
	// label is the label an add_labels or remove_label operation names.
	label string
	// step places a ref update in its branch's chain.
	step int
}

// workloadShape says how many operations of each kind a workload of n
// operations has: two merges per pull request, and the rest split 60/20/20
// between issues (comments and labels), commit statuses and ref updates.
func workloadShape(n int) (perIssue, perCommit, perBranch int) {
	rest := n - fixturePulls*mergesPerPull
	perBranch = max(1, rest/5/fixtureBranches)
	perCommit = max(1, rest/5/fixtureCommits)
	perIssue = max(1, (rest-perBranch*fixtureBranches-perCommit*fixtureCommits)/fixtureIssues)
	return
}

// planWorkload builds the operations, each resource's in the order they
// must be submitted, and gives each resource to one client, which submits
// its resources' operations round robin (so each resource's order holds,
// and the chains of ref updates are fast-forwards in submission order).
func planWorkload(f *fixture, n, clients int, run string) (ops []*plannedOp, perClient [][]*plannedOp) {
	perIssue, perCommit, perBranch := workloadShape(n)
	repo := fixtureOwner + "/" + fixtureRepo
	var byResource [][]*plannedOp
	add := func(list []*plannedOp) { byResource = append(byResource, list) }
	for _, num := range f.issues {
		res := schema.Resource{Type: schema.ResourceIssue, ID: fmt.Sprintf("%s#%d", repo, num)}
		var list []*plannedOp
		for j := range perIssue {
			op := &plannedOp{resource: res}
			switch j % 10 {
			case 3: // label, removed four operations later
				op.action, op.label = schema.ActionAddLabels, fmt.Sprintf("proof-%d", j)
				op.payload = mustJSON(map[string]any{"labels": []string{op.label}})
			case 7:
				op.action, op.label = schema.ActionRemoveLabel, fmt.Sprintf("proof-%d", j-4)
				op.payload = mustJSON(map[string]any{"label": op.label})
			default:
				op.action = schema.ActionComment
				op.payload = mustJSON(map[string]any{"body": fmt.Sprintf("proof comment %d on #%d (run %s)", j, num, run)})
			}
			list = append(list, op)
		}
		add(list)
	}
	for _, p := range f.pulls {
		res := schema.Resource{Type: schema.ResourcePullRequest, ID: fmt.Sprintf("%s#%d", repo, p.number)}
		var list []*plannedOp
		for range mergesPerPull {
			list = append(list, &plannedOp{resource: res, action: schema.ActionMerge,
				payload: mustJSON(map[string]any{"sha": p.head, "method": "merge"})})
		}
		add(list)
	}
	for _, b := range f.branches {
		res := schema.Resource{Type: schema.ResourceRef, ID: repo + ":heads/" + b.name}
		var list []*plannedOp
		for j := 1; j <= perBranch && j < len(b.chain); j++ {
			list = append(list, &plannedOp{resource: res, action: schema.ActionUpdateRef, step: j,
				payload: mustJSON(map[string]any{"sha": b.chain[j], "expectedSha": b.chain[j-1]})})
		}
		add(list)
	}
	states := []string{"pending", "success", "failure", "success"}
	for _, c := range f.commits {
		res := schema.Resource{Type: schema.ResourceCommit, ID: repo + "@" + c}
		var list []*plannedOp
		for j := range perCommit {
			list = append(list, &plannedOp{resource: res, action: schema.ActionCreateStatus,
				payload: mustJSON(map[string]any{"state": states[j%len(states)], "context": fmt.Sprintf("proof/check-%d", j%3),
					"description": fmt.Sprintf("proof status %d", j)})})
		}
		add(list)
	}
	perClient = make([][]*plannedOp, clients)
	for c := range clients {
		var mine [][]*plannedOp
		for r := c; r < len(byResource); r += clients {
			mine = append(mine, byResource[r])
		}
		for i := 0; ; i++ {
			more := false
			for _, list := range mine {
				if i < len(list) {
					more = true
					op := list[i]
					op.seq = len(ops)
					op.key = fmt.Sprintf("proof-%s-%05d", run, op.seq)
					ops = append(ops, op)
					perClient[c] = append(perClient[c], op)
				}
			}
			if !more {
				break
			}
		}
	}
	return ops, perClient
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// accepted is an operation the server answered 201 or 200.
type accepted struct {
	op     *plannedOp
	id     string
	status int // 201 or 200
	// first is when the first try was sent, at when the answer came.
	first, at time.Time
}

// submitter runs the clients: each submits its operations in order and
// retries a submission, with the same idempotency key, until the server
// answers it.
type submitter struct {
	baseURL string
	tokens  []string // one per client
	http    *http.Client

	accepted atomic.Int64
	retried  atomic.Int64

	mu       sync.Mutex
	results  map[string]*accepted // by operation ID
	problems []string
	lastAt   time.Time
}

func newSubmitter(baseURL string, tokens []string) *submitter {
	tr := &http.Transport{MaxIdleConns: 64, MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second}
	return &submitter{baseURL: baseURL, tokens: tokens, results: map[string]*accepted{},
		http: &http.Client{Transport: tr, Timeout: 15 * time.Second}}
}

// run submits every client's operations and returns when all are
// answered, or ctx ends.
func (s *submitter) run(ctx context.Context, perClient [][]*plannedOp) {
	defer s.http.CloseIdleConnections()
	var wg sync.WaitGroup
	for c, ops := range perClient {
		wg.Go(func() {
			// The submitter retries itself (submit), so that the report
			// counts each try: the client's own retries would hide them.
			cl, err := client.New(s.baseURL, client.WithToken(s.tokens[c]), client.WithHTTPClient(s.http), client.WithRetries(0))
			if err != nil {
				s.problem(err.Error())
				return
			}
			for _, op := range ops {
				if ctx.Err() != nil {
					return
				}
				s.submit(ctx, cl, op)
			}
		})
	}
	wg.Wait()
}

func (s *submitter) submit(ctx context.Context, cl *client.Client, op *plannedOp) {
	req := client.SubmitRequest{IdempotencyKey: op.key, Action: op.action, Resource: op.resource, Payload: op.payload}
	backoff := 20 * time.Millisecond
	first := time.Now()
	for tries := 1; ; tries++ {
		v, created, err := cl.Submit(ctx, req)
		if err == nil {
			status := http.StatusOK
			if created {
				status = http.StatusCreated
			}
			now := time.Now()
			s.mu.Lock()
			s.results[v.OperationID] = &accepted{op: op, id: v.OperationID, status: status, first: first, at: now}
			s.lastAt = now
			s.mu.Unlock()
			s.accepted.Add(1)
			if tries > 1 {
				s.retried.Add(1)
			}
			return
		}
		var ae *client.Error
		if errors.As(err, &ae) && ae.Status < 500 && ae.Status != http.StatusTooManyRequests {
			s.problem(fmt.Sprintf("submission %s (%s on %s) refused: HTTP %d %s: %s", op.key, op.action, op.resource.Key(), ae.Status, ae.Code, ae.Message))
			return
		}
		// Unreachable (killed, restarting) or a 5xx: the same request
		// again, with the same idempotency key.
		select {
		case <-ctx.Done():
			s.problem(fmt.Sprintf("submission %s never answered: %v (last error: %v)", op.key, ctx.Err(), err))
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}

func (s *submitter) problem(p string) {
	s.mu.Lock()
	s.problems = append(s.problems, p)
	s.mu.Unlock()
}

// pending reports whether the server still has operations to carry out.
func pending(ctx context.Context, admin *client.Client) (bool, error) {
	for _, st := range []string{string(schema.StatusQueued), string(schema.StatusRunning)} {
		l, err := admin.List(ctx, client.ListOptions{Status: st, Limit: 1})
		if err != nil {
			return false, err
		}
		if len(l.Operations) > 0 {
			return true, nil
		}
	}
	return false, nil
}

// jitter returns a duration between lo and hi.
func jitter(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	return lo + time.Duration(rng.Int64N(int64(hi-lo)+1))
}
