package ghsim

import (
	"cmp"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"
)

// pull is the pull-request side of an issue.
type pull struct {
	id             int64
	head           string // head branch
	base           string // base branch
	headSha        string
	mergeable      bool
	merged         bool
	mergedAt       time.Time
	mergedBy       *user
	mergeCommitSha string
	baseShaAtClose string
}

// NewPull is a pull request to open with AddPull.
type NewPull struct {
	// Number is the pull request's number; 0 takes the next free one.
	Number int    `json:"number,omitempty"`
	Title  string `json:"title,omitempty"`
	Body   string `json:"body,omitempty"`
	// HeadSHA is the head commit. If it is not in the repository's graph
	// it is added, as a child of the base branch's head. Empty derives a
	// new commit.
	HeadSHA string `json:"headSha,omitempty"`
	// Head is the head branch (default "pr-<number>"); it is created or
	// moved to HeadSHA.
	Head string `json:"head,omitempty"`
	// Base is the base branch (default "main"); it must exist.
	Base string `json:"base,omitempty"`
	// Mergeable says whether GitHub could merge it (default true).
	Mergeable *bool `json:"mergeable,omitempty"`
	// User is the author (default "monalisa").
	User string `json:"user,omitempty"`
}

// Pull describes a pull request of the simulator.
type Pull struct {
	Number         int           `json:"number"`
	Title          string        `json:"title"`
	State          string        `json:"state"`
	Merged         bool          `json:"merged"`
	MergeCommitSHA string        `json:"mergeCommitSha,omitempty"`
	MergedBy       string        `json:"mergedBy,omitempty"`
	Mergeable      bool          `json:"mergeable"`
	Head           string        `json:"head"`
	HeadSHA        string        `json:"headSha"`
	Base           string        `json:"base"`
	BaseSHA        string        `json:"baseSha"`
	Labels         []string      `json:"labels"`
	Comments       []CommentInfo `json:"comments"`
}

// AddPull opens a pull request in owner/repo and returns its number. It
// emits pull_request "opened".
func (s *Sim) AddPull(owner, name string, in NewPull) (int, error) {
	r, err := s.lookupRepo(owner, name)
	if err != nil {
		return 0, err
	}
	if in.HeadSHA != "" && !isSHA(in.HeadSHA) {
		return 0, fmt.Errorf("ghsim: head SHA %q is not 40 lower-case hex digits: %w", in.HeadSHA, ErrInvalid)
	}
	who := s.sender(in.User)
	r.mu.Lock()
	defer r.mu.Unlock()
	base := cmp.Or(in.Base, defaultBranch)
	baseSha, ok := r.refs["heads/"+base]
	if !ok {
		return 0, fmt.Errorf("ghsim: base branch %s: %w", base, ErrNotFound)
	}
	n, err := r.claimNumberLocked(in.Number)
	if err != nil {
		return 0, err
	}
	head := cmp.Or(in.Head, "pr-"+strconv.Itoa(n))
	if head == base {
		return 0, fmt.Errorf("ghsim: head and base are both %s: %w", base, ErrInvalid)
	}
	headSha := in.HeadSHA
	if _, known := r.commits[headSha]; !known {
		headSha = r.addCommit(s, headSha, []string{baseSha}, "Changes of #"+strconv.Itoa(n), s.now()).sha
	}
	now := s.now()
	is := &issue{
		number: n, id: s.newID(), title: cmp.Or(in.Title, "Pull request "+strconv.Itoa(n)), body: in.Body,
		user: who, state: "open", createdAt: now, updatedAt: now,
		pr: &pull{id: s.newID(), head: head, base: base, headSha: headSha, mergeable: in.Mergeable == nil || *in.Mergeable},
	}
	r.issues[n] = is
	r.refs["heads/"+head] = headSha
	s.emitPullLocked(r, is, "opened", who, nil)
	return n, nil
}

// Pull returns the state of pull request n of owner/repo.
func (s *Sim) Pull(owner, name string, n int) (Pull, error) {
	r, err := s.lookupRepo(owner, name)
	if err != nil {
		return Pull{}, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	is, ok := r.issues[n]
	if !ok || is.pr == nil {
		return Pull{}, fmt.Errorf("ghsim: pull request %s#%d: %w", r.fullName, n, ErrNotFound)
	}
	p := is.pr
	d := is.describe()
	out := Pull{
		Number: n, Title: is.title, State: is.state, Merged: p.merged, MergeCommitSHA: p.mergeCommitSha,
		Mergeable: p.mergeable, Head: p.head, HeadSHA: p.headSha, Base: p.base, BaseSHA: r.baseShaLocked(is),
		Labels: d.Labels, Comments: d.Comments,
	}
	if p.mergedBy != nil {
		out.MergedBy = p.mergedBy.login
	}
	return out, nil
}

// SetMergeable sets whether pull request n can be merged.
func (s *Sim) SetMergeable(owner, name string, n int, mergeable bool) error {
	return s.withPull(owner, name, n, func(r *repo, is *issue) error {
		is.pr.mergeable = mergeable
		return nil
	})
}

// PushPull pushes a new commit to pull request n's head branch, as its
// author would: a child of the current head (with the given SHA, or a
// derived one when empty). It emits push and pull_request "synchronize",
// and returns the new head SHA.
func (s *Sim) PushPull(owner, name string, n int, sha, sender string) (string, error) {
	if sha != "" && !isSHA(sha) {
		return "", fmt.Errorf("ghsim: SHA %q is not 40 lower-case hex digits: %w", sha, ErrInvalid)
	}
	who := s.sender(sender)
	var head string
	err := s.withPull(owner, name, n, func(r *repo, is *issue) error {
		if is.state != "open" {
			return fmt.Errorf("ghsim: pull request %s#%d is closed: %w", r.fullName, n, ErrInvalid)
		}
		if _, exists := r.commits[sha]; exists {
			return fmt.Errorf("ghsim: commit %s: %w", sha, ErrExists)
		}
		c := r.addCommit(s, sha, []string{is.pr.headSha}, "More changes of #"+strconv.Itoa(n), s.now())
		head = c.sha
		s.moveRefLocked(r, "heads/"+is.pr.head, c.sha, who)
		return nil
	})
	return head, err
}

// ClosePull closes (or, with closed false, reopens) pull request n as a
// person would, without merging; it emits pull_request "closed" or
// "reopened".
func (s *Sim) ClosePull(owner, name string, n int, closed bool, sender string) error {
	who := s.sender(sender)
	return s.withPull(owner, name, n, func(r *repo, is *issue) error {
		if is.pr.merged {
			return fmt.Errorf("ghsim: pull request %s#%d is merged: %w", r.fullName, n, ErrInvalid)
		}
		switch {
		case closed && is.state == "open":
			is.state, is.closedAt, is.updatedAt = "closed", s.now(), s.now()
			is.pr.baseShaAtClose = r.refs["heads/"+is.pr.base]
			s.emitPullLocked(r, is, "closed", who, nil)
		case !closed && is.state == "closed":
			is.state, is.closedAt, is.updatedAt = "open", time.Time{}, s.now()
			s.emitPullLocked(r, is, "reopened", who, nil)
		}
		return nil
	})
}

// SetPullBase changes the base branch of open pull request n as a person
// would (sender, default "monalisa"), emitting pull_request "edited" with
// changes.base (the old ref and sha), as GitHub does; GitHub does the same
// itself when the base branch of a pull request is deleted after its own
// pull request merged (the stacked one moves to that one's base). The
// branch must exist.
func (s *Sim) SetPullBase(owner, name string, n int, base, sender string) error {
	who := s.sender(sender)
	return s.withPull(owner, name, n, func(r *repo, is *issue) error {
		if is.state != "open" {
			return fmt.Errorf("ghsim: pull request %s#%d is closed: %w", r.fullName, n, ErrInvalid)
		}
		if _, ok := r.refs["heads/"+base]; !ok {
			return fmt.Errorf("ghsim: branch %s of %s: %w", base, r.fullName, ErrNotFound)
		}
		if is.pr.base == base {
			return nil
		}
		from, fromSha := is.pr.base, r.baseShaLocked(is)
		is.pr.base, is.updatedAt = base, s.now()
		s.emitPullLocked(r, is, "edited", who, func() map[string]any {
			return map[string]any{"changes": map[string]any{
				"base": map[string]any{"ref": map[string]any{"from": from}, "sha": map[string]any{"from": fromSha}},
			}}
		})
		return nil
	})
}

func (s *Sim) withPull(owner, name string, n int, f func(*repo, *issue) error) error {
	r, err := s.lookupRepo(owner, name)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	is, ok := r.issues[n]
	if !ok || is.pr == nil {
		return fmt.Errorf("ghsim: pull request %s#%d: %w", r.fullName, n, ErrNotFound)
	}
	return f(r, is)
}

// baseShaLocked is the base SHA a pull request shows: the branch's head
// while open, its head when closed.
func (r *repo) baseShaLocked(is *issue) string {
	if is.state == "closed" && is.pr.baseShaAtClose != "" {
		return is.pr.baseShaAtClose
	}
	return r.refs["heads/"+is.pr.base]
}

func (s *Sim) pullRoutes() []*route {
	return []*route{
		{method: "GET", pattern: "/repos/{owner}/{repo}/pulls", auth: authInstallation, perms: []string{"pull_requests:read"}, handle: s.listPulls},
		{method: "GET", pattern: "/repos/{owner}/{repo}/pulls/{number}", auth: authInstallation, perms: []string{"pull_requests:read"}, handle: s.getPull},
		{method: "GET", pattern: "/repos/{owner}/{repo}/pulls/{number}/merge", auth: authInstallation, perms: []string{"pull_requests:read"}, handle: s.isMerged},
		{method: "PUT", pattern: "/repos/{owner}/{repo}/pulls/{number}/merge", auth: authInstallation, creates: true, perms: []string{"contents:write"}, handle: s.mergePull},
		{method: "PUT", pattern: "/repos/{owner}/{repo}/pulls/{number}/update-branch", auth: authInstallation, creates: true, perms: []string{"pull_requests:write", "contents:write"}, handle: s.updateBranch},
	}
}

// pullOf finds the call's pull request and locks the repository; the
// caller unlocks it.
func (c *call) pullOf() (*issue, bool) {
	is, ok := c.issueOf()
	return is, ok && is.pr != nil
}

func (s *Sim) getPull(c *call) response {
	is, ok := c.pullOf()
	defer c.repo.mu.Unlock()
	if !ok {
		return notFound()
	}
	return response{status: http.StatusOK, body: s.renderPull(c.repo, is)}
}

func (s *Sim) listPulls(c *call) response {
	q := c.r.URL.Query()
	state := cmp.Or(q.Get("state"), "open")
	if state != "open" && state != "closed" && state != "all" {
		return validationFailed("PullRequest", "state", "invalid", "")
	}
	base := q.Get("base")
	head := q.Get("head")
	r := c.repo
	r.mu.Lock()
	defer r.mu.Unlock()
	var list []*issue
	for _, is := range r.issues {
		switch {
		case is.pr == nil, state != "all" && is.state != state, base != "" && is.pr.base != base,
			head != "" && head != r.owner.login+":"+is.pr.head && head != is.pr.head:
			continue
		}
		list = append(list, is)
	}
	desc := q.Get("direction") != "asc"
	slices.SortFunc(list, func(a, b *issue) int {
		if desc {
			return b.number - a.number
		}
		return a.number - b.number
	})
	lo, hi, h := c.paginate(len(list))
	out := make([]any, 0, hi-lo)
	for _, is := range list[lo:hi] {
		out = append(out, s.renderPull(r, is))
	}
	return response{status: http.StatusOK, header: h, body: out}
}

func (s *Sim) isMerged(c *call) response {
	is, ok := c.pullOf()
	defer c.repo.mu.Unlock()
	if !ok || !is.pr.merged {
		return notFound()
	}
	return response{status: http.StatusNoContent}
}

func (s *Sim) mergePull(c *call) response {
	var req struct {
		CommitTitle   string `json:"commit_title"`
		CommitMessage string `json:"commit_message"`
		SHA           string `json:"sha"`
		MergeMethod   string `json:"merge_method"`
	}
	if resp, ok := c.decode("PullRequest", &req); !ok {
		return resp
	}
	method := cmp.Or(req.MergeMethod, "merge")
	if method != "merge" && method != "squash" && method != "rebase" {
		return validationFailed("PullRequest", "merge_method", "invalid", "")
	}
	is, ok := c.pullOf()
	r := c.repo
	defer r.mu.Unlock()
	if !ok {
		return notFound()
	}
	p := is.pr
	if p.merged || is.state != "open" {
		return errResponse(http.StatusMethodNotAllowed, "Pull Request is not mergeable", docsRoot)
	}
	if req.SHA != "" && req.SHA != p.headSha {
		return errResponse(http.StatusConflict, "Head branch was modified. Review and try the merge again.", docsRoot)
	}
	if !p.mergeable {
		return errResponse(http.StatusMethodNotAllowed, "Pull Request is not mergeable", docsRoot)
	}
	if msg := r.requiredChecksLocked(p.base, p.headSha); msg != "" {
		return errResponse(http.StatusMethodNotAllowed, msg, docsRoot)
	}
	baseSha, ok := r.refs["heads/"+p.base]
	if !ok {
		return errResponse(http.StatusUnprocessableEntity, baseModifiedMessage, docsRoot)
	}
	title := cmp.Or(req.CommitTitle, fmt.Sprintf("Merge pull request #%d from %s/%s", is.number, r.owner.login, p.head))
	parents := []string{baseSha, p.headSha}
	if method != "merge" {
		parents = []string{baseSha}
	}
	now := s.now()
	mc := r.addCommit(s, "", parents, title, now)
	p.merged, p.mergedAt, p.mergedBy, p.mergeCommitSha, p.baseShaAtClose = true, now, c.sender(), mc.sha, baseSha
	is.state, is.closedAt, is.updatedAt = "closed", now, now
	s.moveRefLocked(r, "heads/"+p.base, mc.sha, c.sender())
	s.emitPullLocked(r, is, "closed", c.sender(), nil)
	c.applied("pull_request:"+r.fullName+"#"+strconv.Itoa(is.number), http.StatusOK)
	return response{status: http.StatusOK, body: map[string]any{"sha": mc.sha, "merged": true, "message": "Pull Request successfully merged"}}
}

func (s *Sim) updateBranch(c *call) response {
	var req struct {
		ExpectedHeadSHA string `json:"expected_head_sha"`
	}
	if resp, ok := c.decode("PullRequest", &req); !ok {
		return resp
	}
	is, ok := c.pullOf()
	r := c.repo
	defer r.mu.Unlock()
	if !ok {
		return notFound()
	}
	p := is.pr
	if is.state != "open" {
		return errResponse(http.StatusUnprocessableEntity, "Cannot update a closed pull request branch.", docsRoot)
	}
	if req.ExpectedHeadSHA != "" && req.ExpectedHeadSHA != p.headSha {
		return errResponse(http.StatusUnprocessableEntity, "expected head sha didn't match current head ref.", docsRoot)
	}
	baseSha := r.refs["heads/"+p.base]
	if r.isAncestor(baseSha, p.headSha) {
		// GitHub makes no merge commit that would bring nothing in.
		return errResponse(http.StatusUnprocessableEntity, "There are no new commits on the base branch.", docsRoot)
	}
	mc := r.addCommit(s, "", []string{p.headSha, baseSha}, fmt.Sprintf("Merge branch '%s' into %s", p.base, p.head), s.now())
	s.moveRefLocked(r, "heads/"+p.head, mc.sha, c.sender())
	c.applied("pull_request:"+r.fullName+"#"+strconv.Itoa(is.number), http.StatusAccepted)
	return response{status: http.StatusAccepted, body: map[string]any{
		"message": "Updating pull request branch.", "url": s.url + "/" + r.fullName + "/pull/" + strconv.Itoa(is.number),
	}}
}

// renderPull is the REST "pull-request" representation.
func (s *Sim) renderPull(r *repo, is *issue) map[string]any {
	p := is.pr
	api := s.url + "/repos/" + r.fullName
	num := strconv.Itoa(is.number)
	self := api + "/pulls/" + num
	html := s.url + "/" + r.fullName + "/pull/" + num
	issueURL := api + "/issues/" + num
	labels := make([]any, 0, len(is.labels))
	for _, l := range is.labels {
		labels = append(labels, s.renderLabel(r, l))
	}
	var mergeable any = p.mergeable
	state := "clean"
	switch {
	case is.state == "closed":
		mergeable, state = nil, "unknown"
	case !p.mergeable:
		state = "dirty"
	case r.requiredChecksLocked(p.base, p.headSha) != "":
		state = "blocked"
	}
	var mergedBy any
	if p.mergedBy != nil {
		mergedBy = p.mergedBy.json
	}
	var mergeSha any
	if p.mergeCommitSha != "" {
		mergeSha = p.mergeCommitSha
	}
	branch := func(ref, sha string) map[string]any {
		return map[string]any{"label": r.owner.login + ":" + ref, "ref": ref, "sha": sha, "user": r.owner.json, "repo": r.repr()}
	}
	link := func(h string) map[string]any { return map[string]any{"href": h} }
	return map[string]any{
		"url": self, "id": p.id, "node_id": nodeID("PR_", p.id), "html_url": html,
		"diff_url": html + ".diff", "patch_url": html + ".patch", "issue_url": issueURL,
		"commits_url": self + "/commits", "review_comments_url": self + "/comments",
		"review_comment_url": api + "/pulls/comments{/number}", "comments_url": issueURL + "/comments",
		"statuses_url": api + "/statuses/" + p.headSha, "number": is.number, "state": is.state,
		"locked": false, "title": is.title, "user": is.user.json, "body": nilIfEmpty(is.body), "labels": labels,
		"milestone": nil, "active_lock_reason": nil, "created_at": formatTime(is.createdAt),
		"updated_at": formatTime(is.updatedAt), "closed_at": formatTimePtr(is.closedAt),
		"merged_at": formatTimePtr(p.mergedAt), "merge_commit_sha": mergeSha, "assignee": nil,
		"assignees": []any{}, "requested_reviewers": []any{}, "requested_teams": []any{},
		"head": branch(p.head, p.headSha), "base": branch(p.base, r.baseShaLocked(is)),
		"_links": map[string]any{
			"self": link(self), "html": link(html), "issue": link(issueURL), "comments": link(issueURL + "/comments"),
			"review_comments": link(self + "/comments"), "review_comment": link(api + "/pulls/comments{/number}"),
			"commits": link(self + "/commits"), "statuses": link(api + "/statuses/" + p.headSha),
		},
		"author_association": association(r, is.user), "auto_merge": nil, "draft": false,
		"merged": p.merged, "mergeable": mergeable, "rebaseable": mergeable, "mergeable_state": state,
		"merged_by": mergedBy, "comments": len(is.comments), "review_comments": 0,
		"maintainer_can_modify": false, "commits": 1, "additions": 1, "deletions": 0, "changed_files": 1,
	}
}

// pullsWithHeadLocked lists the open pull requests whose head is sha.
func (r *repo) pullsWithHeadLocked(sha string) []*issue {
	var out []*issue
	for _, n := range r.sortedNumbers() {
		is := r.issues[n]
		if is.pr != nil && is.state == "open" && is.pr.headSha == sha {
			out = append(out, is)
		}
	}
	return out
}
