package ghsim

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// user is a GitHub account: a person, an organisation, or an App's bot.
type user struct {
	id    int64
	login string
	typ   string          // "User", "Organization" or "Bot"
	json  json.RawMessage // its simple-user representation
}

// repo is one repository. Its identity fields are fixed at creation,
// except that RenameRepo changes the name ones (name, fullName, json,
// archivedJSON, minimal) holding both mu and Sim.mu, so that every request
// resolved after it sees the new name; its content (issues, pull requests, refs, commits, statuses, checks) is
// guarded by mu, which is held for the whole of a mutation so that a
// mutation, its effect record and its webhooks are applied atomically and
// in one order.
type repo struct {
	id        int64
	owner     *user
	name      string
	fullName  string
	createdAt time.Time
	json      json.RawMessage // its repository representation (see repr)
	// archivedJSON is json with "archived": true, shown while archived.
	archivedJSON json.RawMessage
	minimal      json.RawMessage // a small form for installation payloads

	// installationID is guarded by Sim.mu: repositories move between
	// installations.
	installationID int64

	// archived is set by ArchiveRepo: GitHub refuses every write to the
	// repository with 403 until it is unarchived.
	archived atomic.Bool

	mu            sync.Mutex
	nextNumber    int
	issues        map[int]*issue
	labels        map[string]*label // by lower-case name
	refs          map[string]string // "heads/main" → sha
	commits       map[string]*commit
	statuses      map[string][]*status // sha → statuses, oldest first
	checkSuites   map[string][]*checkSuite
	protection    map[string]*protection // branch → required status checks
	collaborators map[string]string      // lower-case login → permission
}

// Repo describes a repository of the simulator.
type Repo struct {
	ID             int64  `json:"id"`
	Owner          string `json:"owner"`
	Name           string `json:"name"`
	FullName       string `json:"fullName"`
	InstallationID int64  `json:"installationId"`
	DefaultBranch  string `json:"defaultBranch"`
}

const defaultBranch = "main"

func repoKey(owner, name string) string { return strings.ToLower(owner + "/" + name) }

// userLocked returns the account with login, creating it with typ if new.
// The caller holds s.mu (or is New).
func (s *Sim) userLocked(login, typ string) *user {
	key := strings.ToLower(login)
	if u, ok := s.users[key]; ok {
		return u
	}
	u := &user{id: s.newID(), login: login, typ: typ}
	u.json = mustJSON(s.renderUser(u))
	s.users[key] = u
	return u
}

// user returns the account with login, creating a person if new (an App's
// bot account, of type Bot, for a login ending in "[bot]", as GitHub's
// are: "github-actions[bot]").
func (s *Sim) user(login string) *user {
	s.mu.Lock()
	defer s.mu.Unlock()
	typ := "User"
	if strings.HasSuffix(login, "[bot]") {
		typ = "Bot"
	}
	return s.userLocked(login, typ)
}

// defaultSender is the person admin actions are attributed to when the
// caller names nobody.
const defaultSender = "monalisa"

func (s *Sim) sender(login string) *user {
	if login == "" {
		login = defaultSender
	}
	return s.user(login)
}

// lockRepo is the start of a mutation by a person: the repository
// owner/name, locked (the caller unlocks r.mu), and who does it (sender,
// default "monalisa").
func (s *Sim) lockRepo(owner, name, sender string) (*repo, *user, error) {
	r, err := s.lookupRepo(owner, name)
	if err != nil {
		return nil, nil, err
	}
	who := s.sender(sender)
	r.mu.Lock()
	return r, who, nil
}

// AddRepo creates repository owner/name in installation installationID. If
// the installation does not exist, it is created (for the primary App, on
// the owner's account) and installation "created" is emitted; otherwise
// installation_repositories "added" is. The repository starts with one
// commit on main. Adding a repository that exists moves it to
// installationID (emitting "removed" for its previous installation) or, if
// it is there already, does nothing.
func (s *Sim) AddRepo(owner, name string, installationID int64) (Repo, error) {
	r, _, err := s.addRepo(owner, name, installationID)
	return r, err
}

// repoAdded says what addRepo did.
type repoAdded int

const (
	repoCreated   repoAdded = iota // a new repository
	repoMoved                      // an existing one, moved to the installation (or put back in one)
	repoUnchanged                  // an existing one, in that installation already
)

func (s *Sim) addRepo(owner, name string, installationID int64) (Repo, repoAdded, error) {
	if owner == "" || name == "" || strings.Contains(owner, "/") || strings.Contains(name, "/") {
		return Repo{}, 0, fmt.Errorf("ghsim: invalid repository name %q/%q: %w", owner, name, ErrInvalid)
	}
	if installationID <= 0 {
		return Repo{}, 0, fmt.Errorf("ghsim: installation ID %d: %w", installationID, ErrInvalid)
	}
	s.mu.Lock()
	inst, instExisted := s.installations[installationID]
	if !instExisted {
		inst = s.newInstallationLocked(installationID, owner)
	}
	key := repoKey(owner, name)
	r, exists := s.repos[key]
	if exists && r.installationID == installationID {
		s.mu.Unlock()
		return r.describe(installationID), repoUnchanged, nil
	}
	var previous int64
	if exists {
		previous = r.installationID
		r.installationID = installationID
	} else {
		r = s.newRepoLocked(owner, name, installationID)
	}
	inst.repoIDs = appendUnique(inst.repoIDs, r.id)
	if prev := s.installations[previous]; prev != nil {
		prev.repoIDs = removeID(prev.repoIDs, r.id)
	}
	s.mu.Unlock()

	if previous != 0 {
		s.emitInstallationRepos(previous, "removed", r)
	}
	if instExisted {
		s.emitInstallationRepos(installationID, "added", r)
	} else {
		s.emitInstallation(installationID, "created")
	}
	added := repoCreated
	if exists {
		added = repoMoved
	}
	return r.describe(installationID), added, nil
}

// ArchiveRepo archives (or, with archived false, unarchives) owner/name as
// an owner would, emitting repository "archived" or "unarchived". While
// archived, every write to it through the REST API (comments, labels,
// merges, refs, statuses…) is refused with GitHub's 403 "Repository was
// archived so is read-only."; reads answer as before, the repository
// (in pull requests' base and head, payloads, GET /repos/{owner}/{repo})
// saying "archived": true.
func (s *Sim) ArchiveRepo(owner, name string, archived bool, sender string) error {
	r, who, err := s.lockRepo(owner, name, sender)
	if err != nil {
		return err
	}
	defer r.mu.Unlock()
	if r.archived.Load() == archived {
		return nil
	}
	r.archived.Store(archived)
	action := "unarchived"
	if archived {
		action = "archived"
	}
	s.emitRepoLocked(r, "repository", action, who, nil)
	return nil
}

// RenameRepo renames owner/name to owner/newName as its owner would,
// emitting repository "renamed" (changes.repository.name.from is the old
// name). As on GitHub, the repository keeps its ID and content, and the
// REST API redirects requests under the old name to it (301 for GET and
// HEAD, 307 for other methods, which clients repeat with their body) until
// a repository is created under the old name.
func (s *Sim) RenameRepo(owner, name, newName, sender string) error {
	if newName == "" || strings.Contains(newName, "/") {
		return fmt.Errorf("ghsim: invalid repository name %q: %w", newName, ErrInvalid)
	}
	r, who, err := s.lockRepo(owner, name, sender)
	if err != nil {
		return err
	}
	defer r.mu.Unlock()
	s.mu.Lock()
	oldName, oldKey, newKey := r.name, repoKey(r.owner.login, r.name), repoKey(r.owner.login, newName)
	if other, taken := s.repos[newKey]; taken && other != r {
		s.mu.Unlock()
		return fmt.Errorf("ghsim: repository %s/%s: %w", r.owner.login, newName, ErrExists)
	}
	delete(s.repos, oldKey)
	delete(s.movedRepos, newKey)
	s.repos[newKey] = r
	if oldKey != newKey {
		s.movedRepos[oldKey] = r
	}
	r.name, r.fullName = newName, r.owner.login+"/"+newName
	s.renderReprs(r)
	s.mu.Unlock()
	s.emitRepoLocked(r, "repository", "renamed", who, func() map[string]any {
		return map[string]any{"changes": map[string]any{"repository": map[string]any{"name": map[string]any{"from": oldName}}}}
	})
	return nil
}

// RemoveRepo takes owner/name out of its installation (the App loses access
// to it) and emits installation_repositories "removed".
func (s *Sim) RemoveRepo(owner, name string) error {
	s.mu.Lock()
	r, ok := s.repos[repoKey(owner, name)]
	if !ok || r.installationID == 0 {
		s.mu.Unlock()
		return fmt.Errorf("ghsim: repository %s/%s: %w", owner, name, ErrNotFound)
	}
	instID := r.installationID
	r.installationID = 0
	if inst := s.installations[instID]; inst != nil {
		inst.repoIDs = removeID(inst.repoIDs, r.id)
	}
	s.mu.Unlock()
	s.emitInstallationRepos(instID, "removed", r)
	return nil
}

// Repos lists the repositories, in creation order.
func (s *Sim) Repos() []Repo {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]Repo, 0, len(s.repos))
	for _, r := range s.repos {
		out = append(out, r.describe(r.installationID))
	}
	sortBy(out, func(r Repo) int64 { return r.ID })
	return out
}

func (r *repo) describe(installationID int64) Repo {
	return Repo{ID: r.id, Owner: r.owner.login, Name: r.name, FullName: r.fullName, InstallationID: installationID, DefaultBranch: defaultBranch}
}

// newRepoLocked creates a repository; the caller holds s.mu.
func (s *Sim) newRepoLocked(owner, name string, installationID int64) *repo {
	ownerUser := s.userLocked(owner, "Organization")
	now := s.now()
	r := &repo{
		id:             s.newID(),
		owner:          ownerUser,
		name:           name,
		fullName:       ownerUser.login + "/" + name,
		createdAt:      now,
		installationID: installationID,
		nextNumber:     1,
		issues:         map[int]*issue{},
		labels:         map[string]*label{},
		refs:           map[string]string{},
		commits:        map[string]*commit{},
		statuses:       map[string][]*status{},
		checkSuites:    map[string][]*checkSuite{},
		protection:     map[string]*protection{},
		collaborators:  map[string]string{strings.ToLower(defaultSender): "write"},
	}
	s.renderReprs(r)
	root := r.addCommit(s, "", nil, "Initial commit", now)
	r.refs["heads/"+defaultBranch] = root.sha
	s.repos[repoKey(owner, name)] = r
	delete(s.movedRepos, repoKey(owner, name)) // GitHub's redirect ends with the name's reuse
	s.reposByID[r.id] = r
	return r
}

// renderReprs renders r's representations (json, archivedJSON, minimal)
// from its name, at creation and at a rename.
func (s *Sim) renderReprs(r *repo) {
	m := s.renderRepo(r)
	m["archived"] = false // renderRepo says what r is now; json is the unarchived form
	r.json = mustJSON(m)
	m["archived"] = true
	r.archivedJSON = mustJSON(m)
	r.minimal = mustJSON(map[string]any{
		"id": r.id, "node_id": nodeID("R_", r.id), "name": r.name, "full_name": r.fullName, "private": false,
	})
}

// repr is the repository representation payloads and pull requests
// carry: archived or not, as the repository is now.
func (r *repo) repr() json.RawMessage {
	if r.archived.Load() {
		return r.archivedJSON
	}
	return r.json
}

// lookupRepo finds a repository by owner and name.
func (s *Sim) lookupRepo(owner, name string) (*repo, error) {
	s.mu.RLock()
	r, ok := s.repos[repoKey(owner, name)]
	s.mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("ghsim: repository %s/%s: %w", owner, name, ErrNotFound)
	}
	return r, nil
}

// renderRepo is the REST "repository" representation.
func (s *Sim) renderRepo(r *repo) map[string]any {
	api := s.url + "/repos/" + r.fullName
	html := s.url + "/" + r.fullName
	ts := formatTime(r.createdAt)
	m := map[string]any{
		"id": r.id, "node_id": nodeID("R_", r.id), "name": r.name, "full_name": r.fullName,
		"owner": r.owner.json, "private": false, "html_url": html, "description": nil, "fork": false,
		"url": api, "homepage": nil, "language": nil, "license": nil, "mirror_url": nil,
		"forks": 0, "forks_count": 0, "stargazers_count": 0, "watchers": 0, "watchers_count": 0,
		"open_issues": 0, "open_issues_count": 0, "size": 0, "default_branch": defaultBranch,
		"has_issues": true, "has_projects": false, "has_wiki": false, "has_pages": false,
		"has_downloads": false, "has_discussions": false, "archived": r.archived.Load(), "disabled": false,
		"visibility": "public", "is_template": false, "topics": []string{},
		"allow_forking": true, "web_commit_signoff_required": false,
		"pushed_at": ts, "created_at": ts, "updated_at": ts,
		"git_url":   "git://" + strings.TrimPrefix(s.url, "http://") + "/" + r.fullName + ".git",
		"ssh_url":   "git@" + strings.TrimPrefix(s.url, "http://") + ":" + r.fullName + ".git",
		"clone_url": html + ".git", "svn_url": html,
	}
	for k, v := range map[string]string{
		"archive_url": "/{archive_format}{/ref}", "assignees_url": "/assignees{/user}",
		"blobs_url": "/git/blobs{/sha}", "branches_url": "/branches{/branch}",
		"collaborators_url": "/collaborators{/collaborator}", "comments_url": "/comments{/number}",
		"commits_url": "/commits{/sha}", "compare_url": "/compare/{base}...{head}",
		"contents_url": "/contents/{+path}", "contributors_url": "/contributors",
		"deployments_url": "/deployments", "downloads_url": "/downloads", "events_url": "/events",
		"forks_url": "/forks", "git_commits_url": "/git/commits{/sha}", "git_refs_url": "/git/refs{/sha}",
		"git_tags_url": "/git/tags{/sha}", "hooks_url": "/hooks",
		"issue_comment_url": "/issues/comments{/number}", "issue_events_url": "/issues/events{/number}",
		"issues_url": "/issues{/number}", "keys_url": "/keys{/key_id}", "labels_url": "/labels{/name}",
		"languages_url": "/languages", "merges_url": "/merges", "milestones_url": "/milestones{/number}",
		"notifications_url": "/notifications{?since,all,participating}", "pulls_url": "/pulls{/number}",
		"releases_url": "/releases{/id}", "stargazers_url": "/stargazers", "statuses_url": "/statuses/{sha}",
		"subscribers_url": "/subscribers", "subscription_url": "/subscription", "tags_url": "/tags",
		"teams_url": "/teams", "trees_url": "/git/trees{/sha}",
	} {
		m[k] = api + v
	}
	return m
}

// repoRoutes serves the repositories themselves.
func (s *Sim) repoRoutes() []*route {
	return []*route{
		{method: "GET", pattern: "/repos/{owner}/{repo}", auth: authInstallation, handle: s.getRepo},
	}
}

// getRepo answers GET /repos/{owner}/{repo} with the "full-repository"
// representation: the repository as webhooks and /installation/repositories
// show it, plus the organisation, the counts, and what the token may do.
// serve has found the repository and checked that the token reaches it.
func (s *Sim) getRepo(c *call) response {
	r := c.repo
	m := s.renderRepo(r)
	m["network_count"] = 0
	m["subscribers_count"] = 0
	if r.owner.typ == "Organization" {
		m["organization"] = r.owner.json
	}
	m["permissions"] = repoPermissions(c.tok.permissions)
	return response{status: http.StatusOK, body: m}
}

// repoPermissions is what an installation token may do in a repository, in
// the collaborator roles full-repository's permissions speak of: pull with
// metadata (every token), triage with issues or pull_requests write, push
// with contents write, maintain and admin with administration write.
func repoPermissions(perms map[string]string) map[string]bool {
	write := func(name string) bool { return permLevel(perms[name]) >= permLevel("write") }
	admin := write("administration")
	return map[string]bool{
		"pull": true, "triage": write("issues") || write("pull_requests") || admin,
		"push": write("contents") || admin, "maintain": admin, "admin": admin,
	}
}

// renderUser is the REST "simple-user" representation.
func (s *Sim) renderUser(u *user) map[string]any {
	api := s.url + "/users/" + u.login
	return map[string]any{
		"login": u.login, "id": u.id, "node_id": nodeID("U_", u.id),
		"avatar_url":  s.url + "/avatars/u/" + fmt.Sprint(u.id),
		"gravatar_id": "", "url": api, "html_url": s.url + "/" + u.login,
		"followers_url": api + "/followers", "following_url": api + "/following{/other_user}",
		"gists_url": api + "/gists{/gist_id}", "starred_url": api + "/starred{/owner}{/repo}",
		"subscriptions_url": api + "/subscriptions", "organizations_url": api + "/orgs",
		"repos_url": api + "/repos", "events_url": api + "/events{/privacy}",
		"received_events_url": api + "/received_events", "type": u.typ, "site_admin": false,
		"user_view_type": "public",
	}
}
