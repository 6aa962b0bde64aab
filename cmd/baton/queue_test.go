package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/baton-dev/baton/app/client"
	"github.com/baton-dev/baton/app/ghsim"
	"github.com/baton-dev/baton/app/mergequeue"
	"github.com/baton-dev/baton/coordinator"
	"github.com/baton-dev/baton/executor"
	"github.com/baton-dev/baton/internal/sqlite"
	"github.com/baton-dev/baton/schema"
)

// queueOps records the operations the merge queue submits, standing in
// for the executor (this test is about the CLI).
type queueOps struct {
	mu  sync.Mutex
	ops map[string]schema.Record
}

func (o *queueOps) Submit(_ context.Context, actor string, s schema.Submission) (schema.Record, bool, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	id, err := executor.OperationID(actor, s.IdempotencyKey)
	if err != nil {
		return schema.Record{}, false, err
	}
	if r, ok := o.ops[id]; ok {
		return r, false, nil
	}
	r := schema.Record{OperationID: id, IdempotencyKey: s.IdempotencyKey, Actor: actor, Action: s.Action, Resource: s.Resource,
		Payload: s.Payload, Status: schema.StatusQueued}
	o.ops[id] = r
	return r, true, nil
}

// List answers the records matching f's status, action, resource and
// actor, in one page.
func (o *queueOps) List(_ context.Context, f executor.ListFilter) ([]schema.Record, string, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []schema.Record
	for _, r := range o.ops {
		if (f.Status == "" || r.Status == f.Status) && (f.Action == "" || r.Action == f.Action) &&
			(f.ResourceType == "" || r.Resource.Type == f.ResourceType) && (f.ResourceID == "" || r.Resource.ID == f.ResourceID) &&
			(f.Actor == "" || r.Actor == f.Actor) {
			out = append(out, r)
		}
	}
	return out, "", nil
}

func (o *queueOps) Get(_ context.Context, id string) (schema.Record, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if r, ok := o.ops[id]; ok {
		return r, nil
	}
	return schema.Record{}, schema.ErrNotFound
}

// Cancel cancels a queued operation, as the executor does (the queue
// cancels the merge of a pull request that leaves it).
func (o *queueOps) Cancel(_ context.Context, id string) (schema.Record, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	r, ok := o.ops[id]
	switch {
	case !ok:
		return schema.Record{}, schema.ErrNotFound
	case r.Terminal():
		return r, schema.ErrAlreadyTerminal
	}
	r.CancellationRequested = true
	if r.Status == schema.StatusQueued {
		now := time.Now()
		r.Status, r.Outcome, r.CompletedAt = schema.StatusCancelled, schema.OutcomeCancelled, &now
	}
	o.ops[id] = r
	return r, nil
}

// The queue subcommands against the merge queue's HTTP routes: tables,
// JSON, and the API's errors.
func TestCLIQueue(t *testing.T) {
	ctx := context.Background()
	q, sim, coord := newCLIQueue(t, "ci")
	// #1 and #2 of octo/demo join (the simulator sends no webhooks here:
	// the deliveries are handed to the queue directly).
	for _, n := range []int{1, 2} {
		cliQueueLabel(t, q, sim, n)
	}
	srv := httptest.NewServer(mergequeue.NewHandler(q, func(r *http.Request, owner, _ string) (string, error) {
		if r.Header.Get("Authorization") != "Bearer queue-token" {
			return "", schema.ErrUnauthorized
		}
		if owner != "octo" {
			return "", schema.Errorf(schema.CodeForbidden, "the token may not act on %s", owner)
		}
		return "queue-token", nil
	}))
	defer srv.Close()
	as := func(args ...string) cliResult {
		return cliRun(t, "", append(args, "--server", srv.URL, "--token", "queue-token")...)
	}

	r := as("queue", "show", "octo/demo")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "octo/demo: 2 in queue\nPOS") ||
		!regexp.MustCompile(`(?m)^1\s+#1\s+`+ghsim.DemoHeadSHA(1)[:12]+`\s+evaluating\s+pending\s+\S+\s+waiting for: ci`).MatchString(r.stdout) ||
		!regexp.MustCompile(`(?m)^2\s+#2\s+`).MatchString(r.stdout) {
		t.Errorf("queue show: %+v", r)
	}
	r = as("queue", "show", "octo/demo", "--json")
	var st client.QueueState
	cliDecodeJSON(t, r.stdout, &st)
	if r.code != 0 || len(st.Entries) != 2 || st.Entries[1].PRSHA != ghsim.DemoHeadSHA(2) || st.Entries[1].Position != 2 {
		t.Errorf("queue show --json: %+v", r)
	}
	r = as("queue", "events", "octo/demo")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "TIME") || !strings.Contains(r.stdout, "cli-2") || !strings.Contains(r.stdout, "#2 joined at") {
		t.Errorf("queue events: %+v", r)
	}
	r = as("queue", "audit", "octo/demo", "--json")
	var a client.QueueAudit
	cliDecodeJSON(t, r.stdout, &a)
	if r.code != 0 || len(a.Audit) != 2 || a.Audit[0].Action != "join" || a.Audit[1].PRNumber != 2 {
		t.Errorf("queue audit --json: %+v", r)
	}
	if r = as("queue", "audit", "octo/demo"); r.code != 0 || !regexp.MustCompile(`(?m)^\S+\s+join\s+#1\s+`).MatchString(r.stdout) {
		t.Errorf("queue audit: %+v", r)
	}

	// #1 loses its label behind the queue's back: a reconcile takes it out.
	if err := sim.RemoveLabel("octo", "demo", 1, "baton:queue", "monalisa"); err != nil {
		t.Fatal(err)
	}
	r = as("queue", "reconcile", "octo/demo")
	if r.code != 0 || r.stdout != "reconciled octo/demo: 1 in queue\nleft: #1\n" {
		t.Errorf("queue reconcile: %+v", r)
	}
	l, err := coord.Acquire(ctx, mergequeue.LeaseKey("octo", "demo"), "someone-else", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if r = as("queue", "reconcile", "octo/demo", "--json"); r.code != 1 || !strings.Contains(r.stderr, "held by someone-else") || !strings.Contains(r.stderr, "(lease_held)") {
		t.Errorf("queue reconcile, lease held: %+v", r)
	}
	if err := coord.Release(ctx, l); err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"queue", "show", "octo"}, 2, "want OWNER/REPO"},
		{[]string{"queue", "show"}, 2, "accepts 1 arg"},
		{[]string{"queue", "show", "other/demo"}, 1, "(forbidden)"},
		{[]string{"queue", "events", "octo/bad name"}, 1, "(invalid_request)"},
	} {
		if r := as(c.args...); r.code != c.code || !strings.Contains(r.stderr, c.stderr) {
			t.Errorf("%v: %+v", c.args, r)
		}
	}
	if r := cliRun(t, "", "queue", "show", "octo/demo", "--server", srv.URL); r.code != 1 || !strings.Contains(r.stderr, "(unauthorized)") {
		t.Errorf("without a token: %+v", r)
	}
}

// The queue's tables print control characters of what GitHub reported
// (check names, in a gate's detail, its bounce reason, its audit) as
// escapes: a check named by a pull request's own workflow must not drive
// the operator's terminal nor forge rows of the table.
func TestCLIQueueEscapesControlCharacters(t *testing.T) {
	q, sim, _ := newCLIQueue(t, "ci\x1b]0;owned\a\n1\t#9")
	cliQueueLabel(t, q, sim, 1)
	srv := httptest.NewServer(mergequeue.NewHandler(q, func(*http.Request, string, string) (string, error) { return "queue-token", nil }))
	defer srv.Close()
	for _, sub := range []string{"show", "events", "audit"} {
		r := cliRun(t, "", "queue", sub, "octo/demo", "--server", srv.URL, "--token", "queue-token")
		if r.code != 0 || strings.ContainsAny(r.stdout, "\x1b\a\t") {
			t.Errorf("queue %s: %+v", sub, r)
		}
	}
	r := cliRun(t, "", "queue", "show", "octo/demo", "--server", srv.URL, "--token", "queue-token")
	if !strings.Contains(r.stdout, `waiting for: ci\x1b]0;owned\a\n1\t#9 (not reported)`) {
		t.Errorf("queue show: %q", r.stdout)
	}
}

// newCLIQueue makes a merge queue on a fresh SQLite store, over the
// simulator seeded with octo/demo, whose main branch requires the check
// named check, with the coordinator of its leases; the test's end verifies
// no goroutine is left.
func newCLIQueue(t *testing.T, check string) (*mergequeue.Queue, *ghsim.Sim, *coordinator.Coordinator) {
	t.Helper()
	leaks := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, leaks) })
	ctx := context.Background()
	db, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "baton.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	coord, err := coordinator.New(coordinator.Config{DB: db})
	if err != nil {
		t.Fatal(err)
	}
	sim, err := ghsim.New(ghsim.Config{Limits: ghsim.Limits{PrimaryLimit: -1}})
	if err != nil {
		t.Fatal(err)
	}
	if err := sim.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sim.Close() })
	if err := sim.SeedDemo(); err != nil {
		t.Fatal(err)
	}
	gh, err := executor.NewGitHubClients(executor.GitHubConfig{BaseURL: sim.URL(), AppID: sim.AppID(), PrivateKey: sim.PrivateKeyPEM()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gh.Close() })
	if err := sim.SetRequiredChecks("octo", "demo", "main", []string{check}, false); err != nil {
		t.Fatal(err)
	}
	q, err := mergequeue.New(mergequeue.Config{DB: db, Leases: coord, Operations: &queueOps{ops: map[string]schema.Record{}}, GitHub: gh.Installation})
	if err != nil {
		t.Fatal(err)
	}
	return q, sim, coord
}

// cliQueueLabel labels octo/demo#n for the queue and hands the queue the
// delivery (the simulator sends no webhooks here).
func cliQueueLabel(t *testing.T, q *mergequeue.Queue, sim *ghsim.Sim, n int) {
	t.Helper()
	if err := sim.AddLabel("octo", "demo", n, "baton:queue", "monalisa"); err != nil {
		t.Fatal(err)
	}
	body := fmt.Sprintf(`{"action":"labeled","number":%d,"pull_request":{"number":%d},"label":{"name":"baton:queue"},"repository":{"full_name":"octo/demo"},"installation":{"id":1}}`, n, n)
	if err := q.HandleEvent(context.Background(), mergequeue.Event{DeliveryID: fmt.Sprintf("cli-%d", n), Name: "pull_request", Action: "labeled", Payload: []byte(body)}); err != nil {
		t.Fatal(err)
	}
}
