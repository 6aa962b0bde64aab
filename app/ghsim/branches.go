package ghsim

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
)

// RenameBranch renames branch from of owner/repo to to, as a person would
// in the repository's settings (sender, default "monalisa"): the branch's
// protection moves with it, each open pull request based on it is
// retargeted to the new name, emitting pull_request "edited" with
// changes.base as GitHub does, and GET …/branches/{from} answers 301 to
// the new name (until a branch of the old name is created again).
func (s *Sim) RenameBranch(owner, name, from, to, sender string) error {
	r, who, err := s.lockRepo(owner, name, sender)
	if err != nil {
		return err
	}
	defer r.mu.Unlock()
	sha, ok := r.refs["heads/"+from]
	if !ok {
		return fmt.Errorf("ghsim: branch %s of %s: %w", from, r.fullName, ErrNotFound)
	}
	if _, ok := r.refs["heads/"+to]; ok || to == "" {
		return fmt.Errorf("ghsim: branch %s of %s exists already: %w", to, r.fullName, ErrInvalid)
	}
	delete(r.refs, "heads/"+from)
	r.refs["heads/"+to] = sha
	if p, ok := r.protection[from]; ok {
		delete(r.protection, from)
		r.protection[to] = p
	}
	s.branchRenames.Store(branchRenameKey(r, from), to)
	for n := 1; n < r.nextNumber; n++ {
		is := r.issues[n]
		if is == nil || is.pr == nil || is.state != "open" || is.pr.base != from {
			continue
		}
		is.pr.base, is.updatedAt = to, s.now()
		s.emitPullLocked(r, is, "edited", who, func() map[string]any {
			return map[string]any{"changes": map[string]any{
				"base": map[string]any{"ref": map[string]any{"from": from}, "sha": map[string]any{"from": sha}},
			}}
		})
	}
	return nil
}

func branchRenameKey(r *repo, branch string) string {
	return strconv.FormatInt(r.id, 10) + "\x00" + branch
}

func (s *Sim) branchRoutes() []*route {
	return []*route{
		{method: "GET", pattern: "/repos/{owner}/{repo}/branches/{branch...}", auth: authInstallation, perms: []string{"contents:read"}, handle: s.getBranch},
	}
}

// getBranch answers GET /repos/{owner}/{repo}/branches/{branch}: the
// branch, or 301 to its new name when it was renamed.
func (s *Sim) getBranch(c *call) response {
	branch := c.r.PathValue("branch")
	r := c.repo
	r.mu.Lock()
	defer r.mu.Unlock()
	sha, ok := r.refs["heads/"+branch]
	if !ok {
		to, renamed := s.branchRenames.Load(branchRenameKey(r, branch))
		if !renamed {
			return errResponse(http.StatusNotFound, "Branch not found", docsRoot)
		}
		loc := s.url + "/repos/" + r.fullName + "/branches/" + url.PathEscape(to.(string))
		return response{status: http.StatusMovedPermanently, header: http.Header{"Location": {loc}},
			body: map[string]any{"message": "Moved Permanently", "url": loc, "documentation_url": docsRoot}}
	}
	api := s.url + "/repos/" + r.fullName
	_, protected := r.protection[branch]
	return response{status: http.StatusOK, body: map[string]any{
		"name":           branch,
		"commit":         map[string]any{"sha": sha, "url": api + "/commits/" + sha},
		"protected":      protected,
		"_links":         map[string]any{"self": api + "/branches/" + url.PathEscape(branch), "html": s.url + "/" + r.fullName + "/tree/" + branch},
		"protection_url": api + "/branches/" + url.PathEscape(branch) + "/protection",
	}}
}
