package ghsim

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"html/template"
	"maps"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// manifest is the part of a GitHub App manifest the simulator uses.
type manifest struct {
	Name           string `json:"name"`
	URL            string `json:"url"`
	Description    string `json:"description"`
	HookAttributes struct {
		URL    string `json:"url"`
		Active *bool  `json:"active"`
	} `json:"hook_attributes"`
	RedirectURL        string            `json:"redirect_url"`
	CallbackURLs       []string          `json:"callback_urls"`
	SetupURL           string            `json:"setup_url"`
	Public             bool              `json:"public"`
	DefaultEvents      []string          `json:"default_events"`
	DefaultPermissions map[string]string `json:"default_permissions"`
}

type pendingManifest struct {
	m       manifest
	owner   string
	expires time.Time
}

type manifestStore struct {
	mu    sync.Mutex
	codes map[string]pendingManifest
}

func (ms *manifestStore) init() { ms.codes = map[string]pendingManifest{} }

// manifestPages serves the github.com side of the manifest flow: the form
// that creates an App from a manifest, for a user or an organisation.
// GitHub asks the person to confirm; the simulator creates the App at once
// and redirects to the manifest's redirect_url with ?code=…&state=….
func (s *Sim) manifestPages(mux *http.ServeMux) {
	mux.HandleFunc("GET /settings/apps/new", s.manifestForm)
	mux.HandleFunc("POST /settings/apps/new", func(w http.ResponseWriter, r *http.Request) { s.manifestPost(w, r, defaultSender) })
	mux.HandleFunc("GET /organizations/{org}/settings/apps/new", s.manifestForm)
	mux.HandleFunc("POST /organizations/{org}/settings/apps/new", func(w http.ResponseWriter, r *http.Request) {
		s.manifestPost(w, r, r.PathValue("org"))
	})
}

var manifestFormPage = template.Must(template.New("form").Parse(`<!doctype html>
<html><head><title>Register new GitHub App · baton simulator</title></head>
<body>
<h1>Register new GitHub App</h1>
<p>This is the baton simulator's stand-in for GitHub's App registration page.
Post a manifest (form field <code>manifest</code>) here to create an App.</p>
<form method="post" action="{{.}}">
<textarea name="manifest" rows="20" cols="80">{}</textarea>
<p><button type="submit">Create GitHub App</button></p>
</form>
</body></html>
`))

func (s *Sim) manifestForm(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_ = manifestFormPage.Execute(w, r.URL.RequestURI())
}

func (s *Sim) manifestPost(w http.ResponseWriter, r *http.Request, owner string) {
	if err := r.ParseForm(); err != nil {
		http.Error(w, "bad form", http.StatusBadRequest)
		return
	}
	var m manifest
	if err := json.Unmarshal([]byte(r.PostForm.Get("manifest")), &m); err != nil {
		http.Error(w, "Invalid GitHub App configuration: the manifest is not valid JSON", http.StatusUnprocessableEntity)
		return
	}
	if m.URL == "" {
		http.Error(w, "Invalid GitHub App configuration: url wasn't supplied", http.StatusUnprocessableEntity)
		return
	}
	target, err := url.Parse(m.RedirectURL)
	if m.RedirectURL == "" || err != nil || !target.IsAbs() {
		http.Error(w, "Invalid GitHub App configuration: redirect_url is not a valid absolute URL", http.StatusUnprocessableEntity)
		return
	}
	code := randomHex(10)
	s.manifests.mu.Lock()
	s.manifests.codes[code] = pendingManifest{m: m, owner: owner, expires: s.now().Add(time.Hour)}
	s.manifests.mu.Unlock()
	q := target.Query()
	q.Set("code", code)
	if state := r.URL.Query().Get("state"); state != "" {
		q.Set("state", state)
	}
	target.RawQuery = q.Encode()
	http.Redirect(w, r, target.String(), http.StatusFound)
}

func (s *Sim) manifestRoutes() []*route {
	return []*route{{method: "POST", pattern: "/app-manifests/{code}/conversions", auth: authNone, handle: s.convertManifest}}
}

// convertManifest exchanges a manifest code for the new App's credentials.
// The new App becomes the simulator's primary App: existing installations
// move to it, and its webhook is the manifest's hook_attributes.
func (s *Sim) convertManifest(c *call) response {
	code := c.r.PathValue("code")
	s.manifests.mu.Lock()
	p, ok := s.manifests.codes[code]
	delete(s.manifests.codes, code)
	s.manifests.mu.Unlock()
	if !ok || !s.now().Before(p.expires) {
		return notFound()
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return errResponse(http.StatusInternalServerError, "Server Error", docsRoot)
	}
	a := s.installManifestApp(p, key)
	body := s.renderApp(a)
	body["client_id"] = a.clientID
	body["client_secret"] = a.clientSecret
	body["webhook_secret"] = a.webhookSecret
	body["pem"] = string(encodeKey(key))
	return response{status: http.StatusCreated, body: body}
}

func (s *Sim) installManifestApp(p pendingManifest, key *rsa.PrivateKey) *app {
	s.mu.Lock()
	defer s.mu.Unlock()
	name := p.m.Name
	if name == "" {
		name = "app-" + randomHex(3)
	}
	typ := "Organization"
	if strings.EqualFold(p.owner, defaultSender) {
		typ = "User"
	}
	owner := s.userLocked(p.owner, typ)
	a := s.newApp(s.newID(), name, key, owner)
	if len(p.m.DefaultPermissions) > 0 {
		a.permissions = maps.Clone(p.m.DefaultPermissions)
		a.permissions["metadata"] = "read"
	}
	if len(p.m.DefaultEvents) > 0 {
		a.events = p.m.DefaultEvents
	}
	a.json = mustJSON(s.renderApp(a))
	if p.m.HookAttributes.Active == nil || *p.m.HookAttributes.Active {
		a.webhookURL = p.m.HookAttributes.URL
	}
	a.webhookSecret = randomHex(20)
	s.apps[a.id] = a
	s.primaryApp = a.id
	for _, inst := range s.installations {
		inst.appID = a.id
		inst.permissions = maps.Clone(a.permissions)
		inst.events = a.events
	}
	return a
}
