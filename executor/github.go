package executor

import (
	"cmp"
	"context"
	"crypto/rsa"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bradleyfalzon/ghinstallation/v2"
	"github.com/golang-jwt/jwt/v4"
	"github.com/google/go-github/v62/github"
)

// GitHubConfig configures the GitHub clients of the App.
type GitHubConfig struct {
	// BaseURL is the REST API base: https://api.github.com/ for github.com,
	// https://HOST/api/v3/ for GitHub Enterprise Server, or a simulator's
	// URL. Defaults to https://api.github.com/.
	BaseURL string
	// AppID is the GitHub App's ID. Required.
	AppID int64
	// PrivateKey is the App's private key, PEM-encoded. Required.
	PrivateKey []byte
	// Transport carries the requests. Defaults to a transport tuned for
	// many concurrent requests to one host.
	Transport http.RoundTripper
	// Timeout bounds each call the executor makes (a call in flight is
	// never cancelled by an operation's cancellation, only by this).
	// Callers of App and Installation bound theirs with their context.
	// Defaults to 30s.
	Timeout time.Duration
	// UserAgent is sent with every request. Defaults to "baton".
	UserAgent string
}

// GitHubClients makes go-github clients for the App and its
// installations. Each installation has one cached client over a
// ghinstallation transport, which exchanges the App's JWT for an
// installation token and renews it before it expires. The cache matters
// beyond speed: go-github remembers a secondary rate limit per client and
// refuses to send until it resets, so one client per installation makes
// that refusal apply to the whole installation, as GitHub intends.
type GitHubClients struct {
	base      *url.URL
	appID     int64
	key       *rsa.PrivateKey
	apps      *ghinstallation.AppsTransport
	transport http.RoundTripper
	timeout   time.Duration
	userAgent string
	app       *github.Client

	// skew is GitHub's clock minus this machine's (nanoseconds), as the
	// Date of a refused App JWT last showed it: the App's JWTs are
	// issued on GitHub's clock (see jwtClockTransport).
	skew atomic.Int64

	mu      sync.Mutex
	clients map[int64]*github.Client
	slug    string // the App's slug, once GET /app has told it
}

// NewGitHubClients checks cfg (the private key among it) and returns the
// factory.
func NewGitHubClients(cfg GitHubConfig) (*GitHubClients, error) {
	if cfg.AppID <= 0 {
		return nil, errors.New("executor: GitHub App ID is required")
	}
	if len(cfg.PrivateKey) == 0 {
		return nil, errors.New("executor: GitHub App private key is required")
	}
	base, err := url.Parse(cmp.Or(cfg.BaseURL, "https://api.github.com/"))
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return nil, fmt.Errorf("executor: GitHub API URL %q is not an http(s) URL", cfg.BaseURL)
	}
	if !strings.HasSuffix(base.Path, "/") {
		base.Path += "/"
	}
	if cfg.Transport == nil {
		cfg.Transport = newTransport()
	}
	cfg.Timeout = cmp.Or(cfg.Timeout, 30*time.Second)
	cfg.UserAgent = cmp.Or(cfg.UserAgent, "baton")
	key, err := jwt.ParseRSAPrivateKeyFromPEM(cfg.PrivateKey)
	if err != nil {
		return nil, fmt.Errorf("executor: GitHub App private key: %w", err)
	}
	g := &GitHubClients{
		base:      base,
		appID:     cfg.AppID,
		key:       key,
		transport: cfg.Transport,
		timeout:   cfg.Timeout,
		userAgent: cfg.UserAgent,
		clients:   make(map[int64]*github.Client),
	}
	g.apps = g.appsTransport()
	g.app = g.newClient(g.apps)
	return g, nil
}

// newTransport returns an HTTP transport that keeps enough idle
// connections for every worker to reuse one.
func newTransport() *http.Transport {
	return &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          256,
		MaxIdleConnsPerHost:   128,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
}

// newClient wraps rt in a go-github client. The http.Client has no Timeout
// of its own: deadlines come from contexts. (go-github replaces the body of
// an error response without closing the original, which would leave the
// http.Client's timeout goroutine running until the timeout fires.) The
// waits an answer names are bounded, and a secondary rate limit that names
// none is given GitHub's documented minute, before go-github reads them
// (waitHeadersTransport).
func (g *GitHubClients) newClient(rt http.RoundTripper) *github.Client {
	c := github.NewClient(httpClient(waitHeadersTransport{rt}))
	u := *g.base
	c.BaseURL = &u
	up := *g.base
	c.UploadURL = &up
	c.UserAgent = g.userAgent
	return c
}

// httpClient is the http.Client of baton's GitHub clients. It follows a
// redirect only with the request's own method: Go's default follows a 301,
// 302 or 303 to a POST, PATCH, PUT or DELETE with a GET, and GitHub
// documents 301 answers to such requests (adding labels to, or removing
// one from, an issue that was moved): the GET would list the issue's
// labels with 200, and the mutation, never made, would be recorded
// succeeded. Such an answer is returned as it is instead, a failure
// (Classify). A 307 or 308 (a renamed repository) keeps the method and
// body and is followed, on the same scheme and host only.
func httpClient(rt http.RoundTripper) *http.Client {
	return &http.Client{Transport: rt, CheckRedirect: func(req *http.Request, via []*http.Request) error {
		if len(via) >= 10 {
			return errors.New("stopped after 10 redirects")
		}
		if req.Method != via[0].Method {
			return http.ErrUseLastResponse
		}
		if req.URL.Scheme != via[0].URL.Scheme || req.URL.Host != via[0].URL.Host {
			// The installation transport adds the token to every request,
			// a redirected one too, so net/http's dropping of the header on
			// the way to another host does not apply: a redirect off the
			// GitHub API's own host (an http:// base URL sent to https, a
			// proxy's sign-in page) is returned as it is, and the token
			// stays with GitHub.
			return http.ErrUseLastResponse
		}
		return nil
	}}
}

func (g *GitHubClients) appsTransport() *ghinstallation.AppsTransport {
	signer := appJWTSigner{Signer: ghinstallation.NewRSASigner(jwt.SigningMethodRS256, g.key), skew: &g.skew}
	// It cannot fail: a signer is given.
	// Every request of the App and of its installations (whose transports
	// are made from this one) goes through sentMarkTransport, then
	// jwtClockTransport.
	t, _ := ghinstallation.NewAppsTransportWithOptions(jwtClockTransport{next: sentMarkTransport{g.transport}, signer: signer, appID: g.appID}, g.appID,
		ghinstallation.WithSigner(signer))
	t.BaseURL = strings.TrimRight(g.base.String(), "/")
	return t
}

// JWTBackdate is how far in the past the App's JWTs are issued, and
// JWTLifetime how long after that they expire: GitHub refuses a JWT
// issued in its future or expiring more than 10 minutes into it, and
// asks for iat 60 s in the past against clock drift. A JWT issued now
// minus a minute, expiring ten minutes after that, is accepted while this
// machine's clock is less than a minute ahead of GitHub's or nine behind;
// beyond that, jwtClockTransport learns the difference.
const (
	JWTBackdate = 60 * time.Second
	JWTLifetime = 10 * time.Minute
)

// clockSkew is GitHub's clock minus this machine's, as learnt so far
// (zero until a refused JWT has shown a difference).
func (g *GitHubClients) clockSkew() time.Duration { return time.Duration(g.skew.Load()) }

// appJWTSigner signs the App's JWTs with JWTBackdate and JWTLifetime
// instead of ghinstallation's own (iat 30 s in the past, exp 2 minutes
// after): with those, a clock more than 30 s ahead of GitHub's issues
// JWTs in GitHub's future, every token exchange is refused with 401, and
// every operation fails as if its installation were gone. The times are
// taken on GitHub's clock: this machine's plus skew, once learned.
type appJWTSigner struct {
	ghinstallation.Signer
	skew *atomic.Int64 // nil: none
}

func (s appJWTSigner) Sign(claims jwt.Claims) (string, error) {
	if rc, ok := claims.(*jwt.RegisteredClaims); ok {
		now := time.Now()
		if s.skew != nil {
			now = now.Add(time.Duration(s.skew.Load()))
		}
		// GitHub wants whole seconds.
		iat := now.Add(-JWTBackdate).Truncate(time.Second)
		rc.IssuedAt = jwt.NewNumericDate(iat)
		rc.ExpiresAt = jwt.NewNumericDate(iat.Add(JWTLifetime))
	}
	return s.Signer.Sign(claims)
}

// Bounds of the clock difference jwtClockTransport acts on: below
// jwtSkewTolerance a refusal is not the clock's doing (the JWT's window
// has a minute's margin on one side and nine on the other); beyond
// jwtMaxSkew the Date is not believed.
const (
	jwtSkewTolerance = 30 * time.Second
	jwtMaxSkew       = 24 * time.Hour
)

// jwtClockTransport carries the requests the App makes with its JWT (the
// installation-token exchange, /app routes). GitHub refuses with 401 a
// JWT issued in its future or expired by its clock: with this machine's
// clock more than a minute ahead of GitHub's, or nine behind, every
// token exchange would be refused and every operation would fail as if
// its installation were gone, until someone fixed the clock. When a 401
// comes with a Date that shows GitHub's clock off this machine's by
// jwtSkewTolerance or more from what was learned before, the difference
// is kept (the signer issues JWTs on GitHub's clock from then on) and the
// request is sent once more with a JWT so issued. (GitHub's client
// libraries do the same.) A 401 is not applied, so sending again is safe.
type jwtClockTransport struct {
	next   http.RoundTripper
	signer appJWTSigner
	appID  int64
}

func (t jwtClockTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if err != nil || resp.StatusCode != http.StatusUnauthorized || !signedWithJWT(req) {
		// (The installations' transports send their requests, made with
		// an installation token, through this one too.)
		return resp, err
	}
	date, derr := http.ParseTime(resp.Header.Get("Date"))
	if derr != nil {
		return resp, nil
	}
	// Date is in whole seconds, rounded down: the JWT errs on the side
	// of the past, which its minute's margin covers.
	skew := time.Until(date)
	if skew.Abs() > jwtMaxSkew || (skew-time.Duration(t.signer.skew.Load())).Abs() < jwtSkewTolerance {
		return resp, nil
	}
	t.signer.skew.Store(int64(skew))
	if req.Body != nil && req.Body != http.NoBody && req.GetBody == nil {
		return resp, nil // cannot be sent again; the next request will do
	}
	again := req.Clone(req.Context())
	if req.GetBody != nil {
		body, err := req.GetBody()
		if err != nil {
			return resp, nil
		}
		again.Body = body
	}
	token, err := t.signer.Sign(&jwt.RegisteredClaims{Issuer: strconv.FormatInt(t.appID, 10)})
	if err != nil {
		return resp, nil
	}
	again.Header.Set("Authorization", "Bearer "+token)
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	return t.next.RoundTrip(again)
}

// sentKey is the context key of a call's sent mark (see withSentMark).
type sentKey struct{}

// withSentMark returns ctx carrying a mark that is set once a request made
// with it (other than an installation token's exchange, which every call
// of an installation may have to make first) is handed to the network:
// while it is not set, nothing of the call reached GitHub.
func withSentMark(ctx context.Context) (context.Context, *atomic.Bool) {
	sent := new(atomic.Bool)
	return context.WithValue(ctx, sentKey{}, sent), sent
}

// sentMarkTransport sets the sent mark of each request it sends, if the
// request has one (see withSentMark) and is not made with the App's JWT.
type sentMarkTransport struct{ next http.RoundTripper }

func (t sentMarkTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if sent, ok := req.Context().Value(sentKey{}).(*atomic.Bool); ok && !signedWithJWT(req) {
		sent.Store(true)
	}
	return t.next.RoundTrip(req)
}

// signedWithJWT reports whether req carries an App JWT (not an
// installation token).
func signedWithJWT(req *http.Request) bool {
	token, ok := strings.CutPrefix(req.Header.Get("Authorization"), "Bearer ")
	return ok && strings.Count(token, ".") == 2
}

// App returns the client authenticated as the App itself (JWT), for
// /app routes: installations, hook deliveries.
func (g *GitHubClients) App() *github.Client { return g.app }

// Installation returns the cached client of one installation.
func (g *GitHubClients) Installation(id int64) (*github.Client, error) {
	if id <= 0 {
		return nil, fmt.Errorf("executor: installation ID %d is not valid", id)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if c, ok := g.clients[id]; ok {
		return c, nil
	}
	// Each installation gets an apps transport of its own: ghinstallation
	// writes to the apps transport it was built from on every token
	// refresh, so sharing one between installations is a data race.
	itr := ghinstallation.NewFromAppsTransport(g.appsTransport(), id)
	c := g.newClient(itr)
	g.clients[id] = c
	return c, nil
}

// identity returns the App's slug: what the comments it posts are
// attributed to (the bot account "<slug>[bot]"). The slug is asked of
// GitHub (GET /app, as the App) the first time and remembered.
func (g *GitHubClients) identity(ctx context.Context) (appIdentity, error) {
	g.mu.Lock()
	slug := g.slug
	g.mu.Unlock()
	if slug == "" {
		a, _, err := g.app.Apps.Get(ctx, "")
		if err != nil {
			return appIdentity{}, err
		}
		if slug = a.GetSlug(); slug == "" {
			return appIdentity{}, errors.New("executor: GET /app named no slug")
		}
		g.mu.Lock()
		g.slug = slug
		g.mu.Unlock()
	}
	return appIdentity{Slug: slug}, nil
}

// Timeout is the bound the executor puts on each call.
func (g *GitHubClients) Timeout() time.Duration { return g.timeout }

// Close closes idle connections.
func (g *GitHubClients) Close() {
	if t, ok := g.transport.(interface{ CloseIdleConnections() }); ok {
		t.CloseIdleConnections()
	}
}

// Forget drops an installation's cached client (the installation was
// removed or its permissions changed), so the next use gets a new token.
func (g *GitHubClients) Forget(id int64) {
	g.mu.Lock()
	delete(g.clients, id)
	g.mu.Unlock()
}

// forgetClient drops an installation's cached client if it is still c.
func (g *GitHubClients) forgetClient(id int64, c *github.Client) {
	g.mu.Lock()
	if g.clients[id] == c {
		delete(g.clients, id)
	}
	g.mu.Unlock()
}
