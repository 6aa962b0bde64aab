package app

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/go-github/v62/github"
	"go.uber.org/zap"

	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/sqlite"
	"github.com/baton-dev/baton/schema"
)

// ErrInstallationUnavailable is the sentinel of an installation that is
// suspended or was removed: operations for it cannot run, and retrying
// does not help (the executor records the category
// installation_unavailable). Errors of this kind are
// *InstallationUnavailableError.
var ErrInstallationUnavailable = errors.New("installation unavailable")

// InstallationUnavailableError says which installation is unavailable and
// why. It matches ErrInstallationUnavailable with errors.Is and has the
// code forbidden.
type InstallationUnavailableError struct {
	ID int64
	// Reason is "suspended" or "deleted".
	Reason string
}

func (e *InstallationUnavailableError) Error() string {
	if e.Reason == "deleted" {
		return fmt.Sprintf("installation %d was removed", e.ID)
	}
	return fmt.Sprintf("installation %d is %s", e.ID, e.Reason)
}

// Is matches ErrInstallationUnavailable.
func (e *InstallationUnavailableError) Is(target error) bool {
	return target == ErrInstallationUnavailable
}

// ErrorCode is forbidden: the API answers 403.
func (e *InstallationUnavailableError) ErrorCode() string { return string(schema.CodeForbidden) }

// Installation is an installation of the App, as baton knows it.
type Installation struct {
	ID int64 `json:"id"`
	// Account is the login of the user or organisation the App is
	// installed on.
	Account string `json:"account"`
	// AccountType is "User", "Organization" or "Enterprise".
	AccountType string `json:"accountType"`
	// RepositorySelection is "all" or "selected".
	RepositorySelection string `json:"repositorySelection,omitempty"`
	// Repositories are the repositories granted ("owner/name"), sorted.
	Repositories []string `json:"repositories"`
	// Permissions are the permissions granted: name → read, write, admin.
	Permissions map[string]string `json:"permissions"`
	// Events are the events the installation sends.
	Events    []string `json:"events"`
	Suspended bool     `json:"suspended"`
	// UpdatedAt is when baton's record last changed.
	UpdatedAt time.Time `json:"updatedAt"`
}

// InstallationsConfig configures the installations registry.
type InstallationsConfig struct {
	// DB is baton's database. Required.
	DB *sqlite.DB
	// App is a client authenticated as the App (JWT), for
	// GET /app/installations (executor.GitHubClients.App) and, when an
	// installation event arrives, GET /app/installations/{id}. Nil turns
	// the resync off: the registry learns only from webhooks, applied as
	// sent.
	App *github.Client
	// Installation returns a client authenticated as an installation, for
	// GET /installation/repositories (executor.GitHubClients.Installation).
	// Required with App.
	Installation func(id int64) (*github.Client, error)
	// ResyncInterval is how often the registry is resynced from GitHub
	// (also once at Start). Defaults to 1h.
	ResyncInterval time.Duration
	// ResyncRetry is the wait after a resync failed (GitHub unreachable
	// at start), doubling after each failure up to ResyncInterval: a
	// registry left empty by a first start without GitHub would refuse
	// every submission until the next interval. Defaults to 30s.
	ResyncRetry time.Duration
	// CallTimeout bounds each of the registry's calls to GitHub. Some are
	// made under the registry's lock, which every installation event
	// waits for: a connection that stalls must not hold them all.
	// Defaults to 30s.
	CallTimeout time.Duration
	// OnChange is called after an installation was removed, suspended,
	// unsuspended or had its permissions changed, so that cached clients
	// can be dropped (executor.GitHubClients.Forget). Optional; it must
	// not block.
	OnChange func(installationID int64)
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
	// Logger defaults to zap.NewNop().
	Logger *zap.Logger
}

// Installations is the registry of the App's installations: the accounts
// it is installed on, their repositories and permissions, and whether they
// are suspended. Webhooks keep it current (subscribe it to the event
// dispatcher: it handles installation, installation_repositories,
// installation_target and repository); a
// resync from GitHub at Start and every ResyncInterval repairs anything
// missed. It resolves a repository to its installation for the API and the
// executor.
type Installations struct {
	cfg      InstallationsConfig
	db       *sqlite.DB
	log      *zap.Logger
	pageSize int // of GitHub's lists; tests make it small

	// mu serializes the changes of webhooks and of the resync, so that a
	// resync's snapshot cannot overwrite a newer event.
	mu sync.Mutex

	cache        repoCache              // InstallationOf's answers
	currentCache repoCache              // CurrentNames().InstallationOf's
	accountCache registryCache[[]int64] // SameAccountInstallations'

	lifeMu  sync.Mutex
	started bool
	stopped bool
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

var _ EventHandler = (*Installations)(nil)

// NewInstallations validates cfg and returns the registry.
func NewInstallations(cfg InstallationsConfig) (*Installations, error) {
	cfg.ResyncInterval = cmp.Or(cfg.ResyncInterval, time.Hour)
	cfg.ResyncRetry = cmp.Or(cfg.ResyncRetry, 30*time.Second)
	cfg.CallTimeout = cmp.Or(cfg.CallTimeout, 30*time.Second)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	var errs []error
	if cfg.DB == nil {
		errs = append(errs, errors.New("no DB"))
	}
	if cfg.App != nil && cfg.Installation == nil {
		errs = append(errs, errors.New("an Installation func is required with App"))
	}
	if cfg.ResyncInterval <= 0 {
		errs = append(errs, fmt.Errorf("want a positive ResyncInterval, not %s", cfg.ResyncInterval))
	}
	if cfg.ResyncRetry <= 0 {
		errs = append(errs, fmt.Errorf("want a positive ResyncRetry, not %s", cfg.ResyncRetry))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("app: invalid installations config: %w", errors.Join(errs...))
	}
	return &Installations{cfg: cfg, db: cfg.DB, log: cfg.Logger.With(zap.String(logKeySubsystem, "installations")), pageSize: 100}, nil
}

// Start starts the resync loop (a first resync now, then every
// ResyncInterval; after a failure, ResyncRetry later, doubling) and
// returns at once; without an App client it does
// nothing.
func (in *Installations) Start(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	in.lifeMu.Lock()
	defer in.lifeMu.Unlock()
	if in.started || in.stopped {
		return errors.New("app: installations registry already started or stopped")
	}
	in.started = true
	if in.cfg.App == nil {
		return nil
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	in.cancel = cancel
	in.wg.Add(1)
	go func() {
		defer in.wg.Done()
		retry := in.cfg.ResyncRetry
		for {
			wait := in.cfg.ResyncInterval
			if err := in.Resync(runCtx); err != nil && runCtx.Err() == nil {
				wait = min(retry, in.cfg.ResyncInterval)
				retry = min(2*retry, in.cfg.ResyncInterval)
				in.log.Warn("resync from GitHub failed; trying again", zap.String(logKeyEvent, "installations.resync_failed"),
					zap.Duration("retryIn", wait), zap.Error(err))
			} else {
				retry = in.cfg.ResyncRetry
			}
			t := time.NewTimer(wait)
			select {
			case <-runCtx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
	}()
	return nil
}

// Stop stops the resync loop, waiting at most until ctx ends. It is safe
// before Start and twice.
func (in *Installations) Stop(ctx context.Context) error {
	in.lifeMu.Lock()
	in.stopped = true
	if in.cancel != nil {
		in.cancel()
	}
	in.lifeMu.Unlock()
	return lifecycle.Wait(ctx, &in.wg)
}

// InstallationOf returns the installation that covers owner/repo: the one
// that has the repository, or, for a former name of a repository the
// registry has (it was renamed, and no repository baton knows has taken
// the name since), the one that has that repository now, as GitHub
// redirects the old name to it. A
// repository baton is not installed on is a forbidden error ("baton is not
// installed on owner/repo"), and so is one whose installation is suspended
// ("installation N is suspended", matching ErrInstallationUnavailable).
func (in *Installations) InstallationOf(ctx context.Context, owner, repo string) (int64, error) {
	return in.installationOf(ctx, owner, repo, true)
}

// CurrentNames is the registry resolving repositories by the names they
// have now only, never a former name: for the merge queue, whose state is
// kept per repository name, so that a queue left under a repository's old
// name is not worked on (through GitHub's redirect) beside the queue of
// its new name.
func (in *Installations) CurrentNames() CurrentNames { return CurrentNames{in} }

// CurrentNames resolves repositories by their current names (see
// Installations.CurrentNames).
type CurrentNames struct{ in *Installations }

// InstallationOf is Installations.InstallationOf without former names.
func (c CurrentNames) InstallationOf(ctx context.Context, owner, repo string) (int64, error) {
	return c.in.installationOf(ctx, owner, repo, false)
}

func (in *Installations) installationOf(ctx context.Context, owner, repo string, aliases bool) (int64, error) {
	full := owner + "/" + repo
	key := strings.ToLower(full)
	cache := &in.cache
	if !aliases {
		cache = &in.currentCache
	}
	a, ok := cache.get(key)
	if !ok {
		gen := cache.gen.Load()
		err := in.db.QueryRow(ctx, `SELECT i.id, i.suspended FROM installation_repositories r
			JOIN installations i ON i.id = r.installation_id
			WHERE r.name_key = ? AND i.deleted_at IS NULL`, key).Scan(&a.id, &a.suspended)
		if aliases && errors.Is(err, sql.ErrNoRows) {
			// A former name of a renamed repository: GitHub redirects it
			// to the repository, so it is covered by the installation
			// that has the repository under the same owner (another may
			// have it too for a while, after a transfer).
			err = in.db.QueryRow(ctx, `SELECT i.id, i.suspended FROM repository_aliases a
				JOIN installation_repositories r ON r.repository_id = a.repository_id
				JOIN installations i ON i.id = r.installation_id
				WHERE a.name_key = ? AND i.deleted_at IS NULL
				AND substr(r.name_key, 1, instr(r.name_key, '/')) = substr(a.name_key, 1, instr(a.name_key, '/'))
				LIMIT 1`, key).Scan(&a.id, &a.suspended)
		}
		a.missing = errors.Is(err, sql.ErrNoRows)
		if err != nil && !a.missing {
			return 0, fmt.Errorf("app: look up the installation of %s: %w", full, err)
		}
		cache.put(key, a, gen)
	}
	if a.missing {
		return 0, schema.Errorf(schema.CodeForbidden, "baton is not installed on %s", full)
	}
	if a.suspended {
		// Its code is forbidden, and its message says it once: an
		// operation's record keeps the whole error.
		return 0, &InstallationUnavailableError{ID: a.id, Reason: "suspended"}
	}
	return a.id, nil
}

// SameAccountInstallations returns ids with every installation the
// registry knows (removed ones included) of a GitHub account one of ids
// belongs to, sorted: what an API token bound to ids acts on (see
// TokenStoreConfig.Accounts). When the App is uninstalled from an account
// and installed again, GitHub gives the new installation another ID; the
// account's ID stays (renames included), so a token goes on acting on the
// account's repositories. An installation whose account ID the registry
// does not know (one it has not heard of, or one removed before baton
// recorded account IDs) stands for itself alone. Answers are kept in
// memory until the registry next changes.
func (in *Installations) SameAccountInstallations(ctx context.Context, ids []int64) ([]int64, error) {
	var key strings.Builder
	for i, id := range ids {
		if i > 0 {
			key.WriteByte(',')
		}
		key.WriteString(strconv.FormatInt(id, 10))
	}
	if out, ok := in.accountCache.get(key.String()); ok {
		return slices.Clone(out), nil
	}
	gen := in.accountCache.gen.Load()
	list, err := json.Marshal(ids)
	if err != nil {
		return nil, err
	}
	rows, err := in.db.Query(ctx, `SELECT DISTINCT o.id FROM installations b JOIN installations o ON o.account_id = b.account_id
		WHERE b.id IN (SELECT value FROM json_each(?)) AND b.account_id != 0 AND o.account_id != 0`, string(list))
	if err != nil {
		return nil, fmt.Errorf("app: read the installations of the accounts of installations %s: %w", key.String(), err)
	}
	defer rows.Close()
	out := slices.Clone(ids)
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		out = append(out, id)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	slices.Sort(out)
	out = slices.Compact(out)
	in.accountCache.put(key.String(), out, gen)
	return slices.Clone(out), nil
}

// Installation returns an installation. A suspended or removed
// installation is returned with an *InstallationUnavailableError (matching
// ErrInstallationUnavailable); one baton has never heard of is a not_found
// error.
func (in *Installations) Installation(ctx context.Context, id int64) (Installation, error) {
	inst, deleted, err := in.get(ctx, id)
	if err != nil {
		return Installation{}, err
	}
	if deleted {
		return inst, &InstallationUnavailableError{ID: id, Reason: "deleted"}
	}
	if inst.Suspended {
		return inst, &InstallationUnavailableError{ID: id, Reason: "suspended"}
	}
	return inst, nil
}

// ListInstallations returns the installations in force (suspended ones
// included, removed ones not), by ID.
func (in *Installations) ListInstallations(ctx context.Context) ([]Installation, error) {
	rows, err := in.db.Query(ctx, `SELECT `+installationColumns+` FROM installations WHERE deleted_at IS NULL ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("app: list installations: %w", err)
	}
	var out []Installation
	for rows.Next() {
		inst, _, err := scanInstallation(rows)
		if err != nil {
			rows.Close()
			return nil, err
		}
		out = append(out, inst)
	}
	err = rows.Err()
	rows.Close()
	if err != nil {
		return nil, err
	}
	repos, err := in.db.Query(ctx, `SELECT r.installation_id, r.full_name FROM installation_repositories r
		JOIN installations i ON i.id = r.installation_id WHERE i.deleted_at IS NULL ORDER BY r.installation_id, r.name_key`)
	if err != nil {
		return nil, fmt.Errorf("app: list installation repositories: %w", err)
	}
	defer repos.Close()
	byID := make(map[int64]*Installation, len(out))
	for i := range out {
		byID[out[i].ID] = &out[i]
	}
	for repos.Next() {
		var (
			id   int64
			name string
		)
		if err := repos.Scan(&id, &name); err != nil {
			return nil, err
		}
		if inst := byID[id]; inst != nil {
			inst.Repositories = append(inst.Repositories, name)
		}
	}
	return out, repos.Err()
}

const installationColumns = `id, account, account_type, repository_selection, permissions, events, suspended, deleted_at, updated_at`

func scanInstallation(row ledgerRow) (Installation, bool, error) {
	var (
		inst                Installation
		perms, events       string
		deletedAt           sql.NullInt64
		updated             int64
		suspended           bool
		account, typ, selec string
	)
	if err := row.Scan(&inst.ID, &account, &typ, &selec, &perms, &events, &suspended, &deletedAt, &updated); err != nil {
		return Installation{}, false, err
	}
	inst.Account, inst.AccountType, inst.RepositorySelection, inst.Suspended = account, typ, selec, suspended
	inst.UpdatedAt = time.UnixMicro(updated).UTC()
	inst.Repositories = []string{}
	inst.Permissions = map[string]string{}
	inst.Events = []string{}
	if err := json.Unmarshal([]byte(perms), &inst.Permissions); err != nil {
		return Installation{}, false, fmt.Errorf("app: installation %d: permissions: %w", inst.ID, err)
	}
	if err := json.Unmarshal([]byte(events), &inst.Events); err != nil {
		return Installation{}, false, fmt.Errorf("app: installation %d: events: %w", inst.ID, err)
	}
	return inst, deletedAt.Valid, nil
}

// get reads one installation with its repositories.
func (in *Installations) get(ctx context.Context, id int64) (Installation, bool, error) {
	inst, deleted, err := scanInstallation(in.db.QueryRow(ctx, `SELECT `+installationColumns+` FROM installations WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return Installation{}, false, schema.Errorf(schema.CodeNotFound, "installation %d is not known to baton", id)
	}
	if err != nil {
		return Installation{}, false, fmt.Errorf("app: read installation %d: %w", id, err)
	}
	rows, err := in.db.Query(ctx, `SELECT full_name FROM installation_repositories WHERE installation_id = ? ORDER BY name_key`, id)
	if err != nil {
		return Installation{}, false, fmt.Errorf("app: read installation %d: %w", id, err)
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return Installation{}, false, err
		}
		inst.Repositories = append(inst.Repositories, name)
	}
	return inst, deleted, rows.Err()
}

// installationState is what GitHub says of an installation, from a
// webhook or the REST API.
type installationState struct {
	id      int64
	account string
	// accountID is GitHub's ID of the account (0: not given).
	accountID           int64
	accountType         string
	repositorySelection string
	permissions         map[string]string
	events              []string
	suspended           bool
}

// installationRepo is a repository granted to an installation.
type installationRepo struct {
	id       int64
	fullName string
}

// installationChange says what an upsert changed, for OnChange.
type installationChange struct {
	existed, wasDeleted, permissionsChanged, suspensionChanged bool
}

// upsertTx writes an installation's state, undeleting it. It runs inside a
// write.
func (in *Installations) upsertTx(tx *sqlite.Tx, s installationState, now time.Time) (installationChange, error) {
	var (
		c                  installationChange
		oldPerms           string
		oldSuspended       bool
		deletedAt          sql.NullInt64
		permsJSON, evsJSON []byte
		err                error
	)
	err = tx.QueryRow(`SELECT permissions, suspended, deleted_at FROM installations WHERE id = ?`, s.id).Scan(&oldPerms, &oldSuspended, &deletedAt)
	switch {
	case err == nil:
		c.existed = true
		c.wasDeleted = deletedAt.Valid
		var old map[string]string
		_ = json.Unmarshal([]byte(oldPerms), &old)
		c.permissionsChanged = !maps.Equal(old, s.permissions)
		c.suspensionChanged = oldSuspended != s.suspended
	case !errors.Is(err, sql.ErrNoRows):
		return c, err
	}
	if s.permissions == nil {
		s.permissions = map[string]string{}
	}
	if s.events == nil {
		s.events = []string{}
	}
	slices.Sort(s.events)
	if permsJSON, err = json.Marshal(s.permissions); err != nil {
		return c, err
	}
	if evsJSON, err = json.Marshal(s.events); err != nil {
		return c, err
	}
	// The account ID is recorded once and never changed: GitHub never
	// moves an installation to another account, and a token's binding
	// follows it (see accountIDOf).
	_, err = tx.Exec(`INSERT INTO installations (id, account, account_id, account_type, repository_selection, permissions, events, suspended, deleted_at, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, NULL, ?)
		ON CONFLICT (id) DO UPDATE SET account = excluded.account, account_type = excluded.account_type,
			account_id = CASE WHEN installations.account_id = 0 THEN excluded.account_id ELSE installations.account_id END,
			repository_selection = excluded.repository_selection, permissions = excluded.permissions, events = excluded.events,
			suspended = excluded.suspended, deleted_at = NULL,
			updated_at = CASE WHEN installations.account = excluded.account AND installations.account_type = excluded.account_type
				AND installations.repository_selection = excluded.repository_selection AND installations.permissions = excluded.permissions
				AND installations.events = excluded.events AND installations.suspended = excluded.suspended
				AND installations.deleted_at IS NULL THEN installations.updated_at ELSE excluded.updated_at END`,
		s.id, s.account, accountIDOf(s), s.accountType, s.repositorySelection, string(permsJSON), string(evsJSON), s.suspended, now.UnixMicro())
	return c, err
}

// accountIDOf is the account ID the registry records for an installation:
// GitHub's ID of its account if that is a user or an organisation (which
// share one numbering), else 0. An enterprise's ID is of another
// numbering: it could equal an organisation's, and a token of the one
// must never follow it to the other.
func accountIDOf(s installationState) int64 {
	if s.accountID <= 0 || (s.accountType != "User" && s.accountType != "Organization") {
		return 0
	}
	return s.accountID
}

// addReposTx grants repositories to an installation (taking them from any
// other installation: a repository belongs to one).
func addReposTx(tx *sqlite.Tx, id int64, repos []installationRepo, now time.Time) (bool, error) {
	changed := false
	for _, r := range repos {
		if !validRepoName(r.fullName) {
			continue
		}
		res, err := tx.Exec(`INSERT INTO installation_repositories (name_key, full_name, repository_id, installation_id) VALUES (?, ?, ?, ?)
			ON CONFLICT (name_key) DO UPDATE SET full_name = excluded.full_name, repository_id = excluded.repository_id,
				installation_id = excluded.installation_id
			WHERE full_name != excluded.full_name OR repository_id != excluded.repository_id OR installation_id != excluded.installation_id`,
			strings.ToLower(r.fullName), r.fullName, r.id, id)
		if err != nil {
			return changed, err
		}
		n, _ := res.RowsAffected()
		changed = changed || n > 0
	}
	if changed {
		_, err := tx.Exec(`UPDATE installations SET updated_at = ? WHERE id = ?`, now.UnixMicro(), id)
		return true, err
	}
	return false, nil
}

// removeReposTx takes repositories away from an installation.
func removeReposTx(tx *sqlite.Tx, id int64, repos []installationRepo, now time.Time) error {
	changed := false
	for _, r := range repos {
		res, err := tx.Exec(`DELETE FROM installation_repositories WHERE name_key = ? AND installation_id = ?`, strings.ToLower(r.fullName), id)
		if err != nil {
			return err
		}
		n, _ := res.RowsAffected()
		changed = changed || n > 0
	}
	if changed {
		_, err := tx.Exec(`UPDATE installations SET updated_at = ? WHERE id = ?`, now.UnixMicro(), id)
		return err
	}
	return nil
}

// replaceReposTx makes repos the whole set of an installation's
// repositories. A repository it had under another name (by ID: a rename
// whose webhook was missed) keeps that name as an alias.
func replaceReposTx(tx *sqlite.Tx, id int64, repos []installationRepo, now time.Time) error {
	want := make(map[string]bool, len(repos))
	wantIDs := make(map[int64]bool, len(repos))
	for _, r := range repos {
		want[strings.ToLower(r.fullName)] = true
		if r.id != 0 {
			wantIDs[r.id] = true
		}
	}
	rows, err := tx.Query(`SELECT name_key, full_name, repository_id FROM installation_repositories WHERE installation_id = ?`, id)
	if err != nil {
		return err
	}
	var gone, renamed []installationRepo
	for rows.Next() {
		var (
			key string
			r   installationRepo
		)
		if err := rows.Scan(&key, &r.fullName, &r.id); err != nil {
			rows.Close()
			return err
		}
		if !want[key] {
			gone = append(gone, r)
			if wantIDs[r.id] {
				renamed = append(renamed, r)
			}
		}
	}
	err = rows.Err()
	rows.Close()
	if err != nil {
		return err
	}
	if err := removeReposTx(tx, id, gone, now); err != nil {
		return err
	}
	if err := addAliasesTx(tx, renamed, now); err != nil {
		return err
	}
	_, err = addReposTx(tx, id, repos, now)
	return err
}

// addAliasesTx records the former names of renamed repositories, each
// resolving to the repository of its ID. A repository without an ID gets
// none.
func addAliasesTx(tx *sqlite.Tx, old []installationRepo, now time.Time) error {
	for _, r := range old {
		if r.id == 0 || !validRepoName(r.fullName) {
			continue
		}
		if _, err := tx.Exec(`INSERT INTO repository_aliases (name_key, full_name, repository_id, created_at) VALUES (?, ?, ?, ?)
			ON CONFLICT (name_key) DO UPDATE SET full_name = excluded.full_name, repository_id = excluded.repository_id,
				created_at = excluded.created_at`,
			strings.ToLower(r.fullName), r.fullName, r.id, now.UnixMicro()); err != nil {
			return err
		}
	}
	return nil
}

// pruneAliasesTx drops the aliases that no longer stand: a name a
// repository of the registry has now (another repository took it, or the
// repository got it back), and the former names of a repository no
// installation in force has under the same owner (it left the App, was
// deleted, or moved to another account: a transfer or an account rename,
// whose old names are not kept). Every write of the registry ends with it.
func pruneAliasesTx(tx *sqlite.Tx) error {
	_, err := tx.Exec(`DELETE FROM repository_aliases
		WHERE name_key IN (SELECT name_key FROM installation_repositories)
		OR NOT EXISTS (SELECT 1 FROM installation_repositories r JOIN installations i ON i.id = r.installation_id
			WHERE r.repository_id = repository_aliases.repository_id AND i.deleted_at IS NULL
			AND substr(r.name_key, 1, instr(r.name_key, '/')) = substr(repository_aliases.name_key, 1, instr(repository_aliases.name_key, '/')))`)
	return err
}

// markDeletedTx records an installation's removal; it reports whether it
// was in force.
func markDeletedTx(tx *sqlite.Tx, id int64, now time.Time) (bool, error) {
	if _, err := tx.Exec(`DELETE FROM installation_repositories WHERE installation_id = ?`, id); err != nil {
		return false, err
	}
	res, err := tx.Exec(`UPDATE installations SET deleted_at = ?, updated_at = ? WHERE id = ? AND deleted_at IS NULL`, now.UnixMicro(), now.UnixMicro(), id)
	if err != nil {
		return false, err
	}
	n, _ := res.RowsAffected()
	return n > 0, nil
}

func (in *Installations) notify(id int64) {
	if in.cfg.OnChange != nil {
		in.cfg.OnChange(id)
	}
}

// isDeleted reports whether the registry has recorded id's removal.
func (in *Installations) isDeleted(ctx context.Context, id int64) (bool, error) {
	var deleted bool
	err := in.db.QueryRow(ctx, `SELECT deleted_at IS NOT NULL FROM installations WHERE id = ?`, id).Scan(&deleted)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return deleted, err
}
