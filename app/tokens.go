package app

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/baton-dev/baton/internal/sqlite"
	"github.com/baton-dev/baton/schema"
)

// API tokens
//
// A token is "baton_" followed by 32 random bytes in unpadded base64url
// (49 characters in all). It is shown once, when it is created; the
// database keeps only its SHA-256 (table api_tokens, migration
// 0003_tokens.sql), so a copy of the database gives nobody a usable token.
// Tokens are looked up by hash and never compared or logged in plain text.
//
// A token names an actor (the actor of every operation it submits), whether
// it is an admin token, and the installations it may act on: a list of
// installation IDs, or all of them. Admin tokens always act on every
// installation.
//
// A binding to an installation follows the installation's GitHub account:
// the token acts on every installation of the same account the
// installations registry knows (SameAccountInstallations), by the
// account's ID, which GitHub never reuses and keeps across renames. So a
// token goes on working when the App is uninstalled from an organisation
// and installed again under a new installation ID, and never reaches
// another account. The account is not stored with the token: it is the
// registry's to know, so a token made for an installation baton has not
// heard of yet, or made before baton recorded account IDs, follows the
// account as soon as the registry learns it (an installation removed
// before then stays bound by its ID alone).
//
// Authenticate keeps what it learned about a token in memory for
// TokenStoreConfig.CacheTTL (5 s by default), so the API does not read
// SQLite on every request. Revoking a token through the same TokenStore
// (the server's) takes effect at once; revoking it from another process
// (`baton token revoke` beside a running server) takes effect within
// CacheTTL.

// TokenPrefix starts every API token, so that a token is recognisable in a
// configuration file or a secret scanner.
const TokenPrefix = "baton_"

// tokenRandomBytes is the entropy of a token.
const tokenRandomBytes = 32

// tokenLen is the length of a well-formed token.
var tokenLen = len(TokenPrefix) + base64.RawURLEncoding.EncodedLen(tokenRandomBytes)

// TokenSpec is what a new token may do.
type TokenSpec struct {
	// Actor is the actor of everything done with the token: 1–128 printable
	// characters. Required.
	Actor string
	// Admin tokens see and cancel every actor's operations, manage dead
	// letters, and act on every installation.
	Admin bool
	// Installations are the installation IDs the token may act on.
	Installations []int64
	// AllInstallations lets the token act on every installation.
	AllInstallations bool
}

// Token describes a stored token (never the token itself).
type Token struct {
	ID               int64   `json:"id"`
	Actor            string  `json:"actor"`
	Admin            bool    `json:"admin"`
	AllInstallations bool    `json:"allInstallations"`
	Installations    []int64 `json:"installations"`
	// Accounts are the GitHub accounts of Installations that the
	// installations registry knows: the binding follows them (ListTokens
	// fills it in).
	Accounts   []TokenAccount `json:"accounts"`
	CreatedAt  time.Time      `json:"createdAt"`
	RevokedAt  *time.Time     `json:"revokedAt,omitempty"`
	LastUsedAt *time.Time     `json:"lastUsedAt,omitempty"`
}

// TokenAccount is a GitHub account a token is bound to through one of its
// installations.
type TokenAccount struct {
	// ID is GitHub's ID of the account.
	ID int64 `json:"id"`
	// Login is the account's login as the registry last heard it.
	Login string `json:"login"`
}

// Revoked reports whether the token was revoked.
func (t Token) Revoked() bool { return t.RevokedAt != nil }

// Principal is who a request speaks for: what its token allows.
type Principal struct {
	TokenID          int64
	Actor            string
	Admin            bool
	AllInstallations bool
	// Installations are the installations the token acts on: those it is
	// bound to and, with TokenStoreConfig.Accounts, every other
	// installation of their accounts.
	Installations []int64
}

// MayActOn reports whether the principal may act on repositories of the
// installation.
func (p *Principal) MayActOn(installationID int64) bool {
	return p.Admin || p.AllInstallations || slices.Contains(p.Installations, installationID)
}

// TokenStoreConfig configures a TokenStore.
type TokenStoreConfig struct {
	// CacheTTL is how long Authenticate trusts what it read about a token
	// (and that a token is unknown or revoked) before reading it again: the
	// longest a revocation made by another process takes to be seen.
	// Defaults to 5s; negative disables the cache.
	CacheTTL time.Duration
	// CacheSize bounds the tokens remembered. Defaults to 10000.
	CacheSize int
	// Now is the clock of creation, revocation and cache expiry. Defaults
	// to time.Now.
	Now func() time.Time
	// Logger defaults to zap.NewNop().
	Logger *zap.Logger
	// Accounts, the installations registry (*Installations), widens the
	// installations of a token on every request to all those of the same
	// GitHub accounts. Nil: a token acts on the installation IDs it is
	// bound to only.
	Accounts AccountInstallations
}

// AccountInstallations tells which installations share a GitHub account
// (*Installations).
type AccountInstallations interface {
	// SameAccountInstallations returns ids with every installation of
	// the accounts ids belong to.
	SameAccountInstallations(ctx context.Context, ids []int64) ([]int64, error)
}

// TokenStore creates, lists, revokes and authenticates API tokens kept in
// baton's SQLite database. It is safe for concurrent use, and several
// processes may use the same database (the server and `baton token`).
type TokenStore struct {
	db        *sqlite.DB
	cacheTTL  time.Duration
	cacheSize int
	now       func() time.Time
	log       *zap.Logger
	accounts  AccountInstallations

	mu    sync.RWMutex
	cache map[[sha256.Size]byte]tokenCacheEntry
	// revocations counts RevokeToken calls: a lookup that read the table
	// before a revocation committed must not cache what it read after the
	// revocation cleared the cache.
	revocations uint64

	// touching holds the IDs of the tokens whose use is being recorded
	// (touch in the background): one write in flight per token.
	touching sync.Map
}

// tokenCacheEntry is what Authenticate learned about one hash: a principal,
// or that the hash authenticates nobody (unknown or revoked).
type tokenCacheEntry struct {
	principal *Principal // nil: refused
	expires   time.Time
}

// tokenLastUsedResolution is how stale last_used_at may be: it is written at
// most this often per token, and only when Authenticate reads the database.
const tokenLastUsedResolution = time.Minute

// NewTokenStore returns a token store on db.
func NewTokenStore(db *sqlite.DB, cfg TokenStoreConfig) (*TokenStore, error) {
	if db == nil {
		return nil, errors.New("app: NewTokenStore needs a database")
	}
	if cfg.CacheTTL == 0 {
		cfg.CacheTTL = 5 * time.Second
	}
	cfg.CacheSize = cmp.Or(cfg.CacheSize, 10000)
	if cfg.CacheSize < 0 {
		return nil, errors.New("app: TokenStoreConfig.CacheSize must not be negative")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	return &TokenStore{
		db:        db,
		cacheTTL:  cfg.CacheTTL,
		cacheSize: cfg.CacheSize,
		now:       cfg.Now,
		log:       cfg.Logger.With(zap.String("subsystem", "tokens")),
		accounts:  cfg.Accounts,
		cache:     make(map[[sha256.Size]byte]tokenCacheEntry),
	}, nil
}

// CreateToken stores a new token and returns it in plain text (the only
// time it exists outside its holder's hands) with its description.
func (s *TokenStore) CreateToken(ctx context.Context, spec TokenSpec) (string, Token, error) {
	if err := schema.ValidateActor(spec.Actor); err != nil {
		return "", Token{}, err
	}
	if schema.ReservedActor(spec.Actor) {
		return "", Token{}, schema.Invalidf("actor names beginning with %q are reserved for the operations baton derives from webhooks", schema.WebhookActorPrefix)
	}
	installations := slices.Clone(spec.Installations)
	slices.Sort(installations)
	installations = slices.Compact(installations)
	for _, id := range installations {
		if id <= 0 {
			return "", Token{}, schema.Invalidf("installation IDs must be positive, not %d", id)
		}
	}
	all := spec.AllInstallations || spec.Admin
	if all && len(installations) > 0 {
		if spec.Admin {
			return "", Token{}, schema.Invalidf("an admin token acts on every installation; give no installation IDs")
		}
		return "", Token{}, schema.Invalidf("give installation IDs or all installations, not both")
	}
	if !all && len(installations) == 0 {
		return "", Token{}, schema.Invalidf("a token must be bound to installations (IDs) or to all installations")
	}
	if installations == nil {
		installations = []int64{}
	}
	var raw [tokenRandomBytes]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", Token{}, fmt.Errorf("app: generate token: %w", err)
	}
	plain := TokenPrefix + base64.RawURLEncoding.EncodeToString(raw[:])
	hash := sha256.Sum256([]byte(plain))
	list, _ := json.Marshal(installations)
	now := s.now().UTC().Truncate(time.Microsecond)
	tok := Token{Actor: spec.Actor, Admin: spec.Admin, AllInstallations: all, Installations: installations, Accounts: []TokenAccount{}, CreatedAt: now}
	err := s.db.Write(ctx, func(tx *sqlite.Tx) error {
		res, err := tx.Exec(`INSERT INTO api_tokens (hash, actor, admin, all_installations, installations, created_at)
			VALUES (?, ?, ?, ?, ?, ?)`, hash[:], spec.Actor, spec.Admin, all, string(list), now.UnixMicro())
		if err != nil {
			return fmt.Errorf("app: store token: %w", err)
		}
		tok.ID, err = res.LastInsertId()
		return err
	})
	if err != nil {
		return "", Token{}, err
	}
	// A refusal of this hash cached before it existed cannot happen in
	// practice (32 random bytes), but forget it all the same.
	s.mu.Lock()
	delete(s.cache, hash)
	s.mu.Unlock()
	s.log.Info("token created", zap.String("event", "token_created"), zap.Int64("tokenId", tok.ID), zap.Bool("admin", tok.Admin))
	toks := []Token{tok}
	if err := s.fillAccounts(ctx, toks); err != nil {
		// The token is stored: its holder must get it all the same.
		s.log.Warn("reading the new token's accounts failed", zap.String("event", "token_accounts_failed"), zap.Int64("tokenId", tok.ID), zap.Error(err))
		return plain, tok, nil
	}
	return plain, toks[0], nil
}

// ListTokens returns every token, revoked ones included, oldest first.
func (s *TokenStore) ListTokens(ctx context.Context) ([]Token, error) {
	rows, err := s.db.Query(ctx, `SELECT id, actor, admin, all_installations, installations, created_at, revoked_at, last_used_at
		FROM api_tokens ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("app: list tokens: %w", err)
	}
	defer rows.Close()
	out := []Token{}
	for rows.Next() {
		t, err := scanToken(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("app: list tokens: %w", err)
	}
	rows.Close()
	if err := s.fillAccounts(ctx, out); err != nil {
		return nil, err
	}
	return out, nil
}

// fillAccounts sets the Accounts of tokens from the installations
// registry's table: the accounts of their installations whose account ID
// it knows, each with the login of its installation in force (or else
// last changed).
func (s *TokenStore) fillAccounts(ctx context.Context, tokens []Token) error {
	rows, err := s.db.Query(ctx, `SELECT id, account_id, account FROM installations WHERE account_id != 0
		ORDER BY deleted_at IS NULL, updated_at, id`)
	if err != nil {
		return fmt.Errorf("app: read the accounts of installations: %w", err)
	}
	defer rows.Close()
	accountOf := map[int64]int64{}
	login := map[int64]string{}
	for rows.Next() {
		var (
			id, account int64
			name        string
		)
		if err := rows.Scan(&id, &account, &name); err != nil {
			return fmt.Errorf("app: read the accounts of installations: %w", err)
		}
		accountOf[id] = account
		login[account] = name // the last row wins: in force, else newest
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("app: read the accounts of installations: %w", err)
	}
	for i := range tokens {
		t := &tokens[i]
		t.Accounts = []TokenAccount{}
		if t.AllInstallations {
			continue
		}
		for _, id := range t.Installations {
			a, ok := accountOf[id]
			if ok && !slices.ContainsFunc(t.Accounts, func(x TokenAccount) bool { return x.ID == a }) {
				t.Accounts = append(t.Accounts, TokenAccount{ID: a, Login: login[a]})
			}
		}
	}
	return nil
}

// RevokeToken revokes a token: from now on it authenticates nobody (at
// once through this store, within CacheTTL through another process's).
// Revoking a revoked token changes nothing and is not an error; an unknown
// ID is not_found.
func (s *TokenStore) RevokeToken(ctx context.Context, id int64) (Token, error) {
	var tok Token
	err := s.db.Write(ctx, func(tx *sqlite.Tx) error {
		if _, err := tx.Exec(`UPDATE api_tokens SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL`,
			s.now().UnixMicro(), id); err != nil {
			return fmt.Errorf("app: revoke token: %w", err)
		}
		row := tx.QueryRow(`SELECT id, actor, admin, all_installations, installations, created_at, revoked_at, last_used_at
			FROM api_tokens WHERE id = ?`, id)
		var err error
		tok, err = scanToken(row)
		return err
	})
	if err != nil {
		return Token{}, err
	}
	s.mu.Lock()
	s.revocations++
	for h, e := range s.cache {
		if e.principal != nil && e.principal.TokenID == id {
			delete(s.cache, h)
		}
	}
	s.mu.Unlock()
	s.log.Info("token revoked", zap.String("event", "token_revoked"), zap.Int64("tokenId", id))
	toks := []Token{tok}
	if err := s.fillAccounts(ctx, toks); err != nil {
		// The revocation stands: say so all the same.
		s.log.Warn("reading the revoked token's accounts failed", zap.String("event", "token_accounts_failed"), zap.Int64("tokenId", id), zap.Error(err))
		return tok, nil
	}
	return toks[0], nil
}

// errBadAPIToken is what every refused token gets: missing, malformed,
// unknown and revoked look the same from outside.
var errBadAPIToken = &schema.Error{Code: schema.CodeUnauthorized, Message: "missing, unknown or revoked API token"}

// Authenticate returns the principal of a token, or an unauthorized error.
// With TokenStoreConfig.Accounts, the principal's installations are those
// of the token's accounts, as the registry knows them now.
func (s *TokenStore) Authenticate(ctx context.Context, token string) (Principal, error) {
	p, err := s.authenticate(ctx, token)
	if err != nil || s.accounts == nil || p.Admin || p.AllInstallations {
		return p, err
	}
	if p.Installations, err = s.accounts.SameAccountInstallations(ctx, p.Installations); err != nil {
		return Principal{}, fmt.Errorf("app: token %d: %w", p.TokenID, err)
	}
	return p, nil
}

func (s *TokenStore) authenticate(ctx context.Context, token string) (Principal, error) {
	if len(token) != tokenLen || !strings.HasPrefix(token, TokenPrefix) {
		return Principal{}, errBadAPIToken
	}
	hash := sha256.Sum256([]byte(token))
	now := s.now()
	if s.cacheTTL > 0 {
		s.mu.RLock()
		e, ok := s.cache[hash]
		s.mu.RUnlock()
		if ok && now.Before(e.expires) {
			if e.principal == nil {
				return Principal{}, errBadAPIToken
			}
			return *e.principal, nil
		}
	}
	s.mu.RLock()
	gen := s.revocations
	s.mu.RUnlock()
	p, lastUsed, err := s.lookup(ctx, hash)
	if err != nil && !errors.Is(err, errBadAPIToken) {
		return Principal{}, err
	}
	if s.cacheTTL > 0 {
		s.remember(hash, p, err, now, gen)
	}
	if err != nil {
		return Principal{}, err
	}
	if lastUsed.IsZero() || now.Sub(lastUsed) >= tokenLastUsedResolution {
		s.touchLater(p.TokenID, now)
	}
	return *p, nil
}

// touchLater records the token's use in the background: the request it
// authenticates, a read as often as not, must not wait for a write (for
// the writer's queue, or for the busy timeout while another process holds
// the database's lock). At most one such write per token is in flight.
func (s *TokenStore) touchLater(id int64, now time.Time) {
	if _, busy := s.touching.LoadOrStore(id, struct{}{}); busy {
		return
	}
	go func() {
		defer s.touching.Delete(id)
		s.touch(context.Background(), id, now)
	}()
}

// lookup reads the token with this hash.
func (s *TokenStore) lookup(ctx context.Context, hash [sha256.Size]byte) (*Principal, time.Time, error) {
	var (
		p        Principal
		list     string
		revoked  sql.NullInt64
		lastUsed sql.NullInt64
	)
	err := s.db.QueryRow(ctx, `SELECT id, actor, admin, all_installations, installations, revoked_at, last_used_at
		FROM api_tokens WHERE hash = ?`, hash[:]).Scan(&p.TokenID, &p.Actor, &p.Admin, &p.AllInstallations, &list, &revoked, &lastUsed)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, time.Time{}, errBadAPIToken
	}
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("app: read token: %w", err)
	}
	if revoked.Valid {
		return nil, time.Time{}, errBadAPIToken
	}
	if schema.ReservedActor(p.Actor) {
		// Created before such actors were refused: it would act as the
		// webhook-born operations' actor. (Refusals are cached, so this
		// is said at most once per cache TTL.)
		s.log.Warn("token refused: its actor is reserved for webhook-born operations; revoke it and create another",
			zap.String("event", "token_reserved_actor"), zap.Int64("tokenId", p.TokenID))
		return nil, time.Time{}, errBadAPIToken
	}
	if err := json.Unmarshal([]byte(list), &p.Installations); err != nil {
		return nil, time.Time{}, fmt.Errorf("app: token %d: installations: %w", p.TokenID, err)
	}
	var last time.Time
	if lastUsed.Valid {
		last = time.UnixMicro(lastUsed.Int64)
	}
	return &p, last, nil
}

// remember caches the outcome of a lookup. When the cache is full, expired
// entries are dropped; if none are, refusals are not cached (so random
// tokens cannot push out the good ones) and a known token replaces an
// arbitrary entry. Nothing is cached if a token was revoked since gen
// was read, before the lookup: what it read may be older than the
// revocation.
func (s *TokenStore) remember(hash [sha256.Size]byte, p *Principal, err error, now time.Time, gen uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.revocations != gen {
		return
	}
	if len(s.cache) >= s.cacheSize {
		for h, e := range s.cache {
			if !now.Before(e.expires) {
				delete(s.cache, h)
			}
		}
	}
	if len(s.cache) >= s.cacheSize {
		if err != nil {
			return
		}
		for h := range s.cache {
			delete(s.cache, h)
			break
		}
	}
	s.cache[hash] = tokenCacheEntry{principal: p, expires: now.Add(s.cacheTTL)}
}

// touch records that the token was used. It is written at most once per
// tokenLastUsedResolution per token and only on a cache miss; a failure is
// logged, never the request's problem (a server stopping is no failure).
func (s *TokenStore) touch(ctx context.Context, id int64, now time.Time) {
	err := s.db.Write(ctx, func(tx *sqlite.Tx) error {
		_, err := tx.Exec(`UPDATE api_tokens SET last_used_at = ? WHERE id = ?`, now.UnixMicro(), id)
		return err
	})
	if err != nil && ctx.Err() == nil && !errors.Is(err, sqlite.ErrClosed) {
		s.log.Warn("recording token use failed", zap.String("event", "token_touch_failed"), zap.Int64("tokenId", id), zap.Error(err))
	}
}

type tokenRowScanner interface{ Scan(dest ...any) error }

func scanToken(row tokenRowScanner) (Token, error) {
	var (
		t                 Token
		list              string
		created           int64
		revoked, lastUsed sql.NullInt64
	)
	err := row.Scan(&t.ID, &t.Actor, &t.Admin, &t.AllInstallations, &list, &created, &revoked, &lastUsed)
	if errors.Is(err, sql.ErrNoRows) {
		return Token{}, schema.Errorf(schema.CodeNotFound, "token not found")
	}
	if err != nil {
		return Token{}, fmt.Errorf("app: read token: %w", err)
	}
	if err := json.Unmarshal([]byte(list), &t.Installations); err != nil {
		return Token{}, fmt.Errorf("app: token %d: installations: %w", t.ID, err)
	}
	t.Accounts = []TokenAccount{}
	t.CreatedAt = time.UnixMicro(created).UTC()
	if revoked.Valid {
		r := time.UnixMicro(revoked.Int64).UTC()
		t.RevokedAt = &r
	}
	if lastUsed.Valid {
		l := time.UnixMicro(lastUsed.Int64).UTC()
		t.LastUsedAt = &l
	}
	return t, nil
}
