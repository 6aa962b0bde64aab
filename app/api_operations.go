package app

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/baton-dev/baton/executor"
	"github.com/baton-dev/baton/queue"
	"github.com/baton-dev/baton/schema"
)

// OperationList is the body of GET /v1/operations.
type OperationList struct {
	Operations []schema.View `json:"operations"`
	// NextCursor continues the list; "" on the last page.
	NextCursor string `json:"nextCursor"`
}

// errOperationNotFound is the answer for a missing operation and for
// another actor's: the two must look the same.
var errOperationNotFound = schema.Errorf(schema.CodeNotFound, "operation not found")

// submitOperation is POST /v1/operations.
func (a *API) submitOperation(w http.ResponseWriter, r *http.Request, p *Principal) error {
	if _, err := apiQuery(r); err != nil {
		return err
	}
	var s schema.Submission
	if err := decodeAPIBody(r, &s); err != nil {
		return err
	}
	if err := s.Validate(); err != nil {
		return err
	}
	target, err := schema.ParseResource(s.Resource)
	if err != nil {
		return err
	}
	inst, err := a.installationFor(r.Context(), p, target)
	if err != nil {
		return err
	}
	if s.InstallationID != 0 && s.InstallationID != inst {
		return schema.Invalidf("installationId %d does not cover %s", s.InstallationID, target.FullName())
	}
	s.InstallationID = inst
	rec, created, err := a.ops.Submit(r.Context(), p.Actor, s)
	if err != nil {
		return err
	}
	view, err := rec.View()
	if err != nil {
		return err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	} else if !rec.Terminal() {
		// The same request again, for an operation that may be stuck in
		// the dead-letter stream: say so, as the status view does.
		view.DeadLetter = a.deadLetterOf(r.Context(), p, rec.OperationID)
	}
	w.Header().Set("Location", "/v1/operations/"+rec.OperationID)
	a.writeJSON(w, status, view)
	return nil
}

// installationFor returns the installation of the target's repository if
// the principal may act on it: not installed, suspended or outside the
// token's installations is forbidden (see principalInstallation).
func (a *API) installationFor(ctx context.Context, p *Principal, t schema.Target) (int64, error) {
	id, err := a.installations.InstallationOf(ctx, t.Owner, t.Repo)
	return principalInstallation(p, t.FullName(), id, err)
}

// principalInstallation is what a principal may learn of the installation
// of repository full (id, err: what RepositoryInstallations answered).
// A token bound to some installations is told the same thing of a
// repository baton is not installed on, of one on another installation,
// and of one on another installation that is suspended: that it may not
// act on it. Otherwise a client of one organisation could learn, by
// trying names, which repositories of other organisations (private ones
// included) baton is installed on, with their installation IDs. Only
// of its own installations does it learn that one is suspended. Admin
// tokens and tokens of all installations are told everything.
func principalInstallation(p *Principal, full string, id int64, err error) (int64, error) {
	scoped := !p.Admin && !p.AllInstallations
	if err != nil {
		var unavailable *InstallationUnavailableError
		if scoped && schema.ErrorCode(err) == schema.CodeForbidden &&
			(!errors.As(err, &unavailable) || !p.MayActOn(unavailable.ID)) {
			return 0, errMayNotActOn(full)
		}
		return 0, err
	}
	if !p.MayActOn(id) {
		return 0, errMayNotActOn(full)
	}
	return id, nil
}

func errMayNotActOn(full string) error {
	return schema.Errorf(schema.CodeForbidden,
		"this API token may not act on %s (baton is not installed there, or not on an installation the token is bound to)", full)
}

// getOperation is GET /v1/operations/{id}[?wait=DURATION].
func (a *API) getOperation(w http.ResponseWriter, r *http.Request, p *Principal) error {
	q, err := apiQuery(r, "wait")
	if err != nil {
		return err
	}
	var wait time.Duration
	if v, ok := q["wait"]; ok {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return schema.Invalidf("wait must be a duration such as 30s (at most %s)", a.maxWait)
		}
		wait = min(d, a.maxWait)
	}
	rec, err := a.visibleOperation(r.Context(), p, r.PathValue("id"))
	if err != nil {
		return err
	}
	var dl *schema.DeadLetterInfo
	if !rec.Terminal() {
		dl = a.deadLetterOf(r.Context(), p, rec.OperationID)
	}
	if wait > 0 && !rec.Terminal() && dl == nil && a.startWait(p) {
		defer a.endWait(p)
		markWaited(w)
		var done bool
		rec, dl, done, err = a.waitTerminal(r, p, rec, wait)
		if err != nil {
			return err
		}
		if done {
			return nil // the client went away
		}
	}
	view, err := rec.View()
	if err != nil {
		return err
	}
	view.DeadLetter = dl
	a.writeJSON(w, http.StatusOK, view)
	return nil
}

// deadLetterCheckEvery is how often a wait looks for the operation's dead
// letter (the store is read every pollEvery): an operation moves there only
// after five failures with backoff between them, and each look is a
// request to the queue.
const deadLetterCheckEvery = time.Second

// deadLetterOf is what the status view says of the operation's dead letter:
// nil when it has none, or when the queue cannot say at the moment (the
// status is the store's and is answered without it; the lookup is logged).
func (a *API) deadLetterOf(ctx context.Context, p *Principal, id string) *schema.DeadLetterInfo {
	if a.deadLetters.Ready() != nil {
		// The queue is away (an external NATS restarting): the status is
		// answered from the store at once, not after a lookup's timeout.
		return nil
	}
	dl, err := a.deadLetters.DeadLetterOf(ctx, id)
	if err != nil {
		if !errors.Is(err, queue.ErrDeadLetterNotFound) && ctx.Err() == nil {
			a.log.Warn("status view: dead letter lookup failed", zap.String("event", "api_dead_letter_lookup_failed"),
				zap.String("operationId", id), zap.Error(err))
		}
		return nil
	}
	info := &schema.DeadLetterInfo{Sequence: dl.Sequence, Failures: dl.Failures, Time: dl.Time.UTC()}
	if p.Admin {
		info.Reason = dl.Reason
	}
	return info
}

// startWait takes one of the principal's token's places to wait; false
// when they are all taken (the request is then answered at once).
func (a *API) startWait(p *Principal) bool {
	a.waitsMu.Lock()
	defer a.waitsMu.Unlock()
	if a.waits[p.TokenID] >= a.maxWaits {
		return false
	}
	a.waits[p.TokenID]++
	return true
}

// endWait gives back a place startWait took.
func (a *API) endWait(p *Principal) {
	a.waitsMu.Lock()
	defer a.waitsMu.Unlock()
	if a.waits[p.TokenID]--; a.waits[p.TokenID] <= 0 {
		delete(a.waits, p.TokenID)
	}
}

// waitTerminal reads the operation again every poll interval until it is
// terminal, it is found in the dead-letter stream (it would wait there for
// an operator, past any wait) or wait has passed (or the server's stop
// ends it), when it is read, and its dead letter looked for, once more.
// gone is true when the request's context ended first. The request's
// token is checked again as often as the dead-letter stream is looked at:
// a token revoked while it waits gets its unauthorized error, not the
// operation, a minute later.
func (a *API) waitTerminal(r *http.Request, p *Principal, rec schema.Record, wait time.Duration) (_ schema.Record, _ *schema.DeadLetterInfo, gone bool, _ error) {
	ctx := r.Context()
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	tick := time.NewTicker(a.pollEvery)
	defer tick.Stop()
	lastLook := time.Now()
	for !rec.Terminal() {
		ended := false // the wait ran out, or the server's stop ended it
		select {
		case <-ctx.Done():
			return rec, nil, true, nil
		case <-deadline.C:
			ended = true
		case <-a.closing:
			ended = true
		case <-tick.C:
		}
		next, err := a.ops.Get(ctx, rec.OperationID)
		if err != nil {
			if ctx.Err() != nil {
				return rec, nil, true, nil
			}
			return rec, nil, false, err
		}
		rec = next
		if rec.Terminal() {
			break
		}
		if ended {
			// Answered as it is now: an operation dead-lettered since the
			// last look (up to deadLetterCheckEvery ago) with its dead
			// letter, not as it was then.
			return rec, a.deadLetterOf(ctx, p, rec.OperationID), false, nil
		}
		if time.Since(lastLook) >= deadLetterCheckEvery {
			lastLook = time.Now()
			if _, err := a.authenticate(r); schema.ErrorCode(err) == schema.CodeUnauthorized {
				return rec, nil, false, err
			}
			if dl := a.deadLetterOf(ctx, p, rec.OperationID); dl != nil {
				return rec, dl, false, nil
			}
		}
	}
	return rec, nil, false, nil
}

// visibleOperation returns the operation if the principal may see it:
// another actor's operation, like a missing one, is not_found (a non-admin
// token learns nothing of it); the token's own actor's operation on an
// installation the token is not bound to (made with another token of the
// same actor) is forbidden.
func (a *API) visibleOperation(ctx context.Context, p *Principal, id string) (schema.Record, error) {
	if !schema.ValidOperationID(id) {
		return schema.Record{}, errOperationNotFound
	}
	rec, err := a.ops.Get(ctx, id)
	if err != nil {
		if schema.ErrorCode(err) == schema.CodeNotFound {
			return schema.Record{}, errOperationNotFound
		}
		return schema.Record{}, err
	}
	if !p.Admin && rec.Actor != p.Actor {
		return schema.Record{}, errOperationNotFound
	}
	if !p.MayActOn(rec.InstallationID) {
		return schema.Record{}, schema.Errorf(schema.CodeForbidden, "this API token may not act on installation %d", rec.InstallationID)
	}
	return rec, nil
}

// cancelOperation is POST /v1/operations/{id}/cancel.
func (a *API) cancelOperation(w http.ResponseWriter, r *http.Request, p *Principal) error {
	if _, err := apiQuery(r); err != nil {
		return err
	}
	rec, err := a.visibleOperation(r.Context(), p, r.PathValue("id"))
	if err != nil {
		return err
	}
	rec, err = a.ops.Cancel(r.Context(), rec.OperationID)
	if err != nil {
		return err
	}
	view, err := rec.View()
	if err != nil {
		return err
	}
	a.writeJSON(w, http.StatusOK, view)
	return nil
}

// listResourceID puts a resourceId filter in the canonical form records
// are stored in (owner and repository in lower case), trying each resource
// type when none is given. An ID no type accepts is kept as given: it
// matches nothing.
func listResourceID(typ, id string) string {
	if id == "" {
		return id
	}
	types := []string{typ}
	if typ == "" {
		types = []string{schema.ResourceIssue, schema.ResourceRef, schema.ResourceCommit}
	}
	for _, t := range types {
		if r, _, err := schema.CanonicalResource(schema.Resource{Type: t, ID: id}); err == nil {
			return r.ID
		}
	}
	return id
}

// listOperations is GET /v1/operations.
func (a *API) listOperations(w http.ResponseWriter, r *http.Request, p *Principal) error {
	q, err := apiQuery(r, "status", "action", "resourceType", "resourceId", "actor", "limit", "cursor")
	if err != nil {
		return err
	}
	f := executor.ListFilter{
		Status:       schema.Status(q["status"]),
		Action:       q["action"],
		ResourceType: q["resourceType"],
		ResourceID:   q["resourceId"],
		Actor:        q["actor"],
		Cursor:       q["cursor"],
	}
	if f.Status != "" && !f.Status.Valid() {
		return schema.Invalidf("status must be one of queued, running, succeeded, failed, cancelled")
	}
	if _, ok := schema.Actions[f.Action]; f.Action != "" && !ok {
		return schema.Invalidf("action is not one of the registered actions")
	}
	switch f.ResourceType {
	case "", schema.ResourcePullRequest, schema.ResourceIssue, schema.ResourceRef, schema.ResourceCommit:
	default:
		return schema.Invalidf("resourceType must be one of pull_request, issue, ref, commit")
	}
	if len(f.ResourceID) > 512 || len(f.Cursor) > 128 {
		return schema.Invalidf("resourceId or cursor is too long")
	}
	f.ResourceID = listResourceID(f.ResourceType, f.ResourceID)
	if v, ok := q["limit"]; ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 500 {
			return schema.Invalidf("limit must be an integer between 1 and 500")
		}
		f.Limit = n
	}
	if !p.Admin {
		if f.Actor != "" && f.Actor != p.Actor {
			return schema.Errorf(schema.CodeForbidden, "only admin tokens list other actors' operations")
		}
		f.Actor = p.Actor
	}
	if !p.Admin && !p.AllInstallations {
		f.Installations = append([]int64{}, p.Installations...)
	}
	recs, next, err := a.ops.List(r.Context(), f)
	if err != nil {
		return err
	}
	out := OperationList{Operations: make([]schema.View, 0, len(recs)), NextCursor: next}
	for i := range recs {
		v, err := recs[i].View()
		if err != nil {
			return err
		}
		out.Operations = append(out.Operations, v)
	}
	a.writeJSON(w, http.StatusOK, out)
	return nil
}

// apiQuery parses the query string of a request strictly: only the named
// parameters, each at most once. It returns them by name.
func apiQuery(r *http.Request, allowed ...string) (map[string]string, error) {
	if r.URL.RawQuery == "" {
		return nil, nil
	}
	vals, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, schema.Invalidf("the query string is malformed")
	}
	out := make(map[string]string, len(vals))
	for k, vs := range vals {
		if !slices.Contains(allowed, k) {
			if len(allowed) == 0 {
				return nil, schema.Invalidf("this route takes no query parameters")
			}
			return nil, schema.Invalidf("unknown query parameter %q", apiTruncate(k, 40))
		}
		if len(vs) != 1 {
			return nil, schema.Invalidf("query parameter %s is given more than once", k)
		}
		out[k] = vs[0]
	}
	return out, nil
}

// apiTruncate shortens s to at most n bytes for error messages, keeping
// whole UTF-8 characters.
func apiTruncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n] + "…"
}
