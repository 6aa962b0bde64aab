package executor

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/sqlite"
	"github.com/baton-dev/baton/schema"
)

// storeAsOlderBaton writes rec the way baton wrote records before payloads
// were decoded strictly: the payload as the client sent it (canonical JSON
// of what was sent, member names in whatever case matched), its hash over
// that. Store.Create would refuse it today.
func storeAsOlderBaton(t testing.TB, s *stack, rec *schema.Record, payload string) {
	t.Helper()
	var err error
	if rec.Payload, err = schema.Canonical(json.RawMessage(payload)); err != nil {
		t.Fatal(err)
	}
	if rec.IdempotencyHash, err = IdempotencyHash(rec.Actor, rec.Action, rec.Resource, rec.Payload); err != nil {
		t.Fatal(err)
	}
	body, err := encodeRecord(rec)
	if err != nil {
		t.Fatal(err)
	}
	err = s.db.Write(context.Background(), func(tx *sqlite.Tx) error {
		_, err := tx.Exec(`INSERT INTO operations
			(operation_id, idempotency_hash, actor, action, resource_type, resource_id, installation_id,
			 status, cancellation_requested, created_at, updated_at, body)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0, ?, ?, ?)`,
			rec.OperationID, rec.IdempotencyHash, rec.Actor, rec.Action, rec.Resource.Type, rec.Resource.ID,
			rec.InstallationID, string(rec.Status), rec.CreatedAt.UnixMicro(), rec.UpdatedAt.UnixMicro(), body)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// An operation an older baton accepted with a payload whose member names
// are not spelled as today's strict decoding wants ("Body" for "body"),
// still queued when baton is upgraded, runs as that baton would have run
// it, and can be saved; it is not failed until it is dead-lettered.
func TestProcessRunsPayloadStoredByOlderBaton(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	ctx := context.Background()
	rec, err := NewRecord("tester", schema.Submission{IdempotencyKey: "before-strict", Action: schema.ActionComment,
		Resource: issue(11), Payload: json.RawMessage(`{"body":"x"}`), InstallationID: 1}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	storeAsOlderBaton(t, s, rec, `{"Body":"queued before the upgrade"}`)
	if _, err := schema.DecodePayload(rec.Action, rec.Payload); err == nil {
		t.Fatal("the stored payload passes strict decoding; the test needs one that does not")
	}

	if r := s.exec.Process(ctx, rec.OperationID); r.Kind != ResultDone {
		t.Fatalf("Process: %v (%v)", r, r.Err)
	}
	got := s.await(t, rec.OperationID, 10*time.Second)
	if got.Status != schema.StatusSucceeded {
		t.Fatalf("status %s (%s: %s), want succeeded", got.Status, got.LastErrorCategory, got.LastErrorMessage)
	}
	is, err := s.sim.Issue("octo", "demo", 11)
	if err != nil {
		t.Fatal(err)
	}
	if len(is.Comments) != 1 || !strings.HasPrefix(is.Comments[0].Body, "queued before the upgrade") {
		t.Errorf("comments on #11: %+v, want the one the stored payload asks for", is.Comments)
	}
}
