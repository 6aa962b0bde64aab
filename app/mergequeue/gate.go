package mergequeue

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/google/go-github/v62/github"
	"go.uber.org/zap"

	"github.com/baton-dev/baton/executor"
)

// checkState is the state of one check (a check run by name, or a status
// by context) on a commit: success, failure or pending.
type checkState struct {
	name  string
	state string
	// conclusion is what GitHub said (a check run's conclusion or a
	// status's state), for the bounce message.
	conclusion string
}

// gate is the verdict on one head.
type gate struct {
	result string // GatePending | GateSuccess | GateFailure
	detail string
}

// evaluateGate decides a gate from the checks reported on a head. With
// required contexts, it passes when each has succeeded and fails when one
// has failed; otherwise (required is nil) every reported check counts and
// at least one must have reported. Statuses take precedence over check
// runs of the same name, as GitHub's merge button has it for a context
// reported both ways.
func evaluateGate(required []string, runs, statuses []checkState) gate {
	byName := map[string]checkState{}
	for _, r := range runs {
		byName[r.name] = r
	}
	for _, s := range statuses {
		byName[s.name] = s
	}
	names := required
	if names == nil {
		for n := range byName {
			names = append(names, n)
		}
		sort.Strings(names)
		if len(names) == 0 {
			return gate{result: GatePending, detail: "no checks reported yet"}
		}
	}
	var failed, pending []string
	for _, n := range names {
		c, ok := byName[n]
		switch {
		case !ok:
			pending = append(pending, n+" (not reported)")
		case c.state == GateFailure:
			failed = append(failed, fmt.Sprintf("%s (%s)", n, c.conclusion))
		case c.state != GateSuccess:
			pending = append(pending, n)
		}
	}
	switch {
	case len(failed) > 0:
		return gate{result: GateFailure, detail: "failed: " + strings.Join(failed, ", ")}
	case len(pending) > 0:
		return gate{result: GatePending, detail: "waiting for: " + strings.Join(pending, ", ")}
	}
	if len(names) == 0 {
		return gate{result: GateSuccess, detail: "no checks required"}
	}
	return gate{result: GateSuccess, detail: "passed: " + strings.Join(names, ", ")}
}

// runState maps a check run to success, failure or pending, as GitHub's
// required checks count it: success, neutral and skipped pass.
func runState(status, conclusion string) string {
	if status != "completed" {
		return GatePending
	}
	switch conclusion {
	case "success", "neutral", "skipped":
		return GateSuccess
	}
	return GateFailure
}

// statusState maps a commit status state.
func statusState(state string) string {
	switch state {
	case "success":
		return GateSuccess
	case "failure", "error":
		return GateFailure
	}
	return GatePending
}

// requiredChecks returns the checks a gate on base requires: the
// configured list, or the required status checks of base's protection; nil
// when base is not protected (every reported check counts then). The
// queue's own status context is never required.
func (r *run) requiredChecks(base string) ([]string, error) {
	if len(r.q.cfg.RequiredChecks) > 0 {
		return r.q.cfg.RequiredChecks, nil
	}
	if req, ok := r.required[base]; ok {
		return req, nil
	}
	gh, err := r.github()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(r.ctx, r.q.cfg.GitHubTimeout)
	defer cancel()
	rsc, resp, err := gh.Repositories.GetRequiredStatusChecks(ctx, r.owner, r.name, base)
	var req []string
	switch {
	case errors.Is(err, github.ErrBranchNotProtected), err != nil && resp != nil && resp.StatusCode == http.StatusNotFound:
		req = nil
	case err != nil && executor.Classify(err, time.Now()).Category == executor.CategoryForbidden:
		// The installation may not read branch protection (the App lacks
		// administration:read): every reported check counts. A 403 that is
		// a rate limit, one go-github does not recognise included, or a
		// suspension is not that: it fails the run, which is retried.
		if _, warned := r.q.protectionWarned.LoadOrStore(r.key+"@"+base, true); !warned {
			r.log.Warn("cannot read branch protection; every reported check counts (logged once per base)",
				zap.String(logEvent, "mergequeue.protection_forbidden"), zap.String("base", base))
		}
		req = nil
	case err != nil:
		return nil, fmt.Errorf("read the required checks of %s: %w", base, err)
	default:
		if rsc.Strict {
			// GitHub refuses to merge a head behind its base when the
			// protection asks for up-to-date branches, and the queue
			// does not update branches: after one merge, the next pull
			// requests would bounce until they are updated.
			if _, warned := r.q.protectionWarned.LoadOrStore("strict:"+r.key+"@"+base, true); !warned {
				r.log.Warn("branch protection requires branches to be up to date before merging; the merge queue does not update branches, so a pull request behind its base bounces (logged once per base)",
					zap.String(logEvent, "mergequeue.protection_strict"), zap.String("base", base))
			}
		}
		if rsc.Contexts != nil {
			req = append(req, *rsc.Contexts...)
		}
		if rsc.Checks != nil {
			for _, c := range *rsc.Checks {
				if !slices.Contains(req, c.Context) {
					req = append(req, c.Context)
				}
			}
		}
		req = slices.DeleteFunc(req, func(s string) bool { return s == r.q.cfg.StatusContext })
		if req == nil {
			req = []string{} // protected, nothing required
		}
	}
	r.required[base] = req
	return req, nil
}

// headChecks reads the check runs (the latest of each name) and the
// statuses (the latest of each context, the queue's own left out) on sha.
func (r *run) headChecks(sha string) (runs, statuses []checkState, err error) {
	gh, err := r.github()
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(r.ctx, r.q.cfg.GitHubTimeout)
	defer cancel()
	latest := map[string]*github.CheckRun{}
	opts := &github.ListCheckRunsOptions{ListOptions: github.ListOptions{PerPage: 100}}
	for {
		res, resp, err := gh.Checks.ListCheckRunsForRef(ctx, r.owner, r.name, sha, opts)
		if err != nil {
			return nil, nil, fmt.Errorf("list the check runs of %s: %w", shortSHA(sha), err)
		}
		for _, cr := range res.CheckRuns {
			if prev := latest[cr.GetName()]; prev == nil || cr.GetID() > prev.GetID() {
				latest[cr.GetName()] = cr
			}
		}
		if resp.NextPage == 0 {
			break
		}
		opts.Page = resp.NextPage
	}
	for name, cr := range latest {
		c := cr.GetConclusion()
		if cr.GetStatus() != "completed" {
			c = cr.GetStatus()
		}
		runs = append(runs, checkState{name: name, state: runState(cr.GetStatus(), cr.GetConclusion()), conclusion: c})
	}
	lo := &github.ListOptions{PerPage: 100}
	for {
		cs, resp, err := gh.Repositories.GetCombinedStatus(ctx, r.owner, r.name, sha, lo)
		if err != nil {
			return nil, nil, fmt.Errorf("read the statuses of %s: %w", shortSHA(sha), err)
		}
		for _, s := range cs.Statuses {
			if s.GetContext() == r.q.cfg.StatusContext {
				continue
			}
			statuses = append(statuses, checkState{name: s.GetContext(), state: statusState(s.GetState()), conclusion: s.GetState()})
		}
		if resp.NextPage == 0 {
			break
		}
		lo.Page = resp.NextPage
	}
	return runs, statuses, nil
}

// evaluate reads e's gate from GitHub's current state and applies it:
// passed, still pending, or failed (the entry bounces).
func (r *run) evaluate(e *entry) error {
	if e.status == StatusBounced || e.status == StatusGatePassed {
		return nil
	}
	req, err := r.requiredChecks(e.base)
	if err != nil {
		return err
	}
	runs, statuses, err := r.headChecks(e.sha)
	if err != nil {
		return err
	}
	g := evaluateGate(req, runs, statuses)
	switch g.result {
	case GateSuccess:
		e.status, e.gateResult, e.gateDetail, e.gateResultAt, e.dirty = StatusGatePassed, GateSuccess, g.detail, r.now, true
		r.audit(AuditGateSuccess, e.pr, e.sha, g.detail)
		r.note("#%d gate passed at %s", e.pr, shortSHA(e.sha))
		r.logInfo("gate passed", "mergequeue.gate_success", e.pr)
	case GateFailure:
		e.gateResult, e.gateDetail, e.gateResultAt, e.dirty = GateFailure, g.detail, r.now, true
		r.audit(AuditGateFailure, e.pr, e.sha, g.detail)
		return r.bounce(e, fmt.Sprintf("the checks on %s %s", shortSHA(e.sha), g.detail), "")
	default:
		if e.status != StatusEvaluating || e.gateResult != GatePending || e.gateDetail != g.detail {
			e.status, e.gateResult, e.gateDetail, e.gateResultAt, e.dirty = StatusEvaluating, GatePending, g.detail, r.now, true
		}
	}
	return nil
}
