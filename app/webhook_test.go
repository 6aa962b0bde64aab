package app

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-dev/baton/app/ghsim"
	"github.com/baton-dev/baton/internal/sqlite"
)

// GitHub's documented example of X-Hub-Signature-256.
func TestWebhookSignatureGitHubExample(t *testing.T) {
	t.Parallel()
	const (
		secret = "It's a Secret to Everybody"
		body   = "Hello, World!"
		want   = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
	)
	if got := webhookSignature(secret, []byte(body)); got != want {
		t.Errorf("signature = %s, want %s", got, want)
	}
	if !validWebhookSignature(want, []byte(body), secret) {
		t.Error("GitHub's example signature refused")
	}
	for _, bad := range []string{
		"", "sha256=", "sha1=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17",
		"sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e18",
		"sha256=757107EA0EB2509FC211221CCE984B8A37570B6D7586C22C46F4379C8B043E1", // short
		"sha256=zz7107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17",
	} {
		if validWebhookSignature(bad, []byte(body), secret) {
			t.Errorf("signature %q accepted", bad)
		}
	}
	if validWebhookSignature(want, []byte(body+" "), secret) || validWebhookSignature(want, []byte(body), secret+"x") {
		t.Error("signature accepted for another body or secret")
	}

	// The receiver takes GitHub's example end to end.
	db := openHookDB(t, sqlite.Options{Synchronous: "NORMAL"})
	l, _ := NewDeliveryLedger(db, nil)
	w, err := NewWebhookReceiver(WebhookConfig{Ledger: l, Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	rec := serveHook(t, w, "POST", map[string]string{"X-Hub-Signature-256": want, "X-GitHub-Event": "ping", "X-GitHub-Delivery": "d-1"}, []byte(`{"zen":"`+body+`"}`))
	if rec.Code != http.StatusUnauthorized {
		t.Errorf("a body other than the one signed: %d", rec.Code)
	}
}

// serveHook sends one request to the receiver. The exchange is validated
// against the OpenAPI description (see checkHookExchange).
func serveHook(t testing.TB, h http.Handler, method string, headers map[string]string, body []byte) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(method, "/webhooks/github", bytes.NewReader(body))
	for k, v := range headers {
		r.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	checkHookExchange(t, r, body, rec)
	return rec
}

// checkHookExchange fails t unless the receiver's answer matches the
// OpenAPI description of POST /webhooks/github (and the request too, when
// the delivery was taken), as apiSpecTransport does for the API.
func checkHookExchange(t testing.TB, r *http.Request, body []byte, rec *httptest.ResponseRecorder) {
	t.Helper()
	if err := loadAPISpec(t).check(r, body, rec.Code, rec.Header(), rec.Body.Bytes()); err != nil {
		t.Errorf("OpenAPI: %v", err)
	}
}

func signedHook(secret, event, id string, body []byte) map[string]string {
	return map[string]string{"X-Hub-Signature-256": webhookSignature(secret, body), "X-GitHub-Event": event, "X-GitHub-Delivery": id, "Content-Type": "application/json"}
}

func hookErrorCode(t *testing.T, rec *httptest.ResponseRecorder) string {
	t.Helper()
	var body struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatalf("error body %q: %v", rec.Body.String(), err)
	}
	if body.Error.Message == "" {
		t.Errorf("error without message: %s", rec.Body.String())
	}
	return body.Error.Code
}

func newHookReceiver(t *testing.T, cfg WebhookConfig) (*WebhookReceiver, *DeliveryLedger) {
	t.Helper()
	db := openHookDB(t, sqlite.Options{Synchronous: "NORMAL"})
	l, err := NewDeliveryLedger(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Ledger = l
	if cfg.Secret == "" {
		cfg.Secret = "s3cret"
	}
	w, err := NewWebhookReceiver(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return w, l
}

// The receiver's answers, one case each, and that only a valid delivery
// reaches the ledger.
func TestWebhookReceiverAnswers(t *testing.T) {
	t.Parallel()
	w, l := newHookReceiver(t, WebhookConfig{MaxBodyBytes: 1 << 10, MaxInFlightBytes: 1 << 20})
	ctx := hookCtx(t)
	body := []byte(`{"action":"opened","installation":{"id":7},"repository":{"full_name":"Octo/App"},"number":1}`)

	rec := serveHook(t, w, "GET", nil, nil)
	if rec.Code != http.StatusMethodNotAllowed || rec.Header().Get("Allow") != "POST" {
		t.Errorf("GET: %d %v", rec.Code, rec.Header())
	}
	rec = serveHook(t, w, "POST", map[string]string{"X-GitHub-Event": "pull_request", "X-GitHub-Delivery": "d-1"}, body)
	if rec.Code != http.StatusUnauthorized || hookErrorCode(t, rec) != "unauthorized" {
		t.Errorf("unsigned: %d %s", rec.Code, rec.Body)
	}
	rec = serveHook(t, w, "POST", signedHook("wrong", "pull_request", "d-1", body), body)
	if rec.Code != http.StatusUnauthorized || hookErrorCode(t, rec) != "unauthorized" {
		t.Errorf("wrong secret: %d %s", rec.Code, rec.Body)
	}
	// A bad signature is 401 even when the delivery's headers are missing:
	// an unsigned caller does not learn which headers are required.
	for _, missing := range []string{"X-GitHub-Delivery", "X-GitHub-Event"} {
		for name, sig := range map[string]string{"wrong secret": webhookSignature("wrong", body), "none": ""} {
			h := signedHook("s3cret", "pull_request", "d-1", body)
			delete(h, missing)
			h["X-Hub-Signature-256"] = sig
			if rec = serveHook(t, w, "POST", h, body); rec.Code != http.StatusUnauthorized || hookErrorCode(t, rec) != "unauthorized" {
				t.Errorf("signature %s, no %s: %d %s", name, missing, rec.Code, rec.Body)
			}
		}
	}
	h := signedHook("s3cret", "pull_request", "d-1", body)
	delete(h, "X-GitHub-Delivery")
	if rec = serveHook(t, w, "POST", h, body); rec.Code != http.StatusBadRequest || hookErrorCode(t, rec) != "invalid_request" {
		t.Errorf("no delivery ID: %d %s", rec.Code, rec.Body)
	}
	h = signedHook("s3cret", "pull_request", "d-1", body)
	delete(h, "X-GitHub-Event")
	if rec = serveHook(t, w, "POST", h, body); rec.Code != http.StatusBadRequest {
		t.Errorf("no event: %d %s", rec.Code, rec.Body)
	}
	big := append([]byte(`{"x":"`), bytes.Repeat([]byte("a"), 2<<10)...)
	big = append(big, `"}`...)
	if rec = serveHook(t, w, "POST", signedHook("s3cret", "pull_request", "d-big", big), big); rec.Code != http.StatusRequestEntityTooLarge || hookErrorCode(t, rec) != "payload_too_large" {
		t.Errorf("too large: %d %s", rec.Code, rec.Body)
	}
	// The same without Content-Length (chunked): read with the limit.
	r := httptest.NewRequest("POST", "/webhooks/github", io.MultiReader(bytes.NewReader(big)))
	r.ContentLength = -1
	for k, v := range signedHook("s3cret", "pull_request", "d-big", big) {
		r.Header.Set(k, v)
	}
	rr := httptest.NewRecorder()
	w.ServeHTTP(rr, r)
	checkHookExchange(t, r, big, rr)
	if rr.Code != http.StatusRequestEntityTooLarge {
		t.Errorf("too large, chunked: %d", rr.Code)
	}
	for _, bad := range []string{`[1]`, `null`, `"x"`, `{"action": 5}`, `{"repository":{"full_name":"no-slash"}}`, `{`} {
		if rec = serveHook(t, w, "POST", signedHook("s3cret", "pull_request", "d-bad", []byte(bad)), []byte(bad)); rec.Code != http.StatusBadRequest {
			t.Errorf("body %s: %d", bad, rec.Code)
		}
	}
	if rec = serveHook(t, w, "POST", signedHook("s3cret", "pull_request", "bad id!", body), body); rec.Code != http.StatusBadRequest {
		t.Errorf("malformed delivery ID: %d", rec.Code)
	}
	if all := ledgerAll(t, ctx, l); len(all) != 0 {
		t.Fatalf("refused requests reached the ledger: %+v", all)
	}

	rec = serveHook(t, w, "POST", signedHook("s3cret", "pull_request", "d-1", body), body)
	if rec.Code != http.StatusAccepted {
		t.Fatalf("valid: %d %s", rec.Code, rec.Body)
	}
	got, err := l.Get(ctx, "d-1")
	if err != nil {
		t.Fatal(err)
	}
	if got.Event != "pull_request" || got.Action != "opened" || got.InstallationID != 7 || got.Repository != "Octo/App" ||
		got.State != DeliveryPending || got.ReceivedAt.IsZero() || got.Redeliveries != 0 {
		t.Errorf("recorded %+v", got)
	}
	// A redelivery answers 200 and changes nothing but the count.
	for range 2 {
		if rec = serveHook(t, w, "POST", signedHook("s3cret", "pull_request", "d-1", body), body); rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "duplicate") {
			t.Errorf("duplicate: %d %s", rec.Code, rec.Body)
		}
	}
	again, _ := l.Get(ctx, "d-1")
	if again.Redeliveries != 2 || again.Seq != got.Seq || len(ledgerAll(t, ctx, l)) != 1 {
		t.Errorf("after duplicates: %+v", again)
	}

	// ping is recorded and answered.
	ping := []byte(`{"zen":"Keep it logically awesome.","hook_id":1,"hook":{"type":"App","id":1}}`)
	if rec = serveHook(t, w, "POST", signedHook("s3cret", "ping", "d-ping", ping), ping); rec.Code != http.StatusAccepted {
		t.Errorf("ping: %d %s", rec.Code, rec.Body)
	}
	if p, err := l.Get(ctx, "d-ping"); err != nil || p.Event != "ping" {
		t.Errorf("ping recorded: %+v, %v", p, err)
	}
}

// During a rotation both secrets are accepted; after it, only the new.
func TestWebhookSecretRotation(t *testing.T) {
	t.Parallel()
	w, _ := newHookReceiver(t, WebhookConfig{Secret: "new", PreviousSecret: "old"})
	body := []byte(`{}`)
	for i, s := range []string{"new", "old"} {
		id := fmt.Sprintf("r-%d", i)
		if rec := serveHook(t, w, "POST", signedHook(s, "ping", id, body), body); rec.Code != http.StatusAccepted {
			t.Errorf("secret %s: %d", s, rec.Code)
		}
	}
	w.SetSecrets("new", "")
	if rec := serveHook(t, w, "POST", signedHook("old", "ping", "r-9", body), body); rec.Code != http.StatusUnauthorized {
		t.Errorf("old secret after the rotation: %d", rec.Code)
	}
}

func TestWebhookConfigValidated(t *testing.T) {
	t.Parallel()
	db := openHookDB(t, sqlite.Options{Synchronous: "NORMAL"})
	l, _ := NewDeliveryLedger(db, nil)
	for name, cfg := range map[string]WebhookConfig{
		"no ledger":      {Secret: "x"},
		"no secret":      {Ledger: l},
		"budget < body":  {Ledger: l, Secret: "x", MaxBodyBytes: 10, MaxInFlightBytes: 5},
		"negative limit": {Ledger: l, Secret: "x", MaxBodyBytes: -1},
	} {
		if _, err := NewWebhookReceiver(cfg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// 1,000 concurrent requests with invalid signatures change nothing, and a valid
// delivery right after is accepted at once.
func TestWebhookInvalidSignatureFlood(t *testing.T) {
	t.Parallel()
	w, l := newHookReceiver(t, WebhookConfig{})
	srv := httptest.NewServer(w)
	defer srv.Close()
	tr := &http.Transport{MaxConnsPerHost: 200, MaxIdleConnsPerHost: 200}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: &apiSpecTransport{t: t, base: tr, spec: loadAPISpec(t)}, Timeout: 30 * time.Second}
	ctx := hookCtx(t)

	send := func(id, sig string, body []byte) (int, error) {
		req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+"/webhooks/github", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-GitHub-Event", "pull_request")
		req.Header.Set("X-GitHub-Delivery", id)
		if sig != "" {
			req.Header.Set("X-Hub-Signature-256", sig)
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	body := []byte(`{"action":"opened","installation":{"id":1},"repository":{"full_name":"octo/demo"}}`)
	var (
		wg       sync.WaitGroup
		start    = make(chan struct{})
		non401   atomic.Int64
		failures atomic.Int64
	)
	for i := range 1000 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			var sig string
			switch i % 4 {
			case 0: // none
			case 1:
				sig = webhookSignature("not-the-secret", body)
			case 2:
				sig = "sha256=" + strings.Repeat("0", 64)
			case 3:
				sig = "sha1=deadbeef"
			}
			code, err := send(fmt.Sprintf("flood-%d", i), sig, body)
			if err != nil {
				failures.Add(1)
				return
			}
			if code != http.StatusUnauthorized {
				non401.Add(1)
			}
		}()
	}
	close(start)
	wg.Wait()
	if failures.Load() > 0 || non401.Load() > 0 {
		t.Fatalf("%d requests failed, %d not answered 401", failures.Load(), non401.Load())
	}
	if all := ledgerAll(t, ctx, l); len(all) != 0 {
		t.Fatalf("the ledger holds %d deliveries after the flood", len(all))
	}
	began := time.Now()
	code, err := send("valid-after-flood", webhookSignature("s3cret", body), body)
	if err != nil || code != http.StatusAccepted {
		t.Fatalf("valid delivery after the flood: %d, %v", code, err)
	}
	if took := time.Since(began); took > 2*time.Second {
		t.Errorf("valid delivery after the flood took %s", took)
	}
	if all := ledgerAll(t, ctx, l); len(all) != 1 || all[0].ID != "valid-after-flood" {
		t.Fatalf("ledger after the valid delivery: %+v", all)
	}
}

// The in-flight budget answers 503 instead of holding more bodies.
func TestWebhookInFlightBudget(t *testing.T) {
	t.Parallel()
	w, _ := newHookReceiver(t, WebhookConfig{MaxBodyBytes: 64 << 10, MaxInFlightBytes: 64 << 10})
	if !w.reserve(60 << 10) {
		t.Fatal("reserve refused")
	}
	body := bytes.Repeat([]byte(" "), 8<<10)
	body = append(body, "{}"...)
	rec := serveHook(t, w, "POST", signedHook("s3cret", "ping", "b-1", body), body)
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" {
		t.Errorf("over budget: %d", rec.Code)
	}
	w.inFlight.Add(-60 << 10)
	if rec = serveHook(t, w, "POST", signedHook("s3cret", "ping", "b-1", body), body); rec.Code != http.StatusAccepted {
		t.Errorf("within budget: %d %s", rec.Code, rec.Body)
	}
	if n := w.inFlight.Load(); n != 0 {
		t.Errorf("budget not given back: %d bytes in flight", n)
	}
}

// Deliveries the simulator makes for what people do on "GitHub" — signed
// as GitHub signs them — are recorded once each, and a redelivery of one
// (same GUID) is answered 200 and handled no second time.
func TestWebhookSimulatorDeliveriesDeduplicated(t *testing.T) {
	t.Parallel()
	var (
		mu   sync.Mutex
		seen = map[string]int{}
	)
	counter := EventHandlerFunc{On: []string{"*"}, Func: func(_ context.Context, d Delivery) error {
		mu.Lock()
		seen[d.ID]++
		mu.Unlock()
		return nil
	}}
	e := newHookEnv(t, hookEnvOptions{handlers: map[string]EventHandler{"counter": counter}})
	ctx := hookCtx(t)
	if err := e.sim.AddLabel("octo", "demo", 1, "baton:queue", "alice"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.sim.AddComment("octo", "demo", 1, "/baton queue", "alice"); err != nil {
		t.Fatal(err)
	}
	e.waitSettled(ctx)
	sent := e.sim.Deliveries()
	if len(sent) != 2 {
		t.Fatalf("simulator made %d deliveries", len(sent))
	}
	for _, d := range sent {
		if !d.OK() || d.StatusCode != http.StatusAccepted {
			t.Errorf("delivery %s answered %d", d.GUID, d.StatusCode)
		}
		rec, err := e.ledger.Get(ctx, d.GUID)
		if err != nil || rec.State != DeliveryHandled || rec.Event != d.Event || rec.Action != d.Action ||
			rec.Repository != "octo/demo" || rec.InstallationID != ghsim.DemoInstallationID || rec.Outcome["counter"] != "handled" {
			t.Errorf("ledger of %s: %+v, %v", d.GUID, rec, err)
		}
	}
	// GitHub redelivers the first (a person clicked "Redeliver").
	if err := e.sim.Redeliver(sent[0].ID); err != nil {
		t.Fatal(err)
	}
	e.waitDeliveries(ctx)
	all := e.sim.Deliveries()
	last := all[len(all)-1]
	if !last.Redelivery || last.GUID != sent[0].GUID || last.StatusCode != http.StatusOK {
		t.Fatalf("redelivery: %+v", last)
	}
	rec, _ := e.ledger.Get(ctx, sent[0].GUID)
	if rec.Redeliveries != 1 {
		t.Errorf("redeliveries = %d", rec.Redeliveries)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, d := range sent {
		if seen[d.GUID] != 1 {
			t.Errorf("delivery %s handled %d times", d.GUID, seen[d.GUID])
		}
	}
}

// FuzzWebhook: whatever the body and headers, the endpoint never answers
// 5xx, and only a correctly signed delivery reaches the ledger.
func FuzzWebhook(f *testing.F) {
	db := openHookDB(f, sqlite.Options{Synchronous: "NORMAL"})
	l, err := NewDeliveryLedger(db, nil)
	if err != nil {
		f.Fatal(err)
	}
	w, err := NewWebhookReceiver(WebhookConfig{Ledger: l, Secret: "fuzz", PreviousSecret: "old", MaxBodyBytes: 1 << 16})
	if err != nil {
		f.Fatal(err)
	}
	f.Add([]byte(`{"action":"opened","installation":{"id":1},"repository":{"full_name":"octo/demo"}}`), "pull_request", "d-1", "POST", true, "")
	f.Add([]byte(`{"zen":"hi"}`), "ping", "72d3162e-cc78-11e3-81ab-4c9367dc0958", "POST", true, "")
	f.Add([]byte(`{}`), "installation", "x", "PUT", true, "")
	f.Add([]byte(`not json`), "push", "d-2", "POST", true, "")
	f.Add([]byte(`{"repository":{"full_name":"a/b/c"}}`), "push", "d-3", "POST", true, "")
	f.Add([]byte(`{"installation":{"id":-1}}`), "issues", "d-4", "POST", true, "")
	f.Add([]byte(`{}`), "", "", "POST", false, "sha256=00")
	f.Add([]byte(`{}`), "ping", "d-5", "POST", false, "sha256="+strings.Repeat("a", 64))
	f.Add([]byte("\xff\xfe{"), "ping\n", "d\x00", "POST", true, "")
	f.Fuzz(func(t *testing.T, body []byte, event, delivery, method string, sign bool, sig string) {
		r := httptest.NewRequest("POST", "/webhooks/github", bytes.NewReader(body))
		r.Header.Set("Content-Type", "application/json") // as GitHub sends it
		if fuzzMethod(method) {
			r.Method = method
		}
		fuzzHeader(r.Header, "X-GitHub-Event", event)
		fuzzHeader(r.Header, "X-GitHub-Delivery", delivery)
		if sign {
			sig = webhookSignature("fuzz", body)
		}
		fuzzHeader(r.Header, "X-Hub-Signature-256", sig)
		rec := httptest.NewRecorder()
		w.ServeHTTP(rec, r)
		checkHookExchange(t, r, body, rec)
		if rec.Code >= 500 {
			t.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
		if rec.Code/100 == 2 {
			if !sign && !validWebhookSignature(sig, body, "fuzz") && !validWebhookSignature(sig, body, "old") {
				t.Fatalf("accepted without a valid signature")
			}
			if _, err := l.Get(context.Background(), r.Header.Get("X-GitHub-Delivery")); err != nil {
				t.Fatalf("accepted but not recorded: %v", err)
			}
		} else if !json.Valid(rec.Body.Bytes()) {
			t.Fatalf("error body is not JSON: %q", rec.Body)
		}
	})
}

func fuzzMethod(m string) bool {
	if m == "" || len(m) > 10 {
		return false
	}
	for _, c := range m {
		if c < 'A' || c > 'Z' {
			return false
		}
	}
	return true
}

// fuzzHeader sets a header the way a client could send it (net/http refuses
// control characters in values).
func fuzzHeader(h http.Header, k, v string) {
	if v == "" || strings.ContainsAny(v, "\r\n\x00") {
		return
	}
	h.Set(k, v)
}

// The answer comes well inside GitHub's 10 s even while a handler is slow:
// handlers run after the answer.
func TestWebhookAnswersBeforeHandlers(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	slow := EventHandlerFunc{On: []string{"ping"}, Func: func(ctx context.Context, _ Delivery) error {
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}}
	e := newHookEnv(t, hookEnvOptions{handlers: map[string]EventHandler{"slow": slow}, noSeed: true})
	defer close(release)
	began := time.Now()
	resp := e.post("s3cret", "ping", "slow-1", []byte(`{"zen":"x"}`))
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if took := time.Since(began); took > 2*time.Second {
		t.Errorf("answered after %s", took)
	}
	rec, err := e.ledger.Get(hookCtx(t), "slow-1")
	if err != nil || rec.State != DeliveryPending {
		t.Errorf("while the handler runs: %+v, %v", rec, err)
	}
}

// A request that announces a large body and sends nothing holds next to
// none of the in-flight budget: idle connections cannot spend it and get
// every delivery refused. (The budget used to be taken from
// Content-Length, a mebibyte per request, before a byte arrived.)
func TestWebhookInFlightBudgetNotTakenByAnnouncedBodies(t *testing.T) {
	t.Parallel()
	w, _ := newHookReceiver(t, WebhookConfig{MaxBodyBytes: 4 << 20, MaxInFlightBytes: 4 << 20})
	const idle = 4
	var (
		writers []*io.PipeWriter
		done    = make(chan int, idle)
		reading = make(chan struct{}, idle)
	)
	for range idle {
		pr, pw := io.Pipe()
		writers = append(writers, pw)
		req := httptest.NewRequest("POST", "/webhooks/github", &firstReadSignal{r: pr, c: reading})
		req.ContentLength = 4 << 20
		for k, v := range signedHook("not-the-secret", "ping", "idle", []byte("{}")) {
			req.Header.Set(k, v)
		}
		go func() {
			rec := httptest.NewRecorder()
			w.ServeHTTP(rec, req)
			done <- rec.Code
		}()
	}
	// Every idle request has reserved its buffer and waits for its body.
	for range idle {
		select {
		case <-reading:
		case code := <-done:
			t.Fatalf("an idle request was answered %d", code)
		}
	}
	if n := w.inFlight.Load(); n > idle*(4<<10) {
		t.Errorf("%d requests that sent nothing hold %d bytes of the budget", idle, n)
	}
	body := []byte(`{"zen":"hello"}`)
	if rec := serveHook(t, w, "POST", signedHook("s3cret", "ping", "real-1", body), body); rec.Code != http.StatusAccepted {
		t.Errorf("a delivery beside %d idle requests: %d %s", idle, rec.Code, rec.Body)
	}
	for _, pw := range writers {
		pw.CloseWithError(io.ErrUnexpectedEOF)
	}
	for range idle {
		<-done
	}
	if n := w.inFlight.Load(); n != 0 {
		t.Errorf("budget not given back: %d bytes in flight", n)
	}
}

// A large body is read whole, within the budget, and the budget is given
// back.
func TestWebhookLargeBodyGrowsWithinBudget(t *testing.T) {
	t.Parallel()
	w, _ := newHookReceiver(t, WebhookConfig{MaxBodyBytes: 8 << 20, MaxInFlightBytes: 16 << 20})
	body := append([]byte(`{"pad":"`), bytes.Repeat([]byte("x"), 5<<20+123)...)
	body = append(body, `"}`...)
	for _, cl := range []int64{int64(len(body)), -1} {
		req := httptest.NewRequest("POST", "/webhooks/github", bytes.NewReader(body))
		req.ContentLength = cl
		for k, v := range signedHook("s3cret", "ping", fmt.Sprintf("big%d", cl+1), body) {
			req.Header.Set(k, v)
		}
		rec := httptest.NewRecorder()
		w.ServeHTTP(rec, req)
		if rec.Code != http.StatusAccepted {
			t.Errorf("Content-Length %d: %d %s", cl, rec.Code, rec.Body)
		}
	}
	if n := w.inFlight.Load(); n != 0 {
		t.Errorf("budget not given back: %d bytes in flight", n)
	}
}

// firstReadSignal is a request body that sends on c when it is first read.
type firstReadSignal struct {
	r    io.Reader
	c    chan<- struct{}
	once sync.Once
}

func (f *firstReadSignal) Read(p []byte) (int, error) {
	f.once.Do(func() { f.c <- struct{}{} })
	return f.r.Read(p)
}
