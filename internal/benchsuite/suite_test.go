package benchsuite

import (
	"regexp"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The benchmarks under go test -bench, by the names of the table.
func BenchmarkStoreCreate(b *testing.B)             { StoreCreate(b) }
func BenchmarkStoreCreateConcurrent32(b *testing.B) { StoreCreateConcurrent(b) }
func BenchmarkStoreGet(b *testing.B)                { StoreGet(b) }
func BenchmarkStoreList50(b *testing.B)             { StoreList(b) }
func BenchmarkLeasesDistinctKeys32(b *testing.B)    { LeasesDistinctKeys(b) }
func BenchmarkLeasesOneKey8(b *testing.B)           { LeasesOneKey(b) }
func BenchmarkQueuePublish(b *testing.B)            { QueuePublish(b) }
func BenchmarkQueueEndToEnd(b *testing.B)           { QueueEndToEnd(b) }
func BenchmarkGitHubComment32(b *testing.B)         { GitHubComment(b) }
func BenchmarkExecutorEndToEnd(b *testing.B)        { ExecutorEndToEnd(b) }
func BenchmarkHTTPSubmit32(b *testing.B)            { HTTPSubmit(b) }

// Every benchmark of the suite runs (a few ops each, as `baton bench
// --suite --benchtime 5x` would) and reports its throughput; the table
// has a row for each.
func TestSuiteRuns(t *testing.T) {
	results, err := Run(Options{Benchtime: "5x"})
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != len(All()) {
		t.Fatalf("%d results for %d benchmarks", len(results), len(All()))
	}
	for _, r := range results {
		if r.Err != "" {
			t.Errorf("%s failed: %s", r.Name, r.Err)
			continue
		}
		if r.N != 5 || r.OpsPerSec <= 0 {
			t.Errorf("%s: %d ops at %.1f ops/s", r.Name, r.N, r.OpsPerSec)
		}
		if _, measured := processCPU(); measured && r.CPUPerOpMicros <= 0 {
			t.Errorf("%s: no CPU per op (%v)", r.Name, r.CPUPerOpMicros)
		}
	}
	var table strings.Builder
	if err := WriteTable(&table, results); err != nil {
		t.Fatal(err)
	}
	for _, bm := range All() {
		if !strings.Contains(table.String(), "| "+bm.Name+" |") {
			t.Errorf("the table has no row for %s:\n%s", bm.Name, table.String())
		}
	}
}

// A failing benchmark is reported with its reason, not as figures.
func TestSuiteReportsFailure(t *testing.T) {
	r := runOne(Benchmark{Name: "broken", Op: "nothing", Func: func(b *testing.B) { fatalf(b, "the disk is on fire") }})
	if r.Err != "the disk is on fire" {
		t.Errorf("failure reported as %q", r.Err)
	}
	if _, err := Run(Options{Filter: regexp.MustCompile("^no such benchmark$")}); err == nil {
		t.Error("an empty selection is not an error")
	}
}
