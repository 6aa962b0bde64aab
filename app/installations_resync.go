package app

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/go-github/v62/github"
	"go.uber.org/zap"

	"github.com/baton-dev/baton/internal/sqlite"
)

// Resync brings the registry in line with GitHub: every installation of
// GET /app/installations (all pages) is recorded with its account,
// permissions, events and suspension, and, unless suspended, the
// repositories of its GET /installation/repositories (all pages);
// installations GitHub no longer lists are marked removed. It runs at
// Start and every ResyncInterval; it may also be called at any time.
//
// Each installation is written under the registry's lock, taken before
// its repositories are read, so a webhook handled meanwhile is applied
// after the resync's snapshot, never under it; and an installation a
// webhook changed after the resync started (its updated_at, on the
// registry's clock, is not before the start) keeps the webhook's state:
// the listed snapshot may predate it. A removal recorded since the start
// is never undone.
func (in *Installations) Resync(ctx context.Context) error {
	if in.cfg.App == nil {
		return errors.New("app: the installations registry has no App client to resync with")
	}
	started := in.cfg.Now()
	var listed []*github.Installation
	opts := &github.ListOptions{PerPage: in.pageSize}
	for {
		cctx, cancel := context.WithTimeout(ctx, in.cfg.CallTimeout)
		page, resp, err := in.cfg.App.Apps.ListInstallations(cctx, opts)
		cancel()
		if err != nil {
			return fmt.Errorf("app: list the App's installations: %w", err)
		}
		listed = append(listed, page...)
		if resp.NextPage == 0 {
			break
		}
		opts.Page = resp.NextPage
	}

	seen := make(map[int64]bool, len(listed))
	var errs []error
	repos := 0
	for _, gi := range listed {
		s, err := installationFromREST(gi)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		seen[s.id] = true
		n, err := in.resyncOne(ctx, s, started)
		repos += n
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			errs = append(errs, err)
		}
	}

	in.mu.Lock()
	var removed []int64
	err := in.write(ctx, func(tx *sqlite.Tx) error {
		removed = removed[:0]
		rows, err := tx.Query(`SELECT id FROM installations WHERE deleted_at IS NULL AND updated_at < ?`, started.UnixMicro())
		if err != nil {
			return err
		}
		var stale []int64
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return err
			}
			if !seen[id] {
				stale = append(stale, id)
			}
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return err
		}
		now := in.cfg.Now()
		for _, id := range stale {
			ok, err := markDeletedTx(tx, id, now)
			if err != nil {
				return err
			}
			if ok {
				removed = append(removed, id)
			}
		}
		return nil
	})
	in.mu.Unlock()
	if err != nil {
		return fmt.Errorf("app: record removed installations: %w", errors.Join(append(errs, err)...))
	}
	for _, id := range removed {
		in.log.Info("installation no longer listed by GitHub: removed", zap.String(logKeyEvent, "installations.removed"), zap.Int64(logKeyInstallation, id))
		in.notify(id)
	}
	in.log.Info("installations resynced from GitHub", zap.String(logKeyEvent, "installations.resynced"),
		zap.Int("installations", len(seen)), zap.Int("repositories", repos), zap.Int("removed", len(removed)), zap.Int("errors", len(errs)))
	return errors.Join(errs...)
}

// resyncOne records one installation as GitHub listed it at or after
// since, with its repositories unless it is suspended (a suspended
// installation gets no token; its repositories are kept as they were). It
// returns how many repositories it recorded.
func (in *Installations) resyncOne(ctx context.Context, s installationState, since time.Time) (int, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.recordLocked(ctx, s, since)
}

// recordLocked records s, GitHub's state of an installation, and the
// repositories GitHub lists for it now (unless it is suspended). With a
// non-zero since, s is a snapshot taken at or after since: an installation
// whose record changed at or after since (a webhook, applied after the
// snapshot may have been taken) keeps that record, and one removed at or
// after since stays removed (its repositories are not asked for); the
// repositories of one that changed, read now under the lock (unless the
// newer record says it is suspended), are recorded all the same. The
// caller holds in.mu, as every writer of the registry does: the record
// read first cannot change before the write.
func (in *Installations) recordLocked(ctx context.Context, s installationState, since time.Time) (int, error) {
	skipped := false
	if !since.IsZero() {
		var (
			updated   int64
			deletedAt sql.NullInt64
			suspended bool
		)
		err := in.db.QueryRow(ctx, `SELECT updated_at, deleted_at, suspended FROM installations WHERE id = ?`, s.id).Scan(&updated, &deletedAt, &suspended)
		switch {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return 0, fmt.Errorf("app: record installation %d: %w", s.id, err)
		case deletedAt.Valid && deletedAt.Int64 >= since.UnixMicro():
			in.log.Debug("installation removed since the resync's snapshot: it stays removed", zap.String(logKeyEvent, "installations.resync_skipped"),
				zap.Int64(logKeyInstallation, s.id))
			return 0, nil
		case updated >= since.UnixMicro():
			// Changed after the snapshot: keep the change. Whether the
			// repositories can be listed is the newer record's to say.
			skipped, s.suspended = true, suspended
			in.log.Debug("installation changed since the resync's snapshot: its newer record kept", zap.String(logKeyEvent, "installations.resync_skipped"),
				zap.Int64(logKeyInstallation, s.id))
		}
	}
	var (
		repos     []installationRepo
		reposErr  error
		haveRepos bool
	)
	if !s.suspended {
		repos, reposErr = in.listRepos(ctx, s.id)
		haveRepos = reposErr == nil
	}
	var c installationChange
	err := in.write(ctx, func(tx *sqlite.Tx) error {
		c = installationChange{}
		now := in.cfg.Now()
		if !skipped {
			var err error
			if c, err = in.upsertTx(tx, s, now); err != nil {
				return err
			}
		}
		if haveRepos {
			return replaceReposTx(tx, s.id, repos, now)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("app: record installation %d: %w", s.id, err)
	}
	if c.existed && (c.wasDeleted || c.permissionsChanged || c.suspensionChanged) {
		in.notify(s.id)
	}
	if reposErr != nil {
		return 0, fmt.Errorf("app: list the repositories of installation %d: %w", s.id, reposErr)
	}
	return len(repos), nil
}

func (in *Installations) listRepos(ctx context.Context, id int64) ([]installationRepo, error) {
	client, err := in.cfg.Installation(id)
	if err != nil {
		return nil, err
	}
	var out []installationRepo
	opts := &github.ListOptions{PerPage: in.pageSize}
	for {
		cctx, cancel := context.WithTimeout(ctx, in.cfg.CallTimeout)
		page, resp, err := client.Apps.ListRepos(cctx, opts)
		cancel()
		if err != nil {
			return nil, err
		}
		for _, r := range page.Repositories {
			out = append(out, installationRepo{id: r.GetID(), fullName: r.GetFullName()})
		}
		if resp.NextPage == 0 {
			return out, nil
		}
		opts.Page = resp.NextPage
	}
}

// installationFromREST reads an installation of the REST API.
func installationFromREST(gi *github.Installation) (installationState, error) {
	s := installationState{
		id: gi.GetID(), repositorySelection: gi.GetRepositorySelection(), events: gi.Events,
		suspended: gi.SuspendedAt != nil, accountType: gi.GetTargetType(),
	}
	if s.id <= 0 {
		return s, errors.New("app: GitHub listed an installation without an ID")
	}
	if a := gi.Account; a != nil {
		s.account = cmp.Or(a.GetLogin(), a.GetName())
		s.accountID = a.GetID()
		s.accountType = cmp.Or(a.GetType(), s.accountType)
	}
	s.permissions = map[string]string{}
	if gi.Permissions != nil {
		b, err := json.Marshal(gi.Permissions)
		if err != nil {
			return s, err
		}
		if err := json.Unmarshal(b, &s.permissions); err != nil {
			return s, fmt.Errorf("app: installation %d: permissions: %w", s.id, err)
		}
	}
	return s, nil
}
