package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/baton-dev/baton/app"
	"github.com/baton-dev/baton/app/client"
	"github.com/baton-dev/baton/internal/sqlite"
	"github.com/baton-dev/baton/schema"
)

const cliComment = `{"body": "hello from the CLI"}`

// submit, status (with and without --wait), cancel, ops: tables, JSON,
// and the API's errors on stderr with exit 1.
func TestCLIOperations(t *testing.T) {
	t.Parallel()
	env := newCLIEnv(t, cliEnvOptions{})
	submit := []string{"submit", "--key", "k-1", "--action", "github.issues.comment", "--resource", "issue:octo/demo#10", "--payload", cliComment}

	r := env.as(t, env.alice, append(submit, "--json")...)
	if r.code != 0 {
		t.Fatalf("submit: %+v", r)
	}
	var op client.Operation
	cliDecodeJSON(t, r.stdout, &op)
	if op.Status != "queued" || op.Actor != "alice" || op.ResourceKey != "issue:octo/demo#10" {
		t.Errorf("submitted %+v", op)
	}
	r = env.as(t, env.alice, submit...)
	if r.code != 0 || !strings.Contains(r.stdout, op.OperationID) || !strings.Contains(r.stderr, "existing operation") {
		t.Errorf("submit again: %+v", r)
	}
	// With --json too: the note on stderr, the operation as is on stdout.
	r = env.as(t, env.alice, append(submit, "--json")...)
	var again client.Operation
	cliDecodeJSON(t, r.stdout, &again)
	if r.code != 0 || again.OperationID != op.OperationID || !strings.Contains(r.stderr, "existing operation") {
		t.Errorf("submit again --json: %+v", r)
	}
	r = env.as(t, env.alice, "submit", "--key", "k-1", "--action", "github.issues.comment", "--resource", "issue:octo/demo#10", "--payload", `{"body":"other"}`)
	if r.code != 1 || !strings.Contains(r.stderr, "idempotency_conflict") || !strings.Contains(r.stderr, "operation "+op.OperationID) {
		t.Errorf("conflicting submit (the operation of the key named): %+v", r)
	}

	// Payload from stdin and from a file; a generated key is printed.
	r = cliRun(t, `{"labels":["bug"]}`, "submit", "--action", "github.issues.add_labels", "--resource-type", "issue",
		"--resource-id", "octo/demo#11", "--payload", "@-", "--server", env.URL, "--token", env.alice)
	if r.code != 0 || !regexp.MustCompile(`idempotency key: cli-[0-9a-f]{24}`).MatchString(r.stderr) ||
		!regexp.MustCompile(`status\s+queued`).MatchString(r.stdout) {
		t.Errorf("submit from stdin: %+v", r)
	}
	file := filepath.Join(t.TempDir(), "p.json")
	if err := os.WriteFile(file, []byte(`{"label":"bug"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	r = env.as(t, env.alice, "submit", "--key", "k-file", "--action", "github.issues.remove_label", "--resource", "issue:octo/demo#12", "--payload", "@"+file)
	if r.code != 0 {
		t.Errorf("submit from a file: %+v", r)
	}

	r = env.as(t, env.alice, "status", op.OperationID)
	if r.code != 0 || !regexp.MustCompile(`(?m)^status\s+queued$`).MatchString(r.stdout) || !strings.Contains(r.stdout, "0 of 3") {
		t.Errorf("status: %+v", r)
	}
	start := time.Now()
	r = env.as(t, env.alice, "status", op.OperationID, "--wait=200ms", "--json")
	if r.code != exitStillRunning || time.Since(start) < 200*time.Millisecond || !strings.Contains(r.stdout, `"status": "queued"`) ||
		!strings.Contains(r.stderr, "still queued: the wait ran out") {
		t.Errorf("status --wait=200ms: %+v after %s", r, time.Since(start))
	}
	if r := env.as(t, env.bob, "status", op.OperationID); r.code != 1 || !strings.Contains(r.stderr, "operation not found (not_found)") {
		t.Errorf("bob's status of alice's operation: %+v", r)
	}

	r = env.as(t, env.alice, "ops")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "OPERATION") || strings.Count(r.stdout, "\n") != 4 {
		t.Errorf("ops:\n%s%s", r.stdout, r.stderr)
	}
	r = env.as(t, env.alice, "ops", "--limit", "1")
	if r.code != 0 || strings.Count(r.stdout, "\n") != 2 || !strings.Contains(r.stderr, "--cursor") {
		t.Errorf("ops --limit 1: %+v", r)
	}
	r = env.as(t, env.alice, "ops", "--limit", "1", "--all", "--json")
	var list client.OperationList
	cliDecodeJSON(t, r.stdout, &list)
	if r.code != 0 || len(list.Operations) != 3 || list.NextCursor != "" {
		t.Errorf("ops --all: %+v", r)
	}
	r = env.as(t, env.alice, "ops", "--resource", "issue:octo/demo#10", "--status", "queued", "--json")
	cliDecodeJSON(t, r.stdout, &list)
	if len(list.Operations) != 1 || list.Operations[0].OperationID != op.OperationID {
		t.Errorf("ops filtered: %+v", r)
	}
	// --resource: a type alone, or an ID without its type (the API
	// takes resourceId alone).
	for res, want := range map[string]int{"issue": 3, "pull_request": 0, "octo/demo#10": 1, "OCTO/demo#11": 1, "issue:octo/demo#12": 1} {
		r = env.as(t, env.alice, "ops", "--resource", res, "--json")
		if r.code != 0 {
			t.Errorf("ops --resource %s: %+v", res, r)
			continue
		}
		list = client.OperationList{}
		cliDecodeJSON(t, r.stdout, &list)
		if len(list.Operations) != want {
			t.Errorf("ops --resource %s: %d operations, want %d: %+v", res, len(list.Operations), want, r)
		}
	}
	if r := env.as(t, env.bob, "ops", "--json"); !strings.Contains(r.stdout, `"operations": []`) {
		t.Errorf("bob's ops: %+v", r)
	}

	// status --wait ends when the operation does; cancel.
	done := make(chan cliResult, 1)
	go func() { done <- env.as(t, env.alice, "status", op.OperationID, "--wait") }()
	r = env.as(t, env.alice, "cancel", op.OperationID)
	if r.code != 0 || !regexp.MustCompile(`(?m)^status\s+cancelled$`).MatchString(r.stdout) {
		t.Errorf("cancel: %+v", r)
	}
	select {
	case w := <-done:
		if w.code != exitNotSucceeded || !strings.Contains(w.stdout, "cancelled") || !strings.Contains(w.stderr, "ended cancelled") {
			t.Errorf("status --wait: %+v", w)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("status --wait did not end when the operation was cancelled")
	}
	if r := env.as(t, env.alice, "cancel", op.OperationID); r.code != 1 || !strings.Contains(r.stderr, "already_terminal") ||
		strings.Count(r.stderr, op.OperationID) != 1 {
		t.Errorf("cancel again (the operation named once): %+v", r)
	}
	if r := env.as(t, "", "ops"); r.code != 1 || !strings.Contains(r.stderr, "unauthorized") {
		t.Errorf("no token: %+v", r)
	}
}

// Bad usage exits 2 without calling the server.
func TestCLIUsageErrors(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"submit", "--resource", "issue:octo/demo#1", "--payload", "{}"},
		{"submit", "--action", "github.issues.comment", "--payload", "{}"},
		{"submit", "--action", "github.issues.comment", "--resource", "octo", "--payload", "{}"},
		{"submit", "--action", "github.issues.comment", "--resource", "issue:octo/demo#1"},
		{"submit", "--action", "github.issues.comment", "--resource", "issue:octo/demo#1", "--payload", "[1]"},
		{"submit", "--action", "a", "--resource", "issue:o/r#1", "--payload", "{}", "--wait=soon"},
		{"submit", "--bogus"},
		{"status"},
		{"status", "a", "b"},
		{"cancel"},
		{"ops", "--limit", "0"},
		{"ops", "extra"},
		{"dlq", "replay", "x"},
		{"dlq", "list", "--limit", "9999"},
		{"lease", "acquire"},
		{"lease", "acquire", "issue:octo/demo#1", "--ttl", "1h"},
		{"lease", "renew", "issue:octo/demo#1"},
		{"lease", "release", "issue:octo/demo#1", "--lease-token", "x"},
		{"lease", "run", "issue:octo/demo#1"},
		{"lease", "run", "issue:octo/demo#1", "true"},
		{"token", "create"},
		{"token", "create", "--actor", "a"},
		{"token", "create", "--actor", "a", "--admin", "--installation", "1"},
		{"token", "revoke", "abc"},
		{"bench", "--clients", "0"},
		{"bench", "--resources", "nonsense"},
		{"submit", "--server", "ftp://x", "--action", "a", "--resource", "issue:o/r#1", "--payload", "{}"},
	} {
		if r := cliRun(t, "", args...); r.code != 2 {
			t.Errorf("baton %s: exit %d, want 2\n%s", strings.Join(args, " "), r.code, r.stderr)
		}
	}
}

// Leases from the CLI: acquire prints the token renew and release need.
func TestCLILeases(t *testing.T) {
	t.Parallel()
	env := newCLIEnv(t, cliEnvOptions{})
	const key = "pull_request:octo/demo#1"
	r := env.as(t, env.alice, "lease", "acquire", key, "--owner", "deploy", "--ttl", "30s", "--json")
	if r.code != 0 {
		t.Fatalf("acquire: %+v", r)
	}
	var g client.LeaseGrant
	cliDecodeJSON(t, r.stdout, &g)
	if g.Key != key || g.Owner != "deploy" || g.Token <= 0 {
		t.Errorf("grant %+v", g)
	}
	r = env.as(t, env.bob, "lease", "check", key)
	if r.code != 0 || !regexp.MustCompile(`owner\s+alice/deploy`).MatchString(r.stdout) {
		t.Errorf("check: %+v", r)
	}
	if r := env.as(t, env.bob, "lease", "acquire", key); r.code != 1 || !strings.Contains(r.stderr, "held by alice/deploy") ||
		!strings.Contains(r.stderr, "(lease_held)") {
		t.Errorf("bob acquire: %+v", r)
	}
	tok := func(n int64) string { return strconv.FormatInt(n, 10) }
	if r := env.as(t, env.alice, "lease", "renew", key, "--owner", "deploy", "--lease-token", tok(g.Token+1)); r.code != 1 || !strings.Contains(r.stderr, "lease_lost") {
		t.Errorf("renew with a wrong token: %+v", r)
	}
	if r := env.as(t, env.alice, "lease", "renew", key, "--owner", "deploy", "--lease-token", tok(g.Token), "--ttl", "5m"); r.code != 0 ||
		!regexp.MustCompile(`lease token\s+`+tok(g.Token)).MatchString(r.stdout) {
		t.Errorf("renew: %+v", r)
	}
	if r := env.as(t, env.alice, "lease", "release", key, "--owner", "deploy", "--lease-token", tok(g.Token)); r.code != 0 || !strings.Contains(r.stdout, "released") {
		t.Errorf("release: %+v", r)
	}
	if r := env.as(t, env.bob, "lease", "check", key, "--json"); !strings.Contains(r.stdout, `"locked": false`) {
		t.Errorf("check after release: %+v", r)
	}
	// The default owner is stable across invocations (USER@HOST).
	r = env.as(t, env.alice, "lease", "acquire", "issue:octo/demo#10", "--json")
	cliDecodeJSON(t, r.stdout, &g)
	if r.code != 0 || g.Owner != defaultLeaseOwner() {
		t.Fatalf("acquire with the default owner: %+v", r)
	}
	if r := env.as(t, env.alice, "lease", "release", "issue:octo/demo#10", "--lease-token", tok(g.Token)); r.code != 0 {
		t.Errorf("release with the default owner: %+v", r)
	}
	if r := env.as(t, env.alice, "lease", "check", "issue:acme/site#1"); r.code != 1 || !strings.Contains(r.stderr, "forbidden") {
		t.Errorf("check outside the installation: %+v", r)
	}
}

// Dead letters from the CLI: admin only.
func TestCLIDeadLetters(t *testing.T) {
	t.Parallel()
	env := newCLIEnv(t, cliEnvOptions{})
	if r := env.as(t, env.admin, "dlq", "list"); r.code != 0 || !strings.HasPrefix(r.stdout, "SEQ") {
		t.Errorf("dlq list: %+v", r)
	}
	if r := env.as(t, env.admin, "dlq", "list", "--json"); r.code != 0 || !strings.Contains(r.stdout, `"deadLetters": []`) {
		t.Errorf("dlq list --json: %+v", r)
	}
	if r := env.as(t, env.admin, "dlq", "replay", "999"); r.code != 1 || !strings.Contains(r.stderr, "not_found") {
		t.Errorf("dlq replay 999: %+v", r)
	}
	if r := env.as(t, env.alice, "dlq", "list"); r.code != 1 || !strings.Contains(r.stderr, "forbidden") {
		t.Errorf("dlq list as alice: %+v", r)
	}
}

// An operation baton could not handle waits in the dead-letter stream: its
// status says so (the reason for admins only), and a --wait on it ends at
// once with exit 6, naming what can be done.
func TestCLIDeadLetteredOperation(t *testing.T) {
	t.Parallel()
	env := newCLIEnv(t, cliEnvOptions{poison: true})
	r := env.as(t, env.alice, "submit", "--key", "poisoned", "--action", "github.issues.comment", "--resource", "issue:octo/demo#10",
		"--payload", cliComment, "--wait=20s")
	if r.code != exitDeadLettered || !strings.Contains(r.stderr, "dead-letter stream") || !strings.Contains(r.stderr, "baton dlq replay 1") ||
		!regexp.MustCompile(`(?m)^dead letter\s+sequence 1, after 1 failures, .*baton dlq replay 1 or a cancel$`).MatchString(r.stdout) {
		t.Fatalf("submit --wait of a poisoned operation: %+v", r)
	}
	id := regexp.MustCompile(`(?m)^operation\s+(\S+)$`).FindStringSubmatch(r.stdout)
	if id == nil {
		t.Fatalf("no operation ID in %q", r.stdout)
	}
	if r := env.as(t, env.admin, "status", id[1]); r.code != 0 || !strings.Contains(r.stdout, "(last failure: store unavailable)") {
		t.Errorf("admin's status: %+v", r)
	}
	start := time.Now()
	if r := env.as(t, env.alice, "status", id[1], "--wait", "--json"); r.code != exitDeadLettered || time.Since(start) > 10*time.Second ||
		!strings.Contains(r.stdout, `"deadLetter": {`) || strings.Contains(r.stdout, "store unavailable") {
		t.Errorf("alice's status --wait --json: %+v", r)
	}
	if r := env.as(t, env.alice, "cancel", id[1]); r.code != 0 {
		t.Errorf("cancel: %+v", r)
	}
	if r := env.as(t, env.alice, "status", id[1], "--wait=5s"); r.code != exitNotSucceeded || strings.Contains(r.stdout, "dead letter") {
		t.Errorf("status --wait after the cancel: %+v", r)
	}
}

// ListInstallations makes the env's installations listable: octo (1) with
// two repositories, and acme (7), suspended, which alice and bob may not
// act on.
func (cliInstallations) ListInstallations(context.Context) ([]app.Installation, error) {
	return []app.Installation{
		{ID: 1, Account: "octo", AccountType: "Organization", Repositories: []string{"octo/demo", "octo/site"}},
		{ID: 7, Account: "acme", AccountType: "Organization", Repositories: []string{"acme/site"}, Suspended: true},
	}, nil
}

// installations: a table or JSON of what the token may act on (an admin
// token: all).
func TestCLIInstallations(t *testing.T) {
	t.Parallel()
	env := newCLIEnv(t, cliEnvOptions{})
	r := env.as(t, env.alice, "installations")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "ID") || strings.Count(r.stdout, "\n") != 2 ||
		!regexp.MustCompile(`(?m)^1\s+octo\s+false\s+octo/demo, octo/site$`).MatchString(r.stdout) {
		t.Errorf("installations:\n%s%s", r.stdout, r.stderr)
	}
	r = env.as(t, env.admin, "installations", "--json")
	var list struct {
		Installations []client.Installation `json:"installations"`
	}
	cliDecodeJSON(t, r.stdout, &list)
	if r.code != 0 || len(list.Installations) != 2 || list.Installations[1].ID != 7 || !list.Installations[1].Suspended ||
		list.Installations[1].Account != "acme" {
		t.Errorf("installations --json as admin: %+v", r)
	}
	if r := env.as(t, "", "installations"); r.code != 1 || !strings.Contains(r.stderr, "unauthorized") {
		t.Errorf("no token: %+v", r)
	}
	if r := cliRun(t, "", "installations", "extra"); r.code != 2 {
		t.Errorf("installations extra: exit %d, want 2", r.code)
	}
}

// Tokens: created on the data directory (the server may be running),
// printed once, listed without the token, revoked.
func TestCLITokens(t *testing.T) {
	t.Parallel()
	env := newCLIEnv(t, cliEnvOptions{})
	r := cliRun(t, "", "token", "create", "--actor", "ci", "--installation", "1", "--installation", "7", "--data", env.dataDir)
	plain := strings.TrimSpace(r.stdout)
	if r.code != 0 || !regexp.MustCompile(`^baton_[A-Za-z0-9_-]{43}$`).MatchString(plain) || r.stderr != "" {
		t.Fatalf("token create: %+v", r)
	}
	// The running server accepts it.
	if _, err := env.apiClient(t, plain).List(context.Background(), client.ListOptions{}); err != nil {
		t.Errorf("the server refuses the new token: %v", err)
	}
	r = cliRun(t, "", "token", "create", "--actor", "ops", "--admin", "--json", "--data", env.dataDir)
	var created struct {
		Token string `json:"token"`
		Actor string `json:"actor"`
		Admin bool   `json:"admin"`
		ID    int64  `json:"id"`
	}
	cliDecodeJSON(t, r.stdout, &created)
	if r.code != 0 || created.Actor != "ops" || !created.Admin || !strings.HasPrefix(created.Token, "baton_") {
		t.Errorf("token create --json: %+v", r)
	}
	r = cliRun(t, "", "token", "list", "--data", env.dataDir)
	if r.code != 0 || strings.Contains(r.stdout, plain) || !regexp.MustCompile(`(?m)^4\s+ci\s+no\s+1,7\s`).MatchString(r.stdout) ||
		!regexp.MustCompile(`(?m)^5\s+ops\s+yes\s+all\s`).MatchString(r.stdout) {
		t.Errorf("token list:\n%s%s", r.stdout, r.stderr)
	}
	r = cliRun(t, "", "token", "revoke", "4", "--data", env.dataDir)
	if r.code != 0 || !strings.Contains(r.stdout, "revoked token 4 (actor ci)") {
		t.Errorf("token revoke: %+v", r)
	}
	// The revocation is in the database: a store without a cached answer
	// refuses the token (the server's cache follows within its 5 s TTL).
	fresh, err := app.NewTokenStore(env.db, app.TokenStoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fresh.Authenticate(context.Background(), plain); err == nil {
		t.Error("a revoked token authenticates")
	}
	if r := cliRun(t, "", "token", "list", "--data", filepath.Join(t.TempDir(), "none")); r.code != 1 || !strings.Contains(r.stderr, "no baton database") {
		t.Errorf("token list on a missing data directory: %+v", r)
	}
	// create makes the data directory if there is none yet.
	newDir := filepath.Join(t.TempDir(), "fresh")
	if r := cliRun(t, "", "token", "create", "--actor", "a", "--all-installations", "--data", newDir); r.code != 0 {
		t.Errorf("token create on a new data directory: %+v", r)
	}
	db, err := sqlite.Open(context.Background(), filepath.Join(newDir, tokenDatabaseFile), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
}

// After --wait the exit status says whether the operation was carried out,
// so that a CI step can be `baton submit ... --wait`: 0 when it succeeded.
// (The other outcomes are in TestCLIOperations: 4 cancelled, 5 the wait
// ran out.) Without --wait, submit and status exit 0 whatever the status.
func TestCLIWaitExitStatus(t *testing.T) {
	t.Parallel()
	env := newCLIEnv(t, cliEnvOptions{complete: true})
	r := env.as(t, env.alice, "submit", "--key", "w-1", "--action", "github.issues.comment", "--resource", "issue:octo/demo#10",
		"--payload", cliComment, "--wait=30s")
	if r.code != 0 || !regexp.MustCompile(`(?m)^status\s+succeeded$`).MatchString(r.stdout) || r.stderr != "" {
		t.Fatalf("submit --wait: %+v", r)
	}
	id := regexp.MustCompile(`(?m)^operation\s+([0-9a-f]{64})$`).FindStringSubmatch(r.stdout)
	if id == nil {
		t.Fatalf("no operation ID in %q", r.stdout)
	}
	if r := env.as(t, env.alice, "status", id[1], "--wait", "--json"); r.code != 0 || !strings.Contains(r.stdout, `"status": "succeeded"`) {
		t.Errorf("status --wait: %+v", r)
	}
	// Without --wait a queued or cancelled operation is no error.
	q := newCLIEnv(t, cliEnvOptions{})
	r = q.as(t, q.alice, "submit", "--key", "w-2", "--action", "github.issues.comment", "--resource", "issue:octo/demo#10", "--payload", cliComment)
	if r.code != 0 {
		t.Fatalf("submit: %+v", r)
	}
	id = regexp.MustCompile(`(?m)^operation\s+([0-9a-f]{64})$`).FindStringSubmatch(r.stdout)
	if r := q.as(t, q.alice, "cancel", id[1]); r.code != 0 {
		t.Fatalf("cancel: %+v", r)
	}
	if r := q.as(t, q.alice, "status", id[1]); r.code != 0 || !strings.Contains(r.stdout, "cancelled") {
		t.Errorf("status of a cancelled operation: %+v", r)
	}
	r = q.as(t, q.alice, "submit", "--key", "w-2", "--action", "github.issues.comment", "--resource", "issue:octo/demo#10", "--payload", cliComment, "--wait")
	if r.code != exitNotSucceeded || !strings.Contains(r.stderr, "ended cancelled") {
		t.Errorf("submit --wait of a cancelled operation: %+v", r)
	}
}

// bench drives the server and reports what it measured.
func TestCLIBench(t *testing.T) {
	t.Parallel()
	env := newCLIEnv(t, cliEnvOptions{complete: true})
	r := env.as(t, env.alice, "bench", "--ops", "40", "--clients", "4", "--json")
	if r.code != 0 {
		t.Fatalf("bench: %+v", r)
	}
	var rep BenchReport
	cliDecodeJSON(t, r.stdout, &rep)
	if rep.Submitted != 40 || len(rep.SubmitErrors) != 0 || rep.SubmitPerSec <= 0 || rep.SubmitP99Ms <= 0 ||
		rep.Terminal != 40 || rep.Outcomes["succeeded"] != 40 || rep.EndToEndPerSec <= 0 || rep.Unfinished != 0 {
		t.Errorf("report %+v", rep)
	}
	if !strings.Contains(r.stderr, "submitting: 40/40 (100%)") || !strings.Contains(r.stderr, "waiting: 40/40 (100%)") {
		t.Errorf("progress lines:\n%s", r.stderr)
	}
	r = env.as(t, env.alice, "bench", "--duration", "200ms", "--clients", "2", "--no-wait", "--resources", "issue:octo/demo#1,issue:acme/site#1")
	// The report is printed; the refused submits make the run incomplete.
	if r.code != 1 || !regexp.MustCompile(`errors: forbidden \d+`).MatchString(r.stdout) || !strings.Contains(r.stdout, "submit throughput") ||
		strings.Contains(r.stdout, "end-to-end") || !strings.Contains(r.stderr, "the run is incomplete") {
		t.Errorf("bench --duration with refused resources:\n%s%s", r.stdout, r.stderr)
	}
}

// Every command says what it does, and every command that runs has
// examples.
func TestCLIHelp(t *testing.T) {
	t.Parallel()
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			if sub.Hidden || sub.Name() == "help" || sub.Name() == "completion" {
				continue
			}
			if sub.Short == "" {
				t.Errorf("%s has no short description", sub.CommandPath())
			}
			if sub.Runnable() && sub.Example == "" && cliIsMine(sub) {
				t.Errorf("%s has no examples", sub.CommandPath())
			}
			walk(sub)
		}
	}
	walk(newRootCmd())
	r := cliRun(t, "", "lease", "run", "--help")
	if r.code != 0 || !strings.Contains(r.stdout, "BATON_LEASE_TOKEN") || !strings.Contains(r.stdout, "3 ") {
		t.Errorf("lease run --help: %+v", r)
	}
}

// cliIsMine reports whether c is one of the client subcommands of this file's
// package owner (serve and ghsim are checked by their own tests).
func cliIsMine(c *cobra.Command) bool {
	for p := c; p != nil; p = p.Parent() {
		switch p.Name() {
		case "submit", "status", "cancel", "ops", "dlq", "lease", "token", "bench", "installations", "queue":
			return true
		}
	}
	return false
}

// status and cancel refuse what is not an operation ID (exit 2) rather
// than print whatever another route of the API answers.
func TestCLIOperationIDChecked(t *testing.T) {
	t.Parallel()
	env := newCLIEnv(t, cliEnvOptions{})
	for _, args := range [][]string{
		{"status", "."}, {"status", ".."}, {"status", ""}, {"status", "../dlq", "--json"},
		{"status", ".", "--wait=1s"}, {"cancel", "."}, {"cancel", "a/b"},
	} {
		r := env.as(t, env.alice, args...)
		if r.code != 2 || r.stdout != "" || !strings.Contains(r.stderr, "not an operation ID") {
			t.Errorf("baton %q: %+v", args, r)
		}
	}
}

// A last error is GitHub's text (or that of whatever answers in its place)
// and a result what the action got back: the human tables of status and
// ops print their control characters as escapes, so that they can neither
// drive the operator's terminal nor forge rows of the table. --json keeps
// them as they are.
func TestCLIEscapesControlCharacters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := newCLIEnv(t, cliEnvOptions{})
	r := env.as(t, env.alice, "submit", "--key", "esc", "--action", "github.issues.comment", "--resource", "issue:octo/demo#10",
		"--payload", cliComment, "--json")
	var op client.Operation
	cliDecodeJSON(t, r.stdout, &op)
	// The operation fails as the executor records it, with what GitHub
	// answered.
	const hostile = "Validation Failed\x1b]0;owned\x07\x1b[2J\u009b1A\u202e\nstatus\tsucceeded"
	rec, err := env.store.Get(ctx, op.OperationID)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	rec.Status, rec.StartedAt, rec.UpdatedAt = schema.StatusRunning, &now, now
	if err := env.store.Save(ctx, &rec); err != nil {
		t.Fatal(err)
	}
	end := time.Now().UTC()
	rec.Status, rec.Outcome, rec.CompletedAt, rec.UpdatedAt, rec.Attempts = schema.StatusFailed, schema.OutcomeFailed, &end, end, 1
	rec.LastErrorCategory, rec.LastErrorMessage = "validation", hostile
	rec.Result = json.RawMessage(`{"message":"a\u009bb"}`)
	if err := env.store.Save(ctx, &rec); err != nil {
		t.Fatal(err)
	}
	r = env.as(t, env.alice, "status", op.OperationID)
	if r.code != 0 {
		t.Fatalf("status: %+v", r)
	}
	if i := strings.IndexFunc(r.stdout, func(c rune) bool { return c != '\n' && cliUnsafeRune(c) }); i >= 0 {
		t.Errorf("status printed a control character (%q at %d):\n%q", r.stdout[i], i, r.stdout)
	}
	if n := len(regexp.MustCompile(`(?m)^status\s`).FindAllString(r.stdout, -1)); n != 1 {
		t.Errorf("status printed %d status rows:\n%s", n, r.stdout)
	}
	if !strings.Contains(r.stdout, `last error       validation: Validation Failed\x1b]0;owned\a\x1b[2J\u009b1A\u202e\nstatus\tsucceeded`) {
		t.Errorf("the last error is not shown escaped:\n%s", r.stdout)
	}
	r = env.as(t, env.alice, "status", op.OperationID, "--json")
	var got client.Operation
	cliDecodeJSON(t, r.stdout, &got)
	if got.LastErrorMessage != hostile {
		t.Errorf("status --json: lastErrorMessage %q, want %q", got.LastErrorMessage, hostile)
	}
}

// --wait=0s waits at most nothing, as --wait=DURATION says: the operation
// as it stands and the exit status of its outcome so far, not a wait
// without limit (a script that passes what is left of its time budget must
// not hang once none is left).
func TestCLIWaitZero(t *testing.T) {
	t.Parallel()
	env := newCLIEnv(t, cliEnvOptions{})
	r := env.as(t, env.alice, "submit", "--key", "w0", "--action", "github.issues.comment", "--resource", "issue:octo/demo#10",
		"--payload", cliComment)
	id := regexp.MustCompile(`(?m)^operation\s+([0-9a-f]{64})$`).FindStringSubmatch(r.stdout)
	if r.code != 0 || id == nil {
		t.Fatalf("submit: %+v", r)
	}
	for _, args := range [][]string{
		{"status", id[1], "--wait=0s"},
		{"status", id[1], "--wait=0"},
		{"submit", "--key", "w0", "--action", "github.issues.comment", "--resource", "issue:octo/demo#10", "--payload", cliComment, "--wait=0s"},
	} {
		done := make(chan cliResult, 1)
		go func() { done <- env.as(t, env.alice, args...) }()
		select {
		case r := <-done:
			if r.code != exitStillRunning || !regexp.MustCompile(`(?m)^status\s+queued$`).MatchString(r.stdout) ||
				!strings.Contains(r.stderr, "still queued") {
				t.Errorf("%s: %+v", strings.Join(args, " "), r)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s still waits after 10s", strings.Join(args, " "))
		}
	}
	if r := env.as(t, env.alice, "cancel", id[1]); r.code != 0 {
		t.Fatalf("cancel: %+v", r)
	}
	if r := env.as(t, env.alice, "status", id[1], "--wait=0s"); r.code != exitNotSucceeded || !strings.Contains(r.stderr, "ended cancelled") {
		t.Errorf("status --wait=0s of a cancelled operation: %+v", r)
	}
}
