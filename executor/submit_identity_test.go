package executor

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/schema"
)

// An optional payload field left out, given as null or as its zero value
// is one request: one idempotency hash, one stored payload.
func TestHashIgnoresAbsentOptionalFields(t *testing.T) {
	t.Parallel()
	sha := strings.Repeat("a", 40)
	for _, c := range []struct {
		action string
		res    schema.Resource
		same   []string
	}{
		{schema.ActionMerge, schema.Resource{Type: "pull_request", ID: "octo/app#1"}, []string{
			`{"sha":"` + sha + `"}`, `{"sha":"` + sha + `","method":null}`, `{"sha":"` + sha + `","method":""}`,
			`{"commitTitle":"","sha":"` + sha + `","commitMessage":null}`, `{"sha":"` + sha + `","method":"merge"}`}},
		{schema.ActionUpdateRef, schema.Resource{Type: "ref", ID: "octo/app:heads/main"}, []string{
			`{"sha":"` + sha + `"}`, `{"sha":"` + sha + `","force":false}`, `{"sha":"` + sha + `","expectedSha":""}`}},
		{schema.ActionCreateStatus, schema.Resource{Type: "commit", ID: "octo/app@" + sha}, []string{
			`{"state":"success","context":"ci"}`, `{"state":"success","context":"ci","description":"","targetUrl":null}`}},
	} {
		var want *schema.Record
		for _, p := range c.same {
			rec, err := NewRecord("alice", schema.Submission{IdempotencyKey: "k", Action: c.action, Resource: c.res, Payload: []byte(p)}, time.Now())
			if err != nil {
				t.Fatalf("%s %s: %v", c.action, p, err)
			}
			if want == nil {
				want = rec
				continue
			}
			if rec.IdempotencyHash != want.IdempotencyHash || string(rec.Payload) != string(want.Payload) {
				t.Errorf("%s: %s hashes to %.12s (stored %s), not %.12s (stored %s)", c.action, p, rec.IdempotencyHash, rec.Payload,
					want.IdempotencyHash, want.Payload)
			}
		}
	}
	// Different input still differs.
	a, _ := NewRecord("alice", schema.Submission{IdempotencyKey: "k", Action: schema.ActionMerge,
		Resource: schema.Resource{Type: "pull_request", ID: "octo/app#1"}, Payload: []byte(`{"sha":"` + sha + `"}`)}, time.Now())
	b, _ := NewRecord("alice", schema.Submission{IdempotencyKey: "k", Action: schema.ActionMerge,
		Resource: schema.Resource{Type: "pull_request", ID: "octo/app#1"}, Payload: []byte(`{"sha":"` + sha + `","method":"squash"}`)}, time.Now())
	if a == nil || b == nil || a.IdempotencyHash == b.IdempotencyHash {
		t.Error("a merge and a squash hash alike")
	}
}

// A record created before the payload was hashed as decoded holds the hash
// of the payload as it was sent: that payload sent again under its key
// resolves to it; other input is still a conflict.
func TestSubmitFindsRecordHashedAsSent(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	ctx := context.Background()
	sha := strings.Repeat("a", 40)
	sub := schema.Submission{IdempotencyKey: "hashed-as-sent", Action: schema.ActionUpdateRef,
		Resource: schema.Resource{Type: "ref", ID: "octo/demo:heads/as-sent"}, Payload: json.RawMessage(`{"force":false,"sha":"` + sha + `"}`), InstallationID: 1}
	old, err := NewRecord("tester", sub, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	// As the earlier version made it.
	if old.Payload, err = schema.Canonical(sub.Payload); err != nil {
		t.Fatal(err)
	}
	if old.IdempotencyHash, err = IdempotencyHash("tester", sub.Action, old.Resource, old.Payload); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.store.Create(ctx, old); err != nil {
		t.Fatal(err)
	}
	got, created, err := s.exec.Submit(ctx, "tester", sub)
	if err != nil || created || got.OperationID != old.OperationID {
		t.Fatalf("the same payload again: created=%v id=%s (want %s), %v", created, got.OperationID, old.OperationID, err)
	}
	sub.Payload = json.RawMessage(`{"force":true,"sha":"` + sha + `"}`)
	if _, _, err := s.exec.Submit(ctx, "tester", sub); schema.ErrorCode(err) != schema.CodeIdempotencyConflict {
		t.Errorf("other input under the same key: %v, want a conflict", err)
	}
}

// A merge stored (by the merge queue, say) with "method":"merge" spelled
// out, before that method was left out of the canonical payload, is still
// found by the same submission under its key after an upgrade.
func TestSubmitFindsMergeStoredWithDefaultMethod(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	ctx := context.Background()
	sub := schema.Submission{IdempotencyKey: "merge-as-stored", Action: schema.ActionMerge,
		Resource: schema.Resource{Type: "pull_request", ID: "octo/demo#1"},
		Payload:  json.RawMessage(`{"sha":"` + strings.Repeat("b", 40) + `","method":"merge"}`), InstallationID: 1}
	old, err := NewRecord("tester", sub, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	// As the earlier version made it: the method kept.
	if old.Payload, err = schema.Canonical(sub.Payload); err != nil {
		t.Fatal(err)
	}
	if old.IdempotencyHash, err = IdempotencyHash("tester", sub.Action, old.Resource, old.Payload); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.store.Create(ctx, old); err != nil {
		t.Fatal(err)
	}
	got, created, err := s.exec.Submit(ctx, "tester", sub)
	if err != nil || created || got.OperationID != old.OperationID {
		t.Fatalf("the same merge again: created=%v id=%s (want %s), %v", created, got.OperationID, old.OperationID, err)
	}
}
