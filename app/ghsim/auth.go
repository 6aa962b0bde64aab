package ghsim

import (
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/golang-jwt/jwt/v4"
)

// app is a GitHub App the simulator knows: the primary one, the ones
// created from manifests, and the "CI" App that owns simulated check runs.
type app struct {
	id           int64
	name         string
	slug         string
	clientID     string
	clientSecret string
	key          *rsa.PrivateKey // nil for Apps that cannot authenticate
	owner        *user
	bot          *user
	createdAt    time.Time
	permissions  map[string]string
	events       []string
	hookID       int64
	json         json.RawMessage // its "integration" representation

	// webhookURL and webhookSecret are guarded by Sim.mu.
	webhookURL    string
	webhookSecret string
}

// defaultPermissions are what installations of the simulated App grant:
// what baton needs.
func defaultPermissions() map[string]string {
	return map[string]string{
		"administration": "read", "checks": "read", "contents": "write", "issues": "write",
		"metadata": "read", "pull_requests": "write", "statuses": "write",
	}
}

var defaultEvents = []string{"check_run", "check_suite", "issue_comment", "issues", "pull_request", "push", "status"}

// newApp creates an App (not registered: the caller adds it to s.apps).
// The caller holds s.mu or is New.
func (s *Sim) newApp(id int64, name string, key *rsa.PrivateKey, owner *user) *app {
	slug := slugify(name)
	a := &app{
		id: id, name: name, slug: slug, key: key, owner: owner, createdAt: s.now(),
		clientID: "Iv1." + randomHex(8), clientSecret: randomHex(20),
		permissions: defaultPermissions(), events: defaultEvents, hookID: s.newID(),
	}
	a.bot = s.userLocked(slug+"[bot]", "Bot")
	a.json = mustJSON(s.renderApp(a))
	return a
}

func (s *Sim) renderApp(a *app) map[string]any {
	return map[string]any{
		"id": a.id, "slug": a.slug, "node_id": nodeID("A_", a.id), "client_id": a.clientID,
		"owner": a.owner.json, "name": a.name, "description": "A GitHub App of the baton simulator",
		"external_url": s.url, "html_url": s.url + "/apps/" + a.slug,
		"created_at": formatTime(a.createdAt), "updated_at": formatTime(a.createdAt),
		"permissions": a.permissions, "events": a.events, "installations_count": 0,
	}
}

var slugRE = regexp.MustCompile(`[^a-z0-9]+`)

func slugify(name string) string {
	return strings.Trim(slugRE.ReplaceAllString(strings.ToLower(name), "-"), "-")
}

// AppID is the primary App's ID.
func (s *Sim) AppID() int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.primaryApp
}

// PrivateKeyPEM is the primary App's private key, PEM-encoded (PKCS #1),
// as GitHub hands it out.
func (s *Sim) PrivateKeyPEM() []byte {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return encodeKey(s.apps[s.primaryApp].key)
}

func encodeKey(key *rsa.PrivateKey) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
}

// token is an installation access token.
type token struct {
	installationID int64
	appID          int64
	expiresAt      time.Time
	repoIDs        map[int64]bool // nil: every repository of the installation
	permissions    map[string]string
}

// reaches reports whether the token may see repository id.
func (t *token) reaches(id int64) bool { return t.repoIDs == nil || t.repoIDs[id] }

type tokenStore struct {
	mu     sync.RWMutex
	tokens map[string]*token
	issued atomic.Int64
}

func (ts *tokenStore) init() { ts.tokens = map[string]*token{} }

func (ts *tokenStore) add(t *token) string {
	value := "ghs_" + randomBase62(36)
	ts.mu.Lock()
	ts.tokens[value] = t
	ts.mu.Unlock()
	ts.issued.Add(1)
	return value
}

func (ts *tokenStore) get(value string) *token {
	ts.mu.RLock()
	defer ts.mu.RUnlock()
	return ts.tokens[value]
}

// revoke drops every token of an installation.
func (ts *tokenStore) revoke(installationID int64) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	for k, t := range ts.tokens {
		if t.installationID == installationID {
			delete(ts.tokens, k)
		}
	}
}

// sweep drops expired tokens.
func (ts *tokenStore) sweep(now time.Time) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	for k, t := range ts.tokens {
		if !now.Before(t.expiresAt) {
			delete(ts.tokens, k)
		}
	}
}

// TokensIssued counts the installation tokens issued so far.
func (s *Sim) TokensIssued() int64 { return s.tokens.issued.Load() }

// badCredentials is GitHub's answer to a missing, unknown or expired token.
func badCredentials() response {
	return errResponse(http.StatusUnauthorized, "Bad credentials", docsRoot)
}

func jwtError(message string) response {
	return errResponse(http.StatusUnauthorized, message, docsRoot)
}

// authenticate checks the Authorization header against the route's needs.
func (s *Sim) authenticate(c *call) (response, bool) {
	if c.rt.auth == authNone {
		return response{}, true
	}
	scheme, cred, _ := strings.Cut(c.r.Header.Get("Authorization"), " ")
	scheme = strings.ToLower(scheme)
	if cred == "" || (scheme != "bearer" && scheme != "token") {
		if c.rt.auth == authApp {
			return jwtError("A JSON web token could not be decoded"), false
		}
		return errResponse(http.StatusUnauthorized, "Requires authentication", docsRoot), false
	}
	isJWT := strings.Count(cred, ".") == 2
	switch c.rt.auth {
	case authApp:
		if !isJWT {
			return jwtError("A JSON web token could not be decoded"), false
		}
		a, resp, ok := s.verifyJWT(cred)
		if !ok {
			return resp, false
		}
		c.app = a
		return response{}, true
	default:
		if isJWT {
			// An App JWT cannot act on repositories.
			return errResponse(http.StatusForbidden, "Resource not accessible by integration", docsRoot), false
		}
		t := s.tokens.get(cred)
		if t == nil || !s.now().Before(t.expiresAt) {
			return badCredentials(), false
		}
		s.mu.RLock()
		inst := s.installations[t.installationID]
		a := s.apps[t.appID]
		suspended := inst != nil && inst.suspended()
		s.mu.RUnlock()
		if inst == nil || a == nil {
			return badCredentials(), false
		}
		if suspended {
			return errResponse(http.StatusForbidden, "This installation has been suspended", docsRoot), false
		}
		c.tok, c.inst, c.app, c.instN = t, inst, a, inst.id
		return response{}, true
	}
}

// jwtLeeway is the clock drift GitHub tolerates; jwtMaxLife is the longest
// lifetime it accepts.
const (
	jwtLeeway  = 60 * time.Second
	jwtMaxLife = 10 * time.Minute
)

// verifyJWT checks an App JWT: RS256, signed by a known App's key, iss the
// App ID (or its client ID), iat and exp integers within GitHub's bounds.
func (s *Sim) verifyJWT(raw string) (*app, response, bool) {
	parser := jwt.NewParser(jwt.WithValidMethods([]string{"RS256"}), jwt.WithJSONNumber(), jwt.WithoutClaimsValidation())
	var a *app
	claims := jwt.MapClaims{}
	_, err := parser.ParseWithClaims(raw, claims, func(t *jwt.Token) (any, error) {
		a = s.appByIssuer(claims["iss"])
		if a == nil || a.key == nil {
			return nil, errors.New("unknown issuer")
		}
		return &a.key.PublicKey, nil
	})
	if err != nil {
		if a == nil && claims["iss"] != nil {
			return nil, jwtError("'Issuer' claim ('iss') must be an Integer"), false
		}
		return nil, jwtError("A JSON web token could not be decoded"), false
	}
	now := s.cfg.JWTNow()
	iat, okIat := integerClaim(claims["iat"])
	if !okIat || time.Unix(iat, 0).After(now.Add(jwtLeeway)) {
		return nil, jwtError("'Issued at' claim ('iat') must be an Integer representing the time that the assertion was issued."), false
	}
	exp, okExp := integerClaim(claims["exp"])
	if !okExp || !time.Unix(exp, 0).After(now) {
		return nil, jwtError("'Expiration time' claim ('exp') must be a numeric value representing the future time at which the assertion expires."), false
	}
	if time.Unix(exp, 0).After(now.Add(jwtMaxLife + jwtLeeway)) {
		return nil, jwtError("'Expiration time' claim ('exp') is too far in the future."), false
	}
	return a, response{}, true
}

func integerClaim(v any) (int64, bool) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, false
	}
	i, err := strconv.ParseInt(string(n), 10, 64)
	return i, err == nil
}

func (s *Sim) appByIssuer(iss any) *app {
	var key string
	switch v := iss.(type) {
	case string:
		key = v
	case json.Number:
		key = string(v)
	default:
		return nil
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if id, err := strconv.ParseInt(key, 10, 64); err == nil {
		return s.apps[id]
	}
	for _, a := range s.apps {
		if a.clientID == key {
			return a
		}
	}
	return nil
}

// checkPermissions enforces the token's permissions for the route.
func (s *Sim) checkPermissions(c *call) (response, bool) {
	if c.tok == nil || len(c.rt.perms) == 0 {
		return response{}, true
	}
	for _, p := range c.rt.perms {
		name, level, _ := strings.Cut(p, ":")
		if permLevel(c.tok.permissions[name]) >= permLevel(level) {
			return response{}, true
		}
	}
	return errResponse(http.StatusForbidden, "Resource not accessible by integration", docsRoot), false
}

func permLevel(p string) int {
	switch p {
	case "read":
		return 1
	case "write":
		return 2
	case "admin":
		return 3
	}
	return 0
}

// appRoutes serves the App's own endpoints.
func (s *Sim) appRoutes() []*route {
	return []*route{
		{method: "GET", pattern: "/app", auth: authApp, handle: s.getApp},
		{method: "GET", pattern: "/app/installations", auth: authApp, handle: s.listInstallations},
		{method: "GET", pattern: "/app/installations/{installation_id}", auth: authApp, handle: s.getInstallation},
		{method: "POST", pattern: "/app/installations/{installation_id}/access_tokens", auth: authApp, handle: s.createToken},
		{method: "GET", pattern: "/installation/repositories", auth: authInstallation, handle: s.listInstallationRepos},
		{method: "GET", pattern: "/rate_limit", auth: authInstallation, handle: s.getRateLimit},
	}
}

func (s *Sim) getApp(c *call) response {
	return response{status: http.StatusOK, body: c.app.json}
}

func (s *Sim) createToken(c *call) response {
	id, err := strconv.ParseInt(c.r.PathValue("installation_id"), 10, 64)
	if err != nil {
		return notFound()
	}
	var req struct {
		Repositories  []string          `json:"repositories"`
		RepositoryIDs []int64           `json:"repository_ids"`
		Permissions   map[string]string `json:"permissions"`
	}
	if resp, ok := c.decode("InstallationAccessToken", &req); !ok {
		return resp
	}
	s.mu.RLock()
	inst := s.installations[id]
	if inst == nil || inst.appID != c.app.id {
		s.mu.RUnlock()
		return notFound()
	}
	if inst.suspended() {
		s.mu.RUnlock()
		return errResponse(http.StatusForbidden, "This installation has been suspended", docsRoot)
	}
	var repoIDs map[int64]bool
	var repos []json.RawMessage
	if len(req.Repositories) > 0 || len(req.RepositoryIDs) > 0 {
		repoIDs = map[int64]bool{}
		for _, name := range req.Repositories {
			r, ok := s.repos[repoKey(inst.account.login, name)]
			if !ok || r.installationID != id {
				s.mu.RUnlock()
				return errResponse(http.StatusUnprocessableEntity, "There is at least one repository that does not exist or is not accessible to the parent installation.", docsRoot)
			}
			repoIDs[r.id] = true
		}
		for _, rid := range req.RepositoryIDs {
			r, ok := s.reposByID[rid]
			if !ok || r.installationID != id {
				s.mu.RUnlock()
				return errResponse(http.StatusUnprocessableEntity, "There is at least one repository that does not exist or is not accessible to the parent installation.", docsRoot)
			}
			repoIDs[r.id] = true
		}
		for _, rid := range inst.repoIDs {
			if repoIDs[rid] {
				repos = append(repos, s.reposByID[rid].repr())
			}
		}
	}
	perms := inst.permissions
	if len(req.Permissions) > 0 {
		perms = map[string]string{}
		for k, v := range req.Permissions {
			if permLevel(inst.permissions[k]) < permLevel(v) || permLevel(v) == 0 {
				s.mu.RUnlock()
				return errResponse(http.StatusUnprocessableEntity, "The permissions requested are not granted to this installation.", docsRoot)
			}
			perms[k] = v
		}
	}
	selection := inst.repositorySelection
	s.mu.RUnlock()

	now := s.now()
	if s.tokens.issued.Load()%256 == 255 {
		s.tokens.sweep(now)
	}
	expires := now.Add(s.cfg.TokenTTL)
	value := s.tokens.add(&token{installationID: id, appID: c.app.id, expiresAt: expires, repoIDs: repoIDs, permissions: perms})
	if repoIDs != nil {
		selection = "selected"
	}
	body := map[string]any{
		"token": value, "expires_at": formatTime(expires), "permissions": perms,
		"repository_selection": selection,
	}
	if repos != nil {
		body["repositories"] = repos
	}
	return response{status: http.StatusCreated, body: body}
}

func (s *Sim) listInstallationRepos(c *call) response {
	s.mu.RLock()
	var all []json.RawMessage
	for _, rid := range c.inst.repoIDs {
		if c.tok.reaches(rid) {
			all = append(all, s.reposByID[rid].repr())
		}
	}
	selection := c.inst.repositorySelection
	s.mu.RUnlock()
	if c.tok.repoIDs != nil {
		selection = "selected"
	}
	lo, hi, h := c.paginate(len(all))
	page := all[lo:hi]
	if page == nil {
		page = []json.RawMessage{}
	}
	return response{status: http.StatusOK, header: h, body: map[string]any{
		"total_count": len(all), "repositories": page, "repository_selection": selection,
	}}
}

func (s *Sim) getRateLimit(c *call) response {
	core := s.limits.peek(c.bucket(), s.now())
	res := map[string]any{"limit": core.limit, "remaining": core.remaining, "reset": core.reset.Unix(), "used": core.used}
	return response{status: http.StatusOK, body: map[string]any{
		"resources": map[string]any{"core": res, "search": map[string]any{"limit": 30, "remaining": 30, "reset": core.reset.Unix(), "used": 0}},
		"rate":      res,
	}}
}

// String keeps keys out of fmt output.
func (a *app) String() string { return fmt.Sprintf("app %d (%s)", a.id, a.slug) }
