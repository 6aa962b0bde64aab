package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/baton-dev/baton/app/client"
	"github.com/baton-dev/baton/schema"
)

// bench --payload @- reads the payload from stdin, as submit's does.
func TestBenchPayloadFromStdin(t *testing.T) {
	t.Parallel()
	env := newCLIEnv(t, cliEnvOptions{})
	r := cliRun(t, `{"labels":["bench"]}`, "bench", "--action", "github.issues.add_labels", "--payload", "@-",
		"--resources", "issue:octo/demo#10", "--ops", "2", "--clients", "1", "--no-wait", "--json",
		"--server", env.URL, "--token", env.alice)
	if r.code != 0 {
		t.Fatalf("bench --payload @-: %+v", r)
	}
	var rep BenchReport
	cliDecodeJSON(t, r.stdout, &rep)
	if rep.Submitted != 2 || len(rep.SubmitErrors) != 0 || rep.Action != "github.issues.add_labels" {
		t.Errorf("bench report %+v", rep)
	}
	if r := cliRun(t, `not json`, "bench", "--payload", "@-", "--server", env.URL, "--token", env.alice); r.code != 2 {
		t.Errorf("bench with a bad payload on stdin: %+v", r)
	}
}

// The figures bench prints are nearest-rank percentiles: the p99 of 160
// latencies is the 159th, not the 158th.
func TestBenchPercentile(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		n        int
		p50, p99 float64 // ms, with latencies 1..n ms
	}{
		{1, 1, 1},
		{2, 1, 2},
		{100, 50, 99},
		{160, 80, 159},
		{1000, 500, 990},
	} {
		sorted := make([]time.Duration, c.n)
		for i := range sorted {
			sorted[i] = time.Duration(i+1) * time.Millisecond
		}
		if got := benchPercentile(sorted, 0.50); got != c.p50 {
			t.Errorf("n=%d: p50 %v ms, want %v", c.n, got, c.p50)
		}
		if got := benchPercentile(sorted, 0.99); got != c.p99 {
			t.Errorf("n=%d: p99 %v ms, want %v", c.n, got, c.p99)
		}
	}
	if got := benchPercentile(nil, 0.99); got != 0 {
		t.Errorf("no latencies: %v", got)
	}
}

// End-to-end throughput counts succeeded operations only; the failed and
// cancelled ones are printed beside it, and every terminal one is in the
// latencies.
func TestBenchEndToEndCountsSucceededOnly(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ops := []benchTerminal{
		{string(schema.StatusSucceeded), t0, t0.Add(time.Second)},
		{string(schema.StatusSucceeded), t0, t0.Add(2 * time.Second)},
		{string(schema.StatusFailed), t0, t0.Add(4 * time.Second)},
		{string(schema.StatusCancelled), t0, t0.Add(3 * time.Second)},
	}
	rep := BenchReport{Outcomes: map[string]int{}, Waited: true, Submitted: 4}
	rep.endToEnd(ops)
	if rep.EndToEndPerSec != 0.5 { // 2 succeeded over the 4 s from first created to last completed
		t.Errorf("end-to-end %v ops/s, want 0.5", rep.EndToEndPerSec)
	}
	if rep.Terminal != 4 || rep.Outcomes["failed"] != 1 || rep.Outcomes["cancelled"] != 1 || rep.Outcomes["succeeded"] != 2 {
		t.Errorf("terminal %d, outcomes %v", rep.Terminal, rep.Outcomes)
	}
	if rep.EndToEndP50Ms != 2000 || rep.EndToEndP99Ms != 4000 {
		t.Errorf("end-to-end p50 %v ms, p99 %v ms; want 2000 and 4000", rep.EndToEndP50Ms, rep.EndToEndP99Ms)
	}
	var out strings.Builder
	if err := printBenchReport(&out, rep); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "0 ops/s succeeded (failed 1, cancelled 1 not counted)") {
		t.Errorf("report:\n%s", out.String())
	}
}

// A wait the server answers with a 500 or 429 is tried again; one the
// server refuses for good is not, and neither is one whose context ended,
// nor one that found the server unreachable: Wait has ridden through that
// for up to two minutes already, and trying again would make it ten.
func TestBenchWaitRetriesTransientAnswers(t *testing.T) {
	t.Parallel()
	id := strings.Repeat("a", 64)
	transport := &url.Error{Op: "Get", URL: "http://x", Err: syscall.ECONNRESET}
	internal := &client.Error{Status: 500, Code: "internal"}
	for _, c := range []struct {
		name      string
		errs      []error // returned by the successive waits; then success
		wantCalls int
		wantErr   bool
	}{
		{"500 passes", []error{internal, internal}, 3, false},
		{"429 passes", []error{&client.Error{Status: 429, Code: "rate_limited"}}, 2, false},
		{"gives up after the tries", []error{internal, internal, internal, internal, internal, internal}, 3, true},
		{"unreachable is final", []error{transport}, 1, true},
		{"a gateway's 503 is final", []error{&client.Error{Status: 503, Code: "unavailable"}}, 1, true},
		{"not found is final", []error{&client.Error{Status: 404, Code: "not_found"}}, 1, true},
		{"context ended", []error{context.DeadlineExceeded}, 1, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			calls := 0
			wait := func(_ context.Context, got string, _ time.Duration) (client.Operation, error) {
				calls++
				if got != id {
					t.Errorf("waited for %q", got)
				}
				if calls <= len(c.errs) {
					return client.Operation{}, c.errs[calls-1]
				}
				return client.Operation{OperationID: id, Status: schema.StatusSucceeded}, nil
			}
			op, err := benchWait(context.Background(), wait, id, 3, time.Millisecond)
			if calls != c.wantCalls || (err != nil) != c.wantErr || (err == nil && op.OperationID != id) {
				t.Errorf("calls %d (want %d), op %+v, err %v", calls, c.wantCalls, op, err)
			}
		})
	}
}

// Once a wait finds the server gone (after Wait's own riding through),
// the waits not yet made are not made: the operations are counted
// unfinished at once instead of each waiting out the same minutes until
// --wait-timeout.
func TestBenchWaitStopsWhenServerGone(t *testing.T) {
	t.Parallel()
	ids := make([]string, 100)
	for i := range ids {
		ids[i] = fmt.Sprintf("%064x", i)
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	done := t0.Add(time.Second)
	var calls, failed atomic.Int64
	wait := func(ctx context.Context, id string, _ time.Duration) (client.Operation, error) {
		calls.Add(1)
		if id < ids[3] { // the first three finished before the server went
			return client.Operation{OperationID: id, Status: schema.StatusSucceeded, CreatedAt: t0, CompletedAt: &done}, nil
		}
		failed.Add(1)
		if failed.Load() > 1 {
			<-ctx.Done() // the others are still riding through
			return client.Operation{}, ctx.Err()
		}
		return client.Operation{}, &url.Error{Op: "Get", URL: "http://x", Err: syscall.ECONNREFUSED}
	}
	var finished atomic.Int64
	prog := newBenchProgress(io.Discard, "waiting", len(ids), 0)
	terminal, unfinished := benchWaitAll(context.Background(), wait, ids, 4, prog, &finished)
	if len(terminal) != 3 || unfinished != 97 || finished.Load() != 3 {
		t.Errorf("%d terminal (%d counted), %d unfinished; want 3 and 97", len(terminal), finished.Load(), unfinished)
	}
	if n := calls.Load(); n > 3+4 {
		t.Errorf("%d waits made after the server was found gone", n-3)
	}
}

// The submit latency covers every request, the refused ones included: a
// run whose every submit fails still reports how long they took, and
// exits 1.
func TestBenchSubmitLatencyIncludesFailures(t *testing.T) {
	t.Parallel()
	env := newCLIEnv(t, cliEnvOptions{})
	r := cliRun(t, "", "bench", "--action", "github.issues.add_labels", "--payload", `{"labels":[]}`,
		"--resources", "issue:octo/demo#10", "--ops", "4", "--clients", "1", "--no-wait", "--json",
		"--server", env.URL, "--token", env.alice)
	if r.code != 1 || !strings.Contains(r.stderr, "4 of 4 submits failed") {
		t.Fatalf("bench whose every submit failed: %+v", r)
	}
	var rep BenchReport
	cliDecodeJSON(t, r.stdout, &rep)
	errs := 0
	for _, n := range rep.SubmitErrors {
		errs += n
	}
	if rep.Submitted != 0 || errs != 4 || rep.SubmitRequests != 4 || rep.SubmitP50Ms <= 0 || rep.SubmitMaxMs < rep.SubmitP99Ms {
		t.Errorf("bench report %+v", rep)
	}
}

// A run whose submits fail (a server that cannot be reached, or refuses
// them) prints its report and exits 1: its figures are not a clean run's.
func TestBenchFailedSubmitsExitNonZero(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := "http://" + l.Addr().String()
	l.Close() // nothing listens there any more
	r := cliRun(t, "", "bench", "--ops", "3", "--clients", "2", "--json", "--server", gone, "--token", "baton_x")
	var rep BenchReport
	cliDecodeJSON(t, r.stdout, &rep)
	if r.code != 1 || rep.Submitted != 0 || rep.SubmitErrors["transport"] != 3 || !strings.Contains(r.stderr, "3 of 3 submits failed") {
		t.Errorf("bench against a server that is gone: %+v, report %+v", r, rep)
	}
}

// --resources is a list of resource keys as the server checks them:
// spaces after the commas do not make every other submit fail, and a key
// the server would refuse, or one given twice, is a usage error.
func TestBenchResources(t *testing.T) {
	t.Parallel()
	env := newCLIEnv(t, cliEnvOptions{})
	r := cliRun(t, "", "bench", "--resources", "issue:octo/demo#10, issue:octo/demo#11", "--ops", "4", "--clients", "2",
		"--no-wait", "--json", "--server", env.URL, "--token", env.alice)
	var rep BenchReport
	cliDecodeJSON(t, r.stdout, &rep)
	if r.code != 0 || rep.Submitted != 4 || len(rep.SubmitErrors) != 0 || rep.Resources != 2 {
		t.Errorf("bench --resources 'a, b': %+v, report %+v", r, rep)
	}
	for _, res := range []string{"bogus:x", "issue:octo/demo", "issue:octo/demo#10,issue:Octo/Demo#10", "issue:octo/demo#10,issue:octo/demo#10"} {
		r := cliRun(t, "", "bench", "--resources", res, "--ops", "1", "--clients", "1", "--no-wait",
			"--server", env.URL, "--token", env.alice)
		if r.code != 2 || !strings.Contains(r.stderr, "--resources") {
			t.Errorf("bench --resources %q: %+v", res, r)
		}
	}
}

// The flags of one mode are refused in the other, not ignored: bench
// --filter without --suite would measure the server instead.
func TestBenchModeFlags(t *testing.T) {
	t.Parallel()
	env := newCLIEnv(t, cliEnvOptions{})
	for _, args := range [][]string{
		{"bench", "--filter", "^store/", "--ops", "1", "--clients", "1", "--no-wait", "--server", env.URL, "--token", env.alice},
		{"bench", "--benchtime", "5x", "--ops", "1", "--clients", "1", "--no-wait", "--server", env.URL, "--token", env.alice},
		{"bench", "--suite", "--filter", "^store/create$", "--benchtime", "1x", "--clients", "4"},
	} {
		if r := cliRun(t, "", args...); r.code != 2 {
			t.Errorf("%v: %+v", args, r)
		}
	}
	// The suite measures this process: a server named to it would be
	// silently left out of what it measured.
	for _, flag := range []string{"--server", "--token"} {
		args := []string{"bench", "--suite", "--filter", "^store/create$", "--benchtime", "1x", flag, "x"}
		if r := cliRun(t, "", args...); r.code != 2 || !strings.Contains(r.stderr, flag) {
			t.Errorf("%v: %+v", args, r)
		}
	}
}

// Clients that meet the same failure print one line for it, not one
// each: 32 clients against a server that is gone print one "submit
// failed".
func TestBenchFailureNotedOnce(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := "http://" + l.Addr().String()
	l.Close()
	r := cliRun(t, "", "bench", "--ops", "64", "--clients", "32", "--json", "--server", gone, "--token", "baton_x")
	if n := strings.Count(r.stderr, "submit failed"); r.code != 1 || n != 1 {
		t.Errorf("%d lines of submit failed, exit %d:\n%s", n, r.code, r.stderr)
	}
}

// --wait-timeout 0 is refused, not a run whose every operation is counted
// unfinished before it was waited for.
func TestBenchWaitTimeoutPositive(t *testing.T) {
	t.Parallel()
	env := newCLIEnv(t, cliEnvOptions{})
	for _, d := range []string{"0s", "-1s"} {
		r := cliRun(t, "", "bench", "--wait-timeout", d, "--ops", "1", "--clients", "1", "--server", env.URL, "--token", env.alice)
		if r.code != 2 || !strings.Contains(r.stderr, "--wait-timeout") {
			t.Errorf("bench --wait-timeout %s: %+v", d, r)
		}
	}
}

// --suite --json's "elapsed" is a time.Duration, in nanoseconds, while
// its other times are in milliseconds: --help says which unit it is.
func TestBenchHelpSaysElapsedUnit(t *testing.T) {
	t.Parallel()
	r := cliRun(t, "", "bench", "--help")
	if r.code != 0 || !regexp.MustCompile(`"elapsed"[^.]*\s+nanoseconds`).MatchString(r.stdout) {
		t.Errorf("bench --help does not say that --suite --json's elapsed is in nanoseconds: %+v", r)
	}
}
