package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/baton-dev/baton/app/client"
	"github.com/baton-dev/baton/app/ghsim"
	"github.com/baton-dev/baton/internal/sqlite"
	"github.com/baton-dev/baton/schema"
)

func startServer(t *testing.T, cfg Config) *Server {
	t.Helper()
	cfg.DataDir = cmpString(cfg.DataDir, t.TempDir())
	cfg.Listen = cmpString(cfg.Listen, "127.0.0.1:0")
	srv, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := srv.Stop(ctx); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	return srv
}

// startDemoSim starts a simulator on its own (as `baton ghsim` runs it),
// seeded with the demo data and closed when the test ends.
func startDemoSim(t *testing.T, cfg ghsim.Config) *ghsim.Sim {
	t.Helper()
	sim, err := ghsim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := sim.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sim.Close() })
	if err := sim.SeedDemo(); err != nil {
		t.Fatal(err)
	}
	return sim
}

func cmpString(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// --dev: the server runs as the App of an in-process simulator, writes
// dev.json with an admin token, and carries out a submitted comment; the
// simulator's webhooks reach the server's receiver.
func TestServerDev(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// A file left where dev.json is written first (by a crash, or by
	// someone else) does not lend it its mode.
	if err := os.WriteFile(filepath.Join(dir, DevFile+".tmp"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	srv := startServer(t, Config{Dev: true, DataDir: dir})
	b, err := os.ReadFile(filepath.Join(dir, DevFile))
	if err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(filepath.Join(dir, DevFile))
	if st.Mode().Perm() != 0o600 {
		t.Errorf("dev.json mode %v", st.Mode().Perm())
	}
	var dev DevInfo
	if err := json.Unmarshal(b, &dev); err != nil || dev.Token == "" || dev.Server != srv.URL() || dev.GitHub != srv.Simulator().URL() {
		t.Fatalf("dev.json = %s (%v)", b, err)
	}
	c, err := client.New(dev.Server, client.WithToken(dev.Token))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	op, created, err := c.Submit(ctx, client.SubmitRequest{IdempotencyKey: "dev-1", Action: schema.ActionComment,
		Resource: schema.Resource{Type: "issue", ID: "octo/demo#10"}, Payload: json.RawMessage(`{"body":"hello"}`)})
	if err != nil || !created {
		t.Fatalf("submit: %v %v", created, err)
	}
	done, err := c.Wait(ctx, op.OperationID, 20*time.Second)
	if err != nil || done.Status != schema.StatusSucceeded || done.InstallationID != 1 {
		t.Fatalf("operation: %+v %v", done, err)
	}
	ins, err := c.Installations(ctx)
	if err != nil || len(ins) != 1 || ins[0].ID != 1 || len(ins[0].Repositories) != 1 || ins[0].Repositories[0] != "octo/demo" {
		t.Fatalf("installations: %+v %v", ins, err)
	}
	r, err := c.Ready(ctx)
	if err != nil || r.Status != "ready" {
		t.Errorf("readyz: %+v %v", r, err)
	}
	// The comment baton posted comes back as an issue_comment delivery,
	// recorded in the ledger.
	deadline := time.Now().Add(10 * time.Second)
	for {
		recs, err := srv.ledger.List(ctx, DeliveryFilter{Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no webhook delivery reached the server")
		}
		time.Sleep(20 * time.Millisecond)
	}
	resp, err := http.Get(srv.URL() + "/metrics")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("metrics: %v %v", resp, err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, name := range []string{"baton_queue_handled_messages_total{result=\"done\"}", "baton_executor_operations_finished_total",
		"baton_coordinator_acquires_total", "baton_api_requests_total", "baton_webhook_requests_total", "baton_queue_dead_letters 0"} {
		if !strings.Contains(string(metrics), name) {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	// Every metric of baton's own that the server shows is in the
	// operator's list of metrics.
	doc, err := os.ReadFile(filepath.Join("..", "deploy", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`(?m)^# TYPE (baton_\w+) `).FindAllStringSubmatch(string(metrics), -1) {
		if !strings.Contains(string(doc), "`"+m[1]+"`") {
			t.Errorf("deploy/README.md does not list the metric %s", m[1])
		}
	}
}

// /readyz says the store is unavailable while it cannot keep writes (here
// a database capped at its size, as a full disk does), although it still
// answers reads, and ready again once it can, with nothing written in
// between: a load balancer stops sending submissions that would fail.
func TestServerReadinessWhenStoreIsFull(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv := startServer(t, Config{Dev: true, DataDir: dir})
	c, err := client.New(srv.URL(), client.WithToken(srv.Dev().Token))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if r, err := c.Ready(ctx); err != nil || r.Checks["store"] != "ok" {
		t.Fatalf("readyz at start: %+v %v", r, err)
	}
	var pages int
	if err := srv.db.QueryRow(ctx, `PRAGMA page_count`).Scan(&pages); err != nil {
		t.Fatal(err)
	}
	if err := srv.db.Write(ctx, func(tx *sqlite.Tx) error {
		_, err := tx.Exec(fmt.Sprintf(`PRAGMA max_page_count = %d`, pages+1))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(map[string]string{"body": strings.Repeat("x", 60000)})
	if _, _, err := c.Submit(ctx, client.SubmitRequest{IdempotencyKey: "full-1", Action: schema.ActionComment,
		Resource: schema.Resource{Type: "issue", ID: "octo/demo#10"}, Payload: body}); err == nil {
		t.Fatal("a submission into a full store was accepted")
	}
	r, err := c.Ready(ctx)
	if err == nil || r.Status != "unavailable" || !strings.Contains(r.Checks["store"], "full") {
		t.Errorf("readyz while the store cannot write: %+v %v", r, err)
	}
	// Lift the cap without a commit of its own. The server's background
	// writes may share the lifting write's batch; one of them failing for
	// the cap rolls back the whole batch before the lift has run, so it is
	// asked again until it has.
	// (The cap is the writer connection's, and outlives a rollback.)
	for deadline := time.Now().Add(10 * time.Second); ; {
		lifted := false
		if err := srv.db.Write(ctx, func(tx *sqlite.Tx) error {
			if _, err := tx.Exec(`PRAGMA max_page_count = 1073741823`); err != nil {
				return err
			}
			lifted = true
			return errors.New("roll back: lift the cap without a commit")
		}); err == nil {
			t.Fatal("the write that lifts the cap committed")
		}
		if lifted {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the cap could not be lifted")
		}
	}
	if r, err := c.Ready(ctx); err != nil || r.Status != "ready" {
		t.Errorf("readyz once the store writes again: %+v %v", r, err)
	}
}

// A server pointed at a simulator running on its own (as `baton ghsim`
// runs it) authenticates as the App with the credentials ghsim wrote.
func TestServerAgainstStandaloneSimulator(t *testing.T) {
	t.Parallel()
	sim := startDemoSim(t, ghsim.Config{Limits: ghsim.Limits{PrimaryLimit: -1}})
	srv := startServer(t, Config{GitHubURL: sim.URL(), AppID: sim.AppID(), PrivateKey: sim.PrivateKeyPEM(),
		WebhookSecret: sim.WebhookSecret()})
	sim.SetWebhook(srv.URL()+"/webhooks/github", sim.WebhookSecret())
	token, _, err := srv.Tokens().CreateToken(context.Background(), TokenSpec{Actor: "ci", Installations: []int64{1}})
	if err != nil {
		t.Fatal(err)
	}
	c, _ := client.New(srv.URL(), client.WithToken(token))
	// The registry resynced from the simulator as the App: the repository
	// resolves to installation 1 without any webhook.
	var op client.Operation
	deadline := time.Now().Add(10 * time.Second)
	for {
		op, _, err = c.Submit(context.Background(), client.SubmitRequest{IdempotencyKey: "sa-1", Action: schema.ActionAddLabels,
			Resource: schema.Resource{Type: "issue", ID: "octo/demo#11"}, Payload: json.RawMessage(`{"labels":["ready"]}`)})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("submit: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	done, err := c.Wait(context.Background(), op.OperationID, 20*time.Second)
	if err != nil || done.Status != schema.StatusSucceeded {
		t.Fatalf("operation: %+v %v", done, err)
	}
	if sim.TokensIssued() == 0 {
		t.Error("no installation token was exchanged")
	}
	// The receiver's answer to a method other than POST is its 405.
	resp, err := http.Get(srv.URL() + "/webhooks/github")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != http.MethodPost {
		t.Errorf("GET /webhooks/github: %d, Allow %q", resp.StatusCode, resp.Header.Get("Allow"))
	}
}

// Without credentials the server serves the setup page and is not ready:
// it has nothing to run operations as.
func TestServerWithoutAppServesSetup(t *testing.T) {
	t.Parallel()
	srv := startServer(t, Config{PublicURL: "https://baton.example.com"})
	resp, err := http.Get(srv.URL() + "/setup")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/setup: %d", resp.StatusCode)
	}
	resp, err = http.Get(srv.URL() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("/readyz without an App: %d", resp.StatusCode)
	}
}

// Setup through the real server: a server without App credentials serves
// /setup; the manifest flow at "GitHub" comes back to its callback, which
// stores the credentials and asks for a restart. A new server on the same
// data directory, given nothing else, then runs as the App: an operation
// succeeds, and the App's webhooks (sent to the manifest's URL) are
// answered 202.
func TestServerSetupThenRestart(t *testing.T) {
	t.Parallel()
	ctx := hookCtx(t)
	sim := startDemoSim(t, ghsim.Config{PrivateKey: hookAppKey(), Limits: ghsim.Limits{PrimaryLimit: -1}})
	// The manifest's webhook URL is the public URL: both servers listen on
	// the same address, so the App's webhooks reach whichever runs.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	dir := t.TempDir()

	first, err := NewServer(Config{DataDir: dir, Listen: addr, PublicURL: "http://" + addr, GitHubWebURL: sim.URL(), GitHubURL: sim.URL()})
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Start(ctx); err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Transport: tr, Jar: jar, Timeout: 30 * time.Second}
	page := setupGet(t, browser, first.URL()+"/setup", http.StatusOK)
	m, mf := formActionRE.FindStringSubmatch(page), manifestRE.FindStringSubmatch(page)
	if m == nil || mf == nil {
		t.Fatalf("no manifest form in\n%s", page)
	}
	resp, err := browser.PostForm(html.UnescapeString(m[1]), url.Values{"manifest": {html.UnescapeString(mf[1])}})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Request.URL.String(), first.URL()+"/setup/callback?") ||
		!strings.Contains(string(body), `id="restart"`) || !strings.Contains(string(body), "Restart baton") || strings.Contains(string(body), `id="running"`) {
		t.Fatalf("callback %d at %s:\n%s", resp.StatusCode, resp.Request.URL, body)
	}
	if creds, ok, err := LoadAppCredentials(dir); err != nil || !ok || creds.AppID != sim.AppID() {
		t.Fatalf("stored credentials: %v, %v", ok, err)
	}
	if got := sim.WebhookURL(); got != "http://"+addr+"/webhooks/github" {
		t.Errorf("the App's webhook is %s", got)
	}
	stopCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := first.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}
	tr.CloseIdleConnections()

	// The restart: the data directory and the address, nothing else.
	srv := startServer(t, Config{DataDir: dir, Listen: addr})
	if srv.gh == nil {
		t.Fatal("the restarted server does not run as the App")
	}
	token, _, err := srv.Tokens().CreateToken(ctx, TokenSpec{Actor: "ci", Installations: []int64{ghsim.DemoInstallationID}})
	if err != nil {
		t.Fatal(err)
	}
	c, _ := client.New(srv.URL(), client.WithToken(token))
	before := len(sim.Deliveries())
	var op client.Operation
	deadline := time.Now().Add(10 * time.Second)
	for {
		// The registry resyncs from "GitHub" at start: until then the
		// repository resolves to no installation.
		op, _, err = c.Submit(ctx, client.SubmitRequest{IdempotencyKey: "restart-1", Action: schema.ActionComment,
			Resource: schema.Resource{Type: "issue", ID: "octo/demo#10"}, Payload: json.RawMessage(`{"body":"hello"}`)})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("submit: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	done, err := c.Wait(ctx, op.OperationID, 20*time.Second)
	if err != nil || done.Status != schema.StatusSucceeded || done.InstallationID != ghsim.DemoInstallationID {
		t.Fatalf("operation: %+v %v", done, err)
	}
	// The comment comes back as an issue_comment delivery, signed with the
	// stored secret and answered 202.
	if err := sim.WaitDeliveries(ctx); err != nil {
		t.Fatal(err)
	}
	sent := sim.Deliveries()[before:]
	if len(sent) == 0 {
		t.Fatal("no webhook delivery after the operation")
	}
	for _, d := range sent {
		if d.StatusCode != http.StatusAccepted {
			t.Errorf("delivery %s (%s) answered %d", d.GUID, d.Event, d.StatusCode)
		}
		if _, err := srv.ledger.Get(ctx, d.GUID); err != nil {
			t.Errorf("delivery %s not in the ledger: %v", d.GUID, err)
		}
	}
}

func TestServerConfigErrors(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]Config{
		"ack wait below lease ttl": {AckWait: 10 * time.Second, LeaseTTL: 30 * time.Second},
		"dev with credentials":     {Dev: true, AppID: 5},
		"dev on every interface":   {Dev: true, Listen: "0.0.0.0:0"},
		"dev on an empty host":     {Dev: true, Listen: ":0"},
		"dev on every v6 address":  {Dev: true, Listen: "[::]:0"},
		"app id without key":       {AppID: 5},
		"bad listen":               {Listen: "nowhere"},
		"workers":                  {Workers: -1},
		"retention below 72h":      {OperationRetention: 24 * time.Hour},
	} {
		if _, err := NewServer(cfg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	for _, listen := range []string{"127.0.0.1:0", "[::1]:0", "localhost:0", "LOCALHOST:0"} {
		if _, err := NewServer(Config{Dev: true, Listen: listen}); err != nil {
			t.Errorf("dev on %s: %v", listen, err)
		}
	}
	// A taken address fails Start before anything else starts.
	srv := startServer(t, Config{PublicURL: "https://baton.example.com"})
	other, err := NewServer(Config{DataDir: t.TempDir(), Listen: srv.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Start(context.Background()); err == nil {
		t.Error("a second server started on a taken address")
		_ = other.Stop(context.Background())
	} else if errors.Is(err, context.Canceled) {
		t.Error(err)
	}
}

// A second server on a data directory another serves from is refused
// before it opens anything, naming the holder; once the first stops, the
// directory can be served again.
func TestServerDataDirLocked(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	first, err := NewServer(Config{DataDir: dir, Listen: "127.0.0.1:0", PublicURL: "https://baton.example.com"})
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	second, err := NewServer(Config{DataDir: dir, Listen: "127.0.0.1:0", PublicURL: "https://baton.example.com"})
	if err != nil {
		t.Fatal(err)
	}
	err = second.Start(context.Background())
	if !errors.Is(err, errDataDirLocked) {
		t.Fatalf("second server on %s: %v, want %v", dir, err, errDataDirLocked)
	}
	if want := fmt.Sprintf("(process %d)", os.Getpid()); !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not name the holder %s", err, want)
	}
	if err := first.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	third := startServer(t, Config{DataDir: dir, PublicURL: "https://baton.example.com"})
	if third.Addr() == "" {
		t.Error("third server has no address")
	}
}

// The merge queue runs in the server: a pull request labelled baton:queue
// whose check passes is merged at its head, through signed webhooks from
// the simulator; the queue's routes answer as the description says.
func TestServerMergeQueue(t *testing.T) {
	t.Parallel()
	srv := startServer(t, Config{Dev: true})
	sim := srv.Simulator()
	head := ghsim.DemoHeadSHA(2)
	run, err := sim.AddCheckRun("octo", "demo", ghsim.NewCheckRun{Name: "ci", HeadSHA: head})
	if err != nil {
		t.Fatal(err)
	}
	if err := sim.AddLabel("octo", "demo", 2, "baton:queue", "monalisa"); err != nil {
		t.Fatal(err)
	}
	if err := sim.CompleteCheckRun("octo", "demo", run, "success"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		pr, err := sim.Pull("octo", "demo", 2)
		if err != nil {
			t.Fatal(err)
		}
		if pr.Merged {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pull request #2 not merged: %+v", pr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	c, err := client.New(srv.URL(), client.WithToken(srv.Dev().Token),
		client.WithHTTPClient(&http.Client{Transport: &apiSpecTransport{t: t, base: http.DefaultTransport, spec: loadAPISpec(t)}}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var audit client.QueueAudit
	for {
		if audit, err = c.QueueAudit(ctx, "octo", "demo"); err != nil {
			t.Fatal(err)
		}
		if n := len(audit.Audit); n > 0 && audit.Audit[n-1].Action == "merge" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("audit: %+v", audit)
		}
		time.Sleep(50 * time.Millisecond)
	}
	var actions []string
	for _, a := range audit.Audit {
		actions = append(actions, a.Action)
		if a.PRNumber != 2 {
			t.Errorf("audit entry for #%d", a.PRNumber)
		}
	}
	if actions[0] != "join" {
		t.Errorf("audit = %v", actions)
	}
	if _, err := c.Queue(ctx, "octo", "demo"); err != nil {
		t.Error(err)
	}
	if _, err := c.QueueEvents(ctx, "octo", "demo"); err != nil {
		t.Error(err)
	}
	if _, err := c.ReconcileQueue(ctx, "octo", "demo"); err != nil {
		t.Error(err)
	}
	// A repository baton is not installed on.
	if _, err := c.Queue(ctx, "elsewhere", "repo"); schema.ErrorCode(err) != schema.CodeNotFound {
		t.Errorf("unknown repository: %v", err)
	}
}

// A stop whose deadline passes while a call to GitHub is in flight cuts
// the call short, releases the operation's lease and sends it back, and
// reports success (the deadline did its job). After a restart the
// operation runs again at once, not once its lease has expired: it probes
// first (the interrupted call may have been applied) and posts its
// comment once.
func TestServerStopDeadlineReleasesWork(t *testing.T) {
	t.Parallel()
	sim := startDemoSim(t, ghsim.Config{Limits: ghsim.Limits{PrimaryLimit: -1}})
	if _, err := sim.SetFault(ghsim.Fault{Route: "POST /repos/{owner}/{repo}/issues/{number}/comments", Kind: ghsim.FaultLatency,
		Latency: time.Minute, Count: 1}); err != nil {
		t.Fatal(err)
	}
	cfg := Config{DataDir: t.TempDir(), GitHubURL: sim.URL(), AppID: sim.AppID(), PrivateKey: sim.PrivateKeyPEM(),
		WebhookSecret: sim.WebhookSecret(), LeaseTTL: 45 * time.Second, Logger: zaptest.NewLogger(t)}
	first := startServer(t, cfg)
	token, _, err := first.Tokens().CreateToken(context.Background(), TokenSpec{Actor: "ci", AllInstallations: true})
	if err != nil {
		t.Fatal(err)
	}
	submit := func(srv *Server) (*client.Client, client.Operation) {
		c, _ := client.New(srv.URL(), client.WithToken(token))
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			op, _, err := c.Submit(context.Background(), client.SubmitRequest{IdempotencyKey: "deadline-1", Action: schema.ActionComment,
				Resource: schema.Resource{Type: "issue", ID: "octo/demo#10"}, Payload: json.RawMessage(`{"body":"once"}`)})
			if err == nil {
				return c, op
			}
			if time.Now().After(deadline) {
				t.Fatalf("submit: %v", err)
			}
		}
	}
	c, op := submit(first)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		// The attempt is saved before its call is made: the call is in
		// flight, held by the latency fault, once that fault has fired.
		cur, err := c.Get(context.Background(), op.OperationID)
		if err == nil && cur.Status == schema.StatusRunning && cur.Attempts == 1 && len(sim.Faults()) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the call did not start: %+v %v", cur, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := first.Stop(ctx); err != nil {
		t.Errorf("stop past its deadline: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("stop took %s", d)
	}

	// Restarted, the operation runs before its lease (45 s) could
	// have expired: the lease was released.
	second := startServer(t, cfg)
	c, _ = submit(second) // the same key: the existing operation
	done, err := c.Wait(context.Background(), op.OperationID, 20*time.Second)
	if err != nil || done.Status != schema.StatusSucceeded {
		t.Fatalf("after the restart: %+v %v", done, err)
	}
	probed := false
	for _, a := range done.AttemptLog {
		probed = probed || a.Probe
	}
	if !probed || done.Attempts != 2 {
		t.Errorf("attempts %d, attempt log %+v: want the interrupted attempt, a probe, then the call", done.Attempts, done.AttemptLog)
	}
	is, err := sim.Issue("octo", "demo", 10)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, cm := range is.Comments {
		if strings.Contains(cm.Body, "once") {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d comments posted, want 1", n)
	}
}
