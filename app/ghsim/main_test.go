package ghsim

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bradleyfalzon/ghinstallation/v2"
	"github.com/google/go-github/v62/github"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var (
	keyOnce sync.Once
	testKey *rsa.PrivateKey
)

// sharedKey is one App key for every test: generating RSA keys is slow.
func sharedKey(t testing.TB) *rsa.PrivateKey {
	keyOnce.Do(func() {
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			panic(err)
		}
		testKey = k
	})
	return testKey
}

// env is what a test needs: a started simulator and clients of it whose
// every response is validated against GitHub's description.
type env struct {
	t         *testing.T
	sim       *Sim
	tr        *http.Transport
	spec      *apiSpec
	validated atomic.Int64
}

func newEnv(t *testing.T, cfg Config) *env {
	t.Helper()
	if cfg.PrivateKey == nil {
		cfg.PrivateKey = sharedKey(t)
	}
	sim, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := sim.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, sim: sim, tr: &http.Transport{MaxIdleConnsPerHost: 64}, spec: loadSpec(t)}
	t.Cleanup(func() {
		e.tr.CloseIdleConnections()
		if err := sim.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return e
}

// seeded is newEnv with the demo data.
func seeded(t *testing.T, cfg Config) *env {
	e := newEnv(t, cfg)
	if err := e.sim.SeedDemo(); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *env) validating() http.RoundTripper {
	return &validatingTransport{t: e.t, base: e.tr, spec: e.spec, count: &e.validated}
}

// client is a go-github client authenticated as installation inst through
// ghinstallation: a real App JWT exchanged for a real installation token.
func (e *env) client(inst int64) *github.Client {
	e.t.Helper()
	itr, err := ghinstallation.New(e.validating(), e.sim.AppID(), inst, e.sim.PrivateKeyPEM())
	if err != nil {
		e.t.Fatal(err)
	}
	itr.BaseURL = e.sim.URL()
	return e.gh(itr)
}

// appClient is a go-github client authenticated as the App (JWT).
func (e *env) appClient() *github.Client {
	e.t.Helper()
	atr, err := ghinstallation.NewAppsTransport(e.validating(), e.sim.AppID(), e.sim.PrivateKeyPEM())
	if err != nil {
		e.t.Fatal(err)
	}
	atr.BaseURL = e.sim.URL()
	return e.gh(atr)
}

// anonClient is a go-github client without credentials.
func (e *env) anonClient() *github.Client { return e.gh(e.validating()) }

func (e *env) gh(rt http.RoundTripper) *github.Client {
	c, err := github.NewClient(&http.Client{Transport: rt}).WithEnterpriseURLs(e.sim.URL(), e.sim.URL())
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

// admin calls the admin API and decodes its answer into out (if not nil).
func (e *env) admin(method, path string, in, out any) int {
	e.t.Helper()
	var body []byte
	if in != nil {
		body, _ = json.Marshal(in)
	}
	status, b := e.adminRaw(method, path, string(body))
	if out != nil && status < 300 {
		if err := json.Unmarshal([]byte(b), out); err != nil {
			e.t.Fatalf("%s %s: %v: %s", method, path, err, b)
		}
	}
	return status
}

// adminRaw calls the admin API with a raw body and returns the status and
// the raw answer.
func (e *env) adminRaw(method, path, body string) (int, string) {
	e.t.Helper()
	req, _ := http.NewRequest(method, e.sim.URL()+path, strings.NewReader(body))
	resp, err := (&http.Client{Transport: e.tr}).Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return c
}

// statusOf is the HTTP status of a go-github error (0 if none).
func statusOf(err error) int {
	var er *github.ErrorResponse
	if errors.As(err, &er) && er.Response != nil {
		return er.Response.StatusCode
	}
	var rl *github.RateLimitError
	if errors.As(err, &rl) && rl.Response != nil {
		return rl.Response.StatusCode
	}
	var ab *github.AbuseRateLimitError
	if errors.As(err, &ab) && ab.Response != nil {
		return ab.Response.StatusCode
	}
	return 0
}

func wantStatus(t *testing.T, err error, want int) {
	t.Helper()
	if got := statusOf(err); got != want {
		t.Fatalf("got status %d (err %v), want %d", got, err, want)
	}
}

// clock is a settable clock for Config.Now.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Now()} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// receiver is a webhook endpoint that checks signatures and validates
// payloads against GitHub's description.
type receiver struct {
	t      *testing.T
	srv    *httptest.Server
	secret string
	spec   *apiSpec
	status atomic.Int32 // answer; 0 means 200

	mu   sync.Mutex
	got  []hook
	cond chan struct{}
}

type hook struct {
	Event, Action, GUID string
	Body                []byte
	Payload             map[string]any
}

func newReceiver(e *env) *receiver {
	rc := &receiver{t: e.t, secret: e.sim.WebhookSecret(), spec: e.spec, cond: make(chan struct{})}
	rc.srv = httptest.NewServer(http.HandlerFunc(rc.serve))
	e.t.Cleanup(rc.srv.Close)
	e.sim.SetWebhook(rc.srv.URL, "")
	return rc
}

func (rc *receiver) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	sig := r.Header.Get("X-Hub-Signature-256")
	if !hmac.Equal([]byte(sig), []byte(SignPayload(rc.secret, body))) {
		rc.t.Errorf("delivery %s: bad signature", r.Header.Get("X-GitHub-Delivery"))
	}
	for _, h := range []string{"X-GitHub-Event", "X-GitHub-Delivery", "X-GitHub-Hook-ID"} {
		if r.Header.Get(h) == "" {
			rc.t.Errorf("delivery without %s", h)
		}
	}
	if !strings.HasPrefix(r.Header.Get("User-Agent"), "GitHub-Hookshot/") {
		rc.t.Errorf("delivery User-Agent %q", r.Header.Get("User-Agent"))
	}
	var payload map[string]any
	if err := json.Unmarshal(body, &payload); err != nil {
		rc.t.Errorf("delivery body: %v", err)
	}
	action, _ := payload["action"].(string)
	event := r.Header.Get("X-GitHub-Event")
	if err := rc.spec.validateWebhook(event, action, body); err != nil {
		rc.t.Errorf("webhook does not match GitHub's description: %v", err)
	}
	rc.mu.Lock()
	rc.got = append(rc.got, hook{Event: event, Action: action, GUID: r.Header.Get("X-GitHub-Delivery"), Body: body, Payload: payload})
	close(rc.cond)
	rc.cond = make(chan struct{})
	rc.mu.Unlock()
	if st := rc.status.Load(); st != 0 {
		w.WriteHeader(int(st))
		return
	}
	w.WriteHeader(http.StatusOK)
}

// wait waits until at least n deliveries arrived and returns them all.
func (rc *receiver) wait(n int) []hook {
	rc.t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		rc.mu.Lock()
		if len(rc.got) >= n {
			out := append([]hook(nil), rc.got...)
			rc.mu.Unlock()
			return out
		}
		cond := rc.cond
		rc.mu.Unlock()
		select {
		case <-cond:
		case <-deadline:
			rc.mu.Lock()
			defer rc.mu.Unlock()
			rc.t.Fatalf("got %d deliveries, want %d", len(rc.got), n)
		}
	}
}

// events lists "event.action" of deliveries.
func events(hs []hook) []string {
	out := make([]string, 0, len(hs))
	for _, h := range hs {
		s := h.Event
		if h.Action != "" {
			s += "." + h.Action
		}
		out = append(out, s)
	}
	return out
}

func ptr[T any](v T) *T { return &v }
