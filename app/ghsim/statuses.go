package ghsim

import (
	"cmp"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
)

// status is a commit status.
type status struct {
	id          int64
	state       string
	context     string
	description string
	targetURL   string
	creator     *user
	createdAt   time.Time
}

// NewStatus is a commit status to set with SetStatus.
type NewStatus struct {
	State       string `json:"state"` // error, failure, pending or success
	Context     string `json:"context,omitempty"`
	Description string `json:"description,omitempty"`
	TargetURL   string `json:"targetUrl,omitempty"`
	// User is who sets it (default "monalisa").
	User string `json:"user,omitempty"`
}

// StatusInfo describes a commit status.
type StatusInfo struct {
	ID          int64  `json:"id"`
	State       string `json:"state"`
	Context     string `json:"context"`
	Description string `json:"description"`
	TargetURL   string `json:"targetUrl"`
	Creator     string `json:"creator"`
}

// protection is a branch's required status checks.
type protection struct {
	strict   bool
	contexts []string
}

var statusStates = []string{"error", "failure", "pending", "success"}

// SetStatus sets a commit status on sha as a CI system (or person) would,
// emitting status.
func (s *Sim) SetStatus(owner, name, sha string, in NewStatus) error {
	r, err := s.lookupRepo(owner, name)
	if err != nil {
		return err
	}
	if !slices.Contains(statusStates, in.State) {
		return fmt.Errorf("ghsim: status state %q: %w", in.State, ErrInvalid)
	}
	who := s.sender(in.User)
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.commits[sha]; !ok {
		return fmt.Errorf("ghsim: commit %s: %w", sha, ErrNotFound)
	}
	s.addStatusLocked(r, sha, in.State, in.Context, in.Description, in.TargetURL, who)
	return nil
}

// Statuses lists the statuses set on sha, newest first.
func (s *Sim) Statuses(owner, name, sha string) ([]StatusInfo, error) {
	r, err := s.lookupRepo(owner, name)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	out := []StatusInfo{}
	list := r.statuses[sha]
	for i := len(list) - 1; i >= 0; i-- {
		st := list[i]
		out = append(out, StatusInfo{ID: st.id, State: st.state, Context: st.context, Description: st.description, TargetURL: st.targetURL, Creator: st.creator.login})
	}
	return out, nil
}

func (s *Sim) addStatusLocked(r *repo, sha, state, context, description, target string, who *user) *status {
	st := &status{id: s.newID(), state: state, context: cmp.Or(context, "default"), description: description, targetURL: target, creator: who, createdAt: s.now()}
	r.statuses[sha] = append(r.statuses[sha], st)
	s.emitStatusLocked(r, sha, st)
	return st
}

// SetRequiredChecks makes contexts the required status checks of branch
// (GitHub refuses to merge a pull request into it until each has passed on
// the head); nil contexts removes the protection.
func (s *Sim) SetRequiredChecks(owner, name, branch string, contexts []string, strict bool) error {
	r, err := s.lookupRepo(owner, name)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if contexts == nil {
		delete(r.protection, branch)
		return nil
	}
	r.protection[branch] = &protection{strict: strict, contexts: slices.Clone(contexts)}
	return nil
}

// SetPermission gives user a permission on owner/repo: "admin",
// "maintain", "write", "triage", "read" or "none".
func (s *Sim) SetPermission(owner, name, login, permission string) error {
	r, err := s.lookupRepo(owner, name)
	if err != nil {
		return err
	}
	switch permission {
	case "admin", "maintain", "write", "triage", "read", "none":
	default:
		return fmt.Errorf("ghsim: permission %q: %w", permission, ErrInvalid)
	}
	s.user(login)
	r.mu.Lock()
	defer r.mu.Unlock()
	if permission == "none" {
		delete(r.collaborators, strings.ToLower(login))
	} else {
		r.collaborators[strings.ToLower(login)] = permission
	}
	return nil
}

// requiredChecksLocked says why sha cannot merge into branch under its
// required status checks, or "" when it can.
func (r *repo) requiredChecksLocked(branch, sha string) string {
	prot := r.protection[branch]
	if prot == nil {
		return ""
	}
	for _, ctx := range prot.contexts {
		switch r.checkStateLocked(sha, ctx) {
		case "success":
		case "":
			return fmt.Sprintf("Required status check %q is expected.", ctx)
		default:
			return fmt.Sprintf("Required status check %q is failing.", ctx)
		}
	}
	return ""
}

// checkStateLocked is the state of a required check context on sha: ""
// when nothing reported it, else "success" only when both the latest
// status with that context and the latest check run of that name (each
// that exists) succeeded, "failure" when either failed, "pending"
// otherwise. As on GitHub, a required name reported both ways needs both.
func (r *repo) checkStateLocked(sha, ctx string) string {
	status := ""
	list := r.statuses[sha]
	for i := len(list) - 1; i >= 0; i-- {
		if strings.EqualFold(list[i].context, ctx) { // contexts are case-insensitive
			status = list[i].state
			break
		}
	}
	run := ""
	for _, suite := range r.checkSuites[sha] {
		for _, cr := range suite.runs {
			if cr.name != ctx {
				continue
			}
			switch {
			case cr.status != "completed":
				run = "pending"
			case cr.conclusion == "success" || cr.conclusion == "neutral" || cr.conclusion == "skipped":
				run = "success"
			default:
				run = "failure"
			}
		}
	}
	states := []string{status, run}
	switch {
	case status == "" && run == "":
		return ""
	case slices.Contains(states, "failure") || slices.Contains(states, "error"):
		return "failure"
	case slices.Contains(states, "pending"):
		return "pending"
	}
	return "success"
}

func (s *Sim) statusRoutes() []*route {
	return []*route{
		{method: "POST", pattern: "/repos/{owner}/{repo}/statuses/{sha}", auth: authInstallation, creates: true, perms: []string{"statuses:write"}, handle: s.createStatus},
		{method: "GET", pattern: "/repos/{owner}/{repo}/commits/{ref}/status", auth: authInstallation, perms: []string{"statuses:read"}, handle: s.combinedStatus},
		{method: "GET", pattern: "/repos/{owner}/{repo}/commits/{ref}/statuses", auth: authInstallation, perms: []string{"statuses:read"}, handle: s.listStatuses},
		{method: "GET", pattern: "/repos/{owner}/{repo}/branches/{branch}/protection/required_status_checks", auth: authInstallation, perms: []string{"administration:read"}, handle: s.getRequiredChecks},
		{method: "GET", pattern: "/repos/{owner}/{repo}/collaborators/{username}/permission", auth: authInstallation, handle: s.getPermission},
	}
}

func (s *Sim) createStatus(c *call) response {
	sha := c.r.PathValue("sha")
	var req struct {
		State       string `json:"state"`
		TargetURL   string `json:"target_url"`
		Description string `json:"description"`
		Context     string `json:"context"`
	}
	if resp, ok := c.decode("Status", &req); !ok {
		return resp
	}
	if !slices.Contains(statusStates, req.State) {
		return validationFailed("Status", "state", "custom", "State is not included in the list")
	}
	r := c.repo
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.commits[sha]; !ok {
		return errResponse(http.StatusUnprocessableEntity, "No commit found for SHA: "+sha, docsRoot)
	}
	st := s.addStatusLocked(r, sha, req.State, req.Context, req.Description, req.TargetURL, c.sender())
	c.applied("commit:"+r.fullName+"@"+sha, http.StatusCreated)
	body := s.renderStatus(r, sha, st)
	return response{status: http.StatusCreated, body: body, header: http.Header{"Location": {body["url"].(string)}}}
}

func (s *Sim) renderStatus(r *repo, sha string, st *status) map[string]any {
	return map[string]any{
		"url": s.url + "/repos/" + r.fullName + "/statuses/" + sha, "avatar_url": nilIfEmpty(""),
		"id": st.id, "node_id": nodeID("SC_", st.id), "state": st.state,
		"description": nilIfEmpty(st.description), "target_url": nilIfEmpty(st.targetURL), "context": st.context,
		"created_at": formatTime(st.createdAt), "updated_at": formatTime(st.createdAt), "creator": st.creator.json,
	}
}

func (s *Sim) combinedStatus(c *call) response {
	r := c.repo
	r.mu.Lock()
	defer r.mu.Unlock()
	sha, ok := r.resolveLocked(c.r.PathValue("ref"))
	if !ok {
		return errResponse(http.StatusNotFound, "No commit found for SHA: "+c.r.PathValue("ref"), docsRoot)
	}
	latest := map[string]*status{}
	var order []string
	list := r.statuses[sha]
	for i := len(list) - 1; i >= 0; i-- {
		st := list[i]
		// The latest of each context, told apart regardless of case,
		// as GitHub's contexts are.
		k := strings.ToLower(st.context)
		if _, seen := latest[k]; !seen {
			latest[k] = st
			order = append(order, k)
		}
	}
	combined := "pending"
	if len(order) > 0 {
		combined = "success"
	}
	statuses := make([]any, 0, len(order))
	for _, ctx := range order {
		st := latest[ctx]
		switch st.state {
		case "error", "failure":
			combined = "failure"
		case "pending":
			if combined == "success" {
				combined = "pending"
			}
		}
		m := s.renderStatus(r, sha, st)
		delete(m, "creator")
		statuses = append(statuses, m)
	}
	return response{status: http.StatusOK, body: map[string]any{
		"state": combined, "statuses": statuses, "sha": sha, "total_count": len(statuses),
		"repository": r.repr(), "commit_url": s.url + "/repos/" + r.fullName + "/commits/" + sha,
		"url": s.url + "/repos/" + r.fullName + "/commits/" + sha + "/status",
	}}
}

func (s *Sim) listStatuses(c *call) response {
	r := c.repo
	r.mu.Lock()
	defer r.mu.Unlock()
	sha, _ := r.resolveLocked(c.r.PathValue("ref"))
	list := r.statuses[sha]
	lo, hi, h := c.paginate(len(list))
	out := make([]any, 0, hi-lo)
	for i := lo; i < hi; i++ {
		out = append(out, s.renderStatus(r, sha, list[len(list)-1-i]))
	}
	return response{status: http.StatusOK, header: h, body: out}
}

func (s *Sim) getRequiredChecks(c *call) response {
	branch := c.r.PathValue("branch")
	r := c.repo
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.refs["heads/"+branch]; !ok {
		return errResponse(http.StatusNotFound, "Branch not found", docsRoot)
	}
	prot := r.protection[branch]
	if prot == nil {
		return errResponse(http.StatusNotFound, "Required status checks not enabled", docsRoot)
	}
	self := s.url + "/repos/" + r.fullName + "/branches/" + branch + "/protection/required_status_checks"
	checks := make([]any, 0, len(prot.contexts))
	for _, ctx := range prot.contexts {
		checks = append(checks, map[string]any{"context": ctx, "app_id": nil})
	}
	return response{status: http.StatusOK, body: map[string]any{
		"url": self, "strict": prot.strict, "contexts": slices.Clone(prot.contexts),
		"contexts_url": self + "/contexts", "checks": checks,
	}}
}

func (s *Sim) getPermission(c *call) response {
	login := c.r.PathValue("username")
	s.mu.RLock()
	u := s.users[strings.ToLower(login)]
	s.mu.RUnlock()
	if u == nil || u.typ == "Organization" {
		return notFound()
	}
	r := c.repo
	r.mu.Lock()
	perm := r.collaborators[strings.ToLower(login)]
	r.mu.Unlock()
	if strings.EqualFold(login, r.owner.login) {
		perm = "admin"
	}
	role := cmp.Or(perm, "read")
	legacy := role
	switch role {
	case "maintain":
		legacy = "write"
	case "triage":
		legacy = "read"
	}
	return response{status: http.StatusOK, body: map[string]any{
		"permission": legacy, "role_name": role, "user": s.renderCollaborator(u, role),
	}}
}

func (s *Sim) renderCollaborator(u *user, role string) map[string]any {
	m := s.renderUser(u)
	lvl := permLevel(role)
	if role == "maintain" || role == "triage" {
		lvl = map[string]int{"maintain": 2, "triage": 1}[role]
	}
	m["permissions"] = map[string]bool{
		"pull": lvl >= 1, "triage": lvl >= 1, "push": lvl >= 2, "maintain": lvl >= 2 && role != "write", "admin": lvl >= 3,
	}
	m["role_name"] = role
	return m
}
