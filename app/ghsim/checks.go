package ghsim

import (
	"cmp"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"
)

// checkSuite groups the check runs of one App on one commit.
type checkSuite struct {
	id         int64
	app        *app
	headSha    string
	headBranch string
	runs       []*checkRun
	createdAt  time.Time
	updatedAt  time.Time
}

type checkRun struct {
	id          int64
	name        string
	status      string // queued, in_progress, completed
	conclusion  string
	startedAt   time.Time
	completedAt time.Time
	suite       *checkSuite
}

// NewCheckRun is a check run to create with AddCheckRun. Check runs belong
// to the simulator's CI App ("sim-ci").
type NewCheckRun struct {
	Name    string `json:"name"`
	HeadSHA string `json:"headSha"`
	// Status is queued, in_progress or completed (default in_progress).
	Status string `json:"status,omitempty"`
	// Conclusion is required when Status is completed: success, failure,
	// neutral, cancelled, skipped, timed_out or action_required.
	Conclusion string `json:"conclusion,omitempty"`
}

// CheckRunInfo describes a check run.
type CheckRunInfo struct {
	ID         int64  `json:"id"`
	Name       string `json:"name"`
	HeadSHA    string `json:"headSha"`
	Status     string `json:"status"`
	Conclusion string `json:"conclusion,omitempty"`
	SuiteID    int64  `json:"checkSuiteId"`
}

var checkConclusions = []string{"success", "failure", "neutral", "cancelled", "skipped", "timed_out", "action_required"}

// AddCheckRun creates a check run on a commit (in the CI App's check suite
// for it) and returns its ID. A run created completed emits check_run
// "completed" (and check_suite "completed" when it completes the suite).
func (s *Sim) AddCheckRun(owner, name string, in NewCheckRun) (int64, error) {
	r, err := s.lookupRepo(owner, name)
	if err != nil {
		return 0, err
	}
	in.Status = cmp.Or(in.Status, "in_progress")
	if err := validateCheck(in.Name, in.Status, in.Conclusion); err != nil {
		return 0, err
	}
	who := s.sender("")
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.commits[in.HeadSHA]; !ok {
		return 0, fmt.Errorf("ghsim: commit %s: %w", in.HeadSHA, ErrNotFound)
	}
	now := s.now()
	var suite *checkSuite
	for _, cs := range r.checkSuites[in.HeadSHA] {
		if cs.app == s.ciApp {
			suite = cs
		}
	}
	if suite == nil {
		suite = &checkSuite{id: s.newID(), app: s.ciApp, headSha: in.HeadSHA, headBranch: r.branchOfLocked(in.HeadSHA), createdAt: now, updatedAt: now}
		r.checkSuites[in.HeadSHA] = append(r.checkSuites[in.HeadSHA], suite)
	}
	run := &checkRun{id: s.newID(), name: in.Name, status: in.Status, startedAt: now, suite: suite}
	suite.runs = append(suite.runs, run)
	suite.updatedAt = now
	if in.Status == "completed" {
		s.completeRunLocked(r, run, in.Conclusion, who)
	}
	return run.id, nil
}

// CompleteCheckRun completes check run id with conclusion, emitting
// check_run "completed" and, when it was the suite's last run to complete,
// check_suite "completed".
func (s *Sim) CompleteCheckRun(owner, name string, id int64, conclusion string) error {
	r, err := s.lookupRepo(owner, name)
	if err != nil {
		return err
	}
	if err := validateCheck("run", "completed", conclusion); err != nil {
		return err
	}
	who := s.sender("")
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, suites := range r.checkSuites {
		for _, suite := range suites {
			for _, run := range suite.runs {
				if run.id == id {
					if run.status == "completed" {
						return fmt.Errorf("ghsim: check run %d is completed: %w", id, ErrInvalid)
					}
					s.completeRunLocked(r, run, conclusion, who)
					return nil
				}
			}
		}
	}
	return fmt.Errorf("ghsim: check run %d: %w", id, ErrNotFound)
}

// CheckRuns lists the check runs on sha.
func (s *Sim) CheckRuns(owner, name, sha string) ([]CheckRunInfo, error) {
	r, err := s.lookupRepo(owner, name)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	out := []CheckRunInfo{}
	for _, suite := range r.checkSuites[sha] {
		for _, run := range suite.runs {
			out = append(out, CheckRunInfo{ID: run.id, Name: run.name, HeadSHA: sha, Status: run.status, Conclusion: run.conclusion, SuiteID: suite.id})
		}
	}
	return out, nil
}

func validateCheck(name, status, conclusion string) error {
	switch {
	case name == "":
		return fmt.Errorf("ghsim: check run without a name: %w", ErrInvalid)
	case !slices.Contains([]string{"queued", "in_progress", "completed"}, status):
		return fmt.Errorf("ghsim: check run status %q: %w", status, ErrInvalid)
	case status == "completed" && !slices.Contains(checkConclusions, conclusion):
		return fmt.Errorf("ghsim: check run conclusion %q: %w", conclusion, ErrInvalid)
	case status != "completed" && conclusion != "":
		return fmt.Errorf("ghsim: a conclusion needs status completed: %w", ErrInvalid)
	}
	return nil
}

func (s *Sim) completeRunLocked(r *repo, run *checkRun, conclusion string, who *user) {
	now := s.now()
	run.status, run.conclusion, run.completedAt = "completed", conclusion, now
	run.suite.updatedAt = now
	s.emitRepoLocked(r, "check_run", "completed", who, func() map[string]any {
		return map[string]any{"check_run": s.renderCheckRun(r, run)}
	})
	if run.suite.status() == "completed" {
		s.emitRepoLocked(r, "check_suite", "completed", who, func() map[string]any {
			return map[string]any{"check_suite": s.renderCheckSuite(r, run.suite)}
		})
	}
}

func (cs *checkSuite) status() string {
	if len(cs.runs) == 0 {
		return "queued"
	}
	for _, run := range cs.runs {
		if run.status != "completed" {
			return "in_progress"
		}
	}
	return "completed"
}

// conclusion of a completed suite: the worst of its runs.
func (cs *checkSuite) conclusion() any {
	if cs.status() != "completed" {
		return nil
	}
	rank := map[string]int{"success": 0, "skipped": 1, "neutral": 2, "cancelled": 3, "timed_out": 4, "action_required": 5, "failure": 6}
	worst := "success"
	for _, run := range cs.runs {
		if rank[run.conclusion] > rank[worst] {
			worst = run.conclusion
		}
	}
	return worst
}

// branchOfLocked names a branch whose head is sha, or nil.
func (r *repo) branchOfLocked(sha string) string {
	for ref, v := range r.refs {
		if v == sha && len(ref) > 6 && ref[:6] == "heads/" {
			return ref[6:]
		}
	}
	return ""
}

func (s *Sim) checkRoutes() []*route {
	return []*route{
		{method: "GET", pattern: "/repos/{owner}/{repo}/commits/{ref}/check-runs", auth: authInstallation, perms: []string{"checks:read"}, handle: s.listCheckRuns},
		{method: "GET", pattern: "/repos/{owner}/{repo}/commits/{ref}/check-suites", auth: authInstallation, perms: []string{"checks:read"}, handle: s.listCheckSuites},
	}
}

func (s *Sim) listCheckRuns(c *call) response {
	q := c.r.URL.Query()
	r := c.repo
	r.mu.Lock()
	defer r.mu.Unlock()
	sha, _ := r.resolveLocked(c.r.PathValue("ref"))
	var runs []*checkRun
	for _, suite := range r.checkSuites[sha] {
		for _, run := range suite.runs {
			if (q.Get("check_name") == "" || q.Get("check_name") == run.name) && (q.Get("status") == "" || q.Get("status") == run.status) {
				runs = append(runs, run)
			}
		}
	}
	lo, hi, h := c.paginate(len(runs))
	out := make([]any, 0, hi-lo)
	for _, run := range runs[lo:hi] {
		out = append(out, s.renderCheckRun(r, run))
	}
	return response{status: http.StatusOK, header: h, body: map[string]any{"total_count": len(runs), "check_runs": out}}
}

func (s *Sim) listCheckSuites(c *call) response {
	r := c.repo
	r.mu.Lock()
	defer r.mu.Unlock()
	sha, _ := r.resolveLocked(c.r.PathValue("ref"))
	suites := r.checkSuites[sha]
	lo, hi, h := c.paginate(len(suites))
	out := make([]any, 0, hi-lo)
	for _, suite := range suites[lo:hi] {
		out = append(out, s.renderCheckSuite(r, suite))
	}
	return response{status: http.StatusOK, header: h, body: map[string]any{"total_count": len(suites), "check_suites": out}}
}

func (s *Sim) renderCheckRun(r *repo, run *checkRun) map[string]any {
	api := s.url + "/repos/" + r.fullName
	id := strconv.FormatInt(run.id, 10)
	var conclusion any
	if run.conclusion != "" {
		conclusion = run.conclusion
	}
	prs := s.pullRefsLocked(r, run.suite.headSha)
	return map[string]any{
		"id": run.id, "node_id": nodeID("CR_", run.id), "head_sha": run.suite.headSha, "external_id": id,
		"url": api + "/check-runs/" + id, "html_url": s.url + "/" + r.fullName + "/runs/" + id,
		"details_url": s.url + "/" + r.fullName + "/runs/" + id, "status": run.status, "conclusion": conclusion,
		"started_at": formatTime(run.startedAt), "completed_at": formatTimePtr(run.completedAt), "name": run.name,
		"output": map[string]any{
			"title": nil, "summary": nil, "text": nil, "annotations_count": 0,
			"annotations_url": api + "/check-runs/" + id + "/annotations",
		},
		"check_suite":   map[string]any{"id": run.suite.id},
		"app":           run.suite.app.json,
		"pull_requests": prs,
	}
}

func (s *Sim) renderCheckSuite(r *repo, cs *checkSuite) map[string]any {
	api := s.url + "/repos/" + r.fullName
	id := strconv.FormatInt(cs.id, 10)
	c := r.commits[cs.headSha]
	var before any
	if c != nil && len(c.parents) > 0 {
		before = c.parents[0]
	}
	return map[string]any{
		"id": cs.id, "node_id": nodeID("CS_", cs.id), "head_branch": nilIfEmpty(cs.headBranch), "head_sha": cs.headSha,
		"status": cs.status(), "conclusion": cs.conclusion(), "url": api + "/check-suites/" + id,
		"before": before, "after": cs.headSha, "pull_requests": s.pullRefsLocked(r, cs.headSha), "app": cs.app.json,
		"repository": r.repr(), "created_at": formatTime(cs.createdAt), "updated_at": formatTime(cs.updatedAt),
		"head_commit": s.renderHeadCommit(r, c), "latest_check_runs_count": len(cs.runs),
		"check_runs_url": api + "/check-suites/" + id + "/check-runs", "rerequestable": true, "runs_rerequestable": false,
	}
}

// pullRefsLocked is the "pull_requests" list of check payloads: the open
// pull requests whose head is sha.
func (s *Sim) pullRefsLocked(r *repo, sha string) []any {
	out := []any{}
	for _, is := range r.pullsWithHeadLocked(sha) {
		p := is.pr
		ref := func(branch, sha string) map[string]any {
			return map[string]any{"ref": branch, "sha": sha, "repo": map[string]any{"id": r.id, "url": s.url + "/repos/" + r.fullName, "name": r.name}}
		}
		out = append(out, map[string]any{
			"id": p.id, "number": is.number, "url": s.url + "/repos/" + r.fullName + "/pulls/" + strconv.Itoa(is.number),
			"head": ref(p.head, p.headSha), "base": ref(p.base, r.baseShaLocked(is)),
		})
	}
	return out
}

// renderHeadCommit is the "simple-commit" of a commit.
func (s *Sim) renderHeadCommit(r *repo, c *commit) map[string]any {
	if c == nil {
		return nil
	}
	person := map[string]any{"name": "Mona Lisa", "email": "monalisa@example.com"}
	return map[string]any{
		"id": c.sha, "tree_id": fakeSHA("tree", c.sha), "message": c.message, "timestamp": formatTime(c.at),
		"author": person, "committer": person,
	}
}
