package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/baton-dev/baton/app/client"
	"github.com/baton-dev/baton/internal/benchsuite"
	"github.com/baton-dev/baton/schema"
)

func init() { register(newBenchCmd) }

type benchOptions struct {
	suite       bool
	benchtime   string
	filter      string
	clients     int
	ops         int
	duration    time.Duration
	action      string
	resources   []string
	payload     string
	waitTimeout time.Duration
	noWait      bool
	*clientOptions
}

func newBenchCmd() *cobra.Command {
	o := &benchOptions{}
	cmd := &cobra.Command{
		Use:   "bench [--clients 32] [--ops N | --duration D] [--action A --resources KEYS --payload JSON] | bench --suite",
		Short: "Measure a running server (submit throughput, end-to-end operations/s, latencies), or run baton's benchmark suite",
		Long: `Bench drives a running server over HTTP the way clients do. --clients
concurrent clients submit operations (each with a fresh idempotency key) until
--ops operations are submitted or --duration has passed; then bench waits
until every accepted operation is terminal. It prints:

  submit    accepted operations per second while submitting, and the
            p50/p99/max latency of one submit request (HTTP round trip:
            authentication, validation, the durable write and the queue),
            over every request, the failed ones included;
  end to end succeeded operations per second from the first submit to the
            last completion (the server's createdAt and completedAt; failed
            and cancelled ones are counted beside it, not in it), and the
            p50/p99 of completedAt − createdAt of each terminal operation;
  outcomes  how many succeeded, failed or were cancelled, and submit errors.

Percentiles are nearest-rank. While waiting, a request the server answers
with a 500 or 429 is tried again a few times before the operation is
counted unfinished; a server that cannot be reached is waited for up to
two minutes (a restart), and then bench stops waiting and counts every
operation not yet seen terminal unfinished. The report is printed in any case; bench
exits 1 when a submit failed or an operation did not finish (the figures
are not a clean run's), and 2 on bad flags.

By default it comments on issues #10, #11 and #12 of octo/demo, which
` + "`baton serve --dev`" + ` seeds; --resources names other resource keys (round robin,
each once, checked before the run) and --action/--payload another action. Give the token of an actor that may
act on those repositories. A progress bar is drawn on stderr when it is a
terminal, plain progress lines otherwise.

--suite runs baton's benchmark suite in this process instead (no server
needed): the store (durable creates, one caller and 32; gets; lists), the
leases (32 holders on their own keys, 8 on one key), the queue (publishes;
a no-op handler end to end), the GitHub call alone (comments through
go-github on the simulator, 32 callers), the executor end to end on the
GitHub simulator (32 workers, 200 resources) and HTTP submissions from 32
clients. Each builds its stack in a temporary directory with SQLite's
synchronous=FULL. It prints the table docs/PERFORMANCE.md shows: ops/s,
p50 and p99 of one op in milliseconds, the process's CPU time per op in
microseconds (the simulator and NATS run in the process too), and notes;
with --json, its results instead, where each benchmark's "elapsed" (its
measured run's time) is in nanoseconds, "p50Ms"/"p99Ms" in milliseconds
and "cpuMicrosPerOp" in microseconds. --benchtime sets how long
each benchmark's measured run lasts (or, as "500x", how many ops it makes);
--filter selects benchmarks by a regular expression on their names. The
flags of one mode are refused in the other.`,
		Example: `  baton bench --suite
  baton bench --suite --benchtime 5s --filter '^(store|leases)/'
  baton bench --clients 32 --ops 20000
  baton bench --duration 30s --json
  baton bench --action github.issues.add_labels --payload '{"labels":["bench"]}' \
    --resources issue:octo/demo#10,issue:octo/demo#11`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// A flag of the other mode would be ignored: a run against a
			// server given --filter, or the suite given --clients (or
			// --server: it measures this process, not that server), would
			// measure something else than asked.
			suiteOnly, serverOnly := []string{"benchtime", "filter"},
				[]string{"clients", "ops", "duration", "action", "resources", "payload", "wait-timeout", "no-wait", "server", "token"}
			other := suiteOnly
			if o.suite {
				other = serverOnly
			}
			for _, name := range other {
				if cmd.Flags().Changed(name) {
					if o.suite {
						return cliUsage(fmt.Errorf("--%s measures a running server; --suite does not take it", name))
					}
					return cliUsage(fmt.Errorf("--%s goes with --suite", name))
				}
			}
			if o.suite {
				return runBenchSuite(o, cmd.OutOrStdout(), cmd.ErrOrStderr())
			}
			return runBench(cmd.Context(), o, cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.BoolVar(&o.suite, "suite", false, "run baton's benchmark suite in this process and print its table (no server needed)")
	f.StringVar(&o.benchtime, "benchtime", "1s", "--suite: how long each benchmark runs (or N ops, as 500x)")
	f.StringVar(&o.filter, "filter", "", "--suite: run only the benchmarks whose name matches this regular expression")
	f.IntVar(&o.clients, "clients", 32, "concurrent clients")
	f.IntVar(&o.ops, "ops", 10000, "operations to submit (unless --duration)")
	f.DurationVar(&o.duration, "duration", 0, "submit for this long instead of --ops operations")
	f.StringVar(&o.action, "action", "github.issues.comment", "action of the operations")
	f.StringSliceVar(&o.resources, "resources", []string{"issue:octo/demo#10", "issue:octo/demo#11", "issue:octo/demo#12"},
		"resource keys to act on, round robin")
	f.StringVar(&o.payload, "payload", "", `payload of every operation: JSON, @FILE or @- (default {"body": "baton bench RUN #N"})`)
	f.DurationVar(&o.waitTimeout, "wait-timeout", 10*time.Minute, "how long to wait for the operations to finish")
	f.BoolVar(&o.noWait, "no-wait", false, "measure submitting only; do not wait for the operations")
	o.clientOptions = addClientFlags(cmd)
	return cmd
}

// BenchReport is what bench measured; --json prints it.
type BenchReport struct {
	Server    string `json:"server"`
	Clients   int    `json:"clients"`
	Action    string `json:"action"`
	Resources int    `json:"resources"`

	Submitted     int            `json:"submitted"`
	SubmitErrors  map[string]int `json:"submitErrors"`
	SubmitSeconds float64        `json:"submitSeconds"`
	SubmitPerSec  float64        `json:"submitsPerSecond"`
	// The submit latencies are of every request, the failed ones included
	// (SubmitRequests of them).
	SubmitRequests int     `json:"submitRequests"`
	SubmitP50Ms    float64 `json:"submitP50Ms"`
	SubmitP99Ms    float64 `json:"submitP99Ms"`
	SubmitMaxMs    float64 `json:"submitMaxMs"`
	Waited         bool    `json:"waited"`
	// Terminal counts the operations seen terminal, whatever their outcome
	// (Outcomes, by status); the end-to-end latencies are theirs.
	Terminal int            `json:"terminal"`
	Outcomes map[string]int `json:"outcomes"`
	// EndToEndPerSec counts succeeded operations only, over the time from
	// the first one created to the last one completed (of any outcome).
	EndToEndPerSec float64 `json:"endToEndPerSecond"`
	EndToEndP50Ms  float64 `json:"endToEndP50Ms"`
	EndToEndP99Ms  float64 `json:"endToEndP99Ms"`
	Unfinished     int     `json:"unfinished"`
}

func runBench(ctx context.Context, o *benchOptions, stdin io.Reader, stdout, stderr io.Writer) error {
	switch {
	case o.clients < 1 || o.clients > 4096:
		return cliUsage(errors.New("--clients must be between 1 and 4096"))
	case o.duration == 0 && o.ops < 1:
		return cliUsage(errors.New("--ops must be positive"))
	case o.duration < 0:
		return cliUsage(errors.New("--duration must be positive"))
	case o.waitTimeout <= 0 && !o.noWait:
		return cliUsage(errors.New("--wait-timeout must be positive (--no-wait not to wait at all)"))
	case len(o.resources) == 0:
		return cliUsage(errors.New("--resources needs at least one resource key"))
	}
	resources, err := benchResources(o.resources)
	if err != nil {
		return cliUsage(err)
	}
	var fixedPayload json.RawMessage
	if o.payload != "" {
		p, err := cliReadPayload(o.payload, stdin)
		if err != nil {
			return cliUsage(err)
		}
		fixedPayload = p
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = o.clients * 2
	tr.MaxIdleConnsPerHost = o.clients * 2
	defer tr.CloseIdleConnections()
	// Every request is measured and every failure counted: the client
	// repeats none.
	c, err := o.client(client.WithHTTPClient(&http.Client{Transport: tr, Timeout: client.MaxWait + 30*time.Second}), client.WithRetries(0))
	if err != nil {
		return err
	}
	var runID [6]byte
	_, _ = rand.Read(runID[:])
	run := hex.EncodeToString(runID[:])

	// Phase 1: submit.
	var (
		next      atomic.Int64
		mu        sync.Mutex
		lat       []time.Duration
		ids       []string
		errCounts = map[string]int{}
		done      atomic.Int64
	)
	var deadline time.Time
	if o.duration > 0 {
		deadline = time.Now().Add(o.duration)
	}
	prog := newBenchProgress(stderr, "submitting", o.ops, o.duration)
	prog.start(func() int64 { return done.Load() })
	start := time.Now()
	var wg sync.WaitGroup
	for range o.clients {
		wg.Go(func() {
			var myLat []time.Duration
			var myIDs []string
			myErrs := map[string]int{}
			for ctx.Err() == nil {
				n := next.Add(1)
				if deadline.IsZero() && n > int64(o.ops) || !deadline.IsZero() && time.Now().After(deadline) {
					break
				}
				payload := fixedPayload
				if payload == nil {
					payload, _ = json.Marshal(map[string]string{"body": fmt.Sprintf("baton bench %s #%d", run, n)})
				}
				req := client.SubmitRequest{
					IdempotencyKey: fmt.Sprintf("bench-%s-%d", run, n),
					Action:         o.action,
					Resource:       resources[int(n-1)%len(resources)],
					Payload:        payload,
				}
				t0 := time.Now()
				op, _, err := c.Submit(ctx, req)
				myLat = append(myLat, time.Since(t0)) // failed requests too
				if err != nil {
					code := client.CodeOf(err)
					if code == "" {
						code = "transport"
					}
					if myErrs[code] == 0 {
						prog.note(fmt.Sprintf("submit failed: %v", cliAPIError(err)))
					}
					myErrs[code]++
					continue
				}
				myIDs = append(myIDs, op.OperationID)
				done.Add(1)
			}
			mu.Lock()
			lat = append(lat, myLat...)
			ids = append(ids, myIDs...)
			for k, v := range myErrs {
				errCounts[k] += v
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	submitTime := time.Since(start)
	prog.stop()

	rep := BenchReport{
		Server: c.BaseURL(), Clients: o.clients, Action: o.action, Resources: len(resources),
		Submitted: len(ids), SubmitErrors: errCounts, SubmitSeconds: submitTime.Seconds(), Outcomes: map[string]int{},
	}
	if submitTime > 0 {
		rep.SubmitPerSec = float64(len(ids)) / submitTime.Seconds()
	}
	slices.Sort(lat)
	rep.SubmitRequests = len(lat)
	rep.SubmitP50Ms, rep.SubmitP99Ms = benchPercentile(lat, 0.50), benchPercentile(lat, 0.99)
	if len(lat) > 0 {
		rep.SubmitMaxMs = benchMs(lat[len(lat)-1])
	}

	// Phase 2: wait until every accepted operation is terminal.
	if !o.noWait && len(ids) > 0 && ctx.Err() == nil {
		rep.Waited = true
		wctx, cancel := context.WithTimeout(ctx, o.waitTimeout)
		defer cancel()
		var finished atomic.Int64
		prog := newBenchProgress(stderr, "waiting", len(ids), 0)
		prog.start(func() int64 { return finished.Load() })
		terminal, unfinished := benchWaitAll(wctx, c.Wait, ids, o.clients, prog, &finished)
		prog.stop()
		rep.Unfinished = unfinished
		rep.endToEnd(terminal)
	}
	if o.json {
		err = cliPrintJSON(stdout, rep)
	} else {
		err = printBenchReport(stdout, rep)
	}
	if err != nil {
		return err
	}
	return rep.incomplete()
}

// incomplete is the error of a run whose figures do not cover what was
// asked: submits that failed (the server refused them, or could not be
// reached) or accepted operations not seen terminal. The report is
// printed all the same; bench exits 1, so that a script does not publish
// it as a clean run.
func (r *BenchReport) incomplete() error {
	errs := 0
	for _, n := range r.SubmitErrors {
		errs += n
	}
	var parts []string
	if errs > 0 {
		parts = append(parts, fmt.Sprintf("%d of %d submits failed", errs, r.SubmitRequests))
	}
	if r.Unfinished > 0 {
		parts = append(parts, fmt.Sprintf("%d of %d operations did not finish", r.Unfinished, r.Submitted))
	}
	if len(parts) == 0 {
		return nil
	}
	return errors.New("the run is incomplete: " + strings.Join(parts, ", "))
}

// benchResources parses --resources: resource keys TYPE:ID, spaces around
// them ignored ("a, b" is a list of two), each checked as the server
// checks it, none given twice (the report counts the resources).
func benchResources(keys []string) ([]client.Resource, error) {
	resources := make([]client.Resource, 0, len(keys))
	seen := map[string]string{}
	for _, k := range keys {
		k = strings.TrimSpace(k)
		res, _, err := schema.ParseResourceKey(k)
		if err != nil {
			return nil, fmt.Errorf("--resources: %q is not a resource key TYPE:ID: %w", k, err)
		}
		if prev, dup := seen[res.Key()]; dup {
			return nil, fmt.Errorf("--resources: %q and %q are one resource", prev, k)
		}
		seen[res.Key()] = k
		resources = append(resources, client.Resource(res))
	}
	if len(resources) == 0 {
		return nil, errors.New("--resources needs at least one resource key")
	}
	return resources, nil
}

func benchMs(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// benchPercentile returns the nearest-rank p-th percentile of sorted
// durations, in ms (0 for none).
func benchPercentile(sorted []time.Duration, p float64) float64 {
	return benchMs(benchsuite.Percentile(sorted, p))
}

// benchTerminal is what the end-to-end figures need of a terminal
// operation.
type benchTerminal struct {
	status             string
	created, completed time.Time
}

// endToEnd fills the end-to-end figures from the terminal operations:
// outcomes, latencies (of all of them) and throughput (of the succeeded
// ones, over the span from the first created to the last completed).
func (r *BenchReport) endToEnd(ops []benchTerminal) {
	r.Terminal = len(ops)
	e2e := make([]time.Duration, 0, len(ops))
	var first, last time.Time
	succeeded := 0
	for _, op := range ops {
		r.Outcomes[op.status]++
		if op.status == string(schema.StatusSucceeded) {
			succeeded++
		}
		e2e = append(e2e, op.completed.Sub(op.created))
		if first.IsZero() || op.created.Before(first) {
			first = op.created
		}
		if op.completed.After(last) {
			last = op.completed
		}
	}
	slices.Sort(e2e)
	r.EndToEndP50Ms, r.EndToEndP99Ms = benchPercentile(e2e, 0.50), benchPercentile(e2e, 0.99)
	if span := last.Sub(first); span > 0 {
		r.EndToEndPerSec = float64(succeeded) / span.Seconds()
	}
}

// benchWaitAll waits for the operations ids from clients goroutines, and
// returns the terminal ones and how many were not (finished counts the
// terminal ones as they come). A wait that fails because the server cannot
// be reached has already ridden through that for a while (client.Wait
// does, as through a restart): the server is gone, so the waits not yet
// made are not made and their operations are counted unfinished at once,
// rather than each riding through again until --wait-timeout.
func benchWaitAll(ctx context.Context, wait func(context.Context, string, time.Duration) (client.Operation, error),
	ids []string, clients int, prog *benchProgress, finished *atomic.Int64) (terminal []benchTerminal, unfinished int) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		idx  atomic.Int64
		gone atomic.Bool
		mu   sync.Mutex
		wg   sync.WaitGroup
	)
	for range clients {
		wg.Go(func() {
			var mine []benchTerminal
			notDone := 0
			for {
				i := idx.Add(1) - 1
				if i >= int64(len(ids)) {
					break
				}
				if ctx.Err() != nil {
					notDone++
					continue
				}
				op, err := benchWait(ctx, wait, ids[i], benchWaitTries, benchWaitBackoff)
				if err != nil || !op.Status.Terminal() || op.CompletedAt == nil {
					switch {
					case err != nil && benchUnreachable(err) && gone.CompareAndSwap(false, true):
						prog.note(fmt.Sprintf("wait failed: %v; the server cannot be reached, the operations not yet seen terminal are counted unfinished", cliAPIError(err)))
						cancel()
					case err != nil && notDone == 0 && !gone.Load():
						prog.note(fmt.Sprintf("wait failed: %v", cliAPIError(err)))
					}
					notDone++
					continue
				}
				mine = append(mine, benchTerminal{status: string(op.Status), created: op.CreatedAt, completed: *op.CompletedAt})
				finished.Add(1)
			}
			mu.Lock()
			terminal = append(terminal, mine...)
			unfinished += notDone
			mu.Unlock()
		})
	}
	wg.Wait()
	return terminal, unfinished
}

// benchUnreachable reports whether a wait failed because the server could
// not be reached: no answer, or a gateway's 502, 503 or 504 for it. Wait
// has ridden through that already.
func benchUnreachable(err error) bool {
	var ae *client.Error
	if errors.As(err, &ae) {
		switch ae.Status {
		case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
			return true
		}
		return false
	}
	return !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, client.ErrInvalidOperationID)
}

// How the wait phase retries a wait that failed with another 5xx or a 429
// before it counts the operation unfinished.
const (
	benchWaitTries   = 5
	benchWaitBackoff = 200 * time.Millisecond
)

// benchWait waits for operation id with wait, trying again (up to tries
// times in all, the pause doubling from backoff) when the server answered
// in a way that may pass: a 500 or another 5xx Wait does not ride through,
// a 429. Other errors, the server unreachable (which Wait has ridden
// through already), and the end of ctx end it at once.
func benchWait(ctx context.Context, wait func(context.Context, string, time.Duration) (client.Operation, error), id string, tries int, backoff time.Duration) (client.Operation, error) {
	for n := 1; ; n++ {
		op, err := wait(ctx, id, 0)
		if err == nil || n >= tries || ctx.Err() != nil || !benchTransient(err) {
			return op, err
		}
		select {
		case <-ctx.Done():
			return op, err
		case <-time.After(backoff):
		}
		backoff *= 2
	}
}

// benchTransient reports whether a wait's error may pass if it is tried
// again: an answer of the server's that says so. (Wait rides through the
// server unreachable itself, for up to two minutes; trying that again
// would multiply it.)
func benchTransient(err error) bool {
	var ae *client.Error
	if !errors.As(err, &ae) || benchUnreachable(err) {
		return false
	}
	return ae.Status >= 500 || ae.Status == http.StatusTooManyRequests
}

func printBenchReport(w io.Writer, r BenchReport) error {
	tw := cliTable(w)
	fmt.Fprintf(tw, "server\t%s\n", r.Server)
	fmt.Fprintf(tw, "workload\t%s on %d resources, %d clients\n", r.Action, r.Resources, r.Clients)
	errs := 0
	var parts []string
	for code, n := range r.SubmitErrors {
		errs += n
		parts = append(parts, fmt.Sprintf("%s %d", code, n))
	}
	slices.Sort(parts)
	fmt.Fprintf(tw, "submitted\t%d in %.2fs (%d errors%s)\n", r.Submitted, r.SubmitSeconds, errs, benchList(parts))
	fmt.Fprintf(tw, "submit throughput\t%.0f ops/s\n", r.SubmitPerSec)
	fmt.Fprintf(tw, "submit latency\tp50 %.2f ms, p99 %.2f ms, max %.2f ms (all %d requests, %d failed among them)\n", r.SubmitP50Ms, r.SubmitP99Ms, r.SubmitMaxMs, r.SubmitRequests, errs)
	if r.Waited {
		var outs []string
		for k, n := range r.Outcomes {
			outs = append(outs, fmt.Sprintf("%s %d", k, n))
		}
		slices.Sort(outs)
		fmt.Fprintf(tw, "terminal\t%d of %d%s\n", r.Terminal, r.Submitted, benchList(outs))
		fmt.Fprintf(tw, "end-to-end throughput\t%.0f ops/s succeeded (failed %d, cancelled %d not counted)\n",
			r.EndToEndPerSec, r.Outcomes[string(schema.StatusFailed)], r.Outcomes[string(schema.StatusCancelled)])
		fmt.Fprintf(tw, "end-to-end latency\tp50 %.2f ms, p99 %.2f ms\n", r.EndToEndP50Ms, r.EndToEndP99Ms)
		if r.Unfinished > 0 {
			fmt.Fprintf(tw, "unfinished\t%d (not terminal within --wait-timeout, or waiting failed: the server gone, say)\n", r.Unfinished)
		}
	}
	return tw.Flush()
}

func benchList(parts []string) string {
	if len(parts) == 0 {
		return ""
	}
	return ": " + strings.Join(parts, ", ")
}

// benchProgress draws progress on stderr: a bar redrawn in place on a
// terminal, a plain line every few seconds otherwise.
type benchProgress struct {
	w        io.Writer
	label    string
	total    int
	duration time.Duration
	tty      bool

	mu    sync.Mutex
	notes []string
	noted map[string]bool
	quit  chan struct{}
	done  chan struct{}
}

func newBenchProgress(w io.Writer, label string, total int, duration time.Duration) *benchProgress {
	tty := false
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			tty = true
		}
	}
	return &benchProgress{w: w, label: label, total: total, duration: duration, tty: tty,
		quit: make(chan struct{}), done: make(chan struct{})}
}

// note prints a message once, between progress lines: the clients that
// meet the same failure (32 of them, against a server that is gone) print
// one line, not one each.
func (p *benchProgress) note(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.noted[s] {
		return
	}
	if p.noted == nil {
		p.noted = map[string]bool{}
	}
	p.noted[s] = true
	p.notes = append(p.notes, s)
}

func (p *benchProgress) start(count func() int64) {
	every := 2 * time.Second
	if p.tty {
		every = 100 * time.Millisecond
	}
	begin := time.Now()
	go func() {
		defer close(p.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-p.quit:
				p.draw(count(), time.Since(begin), true)
				return
			case <-t.C:
				p.draw(count(), time.Since(begin), false)
			}
		}
	}()
}

func (p *benchProgress) draw(n int64, elapsed time.Duration, final bool) {
	p.mu.Lock()
	notes := p.notes
	p.notes = nil
	p.mu.Unlock()
	rate := float64(n) / max(elapsed.Seconds(), 1e-9)
	frac := 0.0
	switch {
	case p.duration > 0:
		frac = min(1, elapsed.Seconds()/p.duration.Seconds())
	case p.total > 0:
		frac = min(1, float64(n)/float64(p.total))
	}
	what := fmt.Sprintf("%d", n)
	if p.duration == 0 {
		what = fmt.Sprintf("%d/%d", n, p.total)
	}
	if p.tty {
		for _, s := range notes {
			fmt.Fprintf(p.w, "\r\033[K%s\n", s)
		}
		const width = 30
		filled := int(frac * width)
		bar := strings.Repeat("█", filled) + strings.Repeat("░", width-filled)
		fmt.Fprintf(p.w, "\r\033[K%-10s %s %3.0f%% %s  %.0f/s", p.label, bar, frac*100, what, rate)
		if final {
			fmt.Fprintln(p.w)
		}
		return
	}
	for _, s := range notes {
		fmt.Fprintln(p.w, s)
	}
	fmt.Fprintf(p.w, "%s: %s (%.0f%%), %.0f/s, %s\n", p.label, what, frac*100, rate, elapsed.Round(time.Second))
}

func (p *benchProgress) stop() {
	close(p.quit)
	<-p.done
}

// BenchSuiteReport is what --suite --json prints.
type BenchSuiteReport struct {
	Machine    string              `json:"machine"`
	Benchtime  string              `json:"benchtime"`
	LoadBefore string              `json:"loadAverageBefore,omitempty"`
	LoadAfter  string              `json:"loadAverageAfter,omitempty"`
	Results    []benchsuite.Result `json:"results"`
}

// runBenchSuite runs the benchmark suite in this process and prints its
// table (or JSON).
func runBenchSuite(o *benchOptions, stdout, stderr io.Writer) error {
	opts := benchsuite.Options{Benchtime: o.benchtime, Started: func(b benchsuite.Benchmark) {
		fmt.Fprintf(stderr, "running %s (%s)\n", b.Name, b.Op)
	}}
	if o.filter != "" {
		re, err := regexp.Compile(o.filter)
		if err != nil {
			return cliUsage(fmt.Errorf("--filter: %w", err))
		}
		opts.Filter = re
	}
	rep := BenchSuiteReport{Machine: benchsuite.Machine(), Benchtime: o.benchtime, LoadBefore: strings.Join(benchsuite.LoadAverage(), " ")}
	results, err := benchsuite.Run(opts)
	if err != nil {
		if oe := (*benchsuite.OptionsError)(nil); errors.As(err, &oe) {
			return cliUsage(err)
		}
		return err
	}
	rep.Results, rep.LoadAfter = results, strings.Join(benchsuite.LoadAverage(), " ")
	failed := 0
	for _, r := range results {
		if r.Err != "" {
			failed++
		}
	}
	if o.json {
		if err := cliPrintJSON(stdout, rep); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(stdout, "machine: %s\n", rep.Machine)
		if rep.LoadBefore != "" {
			fmt.Fprintf(stdout, "load average: %s before, %s after\n", rep.LoadBefore, rep.LoadAfter)
		}
		fmt.Fprintf(stdout, "benchtime: %s per benchmark\n\n", rep.Benchtime)
		if err := benchsuite.WriteTable(stdout, results); err != nil {
			return err
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d benchmarks failed", failed, len(results))
	}
	return nil
}
