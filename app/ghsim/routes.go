package ghsim

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// authKind says which credential a REST route requires.
type authKind int

const (
	authNone         authKind = iota // no credential (the manifest conversion)
	authApp                          // an App JWT
	authInstallation                 // an installation access token
)

// route is one REST operation the simulator serves.
type route struct {
	method  string
	pattern string // net/http ServeMux pattern path
	auth    authKind
	// creates marks content-creating requests, which the secondary rate
	// limit counts.
	creates bool
	// perms lists the installation permissions that allow the route, any
	// of them ("issues:write"); empty means metadata only.
	perms  []string
	handle func(*call) response
}

// call is one REST request on its way through the simulator.
type call struct {
	s         *Sim
	w         http.ResponseWriter
	r         *http.Request
	rt        *route
	path      string // the request path without any /api/v3 prefix
	requestID string
	started   time.Time

	app   *app          // the App the JWT or token belongs to
	inst  *installation // the installation of the token
	tok   *token
	repo  *repo // for /repos/{owner}/{repo}/... routes
	instN int64 // installation ID, 0 for App JWT and anonymous calls

	effects []int // indexes into the effect log of effects this call applied
}

// response is what a handler answers.
type response struct {
	status int
	body   any // JSON-encoded; nil writes no body
	header http.Header
}

const (
	docsRoot      = "https://docs.github.com/rest"
	apiV3Prefix   = "/api/v3"
	mediaTypeJSON = "application/json; charset=utf-8"
	// baseModifiedMessage is GitHub's answer to a merge just after its
	// base branch moved.
	baseModifiedMessage = "Base branch was modified. Review and try the merge again."
)

func (s *Sim) routes() http.Handler {
	mux := http.NewServeMux()
	var all []*route
	all = append(all, s.appRoutes()...)
	all = append(all, s.repoRoutes()...)
	all = append(all, s.pullRoutes()...)
	all = append(all, s.issueRoutes()...)
	all = append(all, s.refRoutes()...)
	all = append(all, s.branchRoutes()...)
	all = append(all, s.statusRoutes()...)
	all = append(all, s.checkRoutes()...)
	all = append(all, s.deliveryRoutes()...)
	all = append(all, s.manifestRoutes()...)
	for _, rt := range all {
		mux.HandleFunc(rt.method+" "+rt.pattern, func(w http.ResponseWriter, r *http.Request) { s.serve(w, r, rt) })
	}
	s.manifestPages(mux)
	admin := s.adminRoutes()

	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p, ok := strings.CutPrefix(r.URL.Path, apiV3Prefix); ok && (p == "" || p[0] == '/') {
			// A shallow copy with its own URL, as http.StripPrefix makes:
			// Clone would copy every header too.
			r2 := new(http.Request)
			*r2 = *r
			r2.URL = new(url.URL)
			*r2.URL = *r.URL
			r2.URL.Path = cmp.Or(p, "/")
			r2.URL.RawPath = ""
			r = r2
		}
		// Header names are spelt as net/http canonicalises (and sends)
		// them, X-Github-…, which spares Set canonicalising them anew.
		w.Header().Set("X-Github-Request-Id", s.newRequestID())
		// GitHub's Date and its rate-limit resets come from one clock;
		// baton measures the one against the other.
		w.Header().Set("Date", s.now().UTC().Format(http.TimeFormat))
		if strings.HasPrefix(r.URL.Path, "/_ghsim/") {
			if !isLoopbackRemote(r.RemoteAddr) {
				writeJSON(w, http.StatusForbidden, errorBody("the admin API answers loopback clients only", ""))
				return
			}
			admin.ServeHTTP(w, r)
			return
		}
		if _, pattern := mux.Handler(r); pattern == "" {
			if s.servePage(w, r) {
				return
			}
			s.limits.anonymousHeaders(w.Header(), s.now())
			writeJSON(w, http.StatusNotFound, errorBody("Not Found", docsRoot))
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// serve runs one REST request: authentication, the primary rate limit,
// repository access, permissions, an archived repository's refusal of
// writes, injected faults, the secondary rate limit,
// then the handler.
func (s *Sim) serve(w http.ResponseWriter, r *http.Request, rt *route) {
	c := &call{s: s, w: w, r: r, rt: rt, path: r.URL.Path, requestID: w.Header().Get("X-Github-Request-Id"), started: s.now()}
	h := w.Header()
	h.Set("X-Github-Media-Type", "github.v3; format=json")
	h.Set("X-Github-Api-Version-Selected", "2022-11-28")

	if resp, ok := s.authenticate(c); !ok {
		s.limits.anonymousHeaders(h, s.now())
		s.write(c, resp)
		return
	}
	if resp, ok := s.primaryLimit(c); !ok {
		s.write(c, resp)
		return
	}
	if rt.auth == authInstallation && r.PathValue("owner") != "" {
		if resp, ok := s.resolveRepo(c); !ok {
			s.write(c, resp)
			return
		}
	}
	if resp, ok := s.checkPermissions(c); !ok {
		s.write(c, resp)
		return
	}
	if c.repo != nil && c.repo.archived.Load() && r.Method != http.MethodGet && r.Method != http.MethodHead {
		s.write(c, errResponse(http.StatusForbidden, "Repository was archived so is read-only.", docsRoot))
		return
	}

	act := s.faults.pick(r.Method, c.path, c.instN)
	if act.latency > 0 {
		t := time.NewTimer(act.latency)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}
	switch act.kind {
	case FaultStatus, FaultTooManyRequests, FaultBaseModified, FaultMergeInProgress, FaultUnauthorized:
		s.write(c, act.response())
		return
	case FaultDropBefore:
		dropConnection(w)
		return
	}

	if rt.creates {
		if resp, ok := s.secondaryLimit(c); !ok {
			s.write(c, resp)
			return
		}
	}
	resp := rt.handle(c)
	// The end is stamped before the answer leaves: a client that reacts to
	// the answer by calling again must see its next call start after it.
	s.effects.finish(c.effects, s.now(), act.kind == FaultDropAfter)
	if act.kind == FaultDropAfter {
		dropConnection(w)
		return
	}
	s.write(c, resp)
}

// write sends a response.
func (s *Sim) write(c *call, resp response) {
	h := c.w.Header()
	for k, vs := range resp.header {
		h[k] = vs
	}
	writeJSON(c.w, resp.status, resp.body)
}

func writeJSON(w http.ResponseWriter, status int, body any) {
	if body == nil || status == http.StatusNoContent {
		w.WriteHeader(status)
		return
	}
	send := func(status int, b []byte) {
		w.Header().Set("Content-Type", mediaTypeJSON)
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		w.WriteHeader(status)
		_, _ = w.Write(b)
	}
	if err := withEncoded(body, func(b []byte) { send(status, b) }); err != nil {
		send(http.StatusInternalServerError, mustJSON(errorBody("encode the response: "+err.Error(), docsRoot)))
	}
}

// dropConnection closes the client's connection without an answer.
func dropConnection(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler) // cannot hijack: abort the response instead
	}
	if tcp, ok := conn.(*net.TCPConn); ok {
		_ = tcp.SetLinger(0) // reset, as a crashed peer would
	}
	_ = conn.Close()
}

// resolveRepo finds the repository of the route and checks that the token
// reaches it; GitHub answers 404 for a repository a token cannot see. A
// former name of a repository (RenameRepo) the token reaches is
// redirected to the repository's name now, 301 for GET and HEAD and 307
// for other methods, as GitHub does (GitHub's Location is
// /repositories/{id}/…, which the simulator does not serve; clients
// follow either alike).
func (s *Sim) resolveRepo(c *call) (response, bool) {
	owner, name := c.r.PathValue("owner"), c.r.PathValue("repo")
	s.mu.RLock()
	key := repoKey(owner, name)
	r, ok := s.repos[key]
	moved := false
	if !ok {
		r, moved = s.movedRepos[key]
		ok = moved
	}
	var reach bool
	var fullName string
	if ok {
		reach = r.installationID == c.instN && c.tok.reaches(r.id)
		fullName = r.fullName
	}
	s.mu.RUnlock()
	if !ok || !reach {
		return notFound(), false
	}
	if moved {
		return s.redirect(c, fullName), false
	}
	c.repo = r
	return response{}, true
}

// redirect answers a request under a repository's former name with the
// same request under fullName.
func (s *Sim) redirect(c *call, fullName string) response {
	// /repos/{owner}/{repo}/rest…, as the client escaped it.
	parts := strings.SplitN(strings.TrimPrefix(c.r.URL.EscapedPath(), "/repos/"), "/", 3)
	loc := s.url + "/repos/" + fullName
	if len(parts) == 3 {
		loc += "/" + parts[2]
	}
	if c.r.URL.RawQuery != "" {
		loc += "?" + c.r.URL.RawQuery
	}
	status, msg := http.StatusTemporaryRedirect, "Temporary Redirect"
	if c.r.Method == http.MethodGet || c.r.Method == http.MethodHead {
		status, msg = http.StatusMovedPermanently, "Moved Permanently"
	}
	return response{status: status, header: http.Header{"Location": {loc}},
		body: map[string]any{"message": msg, "url": loc, "documentation_url": docsRoot + "/guides/best-practices-for-using-the-rest-api#follow-redirects"}}
}

// applied records that this call applied a mutation to resource. The caller
// holds the repository's lock, so effects on one repository are logged in
// the order they were applied.
func (c *call) applied(resource string, status int) {
	c.effects = append(c.effects, c.s.effects.add(Effect{
		InstallationID: c.instN,
		Method:         c.r.Method,
		Path:           c.path,
		Status:         status,
		RequestID:      c.requestID,
		Resource:       resource,
		StartedAt:      c.started,
	}, c.s.now()))
}

// decode reads a JSON request body into v. An empty body, or null, leaves v
// alone.
// As GitHub's REST documentation says of client errors: a body that is not
// JSON is 400 "Problems parsing JSON", JSON that is not an object 400 "Body
// should be a JSON object" (unless v is a json.RawMessage, for routes that
// take other shapes), and an object whose field has the wrong type 422
// "Validation Failed", the error naming resource and field.
func (c *call) decode(resource string, v any) (response, bool) {
	body, err := io.ReadAll(io.LimitReader(c.r.Body, 25<<20))
	if err != nil {
		return errResponse(http.StatusBadRequest, "Problems reading the request body", docsRoot), false
	}
	body = bytes.TrimSpace(body)
	if len(body) == 0 || string(body) == "null" { // ghinstallation sends null for no options
		return response{}, true
	}
	if !json.Valid(body) {
		return errResponse(http.StatusBadRequest, "Problems parsing JSON", docsRoot), false
	}
	if _, raw := v.(*json.RawMessage); !raw && body[0] != '{' {
		return errResponse(http.StatusBadRequest, "Body should be a JSON object", docsRoot), false
	}
	if err := json.Unmarshal(body, v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return validationFailed(resource, te.Field, "invalid",
				fmt.Sprintf("%s is not %s", te.Field, jsonTypeName(te.Type))), false
		}
		return errResponse(http.StatusBadRequest, "Problems parsing JSON", docsRoot), false
	}
	return response{}, true
}

// jsonTypeName names, for an error message, the JSON type Go type t takes.
func jsonTypeName(t reflect.Type) string {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil {
		return "valid"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "valid"
}

// intParam reads a positive integer path value.
func (c *call) intParam(name string) (int, bool) {
	n, err := strconv.Atoi(c.r.PathValue(name))
	return n, err == nil && n > 0
}

// sender is who REST mutations are attributed to: the App's bot.
func (c *call) sender() *user { return c.app.bot }

// paginate applies per_page and page to a list of n items, sets the Link
// header and returns the slice bounds.
func (c *call) paginate(n int) (lo, hi int, header http.Header) {
	q := c.r.URL.Query()
	perPage, err := strconv.Atoi(q.Get("per_page"))
	if err != nil || perPage <= 0 {
		perPage = 30
	}
	perPage = min(perPage, 100)
	page, err := strconv.Atoi(q.Get("page"))
	if err != nil || page <= 0 {
		page = 1
	}
	last := max(1, (n+perPage-1)/perPage)
	lo = min(n, (page-1)*perPage)
	hi = min(n, lo+perPage)
	var links []string
	link := func(p int, rel string) {
		u := c.selfURL()
		v := u.Query()
		v.Set("page", strconv.Itoa(p))
		v.Set("per_page", strconv.Itoa(perPage))
		u.RawQuery = v.Encode()
		links = append(links, fmt.Sprintf("<%s>; rel=%q", u.String(), rel))
	}
	if page > 1 {
		link(min(page-1, last), "prev")
	}
	if page < last {
		link(page+1, "next")
		link(last, "last")
	}
	if page > 1 {
		link(1, "first")
	}
	header = http.Header{}
	if len(links) > 0 {
		header.Set("Link", strings.Join(links, ", "))
	}
	return lo, hi, header
}

// selfURL is the URL the client asked for, as the client addressed it.
func (c *call) selfURL() *url.URL {
	u := *c.r.URL
	u.Scheme = "http"
	u.Host = c.r.Host
	if strings.HasPrefix(c.r.RequestURI, apiV3Prefix) {
		u.Path = apiV3Prefix + c.path
	}
	u.RawPath = ""
	return &u
}

// errorBody is GitHub's error shape.
func errorBody(message, doc string) map[string]any {
	m := map[string]any{"message": message}
	if doc != "" {
		m["documentation_url"] = doc
	}
	return m
}

func errResponse(status int, message, doc string) response {
	b := errorBody(message, doc)
	b["status"] = strconv.Itoa(status)
	return response{status: status, body: b}
}

func notFound() response { return errResponse(http.StatusNotFound, "Not Found", docsRoot) }

// validationFailed is a 422 with one error entry.
func validationFailed(resource, field, code, message string) response {
	e := map[string]any{"resource": resource, "field": field, "code": code}
	if message != "" {
		e["message"] = message
	}
	return response{status: http.StatusUnprocessableEntity, body: map[string]any{
		"message": "Validation Failed", "errors": []any{e}, "documentation_url": docsRoot, "status": "422",
	}}
}

func isLoopbackRemote(remote string) bool {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
