package ghsim

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// FaultKind names what an injected fault does to a request.
type FaultKind string

const (
	// FaultStatus answers with Status (a 5xx; defaults to 500) and GitHub's
	// error body, without applying the request.
	FaultStatus FaultKind = "status"
	// FaultTooManyRequests answers 429 with Retry-After (RetryAfter, in
	// whole seconds; none when zero), without applying the request.
	FaultTooManyRequests FaultKind = "too_many_requests"
	// FaultLatency delays the request by Latency, then serves it normally
	// (other faults matching the same request still apply).
	FaultLatency FaultKind = "latency"
	// FaultDropBefore closes the connection without an answer, before the
	// request is applied.
	FaultDropBefore FaultKind = "drop_before"
	// FaultDropAfter applies the request (the mutation is committed and its
	// effect logged, with Dropped set), then closes the connection without
	// an answer.
	FaultDropAfter FaultKind = "drop_after"
	// FaultBaseModified answers a merge with GitHub's 405 "Base branch was
	// modified. Review and try the merge again.", without applying it: what
	// GitHub says to a merge that comes just after its base moved.
	FaultBaseModified FaultKind = "base_modified"
	// FaultMergeInProgress answers a merge with GitHub's 405 "Merge already
	// in progress", without applying it: what GitHub says to a merge of a
	// pull request while an earlier merge of it is still being carried out.
	FaultMergeInProgress FaultKind = "merge_in_progress"
	// FaultUnauthorized answers with GitHub's 401 "Bad credentials",
	// without applying the request: what GitHub says to a token it does
	// not take (expired by its clock, or not yet usable everywhere).
	FaultUnauthorized FaultKind = "unauthorized"
)

// Fault is a fault injected into the REST requests that match Route.
//
// Route is "METHOD PATH". METHOD is an HTTP method or "*". PATH is matched
// segment by segment against the request path (without any /api/v3
// prefix): a segment in braces ("{number}") matches any one segment, a last
// segment "{name...}" matches one or more remaining segments, "*" as the
// whole PATH matches every path, and other segments match literally. So
// "PUT /repos/{owner}/{repo}/pulls/{number}/merge" matches every merge and
// "PUT /repos/octo/demo/pulls/1/merge" only merges of octo/demo#1;
// "PATCH /repos/{owner}/{repo}/git/refs/{ref...}" matches every ref update.
//
// Faults are checked in the order they were set; latency adds up, and the
// first other fault that fires decides the request's fate.
type Fault struct {
	Route string    `json:"route"`
	Kind  FaultKind `json:"kind"`
	// Installation restricts the fault to one installation's requests; 0
	// matches all.
	Installation int64 `json:"installationId,omitempty"`
	// Status is the answer of a FaultStatus fault. Defaults to 500.
	Status int `json:"status,omitempty"`
	// RetryAfter is the Retry-After of a FaultTooManyRequests fault.
	RetryAfter time.Duration `json:"-"`
	// Latency is the delay of a FaultLatency fault.
	Latency time.Duration `json:"-"`
	// Count limits the fault to the next Count requests it fires on; 0
	// means every matching request until the fault is cleared.
	Count int `json:"count,omitempty"`
	// Probability makes the fault fire on that fraction of matching
	// requests (random, seeded by Config.Seed); 0 means always.
	Probability float64 `json:"probability,omitempty"`
}

// FaultState is a fault in force, with what it has done so far.
type FaultState struct {
	ID string `json:"id"`
	Fault
	RetryAfterSeconds int   `json:"retryAfterSeconds,omitempty"`
	LatencyMillis     int64 `json:"latencyMs,omitempty"`
	// Fired counts the requests the fault has acted on.
	Fired int `json:"fired"`
	// Remaining is how many more times it fires (Count faults only).
	Remaining int `json:"remaining,omitempty"`
}

type fault struct {
	id      string
	f       Fault
	method  string
	pattern []string // nil: every path
	fired   int
}

type faultSet struct {
	mu     sync.Mutex
	faults []*fault
	n      atomic.Int32 // len(faults), read without the lock on the hot path
	rng    *rand.Rand
	nextID int
}

func (fs *faultSet) init(seed uint64) { fs.rng = rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)) }

// SetFault injects a fault and returns its ID (for ClearFault).
func (s *Sim) SetFault(f Fault) (string, error) {
	method, path, ok := strings.Cut(strings.TrimSpace(f.Route), " ")
	path = strings.TrimSpace(path)
	if !ok || method == "" || path == "" || (path != "*" && !strings.HasPrefix(path, "/")) {
		return "", fmt.Errorf("ghsim: fault route %q is not \"METHOD /path\": %w", f.Route, ErrInvalid)
	}
	switch f.Kind {
	case FaultStatus:
		f.Status = cmp.Or(f.Status, http.StatusInternalServerError)
		if f.Status < 500 || f.Status > 599 {
			return "", fmt.Errorf("ghsim: fault status %d is not a 5xx: %w", f.Status, ErrInvalid)
		}
	case FaultTooManyRequests, FaultDropBefore, FaultDropAfter, FaultBaseModified, FaultMergeInProgress, FaultUnauthorized:
	case FaultLatency:
		if f.Latency <= 0 {
			return "", fmt.Errorf("ghsim: latency fault without Latency: %w", ErrInvalid)
		}
	default:
		return "", fmt.Errorf("ghsim: fault kind %q: %w", f.Kind, ErrInvalid)
	}
	if f.Count < 0 || f.Probability < 0 || f.Probability > 1 || f.RetryAfter < 0 {
		return "", fmt.Errorf("ghsim: fault count, probability or retry-after out of range: %w", ErrInvalid)
	}
	ft := &fault{f: f, method: strings.ToUpper(method)}
	if path != "*" {
		ft.pattern = strings.Split(strings.TrimPrefix(path, "/"), "/")
		for i, seg := range ft.pattern {
			if strings.HasSuffix(seg, "...}") && i != len(ft.pattern)-1 {
				return "", fmt.Errorf("ghsim: fault route %q: {name...} must be last: %w", f.Route, ErrInvalid)
			}
		}
	}
	fs := &s.faults
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.nextID++
	ft.id = "f" + strconv.Itoa(fs.nextID)
	fs.faults = append(fs.faults, ft)
	fs.n.Store(int32(len(fs.faults)))
	return ft.id, nil
}

// ClearFault removes one fault; it reports whether it was there.
func (s *Sim) ClearFault(id string) bool {
	fs := &s.faults
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for i, ft := range fs.faults {
		if ft.id == id {
			fs.faults = append(fs.faults[:i:i], fs.faults[i+1:]...)
			fs.n.Store(int32(len(fs.faults)))
			return true
		}
	}
	return false
}

// ClearFaults removes every fault.
func (s *Sim) ClearFaults() {
	fs := &s.faults
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.faults = nil
	fs.n.Store(0)
}

// Faults lists the faults in force.
func (s *Sim) Faults() []FaultState {
	fs := &s.faults
	fs.mu.Lock()
	defer fs.mu.Unlock()
	out := make([]FaultState, 0, len(fs.faults))
	for _, ft := range fs.faults {
		st := FaultState{ID: ft.id, Fault: ft.f, Fired: ft.fired,
			RetryAfterSeconds: int(math.Ceil(ft.f.RetryAfter.Seconds())), LatencyMillis: ft.f.Latency.Milliseconds()}
		if ft.f.Count > 0 {
			st.Remaining = ft.f.Count - ft.fired
		}
		out = append(out, st)
	}
	return out
}

// faultAction is what the faults decided for one request.
type faultAction struct {
	latency    time.Duration
	kind       FaultKind // "" or FaultLatency: serve normally
	status     int
	retryAfter time.Duration
}

// pick decides the faults of one request.
func (fs *faultSet) pick(method, path string, inst int64) faultAction {
	var act faultAction
	if fs.n.Load() == 0 {
		return act
	}
	segs := strings.Split(strings.TrimPrefix(path, "/"), "/")
	fs.mu.Lock()
	defer fs.mu.Unlock()
	kept := fs.faults[:0]
	for _, ft := range fs.faults {
		decided := act.kind != "" && act.kind != FaultLatency
		if !decided && ft.matches(method, segs, inst) && (ft.f.Probability == 0 || fs.rng.Float64() < ft.f.Probability) {
			ft.fired++
			if ft.f.Kind == FaultLatency {
				act.latency += ft.f.Latency
			} else {
				act.kind, act.status, act.retryAfter = ft.f.Kind, ft.f.Status, ft.f.RetryAfter
			}
		}
		if ft.f.Count == 0 || ft.fired < ft.f.Count {
			kept = append(kept, ft)
		}
	}
	clear(fs.faults[len(kept):])
	fs.faults = kept
	fs.n.Store(int32(len(kept)))
	return act
}

func (ft *fault) matches(method string, segs []string, inst int64) bool {
	if ft.method != "*" && ft.method != method {
		return false
	}
	if ft.f.Installation != 0 && ft.f.Installation != inst {
		return false
	}
	if ft.pattern == nil {
		return true
	}
	for i, p := range ft.pattern {
		if strings.HasPrefix(p, "{") && strings.HasSuffix(p, "...}") {
			return i < len(segs)
		}
		if i >= len(segs) {
			return false
		}
		if strings.HasPrefix(p, "{") && strings.HasSuffix(p, "}") {
			if segs[i] == "" {
				return false
			}
			continue
		}
		if p != segs[i] {
			return false
		}
	}
	return len(segs) == len(ft.pattern)
}

// response is the answer of a status, 429, base-modified,
// merge-in-progress or unauthorized fault.
func (a faultAction) response() response {
	switch a.kind {
	case FaultUnauthorized:
		return badCredentials()
	case FaultBaseModified:
		return errResponse(http.StatusMethodNotAllowed, baseModifiedMessage, docsRoot)
	case FaultMergeInProgress:
		return errResponse(http.StatusMethodNotAllowed, "Merge already in progress", docsRoot)
	case FaultTooManyRequests:
		resp := errResponse(http.StatusTooManyRequests, "Too Many Requests", docsRoot)
		if a.retryAfter > 0 {
			resp.header = http.Header{"Retry-After": {strconv.Itoa(int(math.Ceil(a.retryAfter.Seconds())))}}
		}
		return resp
	}
	msg := "Server Error"
	switch a.status {
	case http.StatusBadGateway:
		msg = "Bad Gateway"
	case http.StatusServiceUnavailable:
		msg = "Service Unavailable"
	case http.StatusGatewayTimeout:
		msg = "We couldn't respond to your request in time. Sorry about that. Please try resubmitting your request and contact us if the problem persists."
	}
	return errResponse(a.status, msg, docsRoot)
}
