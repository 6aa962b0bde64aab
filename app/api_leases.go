package app

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/baton-dev/baton/coordinator"
	"github.com/baton-dev/baton/schema"
)

// Bounds of the leases outside holders take over the API.
const (
	MinAPILeaseTTL     = time.Second
	MaxAPILeaseTTL     = 15 * time.Minute
	DefaultAPILeaseTTL = time.Minute
	// MaxLeaseOwnerChars bounds the owner string a caller gives.
	MaxLeaseOwnerChars = 100
)

// Every holder leaseHolder accepts fits the coordinator: an actor and an
// owner of their most characters, each of 4 bytes, and the '/'. (The
// constant below would be negative, and the build fail, otherwise.)
const _ uint = coordinator.MaxOwnerBytes - (4*schema.MaxActorChars + 1 + 4*MaxLeaseOwnerChars)

// LeaseGrantBody is the answer of acquire and renew.
type LeaseGrantBody struct {
	Key       string    `json:"key"`
	Owner     string    `json:"owner"`
	Token     int64     `json:"token"`
	ExpiresAt time.Time `json:"expiresAt"`
}

// LeaseReleaseBody is the answer of release.
type LeaseReleaseBody struct {
	Key      string `json:"key"`
	Owner    string `json:"owner"`
	Released bool   `json:"released"`
}

// LeaseStateBody is the answer of GET /v1/leases/{key}. ExpiresIn is in
// seconds.
type LeaseStateBody struct {
	Key       string   `json:"key"`
	Locked    bool     `json:"locked"`
	Owner     string   `json:"owner,omitempty"`
	Token     int64    `json:"token,omitempty"`
	ExpiresIn *float64 `json:"expiresIn,omitempty"`
}

type acquireLeaseRequest struct {
	Owner      string `json:"owner"`
	TTLSeconds *int64 `json:"ttlSeconds"`
}

type renewLeaseRequest struct {
	Owner      string `json:"owner"`
	Token      *int64 `json:"token"`
	TTLSeconds *int64 `json:"ttlSeconds"`
}

type releaseLeaseRequest struct {
	Owner string `json:"owner"`
	Token *int64 `json:"token"`
}

// acquireLease is POST /v1/leases/{key}/acquire.
func (a *API) acquireLease(w http.ResponseWriter, r *http.Request, p *Principal) error {
	key, err := a.leaseKey(r, p, false)
	if err != nil {
		return err
	}
	var req acquireLeaseRequest
	if err := decodeAPIBody(r, &req); err != nil {
		return err
	}
	held, err := leaseHolder(p, req.Owner)
	if err != nil {
		return err
	}
	// Spaces at an owner's ends are refused when a lease is taken (a
	// holder "job " cannot be told from "job" in a listing, and one made
	// only of spaces names nobody); renew and release still take them, so
	// that a holder from before can finish.
	if strings.TrimSpace(req.Owner) != req.Owner {
		return schema.Invalidf("owner must not begin or end with spaces")
	}
	ttl, err := leaseTTL(req.TTLSeconds)
	if err != nil {
		return err
	}
	g, err := a.leases.Acquire(r.Context(), key, held, ttl)
	if err != nil {
		return apiLeaseError(err)
	}
	a.writeJSON(w, http.StatusOK, LeaseGrantBody{Key: key, Owner: req.Owner, Token: g.Token, ExpiresAt: g.ExpiresAt.UTC()})
	return nil
}

// renewLease is POST /v1/leases/{key}/renew.
func (a *API) renewLease(w http.ResponseWriter, r *http.Request, p *Principal) error {
	key, err := a.leaseKey(r, p, true)
	if err != nil {
		return err
	}
	var req renewLeaseRequest
	if err := decodeAPIBody(r, &req); err != nil {
		return err
	}
	held, err := leaseHolder(p, req.Owner)
	if err != nil {
		return err
	}
	token, err := leaseToken(req.Token)
	if err != nil {
		return err
	}
	ttl, err := leaseTTL(req.TTLSeconds)
	if err != nil {
		return err
	}
	g, err := a.leases.Renew(r.Context(), key, held, token, ttl)
	if err != nil {
		return apiLeaseError(err)
	}
	a.writeJSON(w, http.StatusOK, LeaseGrantBody{Key: key, Owner: req.Owner, Token: g.Token, ExpiresAt: g.ExpiresAt.UTC()})
	return nil
}

// releaseLease is POST /v1/leases/{key}/release.
func (a *API) releaseLease(w http.ResponseWriter, r *http.Request, p *Principal) error {
	key, err := a.leaseKey(r, p, true)
	if err != nil {
		return err
	}
	var req releaseLeaseRequest
	if err := decodeAPIBody(r, &req); err != nil {
		return err
	}
	held, err := leaseHolder(p, req.Owner)
	if err != nil {
		return err
	}
	token, err := leaseToken(req.Token)
	if err != nil {
		return err
	}
	if err := a.leases.Release(r.Context(), key, held, token); err != nil {
		return apiLeaseError(err)
	}
	a.writeJSON(w, http.StatusOK, LeaseReleaseBody{Key: key, Owner: req.Owner, Released: true})
	return nil
}

// checkLease is GET /v1/leases/{key}.
func (a *API) checkLease(w http.ResponseWriter, r *http.Request, p *Principal) error {
	key, err := a.leaseKey(r, p, true)
	if err != nil {
		return err
	}
	st, err := a.leases.Check(r.Context(), key)
	if err != nil {
		return apiLeaseError(err)
	}
	body := LeaseStateBody{Key: key, Locked: st.Locked}
	if st.Locked {
		secs := st.ExpiresIn.Seconds()
		body.Owner, body.Token, body.ExpiresIn = st.Owner, st.Token, &secs
	}
	a.writeJSON(w, http.StatusOK, body)
	return nil
}

// leaseKey returns the request's lease key (one percent-encoded path
// segment, already decoded by the router) if it names a resource the
// principal may act on, in canonical form (schema.ParseResourceKey: the
// owner and repository in lower case), so that every spelling of a
// repository's name is one lease, shared with the operations on it.
//
// held is true for the routes about a lease that may be held already
// (renew, release, check): they are also answered while the repository's
// installation is suspended, to a principal that may learn it is: a lease
// touches nothing at GitHub, and a holder refused its release would keep
// the resource from the operations on it until the lease's TTL ran out,
// also after the installation is unsuspended. A new lease is not granted
// there.
func (a *API) leaseKey(r *http.Request, p *Principal, held bool) (string, error) {
	if _, err := apiQuery(r); err != nil {
		return "", err
	}
	key := r.PathValue("key")
	if len(key) > 512 {
		return "", schema.Invalidf("lease key is longer than 512 bytes")
	}
	res, target, err := schema.ParseResourceKey(key)
	if err != nil {
		return "", err
	}
	if _, err := a.installationFor(r.Context(), p, target); err != nil {
		// installationFor answers ErrInstallationUnavailable only to a
		// principal that may act on that installation.
		if !held || !errors.Is(err, ErrInstallationUnavailable) {
			return "", err
		}
	}
	return res.Key(), nil
}

// leaseHolder checks the caller's owner string and returns the owner the
// lease is held under: "ACTOR/OWNER". Owners hold no '/', so the actor
// part is unambiguous, and no API caller can speak for another actor's
// lease or an operation's (whose owner is its operation ID).
func leaseHolder(p *Principal, owner string) (string, error) {
	if owner == "" {
		return "", schema.Invalidf("owner is required")
	}
	if !utf8.ValidString(owner) || utf8.RuneCountInString(owner) > MaxLeaseOwnerChars {
		return "", schema.Invalidf("owner must be 1–%d characters of UTF-8", MaxLeaseOwnerChars)
	}
	for _, c := range owner {
		if c == '/' || !unicode.IsPrint(c) {
			return "", schema.Invalidf("owner must hold printable characters other than '/'")
		}
	}
	return p.Actor + "/" + owner, nil
}

// leaseTTL checks ttlSeconds (absent: DefaultAPILeaseTTL).
func leaseTTL(secs *int64) (time.Duration, error) {
	if secs == nil {
		return DefaultAPILeaseTTL, nil
	}
	if *secs < int64(MinAPILeaseTTL/time.Second) || *secs > int64(MaxAPILeaseTTL/time.Second) {
		return 0, schema.Invalidf("ttlSeconds must be between %d and %d", MinAPILeaseTTL/time.Second, MaxAPILeaseTTL/time.Second)
	}
	return time.Duration(*secs) * time.Second, nil
}

// leaseToken checks the fencing token of a renew or release.
func leaseToken(t *int64) (int64, error) {
	if t == nil {
		return 0, schema.Invalidf("token is required: the fencing token acquire returned")
	}
	if *t <= 0 {
		return 0, schema.Invalidf("token must be a positive integer")
	}
	return *t, nil
}

// apiLeaseError words the lease service's errors for the API, keeping
// their codes and details.
func apiLeaseError(err error) error {
	details := schema.ErrorDetails(err)
	switch schema.ErrorCode(err) {
	case schema.CodeLeaseHeld:
		msg := "the lease is held by another owner"
		if owner, ok := details["owner"].(string); ok {
			msg = fmt.Sprintf("the lease is held by %s", owner)
			if secs, ok := details["expiresIn"].(float64); ok {
				msg += fmt.Sprintf(" for another %s", (time.Duration(secs * float64(time.Second))).Round(time.Millisecond))
			}
		}
		return &schema.Error{Code: schema.CodeLeaseHeld, Message: msg, Details: details, Err: err}
	case schema.CodeLeaseLost:
		return &schema.Error{Code: schema.CodeLeaseLost, Message: "this owner does not hold the lease with this token (it expired, was released or was taken over)",
			Details: details, Err: err}
	case schema.CodeInvalidRequest:
		var e *schema.Error
		if errors.As(err, &e) {
			return err
		}
		return &schema.Error{Code: schema.CodeInvalidRequest, Message: strings.TrimPrefix(err.Error(), "coordinator: "), Details: details, Err: err}
	}
	return err
}
