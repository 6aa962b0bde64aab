package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/baton-dev/baton/app/client"
	"github.com/baton-dev/baton/app/mergequeue"
	"github.com/baton-dev/baton/executor"
	"github.com/baton-dev/baton/queue"
	"github.com/baton-dev/baton/schema"
)

// The same request twice names the same operation (201, then 200); the
// same key with other input is 422 naming it, and nothing new is stored.
func TestAPISubmitIdempotency(t *testing.T) {
	t.Parallel()
	env := newAPIEnv(t)
	req := apiSubmission("deploy-1", 10, "shipped")

	first := env.do("POST", "/v1/operations", env.alice, req)
	if first.status != http.StatusCreated {
		t.Fatalf("first submit: %d %s", first.status, first.body)
	}
	var v1 schema.View
	first.decode(t, &v1)
	if v1.Actor != "alice" || v1.Status != schema.StatusQueued || v1.InstallationID != 1 || v1.ResourceKey != "issue:octo/demo#10" {
		t.Errorf("first view: %+v", v1)
	}
	if loc := first.header.Get("Location"); loc != "/v1/operations/"+v1.OperationID {
		t.Errorf("Location = %q", loc)
	}

	second := env.do("POST", "/v1/operations", env.alice, req)
	if second.status != http.StatusOK {
		t.Fatalf("second submit: %d %s", second.status, second.body)
	}
	var v2 schema.View
	second.decode(t, &v2)
	if v2.OperationID != v1.OperationID {
		t.Errorf("second submit named %s, want %s", v2.OperationID, v1.OperationID)
	}

	other := apiSubmission("deploy-1", 10, "something else")
	third := env.do("POST", "/v1/operations", env.alice, other)
	if third.status != http.StatusUnprocessableEntity || third.errorCode() != "idempotency_conflict" {
		t.Fatalf("conflicting submit: %d %s", third.status, third.body)
	}
	var eb APIErrorBody
	third.decode(t, &eb)
	if eb.Error.Details["operationId"] != v1.OperationID {
		t.Errorf("conflict details = %v, want operationId %s", eb.Error.Details, v1.OperationID)
	}
	recs, _, err := env.store.List(context.Background(), executor.ListFilter{})
	if err != nil || len(recs) != 1 {
		t.Fatalf("stored: %d records, %v; want 1", len(recs), err)
	}
	if string(recs[0].Payload) != `{"body":"shipped"}` {
		t.Errorf("stored payload %s", recs[0].Payload)
	}

	// Another actor with the same key is another operation.
	fourth := env.do("POST", "/v1/operations", env.bob, req)
	if fourth.status != http.StatusCreated {
		t.Fatalf("bob's submit: %d %s", fourth.status, fourth.body)
	}
	var v4 schema.View
	fourth.decode(t, &v4)
	if v4.OperationID == v1.OperationID || v4.Actor != "bob" {
		t.Errorf("bob's operation: %+v", v4)
	}

	// The Go client says the same.
	op, created, err := env.client(env.alice).Submit(context.Background(), client.SubmitRequest{
		IdempotencyKey: "deploy-1", Action: schema.ActionComment,
		Resource: client.Resource{Type: "issue", ID: "octo/demo#10"},
		Payload:  json.RawMessage(`{ "body" : "shipped" }`),
	})
	if err != nil || created || op.OperationID != v1.OperationID {
		t.Errorf("client submit = %s, created %v, %v", op.OperationID, created, err)
	}
	_, _, err = env.client(env.alice).Submit(context.Background(), client.SubmitRequest{
		IdempotencyKey: "deploy-1", Action: schema.ActionComment,
		Resource: client.Resource{Type: "issue", ID: "octo/demo#10"}, Payload: json.RawMessage(`{"body":"x"}`),
	})
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != 422 || ce.Code != client.CodeIdempotencyConflict || ce.Details["operationId"] != v1.OperationID {
		t.Errorf("client conflict = %#v", err)
	}
}

// A token acts only on its installations: installation 1's token cannot
// submit for a repository of installation 2, whatever the body says.
func TestAPIInstallationBinding(t *testing.T) {
	t.Parallel()
	env := newAPIEnv(t)
	acme := func(key string, inst int64) map[string]any {
		s := apiSubmission(key, 1, "hi")
		s["resource"] = map[string]any{"type": "issue", "id": "acme/site#1"}
		if inst != 0 {
			s["installationId"] = inst
		}
		return s
	}
	for _, tc := range []struct {
		name   string
		token  string
		body   map[string]any
		status int
	}{
		{"installation 1 token, installation 2 repository", env.alice, acme("a", 0), 403},
		{"installation 1 token, installation 2 repository, body claims 1", env.alice, acme("b", 1), 403},
		{"installation 1 token, installation 2 repository, body claims 2", env.alice, acme("c", 2), 403},
		{"installation 2 token", env.carol, acme("d", 0), 201},
		{"installation 2 token, matching installationId", env.carol, acme("e", 2), 201},
		{"installation 2 token, wrong installationId", env.carol, acme("f", 1), 400},
		{"all-installations token", env.dave, acme("g", 0), 201},
		{"admin token", env.admin, acme("h", 0), 201},
		{"installation 2 token, installation 1 repository", env.carol, apiSubmission("i", 10, "x"), 403},
	} {
		r := env.do("POST", "/v1/operations", tc.token, tc.body)
		if r.status != tc.status {
			t.Errorf("%s: %d %s, want %d", tc.name, r.status, r.body, tc.status)
			continue
		}
		if r.status == 403 && r.errorCode() != "forbidden" {
			t.Errorf("%s: code %s", tc.name, r.errorCode())
		}
		if r.status == 201 {
			var v schema.View
			r.decode(t, &v)
			if v.InstallationID != 2 {
				t.Errorf("%s: installationId %d, want the resolved 2", tc.name, v.InstallationID)
			}
		}
	}
	// Leases too.
	r := env.do("POST", apiLeasePath("issue:acme/site#1", "acquire"), env.alice, map[string]any{"owner": "ci"})
	if r.status != 403 || r.errorCode() != "forbidden" {
		t.Errorf("lease on installation 2 with installation 1's token: %d %s", r.status, r.body)
	}
	r = env.do("GET", apiLeasePath("issue:acme/site#1", ""), env.alice, nil)
	if r.status != 403 {
		t.Errorf("check lease on installation 2 with installation 1's token: %d %s", r.status, r.body)
	}
}

// GET with ?wait= returns as soon as the operation is terminal, or as it
// stands when the wait is over.
func TestAPIGetWait(t *testing.T) {
	t.Parallel()
	env := newAPIEnv(t)
	v := env.submit(env.alice, "w-1", 10)

	start := time.Now()
	r := env.do("GET", "/v1/operations/"+v.OperationID+"?wait=150ms", env.alice, nil)
	if r.status != 200 {
		t.Fatalf("wait: %d %s", r.status, r.body)
	}
	var got schema.View
	r.decode(t, &got)
	if got.Status != schema.StatusQueued || time.Since(start) < 150*time.Millisecond {
		t.Errorf("timed-out wait: %s after %s", got.Status, time.Since(start))
	}

	type result struct {
		op  client.Operation
		err error
	}
	done := make(chan result, 1)
	go func() {
		op, err := env.client(env.alice).Wait(context.Background(), v.OperationID, 30*time.Second)
		done <- result{op, err}
	}()
	env.finish(v.OperationID)
	select {
	case res := <-done:
		if res.err != nil || res.op.Status != schema.StatusSucceeded || res.op.CompletedAt == nil {
			t.Errorf("wait = %+v, %v", res.op, res.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the wait did not end when the operation finished")
	}

	// A terminal operation answers at once; no wait is plain GET.
	if r := env.do("GET", "/v1/operations/"+v.OperationID+"?wait=60s", env.alice, nil); r.status != 200 {
		t.Errorf("wait on terminal: %d", r.status)
	}
	if r := env.do("GET", "/v1/operations/"+v.OperationID, env.admin, nil); r.status != 200 {
		t.Errorf("admin get: %d", r.status)
	}
}

// One token holds at most 64 ?wait= requests waiting at once (each reads
// the store ten times a second); its next one is answered at once with the
// operation as it stands, while another token's still waits.
func TestAPIWaitsPerTokenBounded(t *testing.T) {
	t.Parallel()
	env := newAPIEnv(t)
	v := env.submit(env.alice, "many-waits", 10)
	path := "/v1/operations/" + v.OperationID
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for range 64 {
		wg.Go(func() {
			for ctx.Err() == nil { // again when answered at once
				req, _ := http.NewRequestWithContext(ctx, "GET", env.URL+path+"?wait=60s", nil)
				req.Header.Set("Authorization", "Bearer "+env.alice)
				if resp, err := http.DefaultClient.Do(req); err == nil {
					resp.Body.Close()
				}
			}
		})
	}
	// The 65th is answered at once, once the 64 wait (a wait that
	// takes 1 s found a place: one of them was between two requests).
	for try := 0; ; try++ {
		start := time.Now()
		r := env.do("GET", path+"?wait=1s", env.alice, nil)
		var got schema.View
		r.decode(t, &got)
		if r.status != 200 || got.Status != schema.StatusQueued {
			t.Fatalf("wait beyond the bound: %d %s", r.status, r.body)
		}
		if time.Since(start) < 500*time.Millisecond {
			break
		}
		if try == 10 {
			t.Fatalf("a token's 65th wait still waited (%s)", time.Since(start))
		}
		time.Sleep(50 * time.Millisecond) // for the one it displaced to wait again
	}
	start := time.Now()
	if r := env.do("GET", path+"?wait=300ms", env.admin, nil); r.status != 200 || time.Since(start) < 300*time.Millisecond {
		t.Errorf("another token's wait: %d after %s", r.status, time.Since(start))
	}
}

// A non-admin token lists its actor's operations; an admin sees all;
// pages follow the cursor; filters apply.
func TestAPIListOperations(t *testing.T) {
	t.Parallel()
	env := newAPIEnv(t)
	var ids []string
	for i := range 5 {
		ids = append(ids, env.submit(env.alice, fmt.Sprintf("l-%d", i), 10+i%3).OperationID)
	}
	env.submit(env.bob, "b-0", 10)
	env.finish(ids[0])
	ctx := context.Background()
	alice := env.client(env.alice)

	var seen []string
	cursor := ""
	for page := 0; ; page++ {
		l, err := alice.List(ctx, client.ListOptions{Limit: 2, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		for _, op := range l.Operations {
			if op.Actor != "alice" {
				t.Errorf("alice's list holds %s's operation", op.Actor)
			}
			seen = append(seen, op.OperationID)
		}
		if l.NextCursor == "" {
			break
		}
		if page > 5 {
			t.Fatal("paging does not end")
		}
		cursor = l.NextCursor
	}
	if len(seen) != 5 || seen[0] != ids[4] || seen[4] != ids[0] {
		t.Errorf("alice's pages = %v, want %v newest first", seen, ids)
	}
	all, err := env.client(env.admin).List(ctx, client.ListOptions{})
	if err != nil || len(all.Operations) != 6 {
		t.Errorf("admin list: %d, %v", len(all.Operations), err)
	}
	bobs, err := env.client(env.admin).List(ctx, client.ListOptions{Actor: "bob"})
	if err != nil || len(bobs.Operations) != 1 {
		t.Errorf("admin list of bob: %d, %v", len(bobs.Operations), err)
	}
	done, err := alice.List(ctx, client.ListOptions{Status: "succeeded"})
	if err != nil || len(done.Operations) != 1 || done.Operations[0].OperationID != ids[0] {
		t.Errorf("succeeded filter: %+v, %v", done.Operations, err)
	}
	on11, err := alice.List(ctx, client.ListOptions{ResourceType: "issue", ResourceID: "octo/demo#11", Action: schema.ActionComment})
	if err != nil || len(on11.Operations) != 2 {
		t.Errorf("resource filter: %d, %v", len(on11.Operations), err)
	}
	self, err := alice.List(ctx, client.ListOptions{Actor: "alice"})
	if err != nil || len(self.Operations) != 5 {
		t.Errorf("alice naming herself: %d, %v", len(self.Operations), err)
	}
	if _, err := alice.List(ctx, client.ListOptions{Actor: "bob"}); client.CodeOf(err) != client.CodeForbidden {
		t.Errorf("alice listing bob: %v", err)
	}
	empty, err := env.client(env.carol).List(ctx, client.ListOptions{})
	if err != nil || len(empty.Operations) != 0 || empty.NextCursor != "" {
		t.Errorf("carol's list: %+v, %v", empty, err)
	}
}

// Cancel: queued → cancelled; terminal → 409; another actor's → 404; an
// admin cancels anyone's.
func TestAPICancel(t *testing.T) {
	t.Parallel()
	env := newAPIEnv(t)
	ctx := context.Background()
	alice := env.client(env.alice)
	a := env.submit(env.alice, "c-1", 10)
	b := env.submit(env.alice, "c-2", 11)
	c := env.submit(env.alice, "c-3", 12)
	env.finish(c.OperationID)

	op, err := alice.Cancel(ctx, a.OperationID)
	if err != nil || op.Status != schema.StatusCancelled || !op.CancellationRequested || op.Outcome != schema.OutcomeCancelled {
		t.Errorf("cancel queued = %+v, %v", op, err)
	}
	if _, err := alice.Cancel(ctx, a.OperationID); client.CodeOf(err) != client.CodeAlreadyTerminal {
		t.Errorf("cancel cancelled = %v", err)
	}
	_, err = alice.Cancel(ctx, c.OperationID)
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != 409 || ce.Code != client.CodeAlreadyTerminal {
		t.Errorf("cancel succeeded = %v", err)
	}
	if _, err := env.client(env.bob).Cancel(ctx, b.OperationID); client.CodeOf(err) != client.CodeNotFound {
		t.Errorf("bob cancels alice's = %v", err)
	}
	if rec, _ := env.store.Get(ctx, b.OperationID); rec.Status != schema.StatusQueued {
		t.Errorf("after bob's cancel, alice's operation is %s", rec.Status)
	}
	if op, err := env.client(env.admin).Cancel(ctx, b.OperationID); err != nil || op.Status != schema.StatusCancelled {
		t.Errorf("admin cancel = %+v, %v", op.Status, err)
	}

	// A running operation is flagged, not cancelled.
	d := env.submit(env.alice, "c-4", 10)
	rec, _ := env.store.Get(ctx, d.OperationID)
	now := time.Now().UTC()
	rec.Status, rec.StartedAt, rec.UpdatedAt = schema.StatusRunning, &now, now
	if err := env.store.Save(ctx, &rec); err != nil {
		t.Fatal(err)
	}
	if op, err := alice.Cancel(ctx, d.OperationID); err != nil || op.Status != schema.StatusRunning || !op.CancellationRequested {
		t.Errorf("cancel running = %s %v, %v", op.Status, op.CancellationRequested, err)
	}
}

// Another actor's operation is exactly as absent as a missing one.
func TestAPIOtherActorsOperationIsNotFound(t *testing.T) {
	t.Parallel()
	env := newAPIEnv(t)
	v := env.submit(env.alice, "secret", 10)
	other := env.do("GET", "/v1/operations/"+v.OperationID, env.bob, nil)
	missing := env.do("GET", "/v1/operations/"+strings.Repeat("ab", 32), env.bob, nil)
	if other.status != 404 || missing.status != 404 || string(other.body) != string(missing.body) {
		t.Errorf("another's: %d %s; missing: %d %s", other.status, other.body, missing.status, missing.body)
	}
	if r := env.do("GET", "/v1/operations/"+v.OperationID+"?wait=1s", env.bob, nil); r.status != 404 {
		t.Errorf("waiting on another's: %d", r.status)
	}
}

// Leases over the API share the coordinator with operations; an owner is
// held as ACTOR/OWNER, so no other token can renew or release it.
func TestAPILeases(t *testing.T) {
	t.Parallel()
	env := newAPIEnv(t)
	ctx := context.Background()
	const key = "pull_request:octo/app#42"
	if p := client.LeasePath(key); p != "/v1/leases/pull_request%3Aocto%2Fapp%2342" {
		t.Fatalf("LeasePath = %s", p)
	}
	alice, bob := env.client(env.alice), env.client(env.bob)

	st, err := alice.CheckLease(ctx, key)
	if err != nil || st.Locked || st.Key != key {
		t.Fatalf("check free = %+v, %v", st, err)
	}
	g, err := alice.AcquireLease(ctx, key, "ci-7", 30*time.Second)
	if err != nil || g.Key != key || g.Owner != "ci-7" || g.Token <= 0 || time.Until(g.ExpiresAt) < 25*time.Second {
		t.Fatalf("acquire = %+v, %v", g, err)
	}
	// The coordinator holds it under the key operations use.
	cs, err := env.coord.Check(ctx, key)
	if err != nil || !cs.Locked || cs.Owner != "alice/ci-7" || cs.Token != g.Token {
		t.Errorf("coordinator sees %+v, %v", cs, err)
	}
	st, err = bob.CheckLease(ctx, key)
	if err != nil || !st.Locked || st.Owner != "alice/ci-7" || st.Token != g.Token || st.ExpiresIn() <= 0 {
		t.Errorf("check held = %+v, %v", st, err)
	}
	_, err = bob.AcquireLease(ctx, key, "ci-7", 0)
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != 409 || ce.Code != client.CodeLeaseHeld || ce.Details["owner"] != "alice/ci-7" {
		t.Fatalf("bob acquire = %#v", err)
	}
	if secs, ok := ce.Details["expiresIn"].(float64); !ok || secs <= 0 || secs > 30 {
		t.Errorf("lease_held expiresIn = %v", ce.Details["expiresIn"])
	}
	// The same owner asking again is refused too: a live lease is never
	// handed out twice.
	if _, err := alice.AcquireLease(ctx, key, "ci-7", 0); client.CodeOf(err) != client.CodeLeaseHeld {
		t.Errorf("alice acquire again = %v", err)
	}
	// Bob knows owner and token (check told him) but is not alice.
	if _, err := bob.RenewLease(ctx, key, "ci-7", g.Token, time.Minute); client.CodeOf(err) != client.CodeLeaseLost {
		t.Errorf("bob renew = %v", err)
	}
	if err := bob.ReleaseLease(ctx, key, "ci-7", g.Token); client.CodeOf(err) != client.CodeLeaseLost {
		t.Errorf("bob release = %v", err)
	}
	if _, err := alice.RenewLease(ctx, key, "ci-7", g.Token+1, time.Minute); client.CodeOf(err) != client.CodeLeaseLost {
		t.Errorf("renew with a wrong token = %v", err)
	}
	g2, err := alice.RenewLease(ctx, key, "ci-7", g.Token, 10*time.Minute)
	if err != nil || g2.Token != g.Token || time.Until(g2.ExpiresAt) < 9*time.Minute {
		t.Errorf("renew = %+v, %v", g2, err)
	}
	if err := alice.ReleaseLease(ctx, key, "ci-7", g.Token); err != nil {
		t.Errorf("release = %v", err)
	}
	if st, err := bob.CheckLease(ctx, key); err != nil || st.Locked {
		t.Errorf("check after release = %+v, %v", st, err)
	}
	if err := alice.ReleaseLease(ctx, key, "ci-7", g.Token); client.CodeOf(err) != client.CodeLeaseLost {
		t.Errorf("release twice = %v", err)
	}
	g3, err := bob.AcquireLease(ctx, key, "ci-7", 0)
	if err != nil || g3.Token <= g.Token {
		t.Errorf("bob acquire after release = %+v, %v (tokens must grow)", g3, err)
	}

	// An operation's lease: no API caller can release it, even naming its
	// owner and token.
	const opKey = "issue:octo/demo#10"
	opID := strings.Repeat("c", 64)
	lease, err := env.coord.Acquire(ctx, opKey, opID, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := env.client(env.admin).ReleaseLease(ctx, opKey, opID, lease.Token); client.CodeOf(err) != client.CodeLeaseLost {
		t.Errorf("admin releasing an operation's lease = %v", err)
	}
	if st, _ := alice.CheckLease(ctx, opKey); !st.Locked || st.Owner != opID {
		t.Errorf("operation's lease = %+v", st)
	}
}

// An outside holder whose lease expired loses it to the next taker; its
// renewal is then lease_lost.
func TestAPILeaseExpiry(t *testing.T) {
	t.Parallel()
	env := newAPIEnv(t, func(o *apiEnvOptions) { o.fakeClock = true })
	ctx := context.Background()
	const key = "issue:octo/demo#11"
	alice, bob := env.client(env.alice), env.client(env.bob)
	g, err := alice.AcquireLease(ctx, key, "job", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !g.ExpiresAt.Equal(env.clock.Now().Add(5 * time.Second)) {
		t.Errorf("expiresAt %s on the coordinator's clock at %s", g.ExpiresAt, env.clock.Now())
	}
	env.clock.Advance(6 * time.Second)
	g2, err := bob.AcquireLease(ctx, key, "job", 5*time.Second)
	if err != nil || g2.Token <= g.Token {
		t.Fatalf("takeover = %+v, %v", g2, err)
	}
	_, err = alice.RenewLease(ctx, key, "job", g.Token, 5*time.Second)
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Code != client.CodeLeaseLost {
		t.Errorf("renew after takeover = %v", err)
	}
}

// Dead letters: listed and replayed by admin tokens only.
func TestAPIDeadLetters(t *testing.T) {
	t.Parallel()
	env := newAPIEnv(t)
	ctx := context.Background()
	v := env.submit(env.alice, "poison", 10)
	// A wait begun before the operation is dead-lettered ends when it is:
	// the operation waits for an operator from then on, not for time.
	type waited struct {
		op  client.Operation
		err error
		in  time.Duration
	}
	waitDone := make(chan waited, 1)
	go func() {
		start := time.Now()
		op, err := env.client(env.alice).Wait(ctx, v.OperationID, 30*time.Second)
		waitDone <- waited{op, err, time.Since(start)}
	}()
	time.Sleep(200 * time.Millisecond) // the wait is under way, finding no dead letter
	c := env.failingConsumer()
	admin := env.client(env.admin)
	var list client.DeadLetterList
	deadline := time.Now().Add(10 * time.Second)
	for {
		var err error
		list, err = admin.DeadLetters(ctx, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(list.DeadLetters) > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := c.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}
	if len(list.DeadLetters) != 1 || list.DeadLetters[0].OperationID != v.OperationID || list.DeadLetters[0].Failures != 1 {
		t.Fatalf("dead letters = %+v", list)
	}
	seq := list.DeadLetters[0].Sequence
	// The operation's status says where it is: its actor sees the dead
	// letter without the reason (baton's to read), an admin with it.
	w := <-waitDone
	if w.err != nil || w.op.Status != schema.StatusQueued || w.op.DeadLetter == nil || w.op.DeadLetter.Sequence != seq || w.in > 10*time.Second {
		t.Errorf("alice's wait = %+v, %v after %s; want queued with the dead letter, ended by it", w.op, w.err, w.in)
	}
	got, err := env.client(env.alice).Get(ctx, v.OperationID)
	if err != nil || got.DeadLetter == nil || *got.DeadLetter != (schema.DeadLetterInfo{Sequence: seq, Failures: 1, Time: list.DeadLetters[0].Time.UTC()}) {
		t.Errorf("alice's status = %+v, %v", got.DeadLetter, err)
	}
	if got, err := admin.Get(ctx, v.OperationID); err != nil || got.DeadLetter == nil || got.DeadLetter.Reason != "store unavailable" {
		t.Errorf("admin's status = %+v, %v", got.DeadLetter, err)
	}
	if op, err := env.client(env.alice).Wait(ctx, v.OperationID, 30*time.Second); err != nil || op.DeadLetter == nil {
		t.Errorf("a wait on the dead-lettered operation = %+v, %v; want it at once, with the dead letter", op, err)
	}
	if list, err := env.client(env.alice).List(ctx, client.ListOptions{}); err != nil || len(list.Operations) != 1 || list.Operations[0].DeadLetter != nil {
		t.Errorf("alice's list = %+v, %v; lists do not look dead letters up", list, err)
	}
	// /metrics shows the dead letter waiting, for an alert, until it is
	// replayed.
	waiting := func(n int) string {
		return fmt.Sprintf("# HELP baton_queue_dead_letters Dead letters waiting in the OPERATIONS_DLQ stream (neither replayed nor purged): each holds its resource's later operations.\n"+
			"# TYPE baton_queue_dead_letters gauge\nbaton_queue_dead_letters %d\n", n)
	}
	metrics := newQueueCollector(env.broker)
	if err := testutil.CollectAndCompare(metrics, strings.NewReader(waiting(1)), "baton_queue_dead_letters"); err != nil {
		t.Error(err)
	}
	if list.NextAfter != 0 {
		t.Errorf("nextAfter %d on the only page", list.NextAfter)
	}
	if page, err := admin.DeadLetters(ctx, seq, 0); err != nil || len(page.DeadLetters) != 0 {
		t.Errorf("after the last: %+v, %v", page, err)
	}
	if _, err := env.client(env.alice).DeadLetters(ctx, 0, 0); client.CodeOf(err) != client.CodeForbidden {
		t.Errorf("alice lists dead letters: %v", err)
	}
	if _, err := env.client(env.alice).ReplayDeadLetter(ctx, seq); client.CodeOf(err) != client.CodeForbidden {
		t.Errorf("alice replays: %v", err)
	}
	dl, err := admin.ReplayDeadLetter(ctx, seq)
	if err != nil || dl.OperationID != v.OperationID || dl.Sequence != seq {
		t.Errorf("replay = %+v, %v", dl, err)
	}
	if _, err := admin.ReplayDeadLetter(ctx, seq); client.CodeOf(err) != client.CodeNotFound {
		t.Errorf("replay twice = %v", err)
	}
	if list, err := admin.DeadLetters(ctx, 0, 0); err != nil || len(list.DeadLetters) != 0 {
		t.Errorf("after replay: %+v, %v", list, err)
	}
	if got, err := env.client(env.alice).Get(ctx, v.OperationID); err != nil || got.DeadLetter != nil {
		t.Errorf("alice's status after the replay = %+v, %v; want no dead letter", got.DeadLetter, err)
	}
	if err := testutil.CollectAndCompare(metrics, strings.NewReader(waiting(0)), "baton_queue_dead_letters"); err != nil {
		t.Error(err)
	}
	if s := env.broker.Stats(); s.Replayed != 1 {
		t.Errorf("broker replayed %d", s.Replayed)
	}
}

// A dead letter whose operation's record is gone (finished, then deleted
// after the retention) is not replayed either: there is no operation to
// run, and the operator is told so (404, naming it); the letter goes.
func TestAPIReplayOfDeletedOperation(t *testing.T) {
	t.Parallel()
	env := newAPIEnv(t)
	ctx := context.Background()
	v := env.submit(env.alice, "poison-then-pruned", 10)
	dl := env.deadLetterAll(v.OperationID)
	if _, err := env.client(env.alice).Cancel(ctx, v.OperationID); err != nil {
		t.Fatal(err)
	}
	if n, err := env.store.Prune(ctx, time.Now().Add(time.Hour)); err != nil || n != 1 {
		t.Fatalf("prune: %d, %v", n, err)
	}
	admin := env.client(env.admin)
	_, err := admin.ReplayDeadLetter(ctx, dl.Sequence)
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != http.StatusNotFound || ce.Code != client.CodeNotFound ||
		ce.Details["operationId"] != v.OperationID || !strings.Contains(ce.Message, "no longer exists") {
		t.Fatalf("replay of a deleted operation's dead letter = %#v", err)
	}
	if list, err := admin.DeadLetters(ctx, 0, 0); err != nil || len(list.DeadLetters) != 0 {
		t.Errorf("dead letters after the refused replay: %+v, %v", list, err)
	}
	if s := env.broker.Stats(); s.Replayed != 0 {
		t.Errorf("broker replayed %d", s.Replayed)
	}
}

// failingConsumer starts a consumer whose handler fails every message,
// dead-lettering it at its first failure. The caller stops it.
func (e *apiEnv) failingConsumer() *queue.Consumer {
	e.t.Helper()
	c, err := queue.NewConsumer(e.broker, queue.ConsumerConfig{
		Handler: func(ctx context.Context, id string) queue.Result {
			return queue.Failed(errors.New("store unavailable"))
		},
		MaxFailures: 1, FetchWait: 100 * time.Millisecond,
	})
	if err != nil {
		e.t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		e.t.Fatal(err)
	}
	return c
}

// deadLetterAll fails every operation's message from now on, so that it
// is dead-lettered at its first failure, and returns the dead letter of
// the operation id once its status view shows it.
func (e *apiEnv) deadLetterAll(id string) *schema.DeadLetterInfo {
	t := e.t
	t.Helper()
	ctx := context.Background()
	c := e.failingConsumer()
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := c.Stop(stopCtx); err != nil {
			t.Error(err)
		}
	})
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		op, err := e.client(e.admin).Get(ctx, id)
		if err != nil || time.Now().After(deadline) {
			t.Fatalf("never dead-lettered: %+v, %v", op, err)
		}
		if op.DeadLetter != nil {
			return op.DeadLetter
		}
	}
}

// The same request again for an operation waiting in the dead-letter
// stream finds it (200) and says where it waits, as its status does: the
// client learns why nothing happens rather than that it is queued.
func TestAPIResubmitDeadLetteredOperation(t *testing.T) {
	t.Parallel()
	env := newAPIEnv(t)
	v := env.submit(env.alice, "poison-resubmit", 10)
	dl := env.deadLetterAll(v.OperationID)
	r := env.do("POST", "/v1/operations", env.alice, apiSubmission("poison-resubmit", 10, "hello poison-resubmit"))
	var got schema.View
	r.decode(t, &got)
	if r.status != http.StatusOK || got.OperationID != v.OperationID || got.Status != schema.StatusQueued ||
		got.DeadLetter == nil || got.DeadLetter.Sequence != dl.Sequence || got.DeadLetter.Reason != "" {
		t.Fatalf("resubmission: %d %s", r.status, r.body)
	}
}

// A dead letter whose operation was cancelled since is not replayed: the
// operator is told the operation is already cancelled (409
// already_terminal, naming it), not that it is queued again, and the dead
// letter goes at once.
func TestAPIReplayOfCancelledOperation(t *testing.T) {
	t.Parallel()
	env := newAPIEnv(t)
	ctx := context.Background()
	v := env.submit(env.alice, "poison-then-cancel", 10)
	dl := env.deadLetterAll(v.OperationID)
	admin := env.client(env.admin)
	if op, err := env.client(env.alice).Cancel(ctx, v.OperationID); err != nil || op.Status != schema.StatusCancelled {
		t.Fatalf("cancel = %+v, %v", op, err)
	}
	_, err := admin.ReplayDeadLetter(ctx, dl.Sequence)
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != http.StatusConflict || ce.Code != client.CodeAlreadyTerminal ||
		ce.Details["operationId"] != v.OperationID || ce.Details["status"] != "cancelled" {
		t.Fatalf("replay of a cancelled operation's dead letter = %#v", err)
	}
	if list, err := admin.DeadLetters(ctx, 0, 0); err != nil || len(list.DeadLetters) != 0 {
		t.Errorf("dead letters after the refused replay: %+v, %v", list, err)
	}
	if s := env.broker.Stats(); s.Replayed != 0 {
		t.Errorf("broker replayed %d", s.Replayed)
	}
	if _, err := admin.ReplayDeadLetter(ctx, dl.Sequence); client.CodeOf(err) != client.CodeNotFound {
		t.Errorf("replay again = %v", err)
	}
}

// Tokens: missing, malformed, unknown and revoked tokens are 401 with a
// challenge; a revocation through the server's store is immediate.
func TestAPIAuthentication(t *testing.T) {
	t.Parallel()
	env := newAPIEnv(t)
	ctx := context.Background()
	tok := env.newToken(TokenSpec{Actor: "erin", Installations: []int64{1}})
	if _, err := env.client(tok).List(ctx, client.ListOptions{}); err != nil {
		t.Fatalf("fresh token: %v", err)
	}
	tokens, err := env.tokens.ListTokens(ctx)
	if err != nil {
		t.Fatal(err)
	}
	erin := tokens[len(tokens)-1]
	if erin.Actor != "erin" {
		t.Fatalf("last token is %s's", erin.Actor)
	}
	if _, err := env.tokens.RevokeToken(ctx, erin.ID); err != nil {
		t.Fatal(err)
	}
	for name, hs := range map[string][]string{
		"none":      nil,
		"revoked":   {"Bearer " + tok},
		"unknown":   {"Bearer " + TokenPrefix + strings.Repeat("A", 43)},
		"malformed": {"Bearer not-a-token"},
		"basic":     {"Basic YWxpY2U6c2VjcmV0"},
		"empty":     {"Bearer "},
		// Two Authorization headers are one too many, whichever is
		// valid: a proxy in front of baton may read the other one.
		"a valid one, then another": {"Bearer " + env.alice, "Bearer " + tok},
		"another, then a valid one": {"Bearer " + tok, "Bearer " + env.alice},
		"a valid one twice":         {"Bearer " + env.alice, "Bearer " + env.alice},
	} {
		req, _ := http.NewRequest("GET", env.URL+"/v1/operations", nil)
		for _, h := range hs {
			req.Header.Add("Authorization", h)
		}
		resp, err := env.http.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 401 || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("%s token: %d, WWW-Authenticate %q", name, resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
		}
	}
	// Unauthenticated routes.
	for _, p := range []string{"/healthz", "/readyz", "/v1/openapi.json", "/metrics"} {
		if r := env.do("GET", p, "", nil); r.status != 200 {
			t.Errorf("GET %s without a token: %d", p, r.status)
		}
	}
}

// Health, readiness and metrics.
func TestAPIHealthReadinessMetrics(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	queueErr := errors.New("queue: not running")
	env := newAPIEnv(t, func(o *apiEnvOptions) {
		o.readiness = []ReadinessCheck{
			{Name: "store", Check: func(context.Context) error { return nil }},
			{Name: "queue", Check: func(context.Context) error { mu.Lock(); defer mu.Unlock(); return queueErr }},
		}
	})
	r := env.do("GET", "/readyz", "", nil)
	var rd client.Readiness
	r.decode(t, &rd)
	if r.status != 503 || rd.Status != "unavailable" || rd.Checks["queue"] != "queue: not running" || rd.Checks["store"] != "ok" {
		t.Errorf("readyz while the queue is down: %d %s", r.status, r.body)
	}
	mu.Lock()
	queueErr = nil
	mu.Unlock()
	if rd, err := env.client("").Ready(context.Background()); err != nil || rd.Status != "ready" {
		t.Errorf("readyz: %+v, %v", rd, err)
	}
	if err := env.client("").Health(context.Background()); err != nil {
		t.Errorf("healthz: %v", err)
	}
	env.submit(env.alice, "m-1", 10)
	m := env.do("GET", "/metrics", "", nil)
	if m.status != 200 || !strings.Contains(string(m.body), `baton_api_requests_total{code="2xx",route="submitOperation"} 1`) ||
		!strings.Contains(string(m.body), `baton_api_request_duration_seconds_count{route="readyz"} 2`) {
		t.Errorf("metrics:\n%s", m.body)
	}
	doc, err := env.client("").OpenAPI(context.Background())
	if err != nil || !strings.Contains(string(doc), `"openapi": "3.0.3"`) {
		t.Errorf("openapi: %v", err)
	}
}

// apiFakeOperations is the Operations seam as functions, for failures the
// real executor does not produce on demand.
type apiFakeOperations struct {
	submit func(ctx context.Context, actor string, s schema.Submission) (schema.Record, bool, error)
	get    func(ctx context.Context, id string) (schema.Record, error)
}

func (f apiFakeOperations) Submit(ctx context.Context, actor string, s schema.Submission) (schema.Record, bool, error) {
	return f.submit(ctx, actor, s)
}
func (f apiFakeOperations) Get(ctx context.Context, id string) (schema.Record, error) {
	return f.get(ctx, id)
}
func (f apiFakeOperations) List(context.Context, executor.ListFilter) ([]schema.Record, string, error) {
	return nil, "", nil
}
func (f apiFakeOperations) Cancel(ctx context.Context, id string) (schema.Record, error) {
	return f.get(ctx, id)
}

// A failure without a code is "internal error" to the client, logged once
// with its cause; a panic is recovered the same way.
func TestAPIInternalErrors(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zapcore.InfoLevel)
	env := newAPIEnv(t, func(o *apiEnvOptions) {
		o.logger = zap.New(core)
		o.ops = apiFakeOperations{
			submit: func(context.Context, string, schema.Submission) (schema.Record, bool, error) {
				return schema.Record{}, false, errors.New("disk full at /var/lib/secret")
			},
			get: func(context.Context, string) (schema.Record, error) { panic("nil map") },
		}
	})
	r := env.do("POST", "/v1/operations", env.alice, apiSubmission("k", 10, "x"))
	if r.status != 500 || r.errorCode() != "internal" || strings.Contains(string(r.body), "disk") {
		t.Errorf("internal error: %d %s", r.status, r.body)
	}
	if n := logs.FilterMessage("internal error").FilterField(zap.String("event", "api_internal_error")).Len(); n != 1 {
		t.Errorf("internal error logged %d times", n)
	}
	r = env.do("GET", "/v1/operations/"+strings.Repeat("a", 64), env.alice, nil)
	if r.status != 500 || r.errorCode() != "internal" {
		t.Errorf("panic: %d %s", r.status, r.body)
	}
	if n := logs.FilterField(zap.String("event", "api_panic")).Len(); n != 1 {
		t.Errorf("panic logged %d times", n)
	}
	for _, e := range logs.All() {
		for _, f := range e.Context {
			if strings.Contains(f.String, TokenPrefix) {
				t.Errorf("a log line holds a token: %v", e)
			}
		}
	}
}

// Handlers mounted beside the API: with and without the token check.
func TestAPIMountedHandlers(t *testing.T) {
	t.Parallel()
	env := newAPIEnv(t)
	env.api.Handle("POST /webhooks/github", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusAccepted)
	}))
	env.api.HandleAuthenticated("GET /v1/whoami", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, ok := PrincipalFromContext(r.Context())
		if !ok {
			env.api.WriteAPIError(w, r, errors.New("no principal"))
			return
		}
		fmt.Fprint(w, p.Actor)
	}))
	resp, err := http.Post(env.URL+"/webhooks/github", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 202 {
		t.Errorf("mounted webhook handler: %d", resp.StatusCode)
	}
	req, _ := http.NewRequest("GET", env.URL+"/v1/whoami", nil)
	if resp, err = http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Errorf("authenticated mount without a token: %d", resp.StatusCode)
	}
	req.Header.Set("Authorization", "Bearer "+env.alice)
	if resp, err = http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	_, _ = fmt.Fscan(resp.Body, &sb)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("authenticated mount: %d", resp.StatusCode)
	}
}

// Every route the API serves is described, under its name, and every
// described operation is served.
func TestOpenAPIDescribesEveryRoute(t *testing.T) {
	t.Parallel()
	spec := loadAPISpec(t)
	api, err := NewAPI(APIConfig{Operations: apiFakeOperations{}, Leases: &CoordinatorLeases{}, DeadLetters: &queue.Broker{},
		Installations: apiTestInstallations, Tokens: &TokenStore{}})
	if err != nil {
		t.Fatal(err)
	}
	served := map[string]bool{"GET /metrics": true}
	// The merge queue's routes are mounted by the server; their responses
	// are validated in TestServerMergeQueue.
	for _, rt := range mergequeue.Routes() {
		served[rt] = true
	}
	// The webhook receiver is mounted by the server (for every method; it
	// answers 405 itself); its answers are validated in the webhook tests.
	served["POST /webhooks/github"] = true
	for _, rt := range api.routeList() {
		served[rt.Method+" "+rt.Path] = true
		item := spec.doc.Paths.Find(rt.Path)
		if item == nil || item.GetOperation(rt.Method) == nil {
			t.Errorf("%s is served but not described", rt)
			continue
		}
		if id := item.GetOperation(rt.Method).OperationID; id != rt.Name {
			t.Errorf("%s is described as %s, served as %s", rt, id, rt.Name)
		}
	}
	for path, item := range spec.doc.Paths.Map() {
		for method := range item.Operations() {
			if !served[method+" "+path] {
				t.Errorf("%s %s is described but not served", method, path)
			}
		}
	}
}

// EndWaits answers the waits in progress at once, so that a shutdown is
// not held up by them.
func TestAPIEndWaits(t *testing.T) {
	t.Parallel()
	env := newAPIEnv(t)
	v := env.submit(env.alice, "end-waits", 10)
	done := make(chan apiResponse, 1)
	go func() { done <- env.do("GET", "/v1/operations/"+v.OperationID+"?wait=60s", env.alice, nil) }()
	env.api.EndWaits()
	env.api.EndWaits()
	select {
	case r := <-done:
		var got schema.View
		r.decode(t, &got)
		if r.status != 200 || got.Status != schema.StatusQueued {
			t.Errorf("ended wait: %d %s", r.status, r.body)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the wait did not end")
	}
}

// With the queue away, the dead-letter routes answer 503 with a message and
// Retry-After, not a bare 500.
func TestAPIDeadLettersQueueAway(t *testing.T) {
	t.Parallel()
	env := newAPIEnv(t)
	if err := env.broker.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ method, path string }{{"GET", "/v1/dlq"}, {"POST", "/v1/dlq/1/replay"}} {
		r := env.do(c.method, c.path, env.admin, nil)
		if r.status != http.StatusServiceUnavailable || !strings.Contains(string(r.body), `"code":"internal"`) ||
			!strings.Contains(string(r.body), "queue is not reachable") || r.header.Get("Retry-After") == "" {
			t.Errorf("%s %s with the queue stopped: %d %s", c.method, c.path, r.status, r.body)
		}
	}
}

// With the queue away, the status of an unfinished operation is answered
// from the store at once: no dead-letter lookup is tried (with an external
// NATS restarting it would wait for its timeout on every request), and
// nothing is logged for each request.
func TestAPIStatusWhileTheQueueIsAway(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zapcore.InfoLevel)
	env := newAPIEnv(t, func(o *apiEnvOptions) { o.logger = zap.New(core) })
	v := env.submit(env.alice, "away", 10)
	if err := env.broker.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		got, err := env.client(env.alice).Get(context.Background(), v.OperationID)
		if err != nil || got.Status != schema.StatusQueued || got.DeadLetter != nil {
			t.Fatalf("status with the queue away = %+v, %v", got, err)
		}
	}
	if n := logs.FilterField(zap.String("event", "api_dead_letter_lookup_failed")).Len(); n != 0 {
		t.Errorf("%d dead-letter lookups failed and were logged, want none tried", n)
	}
}

// GET /v1/openapi.json takes no query parameters: a query string is 400,
// as the description says, and the description itself is still served.
func TestOpenAPIRefusesQuery(t *testing.T) {
	t.Parallel()
	env := newAPIEnv(t)
	for _, q := range []string{"?format=yaml", "?x", "?a=%zz"} {
		if r := env.do("GET", "/v1/openapi.json"+q, "", nil); r.status != http.StatusBadRequest || r.errorCode() != "invalid_request" {
			t.Errorf("GET /v1/openapi.json%s: %d %s", q, r.status, apiTruncate(string(r.body), 200))
		}
	}
	if r := env.do("GET", "/v1/openapi.json", "", nil); r.status != http.StatusOK || string(r.body) != string(OpenAPIDocument()) {
		t.Errorf("GET /v1/openapi.json: %d", r.status)
	}
}

// A token revoked while one of its ?wait= requests waits is refused there
// too, within about a second: the wait does not go on reading the
// operation for the revoked token and hand it over when it ends.
func TestAPIWaitEndsWhenTokenRevoked(t *testing.T) {
	t.Parallel()
	env := newAPIEnv(t)
	tok, info, err := env.tokens.CreateToken(context.Background(), TokenSpec{Actor: "erin", Installations: []int64{1}})
	if err != nil {
		t.Fatal(err)
	}
	v := env.submit(tok, "revoked-wait", 10)
	done := make(chan apiResponse, 1)
	go func() { done <- env.do("GET", "/v1/operations/"+v.OperationID+"?wait=20s", tok, nil) }()
	time.Sleep(200 * time.Millisecond) // the wait has begun
	if _, err := env.tokens.RevokeToken(context.Background(), info.ID); err != nil {
		t.Fatal(err)
	}
	revoked := time.Now()
	select {
	case r := <-done:
		if r.status != http.StatusUnauthorized || r.errorCode() != "unauthorized" || time.Since(revoked) > 5*time.Second {
			t.Errorf("wait of a token revoked meanwhile: %d after %s: %s", r.status, time.Since(revoked).Round(time.Millisecond), r.body)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the wait did not end")
	}
}

// An operation dead-lettered in the last second of a ?wait= is answered
// with its dead letter when the wait runs out: the answer is read at the
// end of the wait, not as it stood at the last look, so that `baton status
// --wait` exits 6 (dead-lettered), not 5 (still running).
func TestAPIWaitEndingSeesALateDeadLetter(t *testing.T) {
	t.Parallel()
	env := newAPIEnv(t)
	ctx := context.Background()
	v := env.submit(env.alice, "late-poison", 10)
	type waited struct {
		op  client.Operation
		err error
	}
	waitDone := make(chan waited, 1)
	go func() {
		// Shorter than the interval between dead-letter looks: the wait
		// itself never looks.
		op, err := env.client(env.alice).Wait(ctx, v.OperationID, 900*time.Millisecond)
		waitDone <- waited{op, err}
	}()
	time.Sleep(150 * time.Millisecond) // the wait is under way, finding no dead letter
	c := env.failingConsumer()
	defer func() {
		stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_ = c.Stop(stopCtx)
	}()
	w := <-waitDone
	if w.err != nil || w.op.DeadLetter == nil {
		t.Fatalf("wait = %+v, %v; want the operation with its dead letter", w.op, w.err)
	}
}

// A merge that names GitHub's default method and one that names none ask
// for the same merge: the second is the first operation (200), not an
// idempotency conflict, whichever came first; another method is one.
func TestAPISubmitMergeDefaultMethodIsTheSameRequest(t *testing.T) {
	t.Parallel()
	env := newAPIEnv(t)
	const sha = "c44b8a5afaf01af22631fd78c87ecf28f3d2eafa"
	merge := func(key, payload string) apiResponse {
		return env.do("POST", "/v1/operations", env.alice, `{"idempotencyKey":"`+key+`","action":"github.pulls.merge",`+
			`"resource":{"type":"pull_request","id":"octo/demo#1"},"payload":`+payload+`}`)
	}
	for _, order := range [][2]string{
		{`{"sha":"` + sha + `"}`, `{"sha":"` + sha + `","method":"merge"}`},
		{`{"sha":"` + sha + `","method":"merge"}`, `{"sha":"` + sha + `"}`},
	} {
		key := "merge-" + strconv.Itoa(len(order[0]))
		first := merge(key, order[0])
		if first.status != http.StatusCreated {
			t.Fatalf("first %s: %d %s", order[0], first.status, first.body)
		}
		second := merge(key, order[1])
		if second.status != http.StatusOK {
			t.Errorf("%s after %s: %d %s, want 200", order[1], order[0], second.status, second.body)
		}
		if third := merge(key, `{"sha":"`+sha+`","method":"squash"}`); third.errorCode() != "idempotency_conflict" {
			t.Errorf("squash after %s: %d %s, want idempotency_conflict", order[0], third.status, third.body)
		}
	}
}
