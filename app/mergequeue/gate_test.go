package mergequeue

import (
	"strings"
	"testing"

	"github.com/google/go-github/v62/github"
)

// reqs returns the checks named, each required from any App; nil (every
// reported check counts) for nil names, empty for empty names.
func reqs(names ...string) []requiredCheck {
	if names == nil {
		return nil
	}
	req := make([]requiredCheck, len(names))
	for i, n := range names {
		req[i] = requiredCheck{name: n}
	}
	return req
}

func TestEvaluateGate(t *testing.T) {
	t.Parallel()
	run := func(name, status, conclusion string) checkState {
		return checkState{name: name, state: runState(status, conclusion), conclusion: conclusion}
	}
	st := func(name, state string) checkState {
		return checkState{name: name, state: statusState(state), conclusion: state}
	}
	for _, c := range []struct {
		name     string
		required []string
		runs     []checkState
		statuses []checkState
		want     string
		detail   string
	}{
		{"required passed", []string{"ci", "lint"}, []checkState{run("ci", "completed", "success"), run("lint", "completed", "neutral")}, nil, GateSuccess, "passed: ci, lint"},
		{"skipped passes", []string{"ci"}, []checkState{run("ci", "completed", "skipped")}, nil, GateSuccess, ""},
		{"one still running", []string{"ci", "lint"}, []checkState{run("ci", "completed", "success"), run("lint", "in_progress", "")}, nil, GatePending, "waiting for: lint"},
		{"one not reported", []string{"ci", "e2e"}, []checkState{run("ci", "completed", "success")}, nil, GatePending, "e2e (not reported)"},
		{"one failed, one pending", []string{"ci", "lint"}, []checkState{run("ci", "completed", "timed_out"), run("lint", "queued", "")}, nil, GateFailure, "failed: ci (timed_out)"},
		{"cancelled fails", []string{"ci"}, []checkState{run("ci", "completed", "cancelled")}, nil, GateFailure, ""},
		{"status passes", []string{"ci/legacy"}, nil, []checkState{st("ci/legacy", "success")}, GateSuccess, ""},
		{"status error fails", []string{"ci/legacy"}, nil, []checkState{st("ci/legacy", "error")}, GateFailure, ""},
		{"status pending", []string{"ci/legacy"}, nil, []checkState{st("ci/legacy", "pending")}, GatePending, ""},
		{"status context in another case", []string{"ci/legacy"}, nil, []checkState{st("CI/Legacy", "success")}, GateSuccess, "passed: ci/legacy"},
		{"failed run, passed status of the same name", []string{"ci"}, []checkState{run("ci", "completed", "failure")}, []checkState{st("ci", "success")}, GateFailure, "failed: ci (failure)"},
		{"running run, passed status of the same name", []string{"ci"}, []checkState{run("ci", "in_progress", "")}, []checkState{st("ci", "success")}, GatePending, "waiting for: ci"},
		{"passed run, failed status of the same name", []string{"ci"}, []checkState{run("ci", "completed", "success")}, []checkState{st("ci", "failure")}, GateFailure, "failed: ci (failure)"},
		{"passed run and status of the same name", []string{"ci"}, []checkState{run("ci", "completed", "success")}, []checkState{st("ci", "success")}, GateSuccess, "passed: ci"},
		{"unprotected: run and status of the same name", nil, []checkState{run("ci", "completed", "success")}, []checkState{st("ci", "pending")}, GatePending, "waiting for: ci"},
		{"unrequired failure ignored", []string{"ci"}, []checkState{run("ci", "completed", "success"), run("flaky", "completed", "failure")}, nil, GateSuccess, ""},
		{"protected, nothing required", []string{}, nil, nil, GateSuccess, "no checks required"},
		{"unprotected: all reported", nil, []checkState{run("a", "completed", "success"), run("b", "completed", "success")}, []checkState{st("c", "success")}, GateSuccess, "passed: a, b, c"},
		{"unprotected: any failure", nil, []checkState{run("a", "completed", "success"), run("b", "completed", "failure")}, nil, GateFailure, "failed: b (failure)"},
		{"unprotected: nothing reported yet", nil, nil, nil, GatePending, "no checks reported yet"},
	} {
		g := evaluateGate(reqs(c.required...), c.runs, c.statuses)
		if g.result != c.want || !strings.Contains(g.detail, c.detail) {
			t.Errorf("%s: %+v, want %s (%q)", c.name, g, c.want, c.detail)
		}
	}
}

func TestSameNameBothRequired(t *testing.T) {
	t.Parallel()
	run := checkState{name: "ci", state: runState("completed", "failure"), conclusion: "failure"}
	pend := checkState{name: "ci", state: runState("in_progress", ""), conclusion: "in_progress"}
	st := checkState{name: "ci", state: statusState("success"), conclusion: "success"}
	if g := evaluateGate(reqs("ci"), []checkState{run}, []checkState{st}); g.result != GateFailure {
		t.Errorf("%+v", g)
	}
	if g := evaluateGate(reqs("ci"), []checkState{pend}, []checkState{st}); g.result != GatePending {
		t.Errorf("%+v", g)
	}
}

// A check that branch protection requires from one App (checks[].app_id)
// is judged on that App's latest run of the name only; one required from
// any App (app_id -1 or absent) on every App's latest run.
func TestGateRequiredFromApp(t *testing.T) {
	t.Parallel()
	const ci, other = 15368, 99
	cr := func(id, app int64, status, conclusion string) *github.CheckRun {
		return &github.CheckRun{ID: github.Int64(id), Name: github.String("build"), App: &github.App{ID: github.Int64(app)},
			Status: github.String(status), Conclusion: github.String(conclusion)}
	}
	rsc := func(app *int64) *github.RequiredStatusChecks {
		return &github.RequiredStatusChecks{Contexts: &[]string{"build"}, Checks: &[]*github.RequiredStatusCheck{{Context: "build", AppID: app}}}
	}
	for _, c := range []struct {
		name   string
		app    *int64
		runs   []*github.CheckRun
		want   string
		detail string
	}{
		{"another App's passed run does not count", github.Int64(ci),
			[]*github.CheckRun{cr(1, ci, "in_progress", ""), cr(2, other, "completed", "success")}, GatePending, "waiting for: build"},
		{"only another App reported", github.Int64(ci),
			[]*github.CheckRun{cr(2, other, "completed", "success")}, GatePending, "build (not reported)"},
		{"another App's failed run does not count", github.Int64(ci),
			[]*github.CheckRun{cr(1, ci, "completed", "success"), cr(2, other, "completed", "failure")}, GateSuccess, "passed: build"},
		{"the App's latest run counts", github.Int64(ci),
			[]*github.CheckRun{cr(3, ci, "completed", "success"), cr(1, ci, "completed", "failure")}, GateSuccess, ""},
		{"any App (-1): every App's latest run", github.Int64(-1),
			[]*github.CheckRun{cr(1, ci, "completed", "success"), cr(2, other, "completed", "failure")}, GateFailure, "failed: build (failure)"},
		{"any App (absent)", nil,
			[]*github.CheckRun{cr(1, ci, "completed", "success"), cr(2, other, "in_progress", "")}, GatePending, ""},
	} {
		req := protectionChecks(rsc(c.app))
		if len(req) != 1 {
			t.Fatalf("%s: required %+v", c.name, req)
		}
		g := evaluateGate(req, latestRuns(c.runs), nil)
		if g.result != c.want || !strings.Contains(g.detail, c.detail) {
			t.Errorf("%s: %+v, want %s (%q)", c.name, g, c.want, c.detail)
		}
	}
}
