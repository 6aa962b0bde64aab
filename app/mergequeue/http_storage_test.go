package mergequeue_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/baton-dev/baton/app/mergequeue"
	"github.com/baton-dev/baton/internal/sqlite"
)

// A reconcile whose writes the store cannot keep for want of storage (here
// a database filled to its cap, as a full disk is) is answered as every
// route of the API answers it: 503 with Retry-After and baton's own words,
// not the 500 of a bug. The client did nothing wrong, and the same request
// succeeds once there is room.
func TestHTTPStoreFullIsUnavailable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStack(t, stackOptions{noWebhooks: true})
	const repo = "full"
	const prs = 40
	s.repo(t, repo, prs, []string{"ci"})
	labelQueued(t, s, repo, 1)
	// The others are labeled on GitHub only (their deliveries missed): the
	// reconcile queues them, which writes more than the free room left in
	// the pages the database has.
	for i := 2; i <= prs; i++ {
		if err := s.sim.AddLabel("octo", repo, i, "baton:queue", "monalisa"); err != nil {
			t.Fatal(err)
		}
	}
	srv := httptest.NewServer(mergequeue.NewHandler(s.q, authorizeGoodPrefix))
	t.Cleanup(srv.Close)

	// Fill the database to its cap: a table of rows up to the last page,
	// so that a write that needs one more page fails as on a full disk.
	var pages int
	if err := s.db.QueryRow(ctx, `PRAGMA page_count`).Scan(&pages); err != nil {
		t.Fatal(err)
	}
	if err := s.db.Write(ctx, func(tx *sqlite.Tx) error {
		if _, err := tx.Exec(fmt.Sprintf(`PRAGMA max_page_count = %d`, pages+64)); err != nil {
			return err
		}
		_, err := tx.Exec(`CREATE TABLE filler (b BLOB)`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	for _, size := range []int{64 << 10, 4 << 10, 256, 16} {
		for {
			err := s.db.Write(ctx, func(tx *sqlite.Tx) error {
				_, err := tx.Exec(`INSERT INTO filler (b) VALUES (zeroblob(?))`, size)
				return err
			})
			if err != nil {
				if !sqlite.IsStorageError(err) {
					t.Fatal(err)
				}
				break
			}
		}
	}

	req, _ := http.NewRequest("POST", srv.URL+"/v1/repos/octo/"+repo+"/queue/reconcile", nil)
	req.Header.Set("Authorization", "Bearer good")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var body struct {
		Error struct{ Code, Message string }
	}
	_ = json.Unmarshal(b, &body)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" ||
		body.Error.Code != "internal" || !strings.Contains(body.Error.Message, "cannot store") || strings.Contains(string(b), "sqlite") {
		t.Errorf("reconcile into a full store: %d Retry-After %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), b)
	}
	if err := describedAnswer(http.MethodPost, "/v1/repos/{owner}/{repo}/queue/reconcile", resp.StatusCode, resp.Header, b); err != nil {
		t.Errorf("OpenAPI: %v", err)
	}
}
