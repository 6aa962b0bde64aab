package app

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"go.uber.org/zap"

	"github.com/baton-dev/baton/internal/sqlite"
)

// The payload fields of installation and installation_repositories events
// the registry reads (GitHub's "installation" and "repository" shapes).
type hookInstallation struct {
	ID      int64 `json:"id"`
	Account *struct {
		Login string `json:"login"`
		Slug  string `json:"slug"` // enterprise accounts have a slug, not a login
		Name  string `json:"name"`
		Type  string `json:"type"`
	} `json:"account"`
	RepositorySelection string            `json:"repository_selection"`
	Permissions         map[string]string `json:"permissions"`
	Events              []string          `json:"events"`
	SuspendedAt         *string           `json:"suspended_at"`
	TargetType          string            `json:"target_type"`
}

type hookRepo struct {
	ID       int64  `json:"id"`
	FullName string `json:"full_name"`
}

type installationPayload struct {
	Action       string            `json:"action"`
	Installation *hookInstallation `json:"installation"`
	Repository   *hookRepo         `json:"repository"` // repository events
	Changes      *struct {
		Repository *struct {
			Name *struct {
				From string `json:"from"`
			} `json:"name"`
		} `json:"repository"`
	} `json:"changes"`
	Repositories        []hookRepo `json:"repositories"`
	RepositorySelection string     `json:"repository_selection"`
	RepositoriesAdded   []hookRepo `json:"repositories_added"`
	RepositoriesRemoved []hookRepo `json:"repositories_removed"`
}

func (h *hookInstallation) state() installationState {
	s := installationState{
		id: h.ID, repositorySelection: h.RepositorySelection, permissions: h.Permissions,
		events: h.Events, suspended: h.SuspendedAt != nil && *h.SuspendedAt != "",
		accountType: h.TargetType,
	}
	if a := h.Account; a != nil {
		s.account = cmp.Or(a.Login, a.Slug, a.Name)
		s.accountType = cmp.Or(a.Type, h.TargetType)
	}
	return s
}

func installationRepos(in []hookRepo) []installationRepo {
	out := make([]installationRepo, 0, len(in))
	for _, r := range in {
		out = append(out, installationRepo{id: r.ID, fullName: r.FullName})
	}
	return out
}

// Events implements EventHandler: the registry follows installation,
// installation_repositories, and repository (created, deleted, renamed,
// transferred: the repositories of an installation that grants all of
// them change without installation_repositories).
func (in *Installations) Events() []string {
	return []string{"installation", "installation_repositories", "repository"}
}

// HandleEvent implements EventHandler. It applies an installation
// (created, deleted, suspend, unsuspend, new_permissions_accepted),
// installation_repositories (added, removed) or repository (created,
// deleted, renamed, transferred) event to the registry. Events about an
// installation already recorded as removed are ignored: GitHub never
// reuses an installation ID, so they are late copies.
func (in *Installations) HandleEvent(ctx context.Context, d Delivery) error {
	var p installationPayload
	if err := json.Unmarshal(d.Payload, &p); err != nil {
		return Permanent(fmt.Errorf("installation event payload: %w", err))
	}
	if p.Installation == nil || p.Installation.ID <= 0 {
		return Permanent(fmt.Errorf("%s event without an installation", d.Event))
	}
	if d.Event == "repository" {
		return in.handleRepositoryEvent(ctx, d, p)
	}
	s := p.Installation.state()
	if p.RepositorySelection != "" {
		s.repositorySelection = p.RepositorySelection
	}
	log := in.log.With(zap.String(logKeyDeliveryID, d.ID), zap.Int64(logKeyInstallation, s.id),
		zap.String(logKeyGitHubEvent, d.Event), zap.String(logKeyAction, p.Action))

	in.mu.Lock()
	defer in.mu.Unlock()
	deleted, err := in.isDeleted(ctx, s.id)
	if err != nil {
		return err
	}
	if deleted {
		log.Info("event about a removed installation ignored", zap.String(logKeyEvent, "installations.ignored"))
		return nil
	}
	now := in.cfg.Now()
	var (
		c       installationChange
		removed bool
	)
	switch {
	case d.Event == "installation" && p.Action == "deleted":
		err = in.write(ctx, func(tx *sqlite.Tx) error {
			var err error
			if removed, err = markDeletedTx(tx, s.id, now); err != nil || removed {
				return err
			}
			// Never seen before: keep a tombstone all the same.
			if _, err = in.upsertTx(tx, s, now); err != nil {
				return err
			}
			removed, err = markDeletedTx(tx, s.id, now)
			return err
		})
	case d.Event == "installation":
		switch p.Action {
		case "suspend":
			s.suspended = true
		case "unsuspend":
			s.suspended = false
		}
		err = in.write(ctx, func(tx *sqlite.Tx) error {
			var err error
			if c, err = in.upsertTx(tx, s, now); err != nil {
				return err
			}
			if p.Action == "created" {
				return replaceReposTx(tx, s.id, installationRepos(p.Repositories), now)
			}
			return nil
		})
	case d.Event == "installation_repositories":
		err = in.write(ctx, func(tx *sqlite.Tx) error {
			var err error
			if c, err = in.upsertTx(tx, s, now); err != nil {
				return err
			}
			if _, err = addReposTx(tx, s.id, installationRepos(p.RepositoriesAdded), now); err != nil {
				return err
			}
			return removeReposTx(tx, s.id, installationRepos(p.RepositoriesRemoved), now)
		})
	default:
		return nil
	}
	if err != nil {
		return fmt.Errorf("app: apply %s.%s to installation %d: %w", d.Event, p.Action, s.id, err)
	}
	log.Info("installation updated", zap.String(logKeyEvent, "installations.updated"),
		zap.Int("repositoriesAdded", len(p.RepositoriesAdded)), zap.Int("repositoriesRemoved", len(p.RepositoriesRemoved)))
	if removed || (c.existed && (c.permissionsChanged || c.suspensionChanged)) {
		in.notify(s.id)
	}
	return nil
}

// handleRepositoryEvent follows a repository of a known installation:
// created (in an installation that grants every repository), deleted,
// renamed, or transferred away (its new owner's installation, if any,
// reports it through its own events or the resync).
func (in *Installations) handleRepositoryEvent(ctx context.Context, d Delivery, p installationPayload) error {
	if p.Repository == nil || !validRepoName(p.Repository.FullName) {
		return Permanent(errors.New("repository event without a repository"))
	}
	id := p.Installation.ID
	repo := installationRepo{id: p.Repository.ID, fullName: p.Repository.FullName}
	var old []installationRepo
	switch p.Action {
	case "created":
	case "deleted", "transferred":
		old = append(old, repo)
	case "renamed":
		if c := p.Changes; c != nil && c.Repository != nil && c.Repository.Name != nil && c.Repository.Name.From != "" {
			owner, _, _ := strings.Cut(repo.fullName, "/")
			old = append(old, installationRepo{fullName: owner + "/" + c.Repository.Name.From})
		}
	default:
		return nil // edited, archived, privatized…: nothing the registry keeps
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	var known bool
	if err := in.db.QueryRow(ctx, `SELECT COUNT(*) > 0 FROM installations WHERE id = ? AND deleted_at IS NULL`, id).Scan(&known); err != nil {
		return err
	}
	if !known {
		return nil // the resync will learn of the installation, with its repositories
	}
	now := in.cfg.Now()
	err := in.write(ctx, func(tx *sqlite.Tx) error {
		if p.Action == "renamed" && repo.id != 0 {
			if _, err := tx.Exec(`DELETE FROM installation_repositories WHERE installation_id = ? AND repository_id = ?`, id, repo.id); err != nil {
				return err
			}
		}
		if err := removeReposTx(tx, id, old, now); err != nil {
			return err
		}
		if p.Action == "created" || p.Action == "renamed" {
			_, err := addReposTx(tx, id, []installationRepo{repo}, now)
			return err
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("app: apply repository.%s to installation %d: %w", p.Action, id, err)
	}
	in.log.Info("installation repository updated", zap.String(logKeyEvent, "installations.repository"),
		zap.String(logKeyDeliveryID, d.ID), zap.Int64(logKeyInstallation, id), zap.String(logKeyAction, p.Action),
		zap.String(logKeyRepository, repo.fullName))
	return nil
}
