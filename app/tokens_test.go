package app

import (
	"context"
	"crypto/sha256"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/sqlite"
	"github.com/baton-dev/baton/schema"
)

// tokenClock is a clock tests move by hand.
type tokenClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *tokenClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *tokenClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func newTokenDB(t *testing.T) *sqlite.DB {
	t.Helper()
	db, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "baton.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestTokenLifecycle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newTokenDB(t)
	clock := &tokenClock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	s, err := NewTokenStore(db, TokenStoreConfig{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	plain, tok, err := s.CreateToken(ctx, TokenSpec{Actor: "alice", Installations: []int64{7, 3, 7}})
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^baton_[A-Za-z0-9_-]{43}$`).MatchString(plain) {
		t.Errorf("token %q is not baton_ + 43 base64url characters", plain)
	}
	if tok.ID == 0 || tok.Actor != "alice" || tok.Admin || tok.AllInstallations || len(tok.Installations) != 2 || tok.Installations[0] != 3 {
		t.Errorf("token = %+v", tok)
	}
	p, err := s.Authenticate(ctx, plain)
	if err != nil || p.Actor != "alice" || p.TokenID != tok.ID || !p.MayActOn(3) || !p.MayActOn(7) || p.MayActOn(1) || p.Admin {
		t.Errorf("Authenticate = %+v, %v", p, err)
	}

	// Only the hash is stored: no column holds the token.
	var hash []byte
	var dump string
	if err := db.QueryRow(ctx, `SELECT hash, actor || installations || created_at FROM api_tokens WHERE id = ?`, tok.ID).Scan(&hash, &dump); err != nil {
		t.Fatal(err)
	}
	if sum := sha256.Sum256([]byte(plain)); string(hash) != string(sum[:]) || strings.Contains(dump, plain[6:]) {
		t.Errorf("stored hash does not match, or the token is stored")
	}

	admin, at, err := s.CreateToken(ctx, TokenSpec{Actor: "root", Admin: true})
	if err != nil || !at.AllInstallations {
		t.Fatalf("admin token: %+v, %v (admin tokens act on every installation)", at, err)
	}
	if p, err := s.Authenticate(ctx, admin); err != nil || !p.Admin || !p.MayActOn(12345) {
		t.Errorf("admin principal %+v, %v", p, err)
	}
	// The use is recorded in the background, soon.
	var list []Token
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		list, err = s.ListTokens(ctx)
		if err != nil || len(list) != 2 || list[0].LastUsedAt != nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil || len(list) != 2 || list[0].ID != tok.ID || list[1].Actor != "root" || list[0].LastUsedAt == nil {
		t.Errorf("ListTokens = %+v, %v", list, err)
	}

	// Revocation through this store is immediate, despite the cache.
	rt, err := s.RevokeToken(ctx, tok.ID)
	if err != nil || !rt.Revoked() {
		t.Fatalf("RevokeToken = %+v, %v", rt, err)
	}
	if _, err := s.Authenticate(ctx, plain); schema.ErrorCode(err) != schema.CodeUnauthorized {
		t.Errorf("revoked token authenticates: %v", err)
	}
	if _, err := s.RevokeToken(ctx, tok.ID); err != nil {
		t.Errorf("revoking twice: %v", err)
	}
	if _, err := s.RevokeToken(ctx, 999); schema.ErrorCode(err) != schema.CodeNotFound {
		t.Errorf("revoking a missing token: %v", err)
	}
}

// A lookup that read the token before a revocation committed, and would
// cache it after the revocation cleared the cache, caches nothing: the
// revocation holds at once. The interleaving is spelled out step by step.
func TestTokenRevocationRacingLookup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := &tokenClock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	s, err := NewTokenStore(newTokenDB(t), TokenStoreConfig{Now: clock.Now, CacheTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	plain, tok, err := s.CreateToken(ctx, TokenSpec{Actor: "alice", AllInstallations: true})
	if err != nil {
		t.Fatal(err)
	}
	hash := sha256.Sum256([]byte(plain))
	s.mu.RLock()
	gen := s.revocations // as Authenticate reads it, before its lookup
	s.mu.RUnlock()
	p, _, err := s.lookup(ctx, hash) // reads the token while it is valid
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.RevokeToken(ctx, tok.ID); err != nil {
		t.Fatal(err)
	}
	s.remember(hash, p, nil, clock.Now(), gen) // the lookup's result arrives late
	if _, err := s.Authenticate(ctx, plain); schema.ErrorCode(err) != schema.CodeUnauthorized {
		t.Errorf("a token revoked during a lookup still authenticates: %v", err)
	}
}

// A revocation made by another process (another TokenStore on the same
// file) is seen within the cache TTL, and not trusted longer.
func TestTokenRevocationFromAnotherProcess(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newTokenDB(t)
	clock := &tokenClock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	server, err := NewTokenStore(db, TokenStoreConfig{Now: clock.Now, CacheTTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	cli, err := NewTokenStore(db, TokenStoreConfig{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	plain, tok, err := cli.CreateToken(ctx, TokenSpec{Actor: "ci", AllInstallations: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := server.Authenticate(ctx, plain); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.RevokeToken(ctx, tok.ID); err != nil {
		t.Fatal(err)
	}
	clock.Advance(4 * time.Second)
	if _, err := server.Authenticate(ctx, plain); err != nil {
		t.Errorf("within the cache TTL the server still trusts its cache: %v", err)
	}
	clock.Advance(1 * time.Second)
	if _, err := server.Authenticate(ctx, plain); schema.ErrorCode(err) != schema.CodeUnauthorized {
		t.Errorf("after the cache TTL a revoked token still authenticates: %v", err)
	}

	if _, err := server.Authenticate(ctx, TokenPrefix+strings.Repeat("x", 43)); schema.ErrorCode(err) != schema.CodeUnauthorized {
		t.Errorf("unknown token: %v", err)
	}
}

func TestTokenSpecValidation(t *testing.T) {
	t.Parallel()
	s, err := NewTokenStore(newTokenDB(t), TokenStoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for name, spec := range map[string]TokenSpec{
		"no actor":                 {Installations: []int64{1}},
		"actor with a line break":  {Actor: "a\nb", Installations: []int64{1}},
		"no installations":         {Actor: "a"},
		"admin with installations": {Actor: "a", Admin: true, Installations: []int64{1}},
		"both":                     {Actor: "a", AllInstallations: true, Installations: []int64{1}},
		"installation 0":           {Actor: "a", Installations: []int64{0}},
		"the webhook actor":        {Actor: schema.WebhookActor(1), Installations: []int64{1}},
		"a webhook-like actor":     {Actor: "GitHub:ci", AllInstallations: true},
	} {
		if _, _, err := s.CreateToken(context.Background(), spec); schema.ErrorCode(err) != schema.CodeInvalidRequest {
			t.Errorf("%s: %v, want invalid_request", name, err)
		}
	}
	if list, _ := s.ListTokens(context.Background()); len(list) != 0 {
		t.Errorf("refused specs stored %d tokens", len(list))
	}
}

// A token stored with a reserved actor (before such actors were refused)
// no longer authenticates.
func TestTokenWithReservedActorRefused(t *testing.T) {
	t.Parallel()
	db := newTokenDB(t)
	ctx := context.Background()
	s, err := NewTokenStore(db, TokenStoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	plain, tok, err := s.CreateToken(ctx, TokenSpec{Actor: "ci", AllInstallations: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Write(ctx, func(tx *sqlite.Tx) error {
		_, err := tx.Exec(`UPDATE api_tokens SET actor = ? WHERE id = ?`, schema.WebhookActor(1), tok.ID)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	fresh, err := NewTokenStore(db, TokenStoreConfig{}) // nothing cached
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fresh.Authenticate(ctx, plain); schema.ErrorCode(err) != schema.CodeUnauthorized {
		t.Errorf("a token of actor %s: %v, want unauthorized", schema.WebhookActor(1), err)
	}
}

// The cache stays bounded under a flood of random tokens and keeps
// authenticating the good one.
func TestTokenCacheBounded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := NewTokenStore(newTokenDB(t), TokenStoreConfig{CacheSize: 8})
	if err != nil {
		t.Fatal(err)
	}
	good, _, err := s.CreateToken(ctx, TokenSpec{Actor: "a", AllInstallations: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Authenticate(ctx, good); err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		bad := TokenPrefix + strings.Repeat(string(rune('a'+i%26)), 40) + "abc"
		_, _ = s.Authenticate(ctx, bad[:tokenLen])
	}
	s.mu.RLock()
	n := len(s.cache)
	s.mu.RUnlock()
	if n > 8 {
		t.Errorf("cache holds %d entries, bound 8", n)
	}
	if _, err := s.Authenticate(ctx, good); err != nil {
		t.Errorf("good token after the flood: %v", err)
	}
}
