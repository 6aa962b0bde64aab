package main

import (
	"strings"
	"testing"
)

// bench --suite runs the benchmark suite in this process and prints the
// table of docs/PERFORMANCE.md, or JSON. It runs benchmarks that need no
// seeding (store/get and store/list-50 first create a thousand records,
// one commit each, at every run): internal/benchsuite runs them all.
func TestBenchSuite(t *testing.T) {
	r := cliRun(t, "", "bench", "--suite", "--benchtime", "3x", "--filter", "^(store/create|leases/one-key-8)$")
	if r.code != 0 {
		t.Fatalf("bench --suite: %+v", r)
	}
	for _, want := range []string{"| benchmark | one op | ops/s | p50 ms | p99 ms | CPU µs/op | notes | load avg | other CPU |", "| store/create |", "| leases/one-key-8 |", "held/pair", "machine: "} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("bench --suite output lacks %q:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "store/create-32") || strings.Contains(r.stdout, "store/get") {
		t.Errorf("--filter ran more than asked:\n%s", r.stdout)
	}

	r = cliRun(t, "", "bench", "--suite", "--benchtime", "2x", "--filter", "^store/create$", "--json")
	var rep BenchSuiteReport
	cliDecodeJSON(t, r.stdout, &rep)
	if r.code != 0 || len(rep.Results) != 1 || rep.Results[0].N != 2 || rep.Results[0].OpsPerSec <= 0 || rep.Results[0].Err != "" {
		t.Errorf("bench --suite --json: %+v (%s)", rep, r.stderr)
	}

	for _, args := range [][]string{
		{"bench", "--suite", "--filter", "("},
		{"bench", "--suite", "--filter", "^nothing$"},
		{"bench", "--suite", "--benchtime", "soon"},
	} {
		if r := cliRun(t, "", args...); r.code == 0 {
			t.Errorf("%v succeeded: %+v", args, r)
		}
	}
}
