package app

import (
	"cmp"
	"context"
	"crypto/rand"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/google/go-github/v62/github"
	"go.uber.org/zap"
)

// ErrRestartRequired is what SetupConfig.OnConfigured returns when the
// credentials cannot be put to use without a restart: the page then asks
// the operator to restart baton.
var ErrRestartRequired = errors.New("restart baton to run as the new App")

// SetupConfig configures the setup flow.
type SetupConfig struct {
	// DataDir is where the credentials are stored (AppCredentialsFile,
	// and the key file it names, AppPrivateKeyFileOf). Required.
	DataDir string
	// PublicURL is the URL GitHub and browsers reach baton at
	// ("https://baton.example.com"): the App's webhook is
	// PublicURL/webhooks/github, and the flow comes back to
	// PublicURL/setup/callback. Required.
	PublicURL string
	// GitHubWebURL is GitHub's web address, where the App is created.
	// Defaults to https://HOST when GitHubAPIURL is a GitHub Enterprise
	// Server's (https://HOST/api/v3/), else to https://github.com.
	GitHubWebURL string
	// GitHubAPIURL is GitHub's REST API, where the manifest code is
	// exchanged. Defaults to https://api.github.com/ for github.com and
	// to GitHubWebURL/api/v3/ otherwise.
	GitHubAPIURL string
	// Organization creates the App in that organisation instead of the
	// account of the person setting it up.
	Organization string
	// AppName is the App's name (GitHub asks for a unique one; the person
	// may change it on GitHub's page). Defaults to "baton".
	AppName string
	// Force offers to create a new App even when credentials are stored
	// (the new ones replace them).
	Force bool
	// OnConfigured is called once the credentials are stored. It returns
	// nil when baton now runs as the App, ErrRestartRequired (or any other
	// error, which is logged) when a restart is needed to do so; the page
	// says which. Optional: without it the page asks for a restart.
	OnConfigured func(ctx context.Context, creds AppCredentials) error
	// HTTPClient carries the code exchange. Defaults to a client with a
	// 30s timeout.
	HTTPClient *http.Client
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
	// Logger defaults to zap.NewNop().
	Logger *zap.Logger
}

// Setup is the http.Handler of /setup and /setup/callback: creating
// baton's GitHub App from a manifest. /setup shows a page whose button
// posts the manifest (NewAppManifest) to GitHub, with a CSRF state also
// kept in a cookie; GitHub creates the App and sends the browser back to
// /setup/callback with a code, which is exchanged (POST
// /app-manifests/{code}/conversions) for the App's ID, private key and
// webhook secret. They are stored in DataDir (mode 0600), OnConfigured is
// called, and the page shows the link to install the App. Once configured,
// /setup says so and offers no second App unless Force is set.
type Setup struct {
	cfg      SetupConfig
	log      *zap.Logger
	apiURL   *url.URL
	manifest AppManifest
	mux      *http.ServeMux
	cookie   string
	secure   bool
	// cookiePath is the path the browser sees /setup at: PublicURL's
	// path (a reverse proxy serving baton under one) and /setup.
	cookiePath string

	// flowMu serialises the callbacks from the check that baton is not
	// configured to the end of OnConfigured, so that two callbacks cannot
	// both create an App and store it.
	flowMu sync.Mutex

	mu         sync.Mutex
	states     map[string]time.Time // CSRF states issued → expiry
	configured *AppCredentials
	running    bool // OnConfigured said baton runs as the App
}

const (
	setupStateTTL   = time.Hour
	setupMaxStates  = 1000
	setupCookieName = "baton_setup_state"
)

//go:embed setup/*.html
var setupFS embed.FS

var setupTemplates = template.Must(template.ParseFS(setupFS, "setup/*.html"))

// NewSetup validates cfg and returns the setup handler.
func NewSetup(cfg SetupConfig) (*Setup, error) {
	cfg.GitHubWebURL = trimTrailingSlash(cmp.Or(cfg.GitHubWebURL, ghesWebURL(cfg.GitHubAPIURL), "https://github.com"))
	if cfg.GitHubAPIURL == "" {
		if cfg.GitHubWebURL == "https://github.com" {
			cfg.GitHubAPIURL = "https://api.github.com/"
		} else {
			cfg.GitHubAPIURL = cfg.GitHubWebURL + "/api/v3/"
		}
	}
	cfg.AppName = cmp.Or(cfg.AppName, "baton")
	cfg.PublicURL = trimTrailingSlash(cfg.PublicURL)
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: 30 * time.Second}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	var errs []error
	if cfg.DataDir == "" {
		errs = append(errs, errors.New("no DataDir"))
	}
	pub, err := url.Parse(cfg.PublicURL)
	if cfg.PublicURL == "" || err != nil || (pub.Scheme != "http" && pub.Scheme != "https") || pub.Host == "" || pub.RawQuery != "" || pub.Fragment != "" {
		errs = append(errs, fmt.Errorf("want PublicURL an absolute http(s) URL without query (the address GitHub reaches baton at), not %q", cfg.PublicURL))
	}
	if web, err := url.Parse(cfg.GitHubWebURL); err != nil || (web.Scheme != "http" && web.Scheme != "https") || web.Host == "" {
		errs = append(errs, fmt.Errorf("want GitHubWebURL an http(s) URL, not %q", cfg.GitHubWebURL))
	}
	api, err := url.Parse(cfg.GitHubAPIURL)
	if err != nil || (api.Scheme != "http" && api.Scheme != "https") || api.Host == "" {
		errs = append(errs, fmt.Errorf("want GitHubAPIURL an http(s) URL, not %q", cfg.GitHubAPIURL))
	}
	if cfg.Organization != "" && !setupOrgRE.MatchString(cfg.Organization) {
		errs = append(errs, fmt.Errorf("want Organization a GitHub organisation name, not %q", cfg.Organization))
	}
	if len(cfg.AppName) > 34 {
		errs = append(errs, fmt.Errorf("want AppName of at most 34 characters (GitHub's limit), not %q", cfg.AppName))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("app: invalid setup config: %w", errors.Join(errs...))
	}
	if !strings.HasSuffix(api.Path, "/") {
		api.Path += "/"
	}
	s := &Setup{
		cfg:        cfg,
		log:        cfg.Logger.With(zap.String(logKeySubsystem, "setup")),
		apiURL:     api,
		manifest:   NewAppManifest(cfg.AppName, cfg.PublicURL),
		mux:        http.NewServeMux(),
		cookie:     setupCookieName,
		secure:     pub.Scheme == "https",
		cookiePath: pub.EscapedPath() + "/setup",
		states:     map[string]time.Time{},
	}
	creds, ok, err := LoadAppCredentials(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	if ok {
		s.configured = &creds
	}
	s.mux.HandleFunc("GET /setup", s.page)
	s.mux.HandleFunc("GET /setup/{$}", s.page)
	s.mux.HandleFunc("GET /setup/callback", s.callback)
	return s, nil
}

// Manifest is the manifest the page posts.
func (s *Setup) Manifest() AppManifest { return s.manifest }

// ServeHTTP implements http.Handler for /setup and /setup/callback.
func (s *Setup) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	// The page runs no script; its one form goes to GitHub, and GitHub
	// redirects back here.
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; img-src 'self'; base-uri 'none'; frame-ancestors 'none'; form-action 'self' "+setupOrigin(s.cfg.GitHubWebURL))
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	s.mux.ServeHTTP(w, r)
}

// setupView is what the page template shows.
type setupView struct {
	// State: "new" (offer to create the App), "configured" (stored
	// already), "done" (just created), "error".
	State      string
	AppName    string
	PublicURL  string
	WebhookURL string
	FormAction string
	Manifest   string // JSON, for the form field
	Pretty     string // JSON, for people
	Org        string
	Creds      *AppCredentials
	InstallURL string
	Running    bool
	RestartMsg string
	Error      string
	Force      bool
}

func (s *Setup) page(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	configured, running := s.configured, s.running
	s.mu.Unlock()
	if configured != nil && !s.cfg.Force {
		s.render(w, http.StatusOK, setupView{State: "configured", Creds: configured, InstallURL: configured.InstallURL(), Running: running})
		return
	}
	state, err := s.newState()
	if err != nil {
		s.log.Error("no CSRF state", zap.String(logKeyEvent, "setup.state_failed"), zap.Error(err))
		s.render(w, http.StatusInternalServerError, setupView{State: "error", Error: "baton could not start the setup; see its log."})
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name: s.cookie, Value: state, Path: s.cookiePath, MaxAge: int(setupStateTTL.Seconds()),
		HttpOnly: true, Secure: s.secure, SameSite: http.SameSiteLaxMode,
	})
	compact, _ := json.Marshal(s.manifest)
	pretty, _ := json.MarshalIndent(s.manifest, "", "  ")
	action := s.cfg.GitHubWebURL + "/settings/apps/new"
	if s.cfg.Organization != "" {
		action = s.cfg.GitHubWebURL + "/organizations/" + url.PathEscape(s.cfg.Organization) + "/settings/apps/new"
	}
	action += "?state=" + url.QueryEscape(state)
	s.render(w, http.StatusOK, setupView{
		State: "new", AppName: s.cfg.AppName, WebhookURL: s.manifest.HookAttributes.URL,
		FormAction: action, Manifest: string(compact), Pretty: string(pretty), Org: s.cfg.Organization,
		Creds: configured, Force: configured != nil,
	})
}

var (
	setupCodeRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)
	setupOrgRE  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9-]{0,38}$`)
)

func (s *Setup) callback(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	code, state := q.Get("code"), q.Get("state")
	cookie, _ := r.Cookie(s.cookie)
	if state == "" || cookie == nil || cookie.Value != state || !s.takeState(state) {
		s.render(w, http.StatusBadRequest, setupView{State: "error",
			Error: "This link is not from a setup started here, or it has expired. Start again from /setup."})
		return
	}
	http.SetCookie(w, &http.Cookie{Name: s.cookie, Value: "", Path: s.cookiePath, MaxAge: -1, HttpOnly: true, Secure: s.secure, SameSite: http.SameSiteLaxMode})
	if !setupCodeRE.MatchString(code) {
		s.render(w, http.StatusBadRequest, setupView{State: "error", Error: "GitHub did not send back a valid code. Start again from /setup."})
		return
	}
	ctx := context.WithoutCancel(r.Context()) // a closed tab must not leave the exchange half done
	status, view := s.configure(ctx, code)
	s.render(w, status, view)
}

// configure creates the App from code, stores its credentials and calls
// OnConfigured, unless baton is configured already (and not forced). It
// holds flowMu throughout and returns the page to show.
func (s *Setup) configure(ctx context.Context, code string) (int, setupView) {
	s.flowMu.Lock()
	defer s.flowMu.Unlock()
	s.mu.Lock()
	already := s.configured != nil
	s.mu.Unlock()
	if already && !s.cfg.Force {
		// GitHub has created the App whose code this is: it stays unused,
		// and only its owner can delete it.
		return http.StatusConflict, setupView{State: "error", Error: "baton is configured already and does not take a second App. " +
			"GitHub has created the App you just made all the same: delete it on GitHub (Settings, Developer settings, GitHub Apps)."}
	}

	creds, err := s.exchange(ctx, code)
	if err != nil {
		s.log.Error("manifest code exchange failed", zap.String(logKeyEvent, "setup.exchange_failed"), zap.Error(err))
		return http.StatusBadGateway, setupView{State: "error", Error: "GitHub did not complete the App's creation: " + err.Error() + ". Start again from /setup."}
	}
	if err := storeAppCredentials(s.cfg.DataDir, creds); err != nil {
		s.log.Error("storing the App credentials failed", zap.String(logKeyEvent, "setup.store_failed"), zap.Error(err))
		return http.StatusInternalServerError, setupView{State: "error",
			Error: "The App " + creds.Name + " was created on GitHub, but baton could not store its credentials (see its log). Delete the App on GitHub and start again."}
	}
	s.log.Info("GitHub App created from the manifest", zap.String(logKeyEvent, "setup.configured"),
		zap.Int64("appId", creds.AppID), zap.String("slug", creds.Slug), zap.String("owner", creds.Owner))
	view := setupView{State: "done", Creds: &creds, InstallURL: creds.InstallURL()}
	if s.cfg.OnConfigured != nil {
		switch err := s.cfg.OnConfigured(ctx, creds); {
		case err == nil:
			view.Running = true
		case errors.Is(err, ErrRestartRequired):
			view.RestartMsg = "Restart baton to run as the App: its credentials are stored and it reads them at start."
		default:
			s.log.Error("starting as the new App failed", zap.String(logKeyEvent, "setup.start_failed"), zap.Error(err))
			view.RestartMsg = "The credentials are stored, but baton could not start as the App (see its log). Restart baton."
		}
	} else {
		view.RestartMsg = "Restart baton to run as the App: its credentials are stored and it reads them at start."
	}
	s.mu.Lock()
	s.configured, s.running = &creds, view.Running
	s.mu.Unlock()
	return http.StatusOK, view
}

// exchange trades the manifest code for the App's credentials.
func (s *Setup) exchange(ctx context.Context, code string) (AppCredentials, error) {
	client := github.NewClient(s.cfg.HTTPClient)
	u := *s.apiURL
	client.BaseURL = &u
	client.UserAgent = "baton"
	cfg, _, err := client.Apps.CompleteAppManifest(ctx, code)
	if err != nil {
		var er *github.ErrorResponse
		if errors.As(err, &er) && er.Response != nil {
			return AppCredentials{}, fmt.Errorf("GitHub answered %d", er.Response.StatusCode)
		}
		return AppCredentials{}, errors.New("GitHub could not be reached")
	}
	creds := AppCredentials{
		AppID: cfg.GetID(), Slug: cfg.GetSlug(), Name: cfg.GetName(), HTMLURL: cfg.GetHTMLURL(),
		WebURL: s.cfg.GitHubWebURL, APIURL: s.apiURL.String(),
		ClientID: cfg.GetClientID(), ClientSecret: cfg.GetClientSecret(), WebhookSecret: cfg.GetWebhookSecret(),
		CreatedAt: cfg.GetCreatedAt().Time, PrivateKey: []byte(cfg.GetPEM()),
	}
	if cfg.Owner != nil {
		creds.Owner = cfg.Owner.GetLogin()
	}
	if creds.CreatedAt.IsZero() {
		creds.CreatedAt = s.cfg.Now().UTC()
	}
	if creds.AppID <= 0 || creds.Slug == "" || creds.WebhookSecret == "" {
		return AppCredentials{}, errors.New("GitHub's answer lacks the App's ID, slug or webhook secret")
	}
	if err := CheckAppPrivateKey(creds.PrivateKey); err != nil {
		return AppCredentials{}, fmt.Errorf("GitHub's answer has no usable private key: %w", err)
	}
	return creds, nil
}

// newState issues a CSRF state.
func (s *Setup) newState() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	state := hex.EncodeToString(b)
	now := s.cfg.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for st, exp := range s.states {
		if now.After(exp) {
			delete(s.states, st)
		}
	}
	for len(s.states) >= setupMaxStates { // an unauthenticated page must not grow memory without bound
		var oldest string
		var oldestExp time.Time
		for st, exp := range s.states {
			if oldest == "" || exp.Before(oldestExp) {
				oldest, oldestExp = st, exp
			}
		}
		delete(s.states, oldest)
	}
	s.states[state] = now.Add(setupStateTTL)
	return state, nil
}

// takeState consumes a state; it reports whether it was issued and is
// still valid.
func (s *Setup) takeState(state string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	exp, ok := s.states[state]
	delete(s.states, state)
	return ok && !s.cfg.Now().After(exp)
}

func (s *Setup) render(w http.ResponseWriter, status int, v setupView) {
	v.PublicURL = s.cfg.PublicURL // shown by the new page; the error page links back to PublicURL/setup
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	if err := setupTemplates.ExecuteTemplate(w, "page.html", v); err != nil {
		s.log.Error("rendering the setup page failed", zap.String(logKeyEvent, "setup.render_failed"), zap.Error(err))
	}
}

func trimTrailingSlash(s string) string { return strings.TrimRight(s, "/") }

// ghesWebURL is the web address of the GitHub Enterprise Server whose
// REST API is apiURL (https://HOST/api/v3/ → https://HOST), or "" when
// apiURL is not one: given only the API (--github-url), the App is
// created on that server, not on github.com, where the code GitHub sends
// back could not be exchanged at the API.
func ghesWebURL(apiURL string) string {
	u, err := url.Parse(apiURL)
	if err != nil || u.Host == "" || strings.TrimRight(u.Path, "/") != "/api/v3" {
		return ""
	}
	return u.Scheme + "://" + u.Host
}

// setupOrigin returns scheme://host of a URL, for the CSP.
func setupOrigin(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "'none'"
	}
	return u.Scheme + "://" + u.Host
}
