package proof

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-dev/baton/app"
	"github.com/baton-dev/baton/app/client"
	"github.com/baton-dev/baton/app/ghsim"
	"github.com/baton-dev/baton/internal/sqlite"
	"github.com/baton-dev/baton/schema"
)

// scenario is one run of the workload against a baton process while
// something is broken on purpose, again and again.
type scenario struct {
	name    string
	ops     int
	clients int
	// disruptions is how many times the thing is broken; the first
	// whileSubmitting of them happen while the clients submit, the others
	// while the server carries out what it accepted.
	disruptions, whileSubmitting int
	// what is broken: "baton" (SIGKILL of `baton serve`, restarted on
	// the same data directory) or "nats" (SIGKILL of the external
	// nats-server baton uses, restarted on the same store).
	target string

	submitTimeout, settleTimeout time.Duration
}

// disruption is one kill the scenario made.
type disruption struct {
	at         time.Duration // since the clients started
	phase      string        // "submitting", "processing" or "idle"
	accepted   int64         // operations accepted when it happened
	unfinished int           // operations queued or running then (after the submissions)
	// unfinishedBack is how many were queued or running when the
	// target was back.
	unfinishedBack int
	// gone is when the target was killed (nats: once the process had
	// exited), back when it was started again.
	gone, back time.Time
	// acceptedAway is how many submissions were answered while the
	// target was away; sentAway how many of them were first sent after
	// it had gone (nats: their dispatch cannot have reached the broker,
	// so the reconciler had to publish each of them).
	acceptedAway, sentAway int
}

// batonPublishTimeout is how long baton waits for the broker to
// acknowledge a publish (queue.Config.PublishTimeout's default; `baton
// serve` has no flag for it).
const batonPublishTimeout = 5 * time.Second

// unfinished counts the operations baton has yet to carry out (queued
// or running), from its database.
func unfinished(ctx context.Context, db *sqlite.DB) (int, error) {
	var n int
	err := db.QueryRow(ctx, `SELECT count(*) FROM operations WHERE status IN (?, ?)`,
		string(schema.StatusQueued), string(schema.StatusRunning)).Scan(&n)
	return n, err
}

// countAway fills each disruption's acceptedAway and sentAway from the
// submissions' times.
func countAway(events []disruption, sub *submitter) {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	for i := range events {
		e := &events[i]
		for _, a := range sub.results {
			if a.at.After(e.gone) && a.at.Before(e.back) {
				e.acceptedAway++
				if a.first.After(e.gone) {
					e.sentAway++
				}
			}
		}
	}
}

// proofSeed is the seed of the run: BATON_PROOF_SEED, or a fresh one
// (printed in the report, so a failure can be replayed).
func proofSeed(t testing.TB) uint64 {
	if v := os.Getenv("BATON_PROOF_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("BATON_PROOF_SEED=%q: %v", v, err)
		}
		return s
	}
	return uint64(time.Now().UnixNano()) & 0xffffffff
}

// simulatorFaults are the faults of the runs: on every route baton
// mutates through, 10% of the connections dropped after the mutation was
// applied, 5% answered 500 and 0.5% answered 429 with Retry-After: 1 (each
// pauses every worker of the installation for a second, as GitHub asks);
// on the routes its probes and checks read, 5% answered 500.
func simulatorFaults(t testing.TB, sim *ghsim.Sim) {
	t.Helper()
	mutations := []string{
		"POST /repos/{owner}/{repo}/issues/{number}/comments",
		"POST /repos/{owner}/{repo}/issues/{number}/labels",
		"DELETE /repos/{owner}/{repo}/issues/{number}/labels/{name}",
		"PUT /repos/{owner}/{repo}/pulls/{number}/merge",
		"PATCH /repos/{owner}/{repo}/git/refs/{ref...}",
		"POST /repos/{owner}/{repo}/statuses/{sha}",
	}
	reads := []string{
		"GET /repos/{owner}/{repo}/issues/{number}/comments",
		"GET /repos/{owner}/{repo}/issues/{number}/labels",
		"GET /repos/{owner}/{repo}/pulls/{number}",
		"GET /repos/{owner}/{repo}/git/ref/{ref...}",
	}
	var faults []ghsim.Fault
	for _, r := range mutations {
		faults = append(faults,
			ghsim.Fault{Route: r, Kind: ghsim.FaultDropAfter, Probability: 0.10},
			ghsim.Fault{Route: r, Kind: ghsim.FaultStatus, Status: http.StatusInternalServerError, Probability: 0.05},
			ghsim.Fault{Route: r, Kind: ghsim.FaultTooManyRequests, RetryAfter: time.Second, Probability: 0.005})
	}
	for _, r := range reads {
		faults = append(faults, ghsim.Fault{Route: r, Kind: ghsim.FaultStatus, Status: http.StatusInternalServerError, Probability: 0.05})
	}
	for _, f := range faults {
		if _, err := sim.SetFault(f); err != nil {
			t.Fatal(err)
		}
	}
}

// runScenario runs sc, checks everything baton promises and prints its
// report.
func runScenario(t *testing.T, sc scenario) {
	ctx := context.Background()
	seed := proofSeed(t)
	rng := rand.New(rand.NewPCG(seed, 0x6261746f6e))
	bin := batonBinary(t)
	var nats *natsProcess
	if sc.target == "nats" {
		nats = &natsProcess{t: t, bin: natsServerBinary(t), dir: t.TempDir(), port: freePort(t)}
	}
	began := time.Now()

	// GitHub.
	sim, err := ghsim.New(ghsim.Config{Limits: ghsim.Limits{PrimaryLimit: -1}, Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	if err := sim.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sim.Close() })
	_, _, perBranch := workloadShape(sc.ops)
	fx := newFixture(t, sim, perBranch)

	// baton.
	work := t.TempDir()
	dataDir := filepath.Join(work, "data")
	keyFile, secretFile := appFiles(t, sim, work)
	addr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	args := []string{
		"--data", dataDir,
		"--github-url", sim.URL(),
		"--app-id", strconv.FormatInt(sim.AppID(), 10),
		"--private-key", keyFile,
		"--webhook-secret-file", secretFile,
		"--github-pacing", "off",
		"--lease-ttl", "5s",
		"--ack-wait", "10s",
		"--reconcile-interval", "1s",
		"--reconcile-min-age", "3s",
		"--shutdown-timeout", "5s",
	}
	if nats != nil {
		nats.logPath = filepath.Join(work, "nats.log")
		nats.start(ctx)
		t.Cleanup(nats.kill)
		args = append(args, "--nats", nats.url())
	}
	proc := newBatonProcess(t, bin, addr, filepath.Join(work, "baton.log"), args...)
	sim.SetWebhook(proc.url()+"/webhooks/github", "")
	adminToken := createToken(t, bin, dataDir, "--actor", "proof-admin", "--admin")
	tokens := make([]string, sc.clients)
	for c := range tokens {
		tokens[c] = createToken(t, bin, dataDir, "--actor", fmt.Sprintf("proof-client-%02d", c+1), "--installation", "1")
	}
	proc.start(ctx)
	admin, err := client.New(proc.url(), client.WithToken(adminToken))
	if err != nil {
		t.Fatal(err)
	}
	// The installations registry learns of the repository from GitHub.
	if !poll(ctx, time.Minute, 50*time.Millisecond, func() bool {
		insts, err := admin.Installations(ctx)
		if err != nil {
			return false
		}
		for _, in := range insts {
			if slices.Contains(in.Repositories, fixtureOwner+"/"+fixtureRepo) {
				return true
			}
		}
		return false
	}) {
		t.Fatal("baton did not learn of the repository from GitHub within a minute")
	}
	simulatorFaults(t, sim)
	// The test reads the database too, to count the operations still to
	// carry out quickly enough to time a kill on it, and the leases left
	// at the end.
	db, err := sqlite.Open(ctx, filepath.Join(dataDir, app.DatabaseFile), sqlite.Options{ReadConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()

	// The clients, and the disruptions.
	ops, perClient := planWorkload(fx, sc.ops, sc.clients, strconv.FormatUint(seed, 36))
	sub := newSubmitter(proc.url(), tokens)
	subCtx, cancelSub := context.WithTimeout(ctx, sc.submitTimeout)
	defer cancelSub()
	var submitting atomic.Bool
	submitting.Store(true)
	subDone := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(subDone)
		sub.run(subCtx, perClient)
		submitting.Store(false)
	}()
	var events []disruption
	// The kills while submitting come when a share of the operations has
	// been accepted. For the broker, at most 60%: the rest is then
	// submitted while it is away, and is the backlog the reconciler must
	// publish, which the kill while processing lands in.
	hi := int64(len(ops) * 8 / 10)
	if sc.target == "nats" {
		hi = int64(len(ops) / 2)
	}
	thresholds := make([]int64, sc.whileSubmitting)
	for i := range thresholds {
		thresholds[i] = int64(len(ops)/10) + rng.Int64N(hi+1)
	}
	slices.Sort(thresholds)
	var lastRestart time.Time
	for i := range sc.disruptions {
		if i < sc.whileSubmitting {
			poll(ctx, sc.submitTimeout, 5*time.Millisecond, func() bool {
				return sub.accepted.Load() >= thresholds[i] || !submitting.Load()
			})
		} else {
			// While processing: once the submissions are answered, when
			// the operations still to carry out have fallen to between
			// two thirds and nine tenths of what they were — counted, not
			// timed: the backlog goes fast, and a kill after it would
			// test nothing.
			select {
			case <-subDone:
			case <-time.After(sc.submitTimeout):
			}
			if u, err := unfinished(ctx, db); err == nil && u > 0 {
				lo := max(1, u*2/3)
				target := lo + rng.IntN(max(0, u*9/10-lo)+1)
				poll(ctx, sc.settleTimeout, 5*time.Millisecond, func() bool {
					n, err := unfinished(ctx, db)
					return err == nil && n <= target
				})
			}
		}
		ev := disruption{at: time.Since(start), accepted: sub.accepted.Load(), phase: "submitting"}
		if !submitting.Load() {
			ev.phase = "processing"
			if n, err := unfinished(ctx, db); err == nil {
				ev.unfinished = n
				if n == 0 {
					ev.phase = "idle"
				}
			}
		}
		switch sc.target {
		case "baton":
			ev.gone = time.Now()
			proc.kill()
			<-time.After(jitter(rng, 0, 300*time.Millisecond))
			proc.start(ctx)
			ev.back = time.Now() // unreachable until ready
		case "nats":
			// Away for longer than baton's publish timeout: a publish
			// sent just before the kill fails too, rather than waiting
			// for the broker to come back.
			nats.kill()
			ev.gone = time.Now()
			<-time.After(jitter(rng, batonPublishTimeout+500*time.Millisecond, batonPublishTimeout+1500*time.Millisecond))
			ev.back = time.Now()
			nats.start(ctx)
			// baton is ready again once it has reconnected.
			if !proc.waitReady(ctx, time.Minute) {
				t.Fatalf("baton did not reconnect to nats-server within a minute; log:\n%s", tailFile(proc.logPath, 40))
			}
		}
		lastRestart = time.Now()
		if n, err := unfinished(ctx, db); err == nil {
			ev.unfinishedBack = n
		}
		events = append(events, ev)
		if i+1 < sc.whileSubmitting {
			// Let it work a little before the next one. (A kill while
			// processing waits for its moment itself: no time to lose,
			// the backlog goes fast.)
			<-time.After(jitter(rng, 200*time.Millisecond, time.Second))
		}
	}
	<-subDone
	sub.mu.Lock()
	submitEnd := sub.lastAt
	sub.mu.Unlock()

	// Everything must settle.
	settleFrom := submitEnd
	if lastRestart.After(settleFrom) {
		settleFrom = lastRestart
	}
	settled := poll(ctx, sc.settleTimeout, 100*time.Millisecond, func() bool {
		busy, err := pending(ctx, admin)
		return err == nil && !busy
	})
	settleTime := time.Since(settleFrom)
	if !settled {
		t.Errorf("operations still queued or running %s after the last submission and restart", sc.settleTimeout)
	}

	f := verify(ctx, sim, fx, admin, ops, sub, db)
	countAway(events, sub)
	var rec reconcilerFigures
	if sc.target == "nats" {
		rec = brokerChecks(ctx, f, events, proc.url())
	}
	for _, p := range sub.problems {
		f.violate("client: %s", p)
	}
	for _, p := range proc.problems() {
		f.violate("%s", p)
	}
	report := formatReport(sc, seed, f, events, proc, nats, rec, sub, settleTime, settled, time.Since(began))
	publishReport(t, report)
	for i, v := range f.violations {
		if i == 50 {
			t.Errorf("… and %d more", len(f.violations)-50)
			break
		}
		t.Error(v)
	}
}

// reconcilerFigures are the queue counters of baton's /metrics the
// broker checks read.
type reconcilerFigures struct {
	publishErrors, republished, present float64
}

// brokerChecks checks what the broker kills must have exercised: both
// kills came while there was work (submissions, or operations to carry
// out), at least one while submissions were answered, and the reconciler
// published operations again. An operation first sent while the broker
// was away is accepted without reaching the stream; it is published by
// the reconciler or, when the operation before it on its resource
// finishes first, by the executor's nudge. That each of them reached a
// terminal state, once, is the lost and duplicate checks'.
func brokerChecks(ctx context.Context, f *findings, events []disruption, baseURL string) reconcilerFigures {
	var away, sentAway int
	for i, e := range events {
		away += e.acceptedAway
		sentAway += e.sentAway
		if e.phase == "idle" {
			f.violate("broker kill %d came with nothing submitted, queued or running: it tested nothing", i+1)
		}
	}
	if away == 0 {
		f.violate("no submission was answered while the broker was away: accepting without the broker was not exercised")
	}
	m, err := scrapeMetrics(ctx, baseURL)
	if err != nil {
		f.violate("metrics: %v", err)
		return reconcilerFigures{}
	}
	rec := reconcilerFigures{
		publishErrors: m[`baton_queue_publish_errors_total`],
		republished:   m[`baton_queue_reconciled_operations_total{outcome="republished"}`],
		present:       m[`baton_queue_reconciled_operations_total{outcome="present"}`],
	}
	if sentAway > 0 && rec.republished == 0 {
		f.violate("%d operations were first sent and accepted while the broker was away, but the reconciler published none", sentAway)
	}
	if rec.publishErrors < float64(sentAway) {
		f.violate("%d operations were first sent and accepted while the broker was away, but baton counted only %.0f failed dispatches", sentAway, rec.publishErrors)
	}
	return rec
}

// scrapeMetrics reads baton's /metrics: series (name and labels, as
// written) → value.
func scrapeMetrics(ctx context.Context, baseURL string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, baseURL+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out, sc.Err()
}

// formatReport writes what a run did and found.
func formatReport(sc scenario, seed uint64, f *findings, events []disruption, proc *batonProcess, nats *natsProcess,
	rec reconcilerFigures, sub *submitter, settle time.Duration, settled bool, total time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s (seed %d; BATON_PROOF_SEED=%d replays the faults)\n", sc.name, seed, seed)
	row := func(k, format string, args ...any) { fmt.Fprintf(&b, "  %-14s %s\n", k, fmt.Sprintf(format, args...)) }
	row("operations", "%d submitted by %d clients over 50 resources; %d accepted (%d answered 201, %d answered 200 to a retry whose first answer was lost); %d submissions retried while the server was unreachable",
		sc.ops, sc.clients, f.accepted, f.created, f.answered200, sub.retried.Load())
	var phases []string
	for _, e := range events {
		p := fmt.Sprintf("at %.1fs (%s, %d accepted", e.at.Seconds(), e.phase, e.accepted)
		if e.phase != "submitting" {
			p += fmt.Sprintf(", %d unfinished", e.unfinished)
		}
		p += fmt.Sprintf(", away %.1fs", e.back.Sub(e.gone).Seconds())
		if sc.target == "nats" {
			p += fmt.Sprintf(", %d accepted meanwhile, %d of them first sent meanwhile", e.acceptedAway, e.sentAway)
		}
		p += fmt.Sprintf(", %d unfinished when back", e.unfinishedBack)
		phases = append(phases, p+")")
	}
	switch sc.target {
	case "baton":
		row("kills", "%d × SIGKILL of baton serve, %d starts: %s", proc.kills, proc.starts, strings.Join(phases, "; "))
	case "nats":
		row("kills", "%d × SIGKILL of nats-server (baton kept running): %s", nats.kills, strings.Join(phases, "; "))
		row("reconciler", "%.0f dispatches failed while the broker was away; the reconciler published %.0f operations again and found %.0f in the stream already (published by the executor when the operation before them on their resource finished, or dispatched but not yet marked)",
			rec.publishErrors, rec.republished, rec.present)
	}
	row("faults", "GitHub dropped %d connections after applying the request, answered %d × 500 and %d × 429 with Retry-After",
		f.faults[ghsim.FaultDropAfter], f.faults[ghsim.FaultStatus], f.faults[ghsim.FaultTooManyRequests])
	var outs []string
	actions := make([]string, 0, len(f.outcomes))
	for a := range f.outcomes {
		actions = append(actions, a)
	}
	sort.Strings(actions)
	for _, a := range actions {
		var parts []string
		for _, st := range []schema.Status{schema.StatusSucceeded, schema.StatusFailed, schema.StatusCancelled} {
			if n := f.outcomes[a][string(st)]; n > 0 {
				parts = append(parts, fmt.Sprintf("%d %s", n, st))
			}
		}
		outs = append(outs, fmt.Sprintf("%s %s", strings.TrimPrefix(a, "github."), strings.Join(parts, "/")))
	}
	row("outcomes", "%s", strings.Join(outs, "; "))
	if len(f.failedCategories) > 0 {
		var cats []string
		for c, n := range f.failedCategories {
			cats = append(cats, fmt.Sprintf("%s %d", c, n))
		}
		sort.Strings(cats)
		row("failed because", "%s", strings.Join(cats, ", "))
		row("", "(validation: the second merge of a pull request, which GitHub refuses; conflict: a ref update whose expectedSha no longer held because an earlier update of its chain had failed; network, server_error, rate_limited: every attempt failed)")
	}
	row("attempts", "%d calls recorded; %d operations settled by a probe that found the effect of an answer lost", f.attempts, f.probed)
	row("lost", "%d (unanswered submissions: %d)", len(f.lost), f.unanswered)
	row("duplicates", "%d (pull requests merged once: %d of %d; ref updates applied: %d; comments checked: %d; label operations: %d)",
		len(f.duplicates), f.mergedOnce, fixturePulls, f.refUpdates, f.comments, f.labelOps)
	row("disagreements", "%d (GitHub's state against each record's outcome; %d failed operations whose last probe could not read GitHub, either state allowed)", len(f.disagree), len(f.undetermined))
	row("overlaps", "%d (%d mutating calls on the 50 resources)", len(f.overlaps), f.effects)
	row("out of order", "%d (resources whose effects were applied against their operations' submission order)", len(f.outOfOrder))
	row("leases held", "%d (every lease in the database; %d expired, not yet force-released)", len(f.leasesHeld), f.leasesExpired)
	row("dead letters", "%d", len(f.deadLetters))
	settledWord := "settled"
	if !settled {
		settledWord = "NOT settled"
	}
	row("settle time", "%s %.1fs after the last submission and restart", settledWord, settle.Seconds())
	row("duration", "%.1fs in all", total.Seconds())
	if len(f.violations) == 0 {
		row("verdict", "PASS")
	} else {
		row("verdict", "FAIL: %d violations", len(f.violations))
	}
	return b.String()
}

// publishReport logs the report and appends it to $BATON_PROOF_REPORT.
func publishReport(t *testing.T, report string) {
	t.Log("\n" + report)
	path := os.Getenv("BATON_PROOF_REPORT")
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Errorf("BATON_PROOF_REPORT: %v", err)
		return
	}
	defer f.Close()
	if _, err := fmt.Fprintf(f, "%s: %s\n", t.Name(), report); err != nil {
		t.Errorf("BATON_PROOF_REPORT: %v", err)
	}
}
