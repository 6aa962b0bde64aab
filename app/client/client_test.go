package client

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-dev/baton/schema"
)

func TestLeasePath(t *testing.T) {
	t.Parallel()
	for key, want := range map[string]string{
		"pull_request:octo/app#42": "/v1/leases/pull_request%3Aocto%2Fapp%2342",
		"ref:octo/app:heads/a b":   "/v1/leases/ref%3Aocto%2Fapp%3Aheads%2Fa%20b",
		"commit:o/r@abc":           "/v1/leases/commit%3Ao%2Fr@abc",
	} {
		if got := LeasePath(key); got != want {
			t.Errorf("LeasePath(%q) = %s, want %s", key, got, want)
		}
	}
}

// API errors become *Error with the code; other answers keep their status.
func TestErrors(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer baton_x" || r.Header.Get("User-Agent") != "baton-client" {
			w.WriteHeader(400)
			return
		}
		switch r.URL.Path {
		case "/v1/leases/issue%3Ao%2Fr%231/acquire", "/v1/leases/issue:o/r#1/acquire":
			body, _ := io.ReadAll(r.Body)
			if string(body) != `{"owner":"me","ttlSeconds":2}` {
				t.Errorf("acquire body %s", body)
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(409)
			io.WriteString(w, `{"error":{"code":"lease_held","message":"held by x","details":{"owner":"x","expiresIn":1.5}}}`)
		default:
			w.WriteHeader(502)
			io.WriteString(w, "<html>bad gateway</html>")
		}
	}))
	defer srv.Close()
	c, err := New(srv.URL+"/", WithToken(" baton_x "), WithRetries(1))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.AcquireLease(context.Background(), "issue:o/r#1", "me", 1500*time.Millisecond)
	var e *Error
	if !errors.As(err, &e) || e.Status != 409 || e.Code != CodeLeaseHeld || e.Details["owner"] != "x" || e.Error() != "held by x" {
		t.Errorf("lease_held = %#v", err)
	}
	if schema.ErrorCode(err) != schema.CodeLeaseHeld || CodeOf(err) != CodeLeaseHeld {
		t.Errorf("codes: %s %s", schema.ErrorCode(err), CodeOf(err))
	}
	_, err = c.Get(context.Background(), strings.Repeat("ab", 32))
	if !errors.As(err, &e) || e.Status != 502 || e.Code != "" || !strings.Contains(e.Error(), "bad gateway") {
		t.Errorf("502 = %#v", err)
	}
	if _, err := New("localhost:8080"); err == nil {
		t.Error("a server URL without a scheme is accepted")
	}
}

// Wait asks again until the operation is terminal, and stops at its limit.
func TestWait(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	done, never := strings.Repeat("d", 64), strings.Repeat("e", 64)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := calls.Add(1)
		if r.URL.Path == "/v1/operations/"+done && r.URL.Query().Get("wait") != "50s" {
			t.Errorf("request without wait: %s", r.URL)
		}
		status := "running"
		if n == 3 && r.URL.Path == "/v1/operations/"+done {
			status = "succeeded"
		}
		io.WriteString(w, `{"operationId":"x","status":"`+status+`"}`)
	}))
	defer srv.Close()
	c, _ := New(srv.URL)
	op, err := c.Wait(context.Background(), done, 0)
	if err != nil || op.Status != schema.StatusSucceeded || calls.Load() != 3 {
		t.Errorf("Wait = %s, %v after %d calls", op.Status, err, calls.Load())
	}
	calls.Store(0)
	start := time.Now()
	op, err = c.Wait(context.Background(), never, 50*time.Millisecond)
	if err != nil || op.Status != schema.StatusRunning || time.Since(start) > 10*time.Second {
		t.Errorf("Wait with a limit = %s, %v", op.Status, err)
	}
}

// An ID that is not an operation ID never reaches the server: "." would
// be redirected to the list route and decoded as an empty operation.
func TestOperationIDChecked(t *testing.T) {
	t.Parallel()
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"operations":[]}`)
	}))
	defer srv.Close()
	c, err := New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, id := range []string{"", ".", "..", "a/b", "../dlq", strings.Repeat("A", 64), strings.Repeat("a", 63), strings.Repeat("a", 63) + "/"} {
		if _, err := c.Get(ctx, id); !errors.Is(err, ErrInvalidOperationID) {
			t.Errorf("Get(%q) = %v, want ErrInvalidOperationID", id, err)
		}
		if _, err := c.Wait(ctx, id, time.Second); !errors.Is(err, ErrInvalidOperationID) {
			t.Errorf("Wait(%q) = %v, want ErrInvalidOperationID", id, err)
		}
		if _, err := c.Cancel(ctx, id); !errors.Is(err, ErrInvalidOperationID) {
			t.Errorf("Cancel(%q) = %v, want ErrInvalidOperationID", id, err)
		}
	}
	if n := requests.Load(); n != 0 {
		t.Errorf("%d requests sent for IDs that are not operation IDs", n)
	}
	if _, err := c.Get(ctx, strings.Repeat("0a", 32)); err != nil {
		t.Errorf("Get of a well-formed ID: %v", err)
	}
}

// A password in the server URL (for a proxy in front of baton) does not
// appear in New's errors, which end up in CI logs.
func TestNewHidesThePasswordOfABadURL(t *testing.T) {
	for _, raw := range []string{
		"ftp://ci:s3cret@baton.example/",
		"http://ci:s3cret@baton.example/?x=1",
		"http://ci:s3cret@baton.example/#top",
		"http://ci:s3cret@[::1",
		"http://ci:s3cret@",
	} {
		_, err := New(raw)
		if err == nil {
			t.Errorf("New(%q) accepted it", raw)
			continue
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("New(%q): the error shows the password: %v", raw, err)
		}
		if !strings.Contains(err.Error(), "xxxxx@") {
			t.Errorf("New(%q): the error does not show where the password was: %v", raw, err)
		}
	}
	c, err := New("http://ci:s3cret@baton.example:8080/")
	if err != nil {
		t.Fatal(err)
	}
	if got := c.BaseURL(); got != "http://ci:xxxxx@baton.example:8080" {
		t.Errorf("BaseURL() = %q", got)
	}
}
