package app

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/google/go-github/v62/github"
	"go.uber.org/zap"

	"github.com/baton-dev/baton/internal/sqlite"
)

// The payload fields of installation and installation_repositories events
// the registry reads (GitHub's "installation" and "repository" shapes).
type hookInstallation struct {
	ID      int64 `json:"id"`
	Account *struct {
		ID    int64  `json:"id"`
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
	// Account is the renamed account of installation_target events.
	Account *struct {
		Login string `json:"login"`
		Slug  string `json:"slug"`
	} `json:"account"`
	Changes *struct {
		// Login is the account's former login (installation_target).
		Login *struct {
			From string `json:"from"`
		} `json:"login"`
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
		s.accountID = a.ID
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
// installation_repositories, installation_target (the account was
// renamed: so were its repositories), and repository (created, deleted,
// renamed, transferred: the repositories of an installation that grants
// all of them change without installation_repositories).
func (in *Installations) Events() []string {
	return []string{"installation", "installation_repositories", "installation_target", "repository"}
}

// HandleEvent implements EventHandler. It applies an installation
// (created, deleted, suspend, unsuspend, new_permissions_accepted),
// installation_repositories (added, removed), installation_target
// (renamed) or repository (created, deleted, renamed, transferred) event
// to the registry. Events about an installation already recorded as
// removed are ignored: GitHub never reuses an installation ID, so they are
// late copies.
//
// GitHub does not deliver events in order, and missed deliveries are
// redelivered late, so with an App client the registry does not trust an
// installation, installation_repositories or installation_target event's
// action: it reads the installation's current state (GET
// /app/installations/{id}) and, unless suspended, its repositories, and
// records them, as the resync does. When GitHub does not know the
// installation (404: removed since, or never installed; the delivery may
// be a late or replayed one, as a signed body can be sent again under
// another delivery ID), the event grants nothing: no installation is
// recorded and no repository added on its word, only
// installation_repositories' removals are applied. A deleted event is
// applied when GitHub does not know the installation (a removal is final:
// GitHub never reuses an installation ID); about one GitHub still has, the
// installation's current state is recorded instead. Only without an App
// client (baton not yet set up as an App) is an event applied as sent.
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

	if d.Event == "installation_target" && p.Action != "renamed" {
		return nil
	}

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
	removal := d.Event == "installation" && p.Action == "deleted"
	if in.cfg.App != nil {
		refreshed, err := in.refreshLocked(ctx, s.id)
		if err != nil {
			return fmt.Errorf("app: apply %s.%s to installation %d: %w", d.Event, p.Action, s.id, err)
		}
		switch {
		case refreshed && removal:
			// A body sent again, or not GitHub's: GitHub's word is that
			// the installation is in force.
			log.Warn("deleted event about an installation GitHub still has: its current state recorded instead", zap.String(logKeyEvent, "installations.ignored"))
			return nil
		case refreshed:
			log.Info("installation updated from GitHub's current state", zap.String(logKeyEvent, "installations.updated"))
			return nil
		case !removal:
			// GitHub does not know the installation: it was removed since
			// (a late or replayed delivery), or never was. The payload's
			// word grants nothing: no installation is recorded, no
			// repository added (one would be taken from the installation
			// GitHub lists it in). Only repositories taken away are.
			if d.Event == "installation_repositories" && len(p.RepositoriesRemoved) > 0 {
				err := in.write(ctx, func(tx *sqlite.Tx) error {
					return removeReposTx(tx, s.id, installationRepos(p.RepositoriesRemoved), in.cfg.Now())
				})
				if err != nil {
					return fmt.Errorf("app: apply %s.%s to installation %d: %w", d.Event, p.Action, s.id, err)
				}
			}
			log.Warn("GitHub does not know the installation: nothing the event grants is recorded", zap.String(logKeyEvent, "installations.unknown"))
			return nil
		}
		// Removed, and GitHub does not know it any more: applied below.
	}
	if d.Event == "installation_target" {
		return in.renameAccountLocked(ctx, s.id, p, log)
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
// renamed, or transferred in. An event about a repository of another
// account than the installation's is not applied: the installation is
// read again from GitHub. GitHub sends repository.transferred only to
// the installation of the account the repository moved to, with the
// repository under its new name: it joins that installation, and leaves
// whichever one had it under its old name (the repository's ID does not
// change).
func (in *Installations) handleRepositoryEvent(ctx context.Context, d Delivery, p installationPayload) error {
	if p.Repository == nil || !validRepoName(p.Repository.FullName) {
		return Permanent(errors.New("repository event without a repository"))
	}
	id := p.Installation.ID
	repo := installationRepo{id: p.Repository.ID, fullName: p.Repository.FullName}
	var old []installationRepo
	switch p.Action {
	case "created", "transferred":
	case "deleted":
		if repo.id == 0 {
			old = append(old, repo)
		}
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
	var (
		known   bool
		account string
	)
	switch err := in.db.QueryRow(ctx, `SELECT account FROM installations WHERE id = ? AND deleted_at IS NULL`, id).Scan(&account); {
	case err == nil:
		known = true
	case !errors.Is(err, sql.ErrNoRows):
		return err
	}
	if owner, _, _ := strings.Cut(repo.fullName, "/"); known && in.cfg.App != nil && !strings.EqualFold(owner, account) {
		// GitHub sends an installation events about its own account's
		// repositories only: this one is about another account's (a
		// rename of the account not heard of yet, or a body sent again
		// that is not GitHub's word now). What the installation has is
		// GitHub's to say: nothing is taken from another installation on
		// the event's word.
		if _, err := in.refreshLocked(ctx, id); err != nil {
			return fmt.Errorf("app: apply repository.%s to installation %d: %w", p.Action, id, err)
		}
		in.log.Warn("repository event about another account's repository: installation read again from GitHub", zap.String(logKeyEvent, "installations.mismatch"),
			zap.String(logKeyDeliveryID, d.ID), zap.Int64(logKeyInstallation, id), zap.String(logKeyAction, p.Action), zap.String(logKeyRepository, repo.fullName))
		return nil
	}
	// A repository transferred to the installation has left the one that
	// had it already, whether or not this one is known yet.
	if p.Action == "transferred" && repo.id != 0 {
		if err := in.leaveForTransferLocked(ctx, repo); err != nil {
			return fmt.Errorf("app: apply repository.transferred to installation %d: %w", id, err)
		}
	}
	if !known {
		return nil // the resync will learn of the installation, with its repositories
	}
	// A renamed repository with an ID leaves its old name by that ID (a
	// repository that took the name since, its event having come first, keeps
	// it), and the old name stays as an alias: GitHub redirects it to the
	// repository, so operations queued or submitted under it still run.
	var aliases []installationRepo
	if p.Action == "renamed" && repo.id != 0 {
		for _, o := range old {
			aliases = append(aliases, installationRepo{id: repo.id, fullName: o.fullName})
		}
		old = nil
	}
	now := in.cfg.Now()
	late := false
	err := in.write(ctx, func(tx *sqlite.Tx) error {
		late = false
		if p.Action == "renamed" && repo.id != 0 {
			// The registry has the repository under a third name: this
			// rename came after a later one (GitHub does not deliver in
			// order), or one before it was missed. Which name is the
			// repository's now is GitHub's to say (refreshed below); the
			// event's names are both names of it, kept as aliases.
			from := strings.ToLower(repo.fullName)
			if len(aliases) > 0 {
				from = strings.ToLower(aliases[0].fullName)
			}
			var other bool
			if err := tx.QueryRow(`SELECT COUNT(*) > 0 FROM installation_repositories WHERE installation_id = ? AND repository_id = ?
				AND name_key NOT IN (?, ?)`, id, repo.id, strings.ToLower(repo.fullName), from).Scan(&other); err != nil {
				return err
			}
			if other {
				late = true
				return addAliasesTx(tx, append(aliases[:len(aliases):len(aliases)], repo), now)
			}
			if _, err := tx.Exec(`DELETE FROM installation_repositories WHERE installation_id = ? AND repository_id = ?`, id, repo.id); err != nil {
				return err
			}
			for _, a := range aliases {
				if _, err := tx.Exec(`DELETE FROM installation_repositories WHERE installation_id = ? AND name_key = ? AND repository_id = 0`,
					id, strings.ToLower(a.fullName)); err != nil {
					return err
				}
			}
			if err := addAliasesTx(tx, aliases, now); err != nil {
				return err
			}
		}
		if p.Action == "deleted" && repo.id != 0 {
			// By ID (and a row of the name without one): a repository
			// created under the name since, its event having come first,
			// keeps it.
			res, err := tx.Exec(`DELETE FROM installation_repositories WHERE installation_id = ?
				AND (repository_id = ? OR (name_key = ? AND repository_id = 0))`, id, repo.id, strings.ToLower(repo.fullName))
			if err != nil {
				return err
			}
			if n, _ := res.RowsAffected(); n > 0 {
				if _, err := tx.Exec(`UPDATE installations SET updated_at = ? WHERE id = ?`, now.UnixMicro(), id); err != nil {
					return err
				}
			}
		}
		if err := removeReposTx(tx, id, old, now); err != nil {
			return err
		}
		if p.Action == "created" || p.Action == "renamed" || p.Action == "transferred" {
			_, err := addReposTx(tx, id, []installationRepo{repo}, now)
			return err
		}
		return nil
	})
	if err == nil && late {
		if _, err = in.refreshLocked(ctx, id); err == nil {
			in.log.Info("rename out of order with the registry: installation read again from GitHub", zap.String(logKeyEvent, "installations.updated"),
				zap.String(logKeyDeliveryID, d.ID), zap.Int64(logKeyInstallation, id))
			return nil
		}
	}
	if err != nil {
		return fmt.Errorf("app: apply repository.%s to installation %d: %w", p.Action, id, err)
	}
	in.log.Info("installation repository updated", zap.String(logKeyEvent, "installations.repository"),
		zap.String(logKeyDeliveryID, d.ID), zap.Int64(logKeyInstallation, id), zap.String(logKeyAction, p.Action),
		zap.String(logKeyRepository, repo.fullName))
	return nil
}

// leaveForTransferLocked takes repo, transferred to another account, from
// under its old name in whichever installation had it. That installation
// is read again from GitHub first: its list of repositories is recorded
// (without the repository, or with it if the event came late: it has come
// back since, or a failed delivery was redelivered), and the repository is
// removed on the event's word only from one GitHub lists no repositories
// of (suspended, or unknown to GitHub), marked changed so that a resync
// under way does not put it back. The old name is not kept as an alias: it
// was another account's, and its operations ran as that installation. The
// caller holds in.mu.
func (in *Installations) leaveForTransferLocked(ctx context.Context, repo installationRepo) error {
	key := strings.ToLower(repo.fullName)
	rows, err := in.db.Query(ctx, `SELECT DISTINCT installation_id FROM installation_repositories WHERE repository_id = ? AND name_key != ?`, repo.id, key)
	if err != nil {
		return err
	}
	var left []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return err
		}
		left = append(left, id)
	}
	err = rows.Err()
	rows.Close()
	if err != nil {
		return err
	}
	for _, id := range left {
		known, err := in.refreshLocked(ctx, id)
		if err != nil {
			return fmt.Errorf("read installation %d again: %w", id, err)
		}
		listed := false
		if known {
			err := in.db.QueryRow(ctx, `SELECT deleted_at IS NULL AND NOT suspended FROM installations WHERE id = ?`, id).Scan(&listed)
			if err != nil && !errors.Is(err, sql.ErrNoRows) {
				return err
			}
		}
		if listed {
			continue // GitHub's list of its repositories is recorded
		}
		now := in.cfg.Now()
		err = in.write(ctx, func(tx *sqlite.Tx) error {
			res, err := tx.Exec(`DELETE FROM installation_repositories WHERE installation_id = ? AND repository_id = ? AND name_key != ?`, id, repo.id, key)
			if err != nil {
				return err
			}
			if n, _ := res.RowsAffected(); n > 0 {
				_, err = tx.Exec(`UPDATE installations SET updated_at = ? WHERE id = ?`, now.UnixMicro(), id)
			}
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// refreshLocked records installation id as GitHub has it now (GET
// /app/installations/{id}) with its repositories, unless suspended. It
// reports false, and records nothing, when GitHub does not know the
// installation (404). The caller holds in.mu, so that of two events the
// one recorded last read GitHub last.
func (in *Installations) refreshLocked(ctx context.Context, id int64) (bool, error) {
	cctx, cancel := context.WithTimeout(ctx, in.cfg.CallTimeout)
	gi, _, err := in.cfg.App.Apps.GetInstallation(cctx, id)
	cancel()
	var er *github.ErrorResponse
	if errors.As(err, &er) && er.Response != nil && er.Response.StatusCode == http.StatusNotFound {
		return false, nil
	}
	if err != nil {
		return true, fmt.Errorf("read the installation from GitHub: %w", err)
	}
	s, err := installationFromREST(gi)
	if err != nil {
		return true, err
	}
	if s.id != id {
		return true, fmt.Errorf("GitHub answered installation %d for %d", s.id, id)
	}
	_, err = in.recordLocked(ctx, s, time.Time{})
	return true, err
}

// renameAccountLocked applies installation_target.renamed as sent: the
// installation's account and the owner of its repositories become the
// new login. The caller holds in.mu.
func (in *Installations) renameAccountLocked(ctx context.Context, id int64, p installationPayload, log *zap.Logger) error {
	var from, to string
	if c := p.Changes; c != nil && c.Login != nil {
		from = c.Login.From
	}
	if a := p.Account; a != nil {
		to = cmp.Or(a.Login, a.Slug)
	}
	if from == "" || to == "" || strings.Contains(to, "/") {
		return Permanent(errors.New("installation_target.renamed without the old and new logins"))
	}
	var account string
	err := in.db.QueryRow(ctx, `SELECT account FROM installations WHERE id = ? AND deleted_at IS NULL`, id).Scan(&account)
	if errors.Is(err, sql.ErrNoRows) {
		return nil // the resync will learn of the installation, with its repositories
	}
	if err != nil {
		return err
	}
	if !strings.EqualFold(account, from) {
		// A late copy (the account has another login now), or renames
		// out of order: the resync sets the account right.
		log.Info("rename of a login the account does not have ignored", zap.String(logKeyEvent, "installations.ignored"))
		return nil
	}
	prefix := strings.ToLower(from) + "/"
	now := in.cfg.Now()
	renamed := 0
	err = in.write(ctx, func(tx *sqlite.Tx) error {
		renamed = 0
		if _, err := tx.Exec(`UPDATE installations SET account = ?, updated_at = ? WHERE id = ? AND account != ?`, to, now.UnixMicro(), id, to); err != nil {
			return err
		}
		rows, err := tx.Query(`SELECT name_key, full_name, repository_id FROM installation_repositories WHERE installation_id = ?`, id)
		if err != nil {
			return err
		}
		var old, moved []installationRepo
		for rows.Next() {
			var (
				key string
				r   installationRepo
			)
			if err := rows.Scan(&key, &r.fullName, &r.id); err != nil {
				rows.Close()
				return err
			}
			if strings.HasPrefix(key, prefix) {
				old = append(old, r)
				moved = append(moved, installationRepo{id: r.id, fullName: to + "/" + r.fullName[len(prefix):]})
			}
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return err
		}
		renamed = len(moved)
		if err := removeReposTx(tx, id, old, now); err != nil {
			return err
		}
		_, err = addReposTx(tx, id, moved, now)
		return err
	})
	if err != nil {
		return fmt.Errorf("app: apply installation_target.renamed to installation %d: %w", id, err)
	}
	log.Info("installation account renamed", zap.String(logKeyEvent, "installations.renamed"), zap.Int("repositories", renamed))
	return nil
}
