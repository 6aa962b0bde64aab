package app

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/sqlite"
)

// A submission the store cannot keep for want of storage (here a database
// capped at its size, as a full disk does) is answered 503 with
// Retry-After and baton's own words, not a bare 500: the client did
// nothing wrong and the same request succeeds once there is room.
func TestAPIStoreFullIsUnavailable(t *testing.T) {
	t.Parallel()
	srv := startServer(t, Config{Dev: true})
	ctx := context.Background()
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
	body, _ := json.Marshal(map[string]any{"idempotencyKey": "full-1", "action": "github.issues.comment",
		"resource": map[string]string{"type": "issue", "id": "octo/demo#10"},
		"payload":  map[string]string{"body": strings.Repeat("x", 60000)}})
	req, _ := http.NewRequest("POST", srv.URL()+"/v1/operations", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+srv.Dev().Token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var got APIErrorBody
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("body %q: %v", b, err)
	}
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" ||
		got.Error.Code != "internal" || !strings.Contains(got.Error.Message, "cannot store") || strings.Contains(string(b), "sqlite") {
		t.Errorf("submission into a full store: %d Retry-After %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), b)
	}
	// The answer is one the description allows: a client generated from
	// it knows the 503 and its Retry-After.
	if err := loadAPISpec(t).check(req, body, resp.StatusCode, resp.Header, b); err != nil {
		t.Errorf("OpenAPI: %v", err)
	}
}

// A submission whose write waits in vain for the database's lock, held by
// another process (an operator's sqlite3 session, a `baton token` command
// under load) past the busy timeout, is answered 503 with Retry-After, not
// a bare 500: nothing was written, and the same request succeeds once the
// lock is let go.
func TestAPIStoreLockedIsUnavailable(t *testing.T) {
	t.Parallel()
	srv := startServer(t, Config{Dev: true})
	unlock := holdWriteLock(t, srv)
	body, _ := json.Marshal(map[string]any{"idempotencyKey": "locked-1", "action": "github.issues.comment",
		"resource": map[string]string{"type": "issue", "id": "octo/demo#10"},
		"payload":  map[string]string{"body": "hello"}})
	submit := func() (*http.Response, []byte, *http.Request) {
		req, _ := http.NewRequest("POST", srv.URL()+"/v1/operations", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+srv.Dev().Token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b, req
	}
	resp, b, req := submit()
	var got APIErrorBody
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("body %q: %v", b, err)
	}
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" ||
		got.Error.Code != "internal" || !strings.Contains(got.Error.Message, "locked by another process") || strings.Contains(string(b), "sqlite") {
		t.Errorf("submission while another process holds the lock: %d Retry-After %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), b)
	}
	if err := loadAPISpec(t).check(req, body, resp.StatusCode, resp.Header, b); err != nil {
		t.Errorf("OpenAPI: %v", err)
	}
	unlock()
	if resp, b, _ := submit(); resp.StatusCode != http.StatusCreated {
		t.Errorf("submission once the lock is free: %d %s", resp.StatusCode, b)
	}
}

// Authenticating a request records the token's use (last_used_at), a
// write; a read must not wait for it. With the database's write lock held
// by another process, a list of operations is answered at once, not after
// the busy timeout, and the use is recorded once the lock is free.
func TestAPIReadDoesNotWaitForTokenUse(t *testing.T) {
	t.Parallel()
	srv := startServer(t, Config{Dev: true})
	unlock := holdWriteLock(t, srv)
	req, _ := http.NewRequest("GET", srv.URL()+"/v1/operations", nil)
	req.Header.Set("Authorization", "Bearer "+srv.Dev().Token)
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	took := time.Since(start)
	if resp.StatusCode != http.StatusOK || took > 3*time.Second {
		t.Errorf("a list while another process holds the write lock: %d after %v %s", resp.StatusCode, took, b)
	}
	unlock()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var n int
		if err := srv.db.QueryRow(context.Background(), `SELECT COUNT(*) FROM api_tokens WHERE last_used_at IS NOT NULL`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the token's use was never recorded")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// The routes that write to the store may answer 503 when it cannot keep
// writes (above), and the API's description says so, for clients
// generated from it.
func TestOpenAPIDescribesStoreUnavailable(t *testing.T) {
	t.Parallel()
	spec := loadAPISpec(t)
	for _, path := range []string{"/v1/operations", "/v1/operations/{id}/cancel",
		"/v1/leases/{key}/acquire", "/v1/leases/{key}/renew", "/v1/leases/{key}/release"} {
		item := spec.doc.Paths.Value(path)
		if item == nil || item.Post == nil {
			t.Errorf("POST %s is not described", path)
			continue
		}
		if item.Post.Responses.Status(http.StatusServiceUnavailable) == nil {
			t.Errorf("POST %s: no 503 described", path)
		}
	}
}

// holdWriteLock takes the database's write lock from another connection,
// as another process (an operator's sqlite3, a baton token command)
// would, until the returned function (or the test's end) lets it go.
func holdWriteLock(t *testing.T, srv *Server) (unlock func()) {
	t.Helper()
	ctx := context.Background()
	other, err := sql.Open("sqlite", srv.db.Path())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Close() })
	conn, err := other.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := conn.ExecContext(ctx, `BEGIN IMMEDIATE`); err != nil {
		t.Fatal(err)
	}
	return func() {
		if _, err := conn.ExecContext(ctx, `ROLLBACK`); err != nil {
			t.Fatal(err)
		}
	}
}
