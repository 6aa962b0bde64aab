package mergequeue

import (
	"strings"
	"testing"
)

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
		{"status over run of the same name", []string{"ci"}, []checkState{run("ci", "completed", "failure")}, []checkState{st("ci", "success")}, GateSuccess, ""},
		{"unrequired failure ignored", []string{"ci"}, []checkState{run("ci", "completed", "success"), run("flaky", "completed", "failure")}, nil, GateSuccess, ""},
		{"protected, nothing required", []string{}, nil, nil, GateSuccess, "no checks required"},
		{"unprotected: all reported", nil, []checkState{run("a", "completed", "success"), run("b", "completed", "success")}, []checkState{st("c", "success")}, GateSuccess, "passed: a, b, c"},
		{"unprotected: any failure", nil, []checkState{run("a", "completed", "success"), run("b", "completed", "failure")}, nil, GateFailure, "failed: b (failure)"},
		{"unprotected: nothing reported yet", nil, nil, nil, GatePending, "no checks reported yet"},
	} {
		g := evaluateGate(c.required, c.runs, c.statuses)
		if g.result != c.want || !strings.Contains(g.detail, c.detail) {
			t.Errorf("%s: %+v, want %s (%q)", c.name, g, c.want, c.detail)
		}
	}
}
