package ghsim

import (
	"cmp"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// commit is a node of a repository's commit graph. The simulator keeps no
// trees: a commit is its SHA, its parents and a message, enough to decide
// fast-forwards and to tell merges apart.
type commit struct {
	sha     string
	parents []string
	message string
	at      time.Time
	seq     int
}

// Commit describes a commit of the simulator.
type Commit struct {
	SHA     string   `json:"sha"`
	Parents []string `json:"parents"`
	Message string   `json:"message"`
}

// addCommit adds a commit (with a derived SHA when sha is empty). The
// caller holds r.mu, or r is not shared yet.
func (r *repo) addCommit(s *Sim, sha string, parents []string, message string, at time.Time) *commit {
	if sha == "" {
		sha = fakeSHA(r.fullName, strconv.Itoa(len(r.commits)), strings.Join(parents, ","), message, strconv.FormatInt(s.newID(), 10))
	}
	if c, ok := r.commits[sha]; ok {
		return c
	}
	c := &commit{sha: sha, parents: parents, message: message, at: at, seq: len(r.commits)}
	r.commits[sha] = c
	return c
}

// isAncestor reports whether anc is desc or one of its ancestors. The
// caller holds r.mu.
func (r *repo) isAncestor(anc, desc string) bool {
	if anc == desc {
		return true
	}
	target, ok := r.commits[anc]
	if !ok {
		return false
	}
	seen := map[string]bool{desc: true}
	stack := []string{desc}
	for len(stack) > 0 {
		sha := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		c := r.commits[sha]
		if c == nil {
			continue
		}
		for _, p := range c.parents {
			if p == anc {
				return true
			}
			// A parent is always older than its child: skip what is older
			// than the ancestor sought.
			if pc := r.commits[p]; pc != nil && !seen[p] && pc.seq >= target.seq {
				seen[p] = true
				stack = append(stack, p)
			}
		}
	}
	return false
}

// resolveLocked resolves a ref as the commits API does: a full SHA, a
// branch name, "heads/<b>" or "tags/<t>". The caller holds r.mu.
func (r *repo) resolveLocked(ref string) (string, bool) {
	if _, ok := r.commits[ref]; ok {
		return ref, true
	}
	ref = strings.TrimPrefix(ref, "refs/")
	for _, k := range []string{ref, "heads/" + ref, "tags/" + ref} {
		if sha, ok := r.refs[k]; ok {
			return sha, true
		}
	}
	return "", false
}

// AddCommit adds a commit to owner/repo's graph: with the given SHA (a
// derived one when empty) and parents, which must exist. It returns the
// SHA. Adding a commit moves no ref; use SetRef or PushPull for that.
func (s *Sim) AddCommit(owner, name string, c Commit) (string, error) {
	r, err := s.lookupRepo(owner, name)
	if err != nil {
		return "", err
	}
	if c.SHA != "" && !isSHA(c.SHA) {
		return "", fmt.Errorf("ghsim: commit SHA %q is not 40 lower-case hex digits: %w", c.SHA, ErrInvalid)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range c.Parents {
		if _, ok := r.commits[p]; !ok {
			return "", fmt.Errorf("ghsim: parent %s: %w", p, ErrNotFound)
		}
	}
	if c.SHA != "" {
		if _, ok := r.commits[c.SHA]; ok {
			return "", fmt.Errorf("ghsim: commit %s: %w", c.SHA, ErrExists)
		}
	}
	return r.addCommit(s, c.SHA, c.Parents, cmp.Or(c.Message, "A commit"), s.now()).sha, nil
}

// GetCommit returns a commit of owner/repo.
func (s *Sim) GetCommit(owner, name, sha string) (Commit, error) {
	r, err := s.lookupRepo(owner, name)
	if err != nil {
		return Commit{}, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.commits[sha]
	if !ok {
		return Commit{}, fmt.Errorf("ghsim: commit %s: %w", sha, ErrNotFound)
	}
	return Commit{SHA: c.sha, Parents: append([]string{}, c.parents...), Message: c.message}, nil
}

// Ref returns the SHA ref points at ("heads/main", or "refs/heads/main").
func (s *Sim) Ref(owner, name, ref string) (string, error) {
	r, err := s.lookupRepo(owner, name)
	if err != nil {
		return "", err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	sha, ok := r.refs[strings.TrimPrefix(ref, "refs/")]
	if !ok {
		return "", fmt.Errorf("ghsim: ref %s: %w", ref, ErrNotFound)
	}
	return sha, nil
}

// Refs returns every ref of owner/repo ("heads/main" → SHA).
func (s *Sim) Refs(owner, name string) (map[string]string, error) {
	r, err := s.lookupRepo(owner, name)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]string, len(r.refs))
	for k, v := range r.refs {
		out[k] = v
	}
	return out, nil
}

// SetRef points ref ("heads/<b>") at sha, as a person pushing would
// (forced or not): the commit must exist; it creates the ref if new. It
// emits push, and pull_request "synchronize" for open pull requests whose
// head is that branch. sender names the pusher (default "monalisa").
func (s *Sim) SetRef(owner, name, ref, sha, sender string) error {
	r, err := s.lookupRepo(owner, name)
	if err != nil {
		return err
	}
	ref = strings.TrimPrefix(ref, "refs/")
	if !strings.HasPrefix(ref, "heads/") && !strings.HasPrefix(ref, "tags/") {
		return fmt.Errorf("ghsim: ref %q is not heads/… or tags/…: %w", ref, ErrInvalid)
	}
	who := s.sender(sender)
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.commits[sha]; !ok {
		return fmt.Errorf("ghsim: commit %s: %w", sha, ErrNotFound)
	}
	s.moveRefLocked(r, ref, sha, who)
	return nil
}

// moveRefLocked points ref at sha and emits what follows: push, and
// synchronize for pull requests whose head is the branch. The caller holds
// r.mu.
func (s *Sim) moveRefLocked(r *repo, ref, sha string, who *user) {
	before, existed := r.refs[ref]
	if existed && before == sha {
		return
	}
	r.refs[ref] = sha
	s.emitPushLocked(r, ref, before, sha, existed, who)
	branch, ok := strings.CutPrefix(ref, "heads/")
	if !ok {
		return
	}
	for _, n := range r.sortedNumbers() {
		is := r.issues[n]
		if p := is.pr; p != nil && is.state == "open" && p.head == branch && p.headSha != sha {
			prev := p.headSha
			p.headSha = sha
			is.updatedAt = s.now()
			s.emitPullLocked(r, is, "synchronize", who, func() map[string]any { return map[string]any{"before": prev, "after": sha} })
		}
	}
}

func (s *Sim) refRoutes() []*route {
	return []*route{
		{method: "GET", pattern: "/repos/{owner}/{repo}/git/ref/{ref...}", auth: authInstallation, perms: []string{"contents:read"}, handle: s.getRef},
		{method: "GET", pattern: "/repos/{owner}/{repo}/git/commits/{sha}", auth: authInstallation, perms: []string{"contents:read"}, handle: s.getGitCommit},
		{method: "PATCH", pattern: "/repos/{owner}/{repo}/git/refs/{ref...}", auth: authInstallation, creates: true, perms: []string{"contents:write"}, handle: s.updateRef},
		{method: "POST", pattern: "/repos/{owner}/{repo}/git/refs", auth: authInstallation, creates: true, perms: []string{"contents:write"}, handle: s.createRef},
		{method: "DELETE", pattern: "/repos/{owner}/{repo}/git/refs/{ref...}", auth: authInstallation, creates: true, perms: []string{"contents:write"}, handle: s.deleteRef},
	}
}

func (s *Sim) renderRef(r *repo, ref, sha string) map[string]any {
	api := s.url + "/repos/" + r.fullName
	return map[string]any{
		"ref": "refs/" + ref, "node_id": nodeID("REF_", int64(len(ref))+r.id), "url": api + "/git/refs/" + ref,
		"object": map[string]any{"type": "commit", "sha": sha, "url": api + "/git/commits/" + sha},
	}
}

func (s *Sim) getRef(c *call) response {
	ref := strings.TrimPrefix(c.r.PathValue("ref"), "refs/")
	r := c.repo
	r.mu.Lock()
	defer r.mu.Unlock()
	sha, ok := r.refs[ref]
	if !ok {
		return notFound()
	}
	return response{status: http.StatusOK, body: s.renderRef(r, ref, sha)}
}

// getGitCommit answers the git commits API: a commit by its full SHA,
// with its parents.
func (s *Sim) getGitCommit(c *call) response {
	sha := c.r.PathValue("sha")
	r := c.repo
	r.mu.Lock()
	defer r.mu.Unlock()
	cm, ok := r.commits[sha]
	if !ok {
		return notFound()
	}
	api := s.url + "/repos/" + r.fullName
	html := s.url + "/" + r.fullName
	parents := make([]any, 0, len(cm.parents))
	for _, p := range cm.parents {
		parents = append(parents, map[string]any{"sha": p, "url": api + "/git/commits/" + p, "html_url": html + "/commit/" + p})
	}
	gc := s.gitCommit(r, cm.sha, cm.message, cm.at)
	gc["sha"], gc["node_id"], gc["html_url"], gc["parents"] = cm.sha, nodeID("C_", int64(cm.seq)+r.id), html+"/commit/"+cm.sha, parents
	return response{status: http.StatusOK, body: gc}
}

func (s *Sim) updateRef(c *call) response {
	ref := strings.TrimPrefix(c.r.PathValue("ref"), "refs/")
	var req struct {
		SHA   string `json:"sha"`
		Force bool   `json:"force"`
	}
	if resp, ok := c.decode("Reference", &req); !ok {
		return resp
	}
	if req.SHA == "" {
		return validationFailed("Reference", "sha", "missing_field", "")
	}
	r := c.repo
	r.mu.Lock()
	defer r.mu.Unlock()
	old, ok := r.refs[ref]
	if !ok {
		return errResponse(http.StatusUnprocessableEntity, "Reference does not exist", docsRoot)
	}
	if _, ok := r.commits[req.SHA]; !ok {
		return errResponse(http.StatusUnprocessableEntity, "Object does not exist", docsRoot)
	}
	if !req.Force && !r.isAncestor(old, req.SHA) {
		return errResponse(http.StatusUnprocessableEntity, "Update is not a fast forward", docsRoot)
	}
	s.moveRefLocked(r, ref, req.SHA, c.sender())
	c.applied("ref:"+r.fullName+":"+ref, http.StatusOK)
	return response{status: http.StatusOK, body: s.renderRef(r, ref, req.SHA)}
}

func (s *Sim) createRef(c *call) response {
	var req struct {
		Ref string `json:"ref"`
		SHA string `json:"sha"`
	}
	if resp, ok := c.decode("Reference", &req); !ok {
		return resp
	}
	ref, ok := strings.CutPrefix(req.Ref, "refs/")
	if !ok || strings.Count(ref, "/") < 1 || strings.HasSuffix(ref, "/") {
		return errResponse(http.StatusUnprocessableEntity, "Reference name is not well-formed", docsRoot)
	}
	r := c.repo
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.refs[ref]; ok {
		return errResponse(http.StatusUnprocessableEntity, "Reference already exists", docsRoot)
	}
	if _, ok := r.commits[req.SHA]; !ok {
		return errResponse(http.StatusUnprocessableEntity, "Object does not exist", docsRoot)
	}
	s.moveRefLocked(r, ref, req.SHA, c.sender())
	c.applied("ref:"+r.fullName+":"+ref, http.StatusCreated)
	resp := response{status: http.StatusCreated, body: s.renderRef(r, ref, req.SHA)}
	resp.header = http.Header{"Location": {s.url + "/repos/" + r.fullName + "/git/refs/" + ref}}
	return resp
}

func (s *Sim) deleteRef(c *call) response {
	ref := strings.TrimPrefix(c.r.PathValue("ref"), "refs/")
	r := c.repo
	r.mu.Lock()
	defer r.mu.Unlock()
	old, ok := r.refs[ref]
	if !ok {
		return errResponse(http.StatusUnprocessableEntity, "Reference does not exist", docsRoot)
	}
	delete(r.refs, ref)
	s.emitPushLocked(r, ref, old, zeroSHA, true, c.sender())
	c.applied("ref:"+r.fullName+":"+ref, http.StatusNoContent)
	return response{status: http.StatusNoContent}
}

const zeroSHA = "0000000000000000000000000000000000000000"
