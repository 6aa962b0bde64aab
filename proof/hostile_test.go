package proof

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-dev/baton/app"
	"github.com/baton-dev/baton/app/client"
	"github.com/baton-dev/baton/app/ghsim"
	"github.com/baton-dev/baton/internal/sqlite"
	"github.com/baton-dev/baton/schema"
)

// The bound within which a valid request must be served right after the
// flood (generous: CI machines run other tests meanwhile).
const responsiveBound = 3 * time.Second

// dbSnapshot digests every row of every table of baton's database.
func dbSnapshot(t *testing.T, db *sqlite.DB) map[string]string {
	t.Helper()
	ctx := context.Background()
	rows, err := db.Query(ctx, `SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name`)
	if err != nil {
		t.Fatal(err)
	}
	var tables []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		tables = append(tables, n)
	}
	rows.Close()
	snap := map[string]string{}
	for _, table := range tables {
		snap[table] = tableDigest(t, db, table)
	}
	return snap
}

func tableDigest(t *testing.T, db *sqlite.DB, table string) string {
	t.Helper()
	rows, err := db.Query(context.Background(), `SELECT * FROM "`+table+`"`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, fmt.Sprintf("%q", vals))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	sort.Strings(lines)
	sum := sha256.Sum256([]byte(strings.Join(lines, "\n")))
	return fmt.Sprintf("%d rows %x", len(lines), sum[:8])
}

// hostileResult tallies the answers to a flood.
type hostileResult struct {
	mu      sync.Mutex
	byCode  map[int]int
	errs    []string
	slowest time.Duration
}

func (h *hostileResult) add(status int, err error, d time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err != nil {
		h.errs = append(h.errs, err.Error())
		return
	}
	h.byCode[status]++
	h.slowest = max(h.slowest, d)
}

func (h *hostileResult) String() string {
	var parts []string
	for code, n := range h.byCode {
		parts = append(parts, fmt.Sprintf("%d × %d", n, code))
	}
	sort.Strings(parts)
	return fmt.Sprintf("%s; slowest answer %v; %d transport errors", strings.Join(parts, ", "), h.slowest.Round(time.Millisecond), len(h.errs))
}

// TestHostileRequests floods a running server with 1,000 concurrent webhook
// deliveries whose signatures are missing, malformed or wrong, and 1,000
// concurrent API requests (on every authenticated route) whose tokens are
// missing, forged, malformed or revoked. Every one is refused; nothing in
// the database changes (operations, deliveries, leases, tokens — every
// table); and a valid request right after is served within the bound.
func TestHostileRequests(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := newInProcess(t)
	secret := p.sim.WebhookSecret()

	// State worth attacking: an operation that ran, an operation waiting,
	// a lease an outside holder keeps, a revoked token, a delivery.
	aliceTok := p.token(t, app.TokenSpec{Actor: "alice", Installations: []int64{1}})
	alice := p.client(t, aliceTok)
	ran, _, err := alice.Submit(ctx, client.SubmitRequest{IdempotencyKey: "hostile-ran", Action: schema.ActionComment,
		Resource: client.Resource{Type: schema.ResourceIssue, ID: "octo/demo#10"}, Payload: json.RawMessage(`{"body":"before the flood"}`)})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if v, err := alice.Wait(wctx, ran.OperationID, time.Minute); err != nil || !v.Status.Terminal() {
		t.Fatalf("the first operation did not finish: %v %v", v.Status, err)
	}
	lease, err := alice.AcquireLease(ctx, "issue:octo/demo#11", "deploy", 15*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	waiting, _, err := alice.Submit(ctx, client.SubmitRequest{IdempotencyKey: "hostile-waits", Action: schema.ActionComment,
		Resource: client.Resource{Type: schema.ResourceIssue, ID: "octo/demo#11"}, Payload: json.RawMessage(`{"body":"waits for the lease"}`)})
	if err != nil {
		t.Fatal(err)
	}
	revokedTok, desc, err := p.tokens.CreateToken(ctx, app.TokenSpec{Actor: "mallory", AllInstallations: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.tokens.RevokeToken(ctx, desc.ID); err != nil {
		t.Fatal(err)
	}
	sendDelivery := func(id string) int {
		body := []byte(`{"zen":"Keep it logically awesome.","hook_id":1}`)
		req, _ := http.NewRequest("POST", p.srv.URL()+"/webhooks/github", bytes.NewReader(body))
		req.Header.Set("X-GitHub-Event", "ping")
		req.Header.Set("X-GitHub-Delivery", id)
		req.Header.Set("X-Hub-Signature-256", ghsim.SignPayload(secret, body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if s := sendDelivery("before-the-flood"); s != http.StatusAccepted {
		t.Fatalf("a valid delivery: %d", s)
	}

	db, err := sqlite.Open(ctx, filepath.Join(p.dir, app.DatabaseFile), sqlite.Options{ReadConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// Let the state settle (the outbox marks the waiting operation
	// dispatched a moment after its publish): two snapshots alike.
	var before map[string]string
	if !poll(ctx, 10*time.Second, 250*time.Millisecond, func() bool {
		again := dbSnapshot(t, db)
		same := before != nil && maps.Equal(before, again)
		before = again
		return same
	}) {
		t.Fatal("the database did not settle before the flood")
	}

	// The flood.
	tr := &http.Transport{MaxIdleConnsPerHost: 100, MaxConnsPerHost: 0}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: time.Minute}
	hooks, apis := &hostileResult{byCode: map[int]int{}}, &hostileResult{byCode: map[int]int{}}
	start := make(chan struct{})
	var wg sync.WaitGroup
	// fire sends req once the flood starts and tallies the answer in into.
	fire := func(req *http.Request, into *hostileResult) {
		<-start
		t0 := time.Now()
		resp, err := hc.Do(req)
		if err != nil {
			into.add(0, err, 0)
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		into.add(resp.StatusCode, nil, time.Since(t0))
	}
	for i := range 1000 {
		wg.Go(func() { fire(badDelivery(p.srv.URL(), secret, i), hooks) })
		wg.Go(func() {
			fire(badAPIRequest(p.srv.URL(), i, aliceTok, revokedTok, ran.OperationID, lease), apis)
		})
	}
	flood := time.Now()
	close(start)
	wg.Wait()
	took := time.Since(flood)

	// Every forged request was refused, and nothing changed.
	if hooks.byCode[401] != 1000 || len(hooks.errs) > 0 {
		t.Errorf("1,000 badly signed deliveries, want 1,000 × 401: %v %v", hooks, hooks.errs[:min(3, len(hooks.errs))])
	}
	if apis.byCode[401] != 1000 || len(apis.errs) > 0 {
		t.Errorf("1,000 requests with bad tokens, want 1,000 × 401: %v %v", apis, apis.errs[:min(3, len(apis.errs))])
	}
	after := dbSnapshot(t, db)
	for table, b := range before {
		if after[table] != b {
			t.Errorf("table %s changed under the flood: %s → %s", table, b, after[table])
		}
	}
	if len(after) != len(before) {
		t.Errorf("tables before %v, after %v", slices.Sorted(maps.Keys(before)), slices.Sorted(maps.Keys(after)))
	}

	// The server is still at everyone's service.
	t0 := time.Now()
	op, created, err := alice.Submit(ctx, client.SubmitRequest{IdempotencyKey: "hostile-after", Action: schema.ActionComment,
		Resource: client.Resource{Type: schema.ResourceIssue, ID: "octo/demo#12"}, Payload: json.RawMessage(`{"body":"after the flood"}`)})
	submitTook := time.Since(t0)
	if err != nil || !created {
		t.Fatalf("a valid submission after the flood: %v (created %v)", err, created)
	}
	t1 := time.Now()
	if s := sendDelivery("after-the-flood"); s != http.StatusAccepted {
		t.Errorf("a valid delivery after the flood: %d", s)
	}
	hookTook := time.Since(t1)
	if submitTook > responsiveBound || hookTook > responsiveBound {
		t.Errorf("valid requests after the flood took %v (submit) and %v (delivery), want under %v", submitTook, hookTook, responsiveBound)
	}
	if v, err := alice.Wait(wctx, op.OperationID, time.Minute); err != nil || v.Status != schema.StatusSucceeded {
		t.Errorf("the operation submitted after the flood: %v %v", v.Status, err)
	}
	st, err := alice.CheckLease(ctx, lease.Key)
	if err != nil || !st.Locked || st.Token != lease.Token {
		t.Errorf("the outside holder's lease after the flood: %+v %v", st, err)
	}
	if v, err := alice.Get(ctx, waiting.OperationID); err != nil || v.Status != schema.StatusQueued {
		t.Errorf("the waiting operation after the flood: %v %v", v.Status, err)
	}
	t.Logf("flood of 2,000 concurrent forged requests answered in %v\n  deliveries: %v\n  API: %v\n  then a valid submit took %v, a valid delivery %v",
		took.Round(time.Millisecond), hooks, apis, submitTook.Round(time.Millisecond), hookTook.Round(time.Millisecond))
}

// badDelivery is the i-th forged delivery: a plausible event whose
// signature is missing, malformed, made with another secret, made for
// another body, or cut short.
func badDelivery(base, secret string, i int) *http.Request {
	body := []byte(fmt.Sprintf(`{"action":"opened","number":%d,"installation":{"id":1},"repository":{"full_name":"octo/demo"},"pull_request":{"number":%d}}`, i, i))
	if i%50 == 0 {
		// Now and then a large one, to make the receiver read it all.
		body = append(body[:len(body)-1], []byte(`,"padding":"`+strings.Repeat("x", 512<<10)+`"}`)...)
	}
	var sig string
	switch i % 8 {
	case 0: // none
	case 1:
		sig = "sha1=" + strings.Repeat("ab", 20)
	case 2:
		sig = ghsim.SignPayload("not the secret", body)
	case 3:
		sig = ghsim.SignPayload(secret, append([]byte(nil), body[:len(body)-1]...)) // another body
	case 4:
		sig = ghsim.SignPayload(secret, body)[:40] // cut short
	case 5:
		sig = ghsim.SignPayload("", body)
	case 6:
		sig = strings.ToUpper(ghsim.SignPayload("not the secret either", body))
	case 7:
		tampered := append([]byte(nil), body...)
		tampered[len(tampered)-2] ^= 1
		sig = ghsim.SignPayload(secret, tampered)
	}
	req, _ := http.NewRequest("POST", base+"/webhooks/github", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-GitHub-Event", "pull_request")
	req.Header.Set("X-GitHub-Delivery", fmt.Sprintf("forged-%d", i))
	if sig != "" {
		req.Header.Set("X-Hub-Signature-256", sig)
	}
	return req
}

// badAPIRequest is the i-th API request with a bad token, on one of the
// authenticated routes, with a body that would be valid.
func badAPIRequest(base string, i int, valid, revoked, opID string, lease client.LeaseGrant) *http.Request {
	leasePath := client.LeasePath(lease.Key)
	routes := []struct {
		method, path, body string
	}{
		{"POST", "/v1/operations", fmt.Sprintf(`{"idempotencyKey":"forged-%d","action":"github.issues.comment","resource":{"type":"issue","id":"octo/demo#10"},"payload":{"body":"forged"}}`, i)},
		{"GET", "/v1/operations", ""},
		{"GET", "/v1/operations/" + opID, ""},
		{"POST", "/v1/operations/" + opID + "/cancel", ""},
		{"POST", leasePath + "/acquire", `{"owner":"deploy","ttlSeconds":60}`},
		{"POST", leasePath + "/renew", fmt.Sprintf(`{"owner":"deploy","token":%d,"ttlSeconds":60}`, lease.Token)},
		{"POST", leasePath + "/release", fmt.Sprintf(`{"owner":"deploy","token":%d}`, lease.Token)},
		{"GET", leasePath, ""},
		{"GET", "/v1/dlq", ""},
		{"POST", "/v1/dlq/1/replay", ""},
		{"GET", "/v1/installations", ""},
	}
	r := routes[i%len(routes)]
	var rd io.Reader
	if r.body != "" {
		rd = strings.NewReader(r.body)
	}
	path := r.path
	var auth string
	switch (i / len(routes)) % 10 {
	case 0: // none
	case 1:
		auth = "Bearer "
	case 2: // right shape, unknown
		random := make([]byte, 32)
		_, _ = rand.Read(random)
		auth = "Bearer " + app.TokenPrefix + base64.RawURLEncoding.EncodeToString(random)[:len(valid)-len(app.TokenPrefix)]
	case 3:
		auth = "Bearer " + revoked
	case 4: // one character off
		b := []byte(valid)
		b[len(b)-1] ^= 1
		auth = "Bearer " + string(b)
	case 5:
		auth = "Basic " + base64.StdEncoding.EncodeToString([]byte("alice:"+valid))
	case 6:
		auth = "Bearer " + valid + " " + valid
	case 7:
		auth = "Bearer " + app.TokenPrefix + strings.Repeat("A", 4000)
	case 8:
		auth = "Bearer " + strings.Replace(valid, "_", "_ü", 1)
	case 9: // in the query, where tokens do not go (no route has a query)
		path += "?access_token=" + valid
	}
	req, _ := http.NewRequest(r.method, base+path, rd)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return req
}
