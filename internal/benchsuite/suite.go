package benchsuite

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// Benchmark is one of baton's benchmarks.
type Benchmark struct {
	// Name is "group/name", e.g. "store/create-32".
	Name string
	// Op says what one op is ("a durable Create").
	Op string
	// Func is the benchmark. It must report "ops/s" (reportRate): the
	// table takes the rate from it. When it measures latencies it reports
	// "p50-ms" and "p99-ms"; other metrics are notes.
	Func func(b *testing.B)
}

// All returns the benchmarks, in the order the table shows them.
func All() []Benchmark {
	return []Benchmark{
		{"store/create", "a durable Create, one caller", StoreCreate},
		{"store/create-32", "a durable Create, 32 concurrent callers", StoreCreateConcurrent},
		{"store/get", "a Get by operation ID (GOMAXPROCS readers)", StoreGet},
		{"store/list-50", "a List of 50 records of one actor", StoreList},
		{"leases/distinct-32", "an acquire+release pair, 32 holders on their own keys", LeasesDistinctKeys},
		{"leases/one-key-8", "an acquire+release pair, 8 holders on one key", LeasesOneKey},
		{"queue/publish", "an acknowledged publish, one at a time", QueuePublish},
		{"queue/e2e-noop", "a message published (32 publishers) and handled by a no-op handler", QueueEndToEnd},
		{"github/comment-32", "a comment created through go-github on the simulator over HTTP, 32 concurrent callers (the call alone)", GitHubComment},
		{"executor/e2e", "an operation submitted and carried out on the simulator (32 workers, 200 resources)", ExecutorEndToEnd},
		{"http/submit-32", "a POST /v1/operations over HTTP, 32 concurrent clients", HTTPSubmit},
	}
}

// Result is what one benchmark measured, as the table shows it.
type Result struct {
	Name string `json:"name"`
	Op   string `json:"op"`
	// N is the number of ops of the measured run.
	N int `json:"n"`
	// Elapsed is the measured run's time; in JSON, in nanoseconds (a
	// time.Duration).
	Elapsed   time.Duration `json:"elapsed"`
	OpsPerSec float64       `json:"opsPerSecond"`
	// P50Ms and P99Ms are one op's latency percentiles; 0 when the
	// benchmark does not measure them.
	P50Ms float64 `json:"p50Ms,omitempty"`
	P99Ms float64 `json:"p99Ms,omitempty"`
	// CPUPerOpMicros is the CPU time the whole process (baton's stack,
	// the embedded NATS server and the GitHub simulator alike) used per
	// op, in microseconds; 0 where it is not measured. On a machine of C
	// CPUs no more than C·10⁶ / CPUPerOpMicros ops can run a second.
	CPUPerOpMicros float64 `json:"cpuMicrosPerOp,omitempty"`
	// Notes are the other metrics the benchmark reported
	// ("writes/txn" …).
	Notes map[string]float64 `json:"notes,omitempty"`
	// Load is the 1-minute load average when the benchmark started (the
	// suite's previous benchmark counts in it); "" where unknown.
	Load string `json:"loadAverage,omitempty"`
	// OtherCPU is how many CPUs other processes kept busy, on average,
	// while the benchmark ran: near 0 on a quiet machine. -1 where
	// unknown.
	OtherCPU float64 `json:"otherCPU"`
	// Err is why the benchmark failed ("" when it ran).
	Err string `json:"error,omitempty"`
}

// Options configure Run.
type Options struct {
	// Benchtime is how long each benchmark's measured run lasts ("2s") or
	// how many ops it makes ("500x"), as go test's -benchtime. Defaults to
	// "1s".
	Benchtime string
	// Filter selects benchmarks by name; nil runs all.
	Filter *regexp.Regexp
	// Started, if set, is called before each benchmark runs.
	Started func(Benchmark)
}

var runMu sync.Mutex

// OptionsError is Run's error when its Options cannot run (a benchtime
// the testing package refuses, a filter no benchmark matches): the
// caller's mistake, not the suite's.
type OptionsError struct{ Err error }

func (e *OptionsError) Error() string { return e.Err.Error() }
func (e *OptionsError) Unwrap() error { return e.Err }

// Run runs the selected benchmarks one after the other with
// testing.Benchmark and returns their results. A benchmark that fails has
// its Err set; the others still run.
func Run(opts Options) ([]Result, error) {
	runMu.Lock()
	defer runMu.Unlock()
	testing.Init()
	f := flag.Lookup("test.benchtime") // defined by testing.Init
	prev := f.Value.String()
	if err := f.Value.Set(cmp.Or(opts.Benchtime, "1s")); err != nil {
		return nil, &OptionsError{fmt.Errorf("benchtime %q: %w", opts.Benchtime, err)}
	}
	defer func() { _ = f.Value.Set(prev) }()
	var out []Result
	for _, bm := range All() {
		if opts.Filter != nil && !opts.Filter.MatchString(bm.Name) {
			continue
		}
		if opts.Started != nil {
			opts.Started(bm)
		}
		out = append(out, runOne(bm))
	}
	if len(out) == 0 {
		return nil, &OptionsError{errors.New("benchsuite: no benchmark matches the filter")}
	}
	return out, nil
}

func runOne(bm Benchmark) Result {
	failures.reset()
	before := sampleMachine()
	r := testing.Benchmark(bm.Func)
	after := sampleMachine()
	res := Result{Name: bm.Name, Op: bm.Op, N: r.N, Elapsed: r.T, Notes: map[string]float64{},
		Load: before.load1, OtherCPU: othersCPU(before, after)}
	if msg := failures.get(); msg != "" || r.N == 0 {
		res.Err = cmp.Or(msg, "the benchmark failed")
		return res
	}
	for k, v := range r.Extra {
		switch k {
		case "ops/s":
			res.OpsPerSec = v
		case "p50-ms":
			res.P50Ms = v
		case "p99-ms":
			res.P99Ms = v
		case "cpu-µs/op":
			res.CPUPerOpMicros = v
		default:
			res.Notes[k] = v
		}
	}
	return res
}

// WriteTable writes results as the Markdown table of docs/PERFORMANCE.md:
// benchmark, what one op is, ops/s, p50 and p99 in ms, the CPU per op in
// µs, notes, the load average when it started and the CPUs other processes
// used meanwhile.
func WriteTable(w io.Writer, results []Result) error {
	var b strings.Builder
	b.WriteString("| benchmark | one op | ops/s | p50 ms | p99 ms | CPU µs/op | notes | load avg | other CPU |\n")
	b.WriteString("|---|---|--:|--:|--:|--:|---|--:|--:|\n")
	for _, r := range results {
		load, other := cmp.Or(r.Load, "–"), "–"
		if r.OtherCPU >= 0 {
			other = fmt.Sprintf("%.2f", r.OtherCPU)
		}
		if r.Err != "" {
			fmt.Fprintf(&b, "| %s | %s | failed | | | | %s | %s | %s |\n", r.Name, r.Op, strings.ReplaceAll(r.Err, "|", "\\|"), load, other)
			continue
		}
		var notes []string
		for _, k := range slices.Sorted(maps.Keys(r.Notes)) {
			notes = append(notes, fmt.Sprintf("%s %s", formatFigure(r.Notes[k]), k))
		}
		cpu := "–"
		if r.CPUPerOpMicros > 0 {
			cpu = fmt.Sprintf("%.0f", r.CPUPerOpMicros)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", r.Name, r.Op, formatRate(r.OpsPerSec),
			formatMs(r.P50Ms), formatMs(r.P99Ms), cpu, strings.Join(notes, ", "), load, other)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// Machine describes where the figures were measured.
func Machine() string {
	return fmt.Sprintf("%s/%s, %d CPUs (GOMAXPROCS %d), %s", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version())
}

func formatRate(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

func formatMs(v float64) string {
	if v == 0 {
		return "–"
	}
	if v >= 10 {
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

func formatFigure(v float64) string {
	if v == float64(int64(v)) {
		return fmt.Sprintf("%d", int64(v))
	}
	return fmt.Sprintf("%.2f", v)
}

// failures keeps the first error a benchmark reported: testing.Benchmark
// discards what a B logs, and Run needs to say why a benchmark failed.
var failures failureLog

type failureLog struct {
	mu  sync.Mutex
	msg string
}

func (f *failureLog) reset() {
	f.mu.Lock()
	f.msg = ""
	f.mu.Unlock()
}

func (f *failureLog) get() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.msg
}

func (f *failureLog) set(msg string) {
	f.mu.Lock()
	if f.msg == "" {
		f.msg = msg
	}
	f.mu.Unlock()
}

// fatalf fails the benchmark from its own goroutine.
func fatalf(b *testing.B, format string, args ...any) {
	b.Helper()
	msg := fmt.Sprintf(format, args...)
	failures.set(msg)
	b.Fatal(msg)
}

// errorf fails the benchmark from any goroutine; the caller returns.
func errorf(b *testing.B, format string, args ...any) {
	b.Helper()
	msg := fmt.Sprintf(format, args...)
	failures.set(msg)
	b.Error(msg)
}
