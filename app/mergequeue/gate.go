package mergequeue

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
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
	// appID is the App that reported a check run (0 for a status, or
	// unknown).
	appID int64
	// conclusion is what GitHub said (a check run's conclusion or a
	// status's state), for the bounce message.
	conclusion string
}

// gate is the verdict on one head.
type gate struct {
	result string // GatePending | GateSuccess | GateFailure
	detail string
}

// requiredCheck is one check a gate requires: a name and the App that
// must report it as a check run (0: any App).
type requiredCheck struct {
	name  string
	appID int64
}

// evaluateGate decides a gate from the checks reported on a head. With
// required checks, it passes when each has succeeded and fails when one
// has failed; otherwise (required is nil) every reported check counts and
// at least one must have reported. As on
// GitHub, a name reported both as a check run and as a status needs both:
// it has failed when any report of it failed, is pending while any is
// pending, and has succeeded only when every report succeeded. A check
// required from one App counts only that App's check runs (statuses,
// which name no App, always count).
func evaluateGate(required []requiredCheck, runs, statuses []checkState) gate {
	if required == nil {
		for _, c := range slices.Concat(runs, statuses) {
			if !slices.ContainsFunc(required, func(rc requiredCheck) bool { return rc.name == c.name }) {
				required = append(required, requiredCheck{name: c.name})
			}
		}
		if len(required) == 0 {
			return gate{result: GatePending, detail: "no checks reported yet"}
		}
		slices.SortFunc(required, func(a, b requiredCheck) int { return cmp.Compare(a.name, b.name) })
	}
	var failed, pending, passed []string
	for _, rc := range required {
		var reported bool
		var fail, wait *checkState
		count := func(c *checkState) {
			reported = true
			switch {
			case c.state == GateFailure:
				fail = cmp.Or(fail, c)
			case c.state != GateSuccess:
				wait = cmp.Or(wait, c)
			}
		}
		for i := range runs {
			if c := &runs[i]; c.name == rc.name && (rc.appID == 0 || c.appID == rc.appID) {
				count(c)
			}
		}
		for i := range statuses {
			// A status's context is case-insensitive on GitHub ("CI"
			// reports the required "ci"); a check run's name is not.
			if c := &statuses[i]; strings.EqualFold(c.name, rc.name) {
				count(c)
			}
		}
		switch {
		case !reported:
			pending = append(pending, rc.name+" (not reported)")
		case fail != nil:
			failed = append(failed, fmt.Sprintf("%s (%s)", rc.name, fail.conclusion))
		case wait != nil:
			pending = append(pending, rc.name)
		default:
			passed = append(passed, rc.name)
		}
	}
	switch {
	case len(failed) > 0:
		return gate{result: GateFailure, detail: "failed: " + strings.Join(failed, ", ")}
	case len(pending) > 0:
		return gate{result: GatePending, detail: "waiting for: " + strings.Join(pending, ", ")}
	case len(passed) == 0:
		return gate{result: GateSuccess, detail: "no checks required"}
	}
	return gate{result: GateSuccess, detail: "passed: " + strings.Join(passed, ", ")}
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
// configured list (each from any App), or the required status checks of
// base's protection (each pinned to the App it names); nil when
// base is not protected (every reported check counts then). The queue's
// own status context is never required; a protection that requires it is
// named to the operator once per base.
func (r *run) requiredChecks(base string) ([]requiredCheck, error) {
	if names := r.q.cfg.RequiredChecks; len(names) > 0 {
		req := make([]requiredCheck, len(names))
		for i, n := range names {
			req[i] = requiredCheck{name: n}
		}
		return req, nil
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
	var req []requiredCheck
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
		req = protectionChecks(rsc)
		if slices.ContainsFunc(req, r.ownContext) {
			// The queue's status on a head stays pending until the merge
			// (its "merging" status and the merge are operations on
			// different resources, so no order between them holds), and
			// GitHub refuses a merge while a required status is pending:
			// every pull request would bounce.
			if _, warned := r.q.protectionWarned.LoadOrStore("own:"+r.key+"@"+base, true); !warned {
				r.log.Warn("branch protection requires the merge queue's own status; GitHub refuses every merge while it is pending, so pull requests bounce: remove it from the required checks (logged once per base)",
					zap.String(logEvent, "mergequeue.protection_own_status"), zap.String("base", base),
					zap.String("context", r.q.cfg.StatusContext))
			}
			req = slices.DeleteFunc(req, r.ownContext)
		}
		if req == nil {
			req = []requiredCheck{} // protected, nothing required
		}
	}
	r.required[base] = req
	return req, nil
}

// ownContext reports whether a required check is the queue's own status
// context.
func (r *run) ownContext(rc requiredCheck) bool { return rc.name == r.q.cfg.StatusContext }

// protectionChecks lists the required checks of a branch protection: its
// checks, each pinned to the App that must report it when it names one
// (app_id -1 or absent: any App), then the contexts no check names.
func protectionChecks(rsc *github.RequiredStatusChecks) []requiredCheck {
	var req []requiredCheck
	if rsc.Checks != nil {
		for _, c := range *rsc.Checks {
			rc := requiredCheck{name: c.Context, appID: max(c.GetAppID(), 0)}
			if !slices.Contains(req, rc) {
				req = append(req, rc)
			}
		}
	}
	if rsc.Contexts != nil {
		for _, ctx := range *rsc.Contexts {
			if !slices.ContainsFunc(req, func(rc requiredCheck) bool { return rc.name == ctx }) {
				req = append(req, requiredCheck{name: ctx})
			}
		}
	}
	return req
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
	var all []*github.CheckRun
	opts := &github.ListCheckRunsOptions{ListOptions: github.ListOptions{PerPage: 100}}
	for {
		res, resp, err := gh.Checks.ListCheckRunsForRef(ctx, r.owner, r.name, sha, opts)
		if err != nil {
			return nil, nil, fmt.Errorf("list the check runs of %s: %w", shortSHA(sha), err)
		}
		all = append(all, res.CheckRuns...)
		if resp.NextPage == 0 {
			break
		}
		opts.Page = resp.NextPage
	}
	runs = latestRuns(all)
	lo := &github.ListOptions{PerPage: 100}
	for {
		cs, resp, err := gh.Repositories.GetCombinedStatus(ctx, r.owner, r.name, sha, lo)
		if err != nil {
			return nil, nil, fmt.Errorf("read the statuses of %s: %w", shortSHA(sha), err)
		}
		for _, s := range cs.Statuses {
			if strings.EqualFold(s.GetContext(), r.q.cfg.StatusContext) {
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

// latestRuns keeps the latest check run (the highest ID) of each name and
// App: a check required from one App is judged on that App's run, and
// one required from any App on every App's.
func latestRuns(all []*github.CheckRun) []checkState {
	type key struct {
		name string
		app  int64
	}
	latest := map[key]*github.CheckRun{}
	for _, cr := range all {
		k := key{cr.GetName(), cr.GetApp().GetID()}
		if prev := latest[k]; prev == nil || cr.GetID() > prev.GetID() {
			latest[k] = cr
		}
	}
	runs := make([]checkState, 0, len(latest))
	for k, cr := range latest {
		c := cr.GetConclusion()
		if cr.GetStatus() != "completed" {
			c = cr.GetStatus()
		}
		runs = append(runs, checkState{name: k.name, appID: k.app, state: runState(cr.GetStatus(), cr.GetConclusion()), conclusion: c})
	}
	slices.SortFunc(runs, func(a, b checkState) int { return cmp.Or(cmp.Compare(a.name, b.name), cmp.Compare(a.appID, b.appID)) })
	return runs
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
