package ghsim

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// installation is an installation of an App on an account. Its fields are
// guarded by Sim.mu.
type installation struct {
	id                  int64
	appID               int64
	account             *user
	repoIDs             []int64
	permissions         map[string]string
	events              []string
	repositorySelection string
	createdAt           time.Time
	updatedAt           time.Time
	suspendedAt         time.Time
	suspendedBy         *user
}

func (i *installation) suspended() bool { return !i.suspendedAt.IsZero() }

// Installation describes an installation of the simulator.
type Installation struct {
	ID           int64             `json:"id"`
	AppID        int64             `json:"appId"`
	Account      string            `json:"account"`
	Repositories []string          `json:"repositories"`
	Permissions  map[string]string `json:"permissions"`
	Suspended    bool              `json:"suspended"`
}

// AddInstallation installs the primary App on account as installation id
// (with no repositories yet) and emits installation "created". Adding an
// installation that exists is ErrExists.
func (s *Sim) AddInstallation(id int64, account string) error {
	if id <= 0 || account == "" {
		return fmt.Errorf("ghsim: installation %d on %q: %w", id, account, ErrInvalid)
	}
	s.mu.Lock()
	if _, ok := s.installations[id]; ok {
		s.mu.Unlock()
		return fmt.Errorf("ghsim: installation %d: %w", id, ErrExists)
	}
	s.newInstallationLocked(id, account)
	s.mu.Unlock()
	s.emitInstallation(id, "created")
	return nil
}

func (s *Sim) newInstallationLocked(id int64, account string) *installation {
	now := s.now()
	inst := &installation{
		id: id, appID: s.primaryApp, account: s.userLocked(account, "Organization"),
		permissions: maps.Clone(s.apps[s.primaryApp].permissions), events: s.apps[s.primaryApp].events,
		repositorySelection: "selected", createdAt: now, updatedAt: now,
	}
	s.installations[id] = inst
	return inst
}

// SetInstallationPermissions replaces the permissions installation id
// grants (as when an owner accepts narrower ones): tokens issued from then
// on carry them, tokens issued before keep theirs, as on GitHub. Levels are
// "read" and "write" (and "admin").
func (s *Sim) SetInstallationPermissions(id int64, perms map[string]string) error {
	for name, level := range perms {
		if name == "" || permLevel(level) == 0 {
			return fmt.Errorf("ghsim: permission %q: %q: %w", name, level, ErrInvalid)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	inst, ok := s.installations[id]
	if !ok {
		return fmt.Errorf("ghsim: installation %d: %w", id, ErrNotFound)
	}
	inst.permissions = maps.Clone(perms)
	inst.updatedAt = s.now()
	return nil
}

// DeleteInstallation uninstalls the App from installation id: its tokens
// stop working, its repositories become unreachable, and installation
// "deleted" is emitted.
func (s *Sim) DeleteInstallation(id int64) error {
	s.mu.Lock()
	inst, ok := s.installations[id]
	if !ok {
		s.mu.Unlock()
		return fmt.Errorf("ghsim: installation %d: %w", id, ErrNotFound)
	}
	payload := s.installationPayloadLocked(inst, "deleted", s.userLocked(defaultSender, "User"))
	for _, rid := range inst.repoIDs {
		if r := s.reposByID[rid]; r != nil {
			r.installationID = 0
		}
	}
	delete(s.installations, id)
	appID := inst.appID
	s.mu.Unlock()
	s.tokens.revoke(id)
	s.hooks.emit(appID, "installation:"+strconv.FormatInt(id, 10), "installation", "deleted", id, 0, payload)
	return nil
}

// SuspendInstallation suspends (or, with suspended false, unsuspends)
// installation id and emits installation "suspend" or "unsuspend". While
// suspended, its tokens are refused with 403 and no token is issued.
func (s *Sim) SuspendInstallation(id int64, suspended bool) error {
	s.mu.Lock()
	inst, ok := s.installations[id]
	if !ok {
		s.mu.Unlock()
		return fmt.Errorf("ghsim: installation %d: %w", id, ErrNotFound)
	}
	if inst.suspended() == suspended {
		s.mu.Unlock()
		return nil
	}
	action := "unsuspend"
	if suspended {
		action = "suspend"
		inst.suspendedAt = s.now()
		inst.suspendedBy = s.userLocked(defaultSender, "User")
	} else {
		inst.suspendedAt = time.Time{}
		inst.suspendedBy = nil
	}
	inst.updatedAt = s.now()
	s.mu.Unlock()
	s.emitInstallation(id, action)
	return nil
}

// Installations lists the installations, by ID.
func (s *Sim) Installations() []Installation {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]Installation, 0, len(s.installations))
	for _, inst := range s.installations {
		out = append(out, s.describeInstallationLocked(inst))
	}
	sortBy(out, func(i Installation) int64 { return i.ID })
	return out
}

func (s *Sim) describeInstallationLocked(inst *installation) Installation {
	d := Installation{ID: inst.id, AppID: inst.appID, Account: inst.account.login, Permissions: maps.Clone(inst.permissions), Suspended: inst.suspended(), Repositories: []string{}}
	for _, rid := range inst.repoIDs {
		d.Repositories = append(d.Repositories, s.reposByID[rid].fullName)
	}
	return d
}

// renderInstallationLocked is the REST "installation" representation.
func (s *Sim) renderInstallationLocked(inst *installation) map[string]any {
	a := s.apps[inst.appID]
	slug := ""
	if a != nil {
		slug = a.slug
	}
	var suspendedBy any
	if inst.suspendedBy != nil {
		suspendedBy = inst.suspendedBy.json
	}
	// GitHub's description of GET /app/installations has the account as
	// allOf simple-user and enterprise (elsewhere anyOf): the enterprise
	// fields are added so that both readings hold.
	var account map[string]any
	_ = json.Unmarshal(inst.account.json, &account)
	account["name"] = inst.account.login
	account["slug"] = strings.ToLower(inst.account.login)
	account["created_at"] = formatTime(inst.createdAt)
	account["updated_at"] = formatTime(inst.createdAt)
	return map[string]any{
		"id": inst.id, "account": account, "repository_selection": inst.repositorySelection,
		"access_tokens_url": s.url + "/app/installations/" + strconv.FormatInt(inst.id, 10) + "/access_tokens",
		"repositories_url":  s.url + "/installation/repositories",
		"html_url":          s.url + "/organizations/" + inst.account.login + "/settings/installations/" + strconv.FormatInt(inst.id, 10),
		"app_id":            inst.appID, "app_slug": slug, "target_id": inst.account.id, "target_type": inst.account.typ,
		"permissions": inst.permissions, "events": inst.events,
		"created_at": formatTime(inst.createdAt), "updated_at": formatTime(inst.updatedAt),
		"single_file_name": nil, "has_multiple_single_files": false, "single_file_paths": []string{},
		"suspended_by": suspendedBy, "suspended_at": formatTimePtr(inst.suspendedAt),
	}
}

func (s *Sim) listInstallations(c *call) response {
	s.mu.RLock()
	var mine []*installation
	for _, inst := range s.installations {
		if inst.appID == c.app.id {
			mine = append(mine, inst)
		}
	}
	sortBy(mine, func(i *installation) int64 { return i.id })
	lo, hi, h := c.paginate(len(mine))
	out := make([]json.RawMessage, 0, hi-lo)
	for _, inst := range mine[lo:hi] {
		out = append(out, mustJSON(s.renderInstallationLocked(inst)))
	}
	s.mu.RUnlock()
	return response{status: http.StatusOK, header: h, body: out}
}

func (s *Sim) getInstallation(c *call) response {
	id, err := strconv.ParseInt(c.r.PathValue("installation_id"), 10, 64)
	if err != nil {
		return notFound()
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	inst := s.installations[id]
	if inst == nil || inst.appID != c.app.id {
		return notFound()
	}
	return response{status: http.StatusOK, body: s.renderInstallationLocked(inst)}
}
