package client

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const retryTestOp = `{"operationId":"` + "0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a" + `","status":"queued"}`

// A submission that met a lost connection, a 502 or a 503 is sent again,
// the same bytes (the same idempotency key), until it is answered.
func TestSubmitRetriedOnPassingFailures(t *testing.T) {
	t.Parallel()
	var (
		mu     sync.Mutex
		bodies []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, string(b))
		n := len(bodies)
		mu.Unlock()
		switch n {
		case 1: // the connection is lost before an answer
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
		case 2: // a proxy's page
			w.WriteHeader(http.StatusBadGateway)
			io.WriteString(w, "<html>bad gateway</html>")
		case 3:
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, `{"error":{"code":"internal","message":"try again shortly"}}`)
		default:
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, retryTestOp)
		}
	}))
	defer srv.Close()
	c, err := New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	op, created, err := c.Submit(context.Background(), SubmitRequest{IdempotencyKey: "k", Action: "github.issues.comment",
		Resource: Resource{Type: "issue", ID: "o/r#1"}, Payload: []byte(`{"body":"hi"}`)})
	if err != nil || !created || op.Status != "queued" {
		t.Fatalf("Submit = %v, %v, %v", op.Status, created, err)
	}
	if len(bodies) != 4 {
		t.Fatalf("%d requests, want 4", len(bodies))
	}
	for _, b := range bodies[1:] {
		if b != bodies[0] || !strings.Contains(b, `"idempotencyKey":"k"`) {
			t.Errorf("a repeated submission differs: %s, first %s", b, bodies[0])
		}
	}
}

// Requests whose repetition is not harmless are sent once, whatever the
// answer; and a 500 (baton failed) or a 4xx is not repeated at all.
func TestUnsafeRequestsNotRetried(t *testing.T) {
	t.Parallel()
	var requests atomic.Int32
	status := atomic.Int32{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		w.WriteHeader(int(status.Load()))
		io.WriteString(w, `{"error":{"code":"internal","message":"no"}}`)
	}))
	defer srv.Close()
	c, err := New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	id := strings.Repeat("ab", 32)
	calls := map[string]func() error{
		"Cancel":           func() error { _, err := c.Cancel(ctx, id); return err },
		"AcquireLease":     func() error { _, err := c.AcquireLease(ctx, "issue:o/r#1", "me", time.Minute); return err },
		"RenewLease":       func() error { _, err := c.RenewLease(ctx, "issue:o/r#1", "me", 3, time.Minute); return err },
		"ReleaseLease":     func() error { return c.ReleaseLease(ctx, "issue:o/r#1", "me", 3) },
		"ReplayDeadLetter": func() error { _, err := c.ReplayDeadLetter(ctx, 7); return err },
		"ReconcileQueue":   func() error { _, err := c.ReconcileQueue(ctx, "o", "r"); return err },
	}
	status.Store(http.StatusServiceUnavailable)
	for name, call := range calls {
		requests.Store(0)
		if err := call(); err == nil {
			t.Errorf("%s: no error", name)
		}
		if n := requests.Load(); n != 1 {
			t.Errorf("%s answered 503 was sent %d times, want 1", name, n)
		}
	}
	for _, st := range []int{http.StatusInternalServerError, http.StatusBadRequest, http.StatusNotFound} {
		status.Store(int32(st))
		requests.Store(0)
		if _, _, err := c.Submit(ctx, SubmitRequest{IdempotencyKey: "k"}); err == nil {
			t.Errorf("Submit answered %d: no error", st)
		}
		if _, err := c.Get(ctx, id); err == nil {
			t.Errorf("Get answered %d: no error", st)
		}
		if n := requests.Load(); n != 2 {
			t.Errorf("Submit and Get answered %d: %d requests, want 2", st, n)
		}
	}
}

// Retry-After is waited for; one asking for longer than the client waits
// is returned at once; WithRetries(0) sends once; the end of the context
// ends the waiting.
func TestRetryAfter(t *testing.T) {
	t.Parallel()
	var (
		requests   atomic.Int32
		retryAfter atomic.Value
	)
	retryAfter.Store("1")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if requests.Add(1) == 1 || retryAfter.Load() != "1" {
			w.Header().Set("Retry-After", retryAfter.Load().(string))
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		io.WriteString(w, `{"operations":[],"nextCursor":""}`)
	}))
	defer srv.Close()
	c, err := New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	start := time.Now()
	if _, err := c.List(ctx, ListOptions{}); err != nil || requests.Load() != 2 {
		t.Fatalf("List after a 429: %v after %d requests", err, requests.Load())
	}
	if d := time.Since(start); d < 900*time.Millisecond {
		t.Errorf("Retry-After: 1 waited %s", d)
	}

	retryAfter.Store("3600")
	requests.Store(0)
	var e *Error
	if _, err := c.List(ctx, ListOptions{}); !errors.As(err, &e) || e.Status != http.StatusTooManyRequests || requests.Load() != 1 {
		t.Errorf("Retry-After: 3600: %v after %d requests", err, requests.Load())
	}

	retryAfter.Store("")
	requests.Store(0)
	c0, _ := New(srv.URL, WithRetries(0))
	if _, err := c0.List(ctx, ListOptions{}); err == nil || requests.Load() != 1 {
		t.Errorf("WithRetries(0): %v after %d requests", err, requests.Load())
	}
	if _, err := New(srv.URL, WithRetries(-1)); err == nil {
		t.Error("WithRetries(-1) accepted")
	}

	retryAfter.Store("20")
	requests.Store(0)
	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	start = time.Now()
	if _, err := c.List(cctx, ListOptions{}); !errors.As(err, &e) || e.Status != http.StatusTooManyRequests {
		t.Errorf("List with the context ending while it waits: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the end of the context was noticed after %s", d)
	}
}

// A server (or a proxy) that answers ?wait= at once is not asked again
// and again without a pause.
func TestWaitPaces(t *testing.T) {
	t.Parallel()
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		io.WriteString(w, `{"operationId":"x","status":"running"}`)
	}))
	defer srv.Close()
	c, err := New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	op, err := c.Wait(context.Background(), strings.Repeat("ab", 32), 2500*time.Millisecond)
	if err != nil || op.Status != "running" {
		t.Fatalf("Wait = %s, %v", op.Status, err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Wait with a 2.5s limit took %s", d)
	}
	if n := requests.Load(); n > 4 {
		t.Errorf("%d requests in 2.5 s to a server that answers at once", n)
	}
}

// The base URL may carry a path prefix (baton behind a reverse proxy), with
// or without a trailing slash; a query or fragment is refused, since the
// routes' paths are appended to it.
func TestBaseURL(t *testing.T) {
	t.Parallel()
	var got atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Store(r.URL.EscapedPath())
		io.WriteString(w, `{"key":"k","locked":false}`)
	}))
	defer srv.Close()
	for _, base := range []string{srv.URL + "/baton", srv.URL + "/baton/"} {
		c, err := New(base)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.CheckLease(context.Background(), "issue:o/r#1"); err != nil {
			t.Fatal(err)
		}
		if p := got.Load(); p != "/baton/v1/leases/issue%3Ao%2Fr%231" {
			t.Errorf("%s: request to %s", base, p)
		}
	}
	for _, base := range []string{srv.URL + "/?x=1", srv.URL + "/#top", srv.URL + "/?"} {
		if _, err := New(base); err == nil {
			t.Errorf("New(%q) accepted", base)
		}
	}
}

// With an http.Client whose timeout is shorter than MaxWait, Wait's long
// polls fit in it rather than time out.
func TestWaitFitsTheHTTPTimeout(t *testing.T) {
	t.Parallel()
	var waits sync.Map
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d, err := time.ParseDuration(r.URL.Query().Get("wait"))
		if err != nil {
			t.Errorf("wait=%q", r.URL.Query().Get("wait"))
		}
		waits.Store(d, true)
		time.Sleep(min(d, 2*time.Second))
		io.WriteString(w, `{"operationId":"x","status":"running"}`)
	}))
	defer srv.Close()
	c, err := New(srv.URL, WithHTTPClient(&http.Client{Timeout: 1500 * time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	op, err := c.Wait(context.Background(), strings.Repeat("ab", 32), 3*time.Second)
	if err != nil || op.Status != "running" {
		t.Fatalf("Wait = %s, %v", op.Status, err)
	}
	waits.Range(func(k, _ any) bool {
		if k.(time.Duration) > time.Second {
			t.Errorf("asked the server to wait %s with a 1.5 s client timeout", k)
		}
		return true
	})
}

// A Wait rides through a restart of the server: the stopping server
// answers it at once and stops listening, and the new one answers a little
// later, beyond the retries of a single request.
func TestWaitRidesThroughARestart(t *testing.T) {
	t.Parallel()
	var first sync.Once
	addr := restartingServer(t, func(w http.ResponseWriter, answered func()) {
		io.WriteString(w, `{"operationId":"x","status":"running"}`)
		first.Do(answered)
	}, `{"operationId":"x","status":"succeeded"}`)
	c, err := New("http://"+addr, WithRetries(1))
	if err != nil {
		t.Fatal(err)
	}
	op, err := c.Wait(context.Background(), strings.Repeat("ab", 32), time.Minute)
	if err != nil || op.Status != "succeeded" {
		t.Errorf("Wait across a restart = %q, %v; want succeeded", op.Status, err)
	}

	// A server that never answered is not waited for.
	ln2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := ln2.Addr().String()
	ln2.Close()
	c, err = New("http://"+gone, WithRetries(1))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := c.Wait(context.Background(), strings.Repeat("ab", 32), time.Minute); err == nil {
		t.Error("Wait on a server that is not there: no error")
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Wait on a server that is not there took %s", d)
	}
}

// Behind a reverse proxy (deploy/README.md puts one in front of baton), a
// restart does not look like a server that cannot be reached: the proxy
// answers 502, 503 or 504 until baton listens again. A Wait rides through
// that too.
func TestWaitRidesThroughARestartBehindAProxy(t *testing.T) {
	t.Parallel()
	for _, status := range []int{http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			t.Parallel()
			testWaitBehindAProxy(t, status)
		})
	}
}

func testWaitBehindAProxy(t *testing.T, status int) {
	var (
		mu   sync.Mutex
		down time.Time
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case down.IsZero(): // answered, then the restart begins
			down = time.Now()
			io.WriteString(w, `{"operationId":"x","status":"running"}`)
		case time.Since(down) < 3*time.Second: // the proxy's page
			w.WriteHeader(status)
			io.WriteString(w, "<html>bad gateway</html>")
		default:
			io.WriteString(w, `{"operationId":"x","status":"succeeded"}`)
		}
	}))
	c, err := New(srv.URL, WithRetries(1))
	if err != nil {
		t.Fatal(err)
	}
	op, err := c.Wait(context.Background(), strings.Repeat("ab", 32), time.Minute)
	if err != nil || op.Status != "succeeded" {
		t.Errorf("Wait across a restart behind a proxy answering %d = %q, %v; want succeeded", status, op.Status, err)
	}
	srv.Close()
}

// baton submit --wait: the submission was answered, and the server goes
// away before the Wait's first request is answered (a restart begun just
// then). The server exists, so the Wait rides through the restart as it
// would have after one answer of its own.
func TestWaitAfterAnAnsweredSubmitRidesThroughARestart(t *testing.T) {
	t.Parallel()
	addr := restartingServer(t, func(w http.ResponseWriter, answered func()) {
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, retryTestOp)
		answered()
	}, strings.Replace(retryTestOp, "queued", "succeeded", 1))
	c, err := New("http://"+addr, WithRetries(1))
	if err != nil {
		t.Fatal(err)
	}
	op, _, err := c.Submit(context.Background(), SubmitRequest{IdempotencyKey: "k", Action: "github.issues.comment",
		Resource: Resource{Type: "issue", ID: "o/r#1"}, Payload: []byte(`{"body":"x"}`)})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // the server is gone
	op, err = c.Wait(context.Background(), op.OperationID, time.Minute)
	if err != nil || op.Status != "succeeded" {
		t.Errorf("Wait after the submission, across a restart = %q, %v; want succeeded", op.Status, err)
	}
}

// restartingServer serves with answer until answer calls answered (once),
// then stops listening 50 ms later (the answer on its way), stays down 2 s,
// and listens again on the same address, answering every request with
// after. It returns the address; the new server is closed when the test
// ends.
func restartingServer(t *testing.T, answer func(w http.ResponseWriter, answered func()), after string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	done := make(chan struct{})
	old := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		answer(w, func() { close(done) })
	})}
	go old.Serve(ln)
	newServer := make(chan *http.Server, 1)
	t.Cleanup(func() {
		if srv := <-newServer; srv != nil {
			srv.Close()
		}
	})
	go func() {
		<-done
		time.Sleep(50 * time.Millisecond) // the answer is on its way
		old.Close()
		time.Sleep(2 * time.Second) // down, then up again
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Error(err)
			newServer <- nil
			return
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, after)
		})}
		newServer <- srv
		srv.Serve(ln)
	}()
	return addr
}
