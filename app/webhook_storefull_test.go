package app

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/baton-dev/baton/internal/sqlite"
)

// A delivery the store cannot keep for want of storage (here a database
// capped at its size, as a full disk does) is answered 503 with
// Retry-After, as the API answers such a write, not a bare 500: GitHub
// did nothing wrong, and the redelivery is taken once there is room.
func TestWebhookStoreFullIsUnavailable(t *testing.T) {
	t.Parallel()
	w, l := newHookReceiver(t, WebhookConfig{})
	ctx := hookCtx(t)
	var pages int
	if err := l.db.QueryRow(ctx, `PRAGMA page_count`).Scan(&pages); err != nil {
		t.Fatal(err)
	}
	if err := l.db.Write(ctx, func(tx *sqlite.Tx) error {
		_, err := tx.Exec(fmt.Sprintf(`PRAGMA max_page_count = %d`, pages+1))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"zen":"` + strings.Repeat("x", 200<<10) + `"}`)
	rec := serveHook(t, w, http.MethodPost, signedHook("s3cret", "ping", "full-1", body), body)
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" || hookErrorCode(t, rec) != "internal" ||
		strings.Contains(rec.Body.String(), "sqlite") {
		t.Fatalf("a delivery into a full store: %d (Retry-After %q) %s", rec.Code, rec.Header().Get("Retry-After"), rec.Body.String())
	}
	if _, err := l.Get(ctx, "full-1"); err == nil {
		t.Fatal("a delivery answered 503 is in the ledger")
	}

	// Room again: its redelivery is a new delivery.
	if err := l.db.Write(ctx, func(tx *sqlite.Tx) error {
		_, err := tx.Exec(`PRAGMA max_page_count = 1073741823`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if rec = serveHook(t, w, http.MethodPost, signedHook("s3cret", "ping", "full-1", body), body); rec.Code != http.StatusAccepted {
		t.Fatalf("the redelivery: %d %s", rec.Code, rec.Body.String())
	}
}
