package app

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/sqlite"
)

// The answer comes within RecordTimeout however long the store's writer is
// held up (a slow disk, a long batch ahead of the delivery's write):
// GitHub gives up after 10 s, and a receiver that answers later has the
// delivery recorded as failed anyway, and holds a connection meanwhile.
// A delivery not recorded in time is answered 503 and left out of the
// ledger, so that its redelivery is taken as new.
func TestWebhookAnswersWithinRecordTimeoutWhenTheStoreIsSlow(t *testing.T) {
	t.Parallel()
	const timeout = 300 * time.Millisecond
	w, l := newHookReceiver(t, WebhookConfig{RecordTimeout: timeout})
	ctx := hookCtx(t)

	release := make(chan struct{})
	writeDone := make(chan error, 1)
	holdWriter(l.db, release, writeDone)
	// The writer is held for 3 s, ten times the timeout.
	releaseAt := time.AfterFunc(3*time.Second, func() { close(release) })
	defer releaseAt.Stop()
	body := []byte(`{"zen":"slow"}`)
	began := time.Now()
	rec := serveHook(t, w, http.MethodPost, signedHook("s3cret", "ping", "slow-store-1", body), body)
	took := time.Since(began)
	if err := <-writeDone; err != nil {
		t.Fatal(err)
	}
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" || took > timeout+time.Second {
		t.Fatalf("answered %d (Retry-After %q) after %s: %s", rec.Code, rec.Header().Get("Retry-After"), took, rec.Body.String())
	}
	if _, err := l.Get(ctx, "slow-store-1"); err == nil {
		t.Fatal("a delivery answered 503 is in the ledger")
	}
	// The body's budget, kept while the write was waiting, is given back.
	hookEventually(t, ctx, "the in-flight budget given back", func() bool { return w.inFlight.Load() == 0 })

	// Its redelivery, the store free again, is a new delivery.
	rec = serveHook(t, w, http.MethodPost, signedHook("s3cret", "ping", "slow-store-1", body), body)
	if rec.Code != http.StatusAccepted {
		t.Fatalf("the redelivery: %d %s", rec.Code, rec.Body.String())
	}
}

// So too for the redelivery of a failed delivery, whose replay is a
// second write: the answer comes within RecordTimeout, and the delivery
// stays failed, to be redelivered again.
func TestWebhookReplayAnswersWithinRecordTimeoutWhenTheStoreIsSlow(t *testing.T) {
	t.Parallel()
	const timeout = 300 * time.Millisecond
	var l *DeliveryLedger
	release := make(chan struct{})
	writeDone := make(chan error, 1)
	replay := func(ctx context.Context, id string) error {
		// The store's writer is taken by something else between the
		// delivery's record and its replay.
		holdWriter(l.db, release, writeDone)
		_, err := l.requeue(ctx, id)
		return err
	}
	w, l := newHookReceiver(t, WebhookConfig{RecordTimeout: timeout, Replay: replay})
	ctx := hookCtx(t)
	body := []byte(`{"zen":"failed"}`)
	if rec := serveHook(t, w, http.MethodPost, signedHook("s3cret", "ping", "failed-1", body), body); rec.Code != http.StatusAccepted {
		t.Fatalf("first delivery: %d", rec.Code)
	}
	if err := l.db.Write(ctx, func(tx *sqlite.Tx) error {
		_, err := tx.Exec(`UPDATE webhook_deliveries SET state = 'failed' WHERE delivery_id = 'failed-1'`)
		return err
	}); err != nil {
		t.Fatal(err)
	}

	releaseAt := time.AfterFunc(3*time.Second, func() { close(release) })
	defer releaseAt.Stop()
	began := time.Now()
	rec := serveHook(t, w, http.MethodPost, signedHook("s3cret", "ping", "failed-1", body), body)
	took := time.Since(began)
	if err := <-writeDone; err != nil {
		t.Fatal(err)
	}
	if rec.Code != http.StatusServiceUnavailable || took > timeout+time.Second {
		t.Fatalf("answered %d after %s: %s", rec.Code, took, rec.Body.String())
	}
	if r, err := l.Get(ctx, "failed-1"); err != nil || r.State != DeliveryFailed {
		t.Fatalf("after a replay answered 503: %+v, %v", r, err)
	}
	hookEventually(t, ctx, "the in-flight budget given back", func() bool { return w.inFlight.Load() == 0 })
}

// holdWriter takes db's writer and keeps it until release is closed, then
// sends the write's error on done. It returns once the writer is taken.
func holdWriter(db *sqlite.DB, release <-chan struct{}, done chan<- error) {
	held := make(chan struct{})
	go func() {
		done <- db.Write(context.Background(), func(*sqlite.Tx) error {
			close(held)
			<-release
			return nil
		})
	}()
	<-held
}
