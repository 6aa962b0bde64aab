package executor

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/baton-dev/baton/schema"
)

// Identity vectors: the hashes are part of baton's contract (clients may
// compute an operation's ID themselves), so they are pinned.
func TestIdentityVectors(t *testing.T) {
	t.Parallel()
	id, err := OperationID("alice", "k-1")
	if err != nil {
		t.Fatal(err)
	}
	// SHA-256 of {"actor":"alice","idempotencyKey":"k-1"}.
	if id != "566c82f0f50c5505326f0276d5a9de507000b8529cbd5c565554b6de903ea904" {
		t.Errorf("operationId = %s", id)
	}
	res := schema.Resource{Type: "issue", ID: "octo/app#1"}
	hash, err := IdempotencyHash("alice", schema.ActionComment, res, json.RawMessage(`{"body":"hi"}`))
	if err != nil {
		t.Fatal(err)
	}
	if hash != "4a17cc3d00a561d917d50f9beee02a4d54632795538c8ab4024011c4facb8d09" {
		t.Errorf("idempotencyHash = %s", hash)
	}
}

// The hash is of the canonical form: key order and insignificant white
// space do not change it; Unicode is hashed as RFC 8785 writes it.
func TestIdentityIsCanonical(t *testing.T) {
	t.Parallel()
	res := schema.Resource{Type: "issue", ID: "octo/app#1"}
	same := []string{
		`{"body":"hi","extra":{"b":1,"a":[1,2]}}`,
		`{ "extra" : { "a" : [ 1 , 2 ] , "b" : 1.0 } , "body" : "hi" }`,
		`{"extra":{"a":[1,2],"b":1E0},"body":"\u0068\u0069"}`,
	}
	var first string
	for i, p := range same {
		h, err := IdempotencyHash("alice", schema.ActionComment, res, json.RawMessage(p))
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = h
		} else if h != first {
			t.Errorf("payload %d hashes to %s, not %s", i, h, first)
		}
	}
	// Unicode: é, an emoji, and escaped control characters, written
	// differently but equal. The value is pinned: SHA-256 of
	// {"action":"github.issues.comment","actor":"zoë","payload":{"body":"café 😀 \u0001\n"},"resource":{"id":"octo/app#1","type":"issue"}}
	// with é, ë and 😀 as raw UTF-8 and the control characters escaped.
	const unicodeHash = "4e69fe1a2bf2267b339d93622ea1e7b38e227fe7cd7e84f6053eed45b9b16023"
	for _, c := range []struct{ actor, payload string }{
		{"zoë", `{"body":"café 😀 \u0001\n"}`},
		{"zo\u00eb", `{"body":"caf\u00e9 \ud83d\ude00 \u0001\u000a"}`},
		{"zo\xc3\xab", `{"body":"caf\u00E9 \uD83D\uDE00 \u0001\u000A"}`},
	} {
		h, err := IdempotencyHash(c.actor, schema.ActionComment, res, json.RawMessage(c.payload))
		if err != nil {
			t.Fatalf("IdempotencyHash(%q, %s): %v", c.actor, c.payload, err)
		}
		if h != unicodeHash {
			t.Errorf("IdempotencyHash(%q, %s) = %s, want %s", c.actor, c.payload, h, unicodeHash)
		}
	}
	// A different actor, key, payload or resource is another identity.
	other, err := IdempotencyHash("alice", schema.ActionComment, schema.Resource{Type: "issue", ID: "octo/app#2"}, json.RawMessage(same[0]))
	if err != nil {
		t.Fatal(err)
	}
	if other == first {
		t.Error("another resource hashed the same")
	}
	id1, err1 := OperationID("alice", "k")
	id2, err2 := OperationID("alicek", "")
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	if id1 == id2 {
		t.Error("actor and key are not separated in the identity")
	}
	// Unicode and an escaped NUL in the identity: SHA-256 of
	// {"actor":"é😀","idempotencyKey":"k\u0000"}.
	id, err := OperationID("é😀", "k\u0000")
	if err != nil {
		t.Fatal(err)
	}
	if id != "97a1931a5c0686f6bc056888ada838935d016aa4fc2a35da0d6c1440d775b8e6" {
		t.Errorf("OperationID(é😀, k\\u0000) = %s", id)
	}
}

// The identity objects are hashed with their keys sorted, whatever order
// they are written in: {"idempotencyKey","actor"} and {"actor",
// "idempotencyKey"} are the same identity, as are the request objects with
// their keys (and the resource's) in any order.
func TestIdentityKeyOrder(t *testing.T) {
	t.Parallel()
	const aliceK1 = "566c82f0f50c5505326f0276d5a9de507000b8529cbd5c565554b6de903ea904"
	for _, v := range []any{
		json.RawMessage(`{"actor":"alice","idempotencyKey":"k-1"}`),
		json.RawMessage(`{"idempotencyKey":"k-1","actor":"alice"}`),
		struct {
			IdempotencyKey string `json:"idempotencyKey"`
			Actor          string `json:"actor"`
		}{"k-1", "alice"},
	} {
		h, err := hashCanonical(v)
		if err != nil {
			t.Fatal(err)
		}
		if h != aliceK1 {
			t.Errorf("hash of %s = %s, want %s", mustJSON(v), h, aliceK1)
		}
	}
	const aliceHi = "4a17cc3d00a561d917d50f9beee02a4d54632795538c8ab4024011c4facb8d09"
	for _, raw := range []string{
		`{"action":"github.issues.comment","actor":"alice","payload":{"body":"hi"},"resource":{"id":"octo/app#1","type":"issue"}}`,
		`{"resource":{"type":"issue","id":"octo/app#1"},"payload":{"body":"hi"},"actor":"alice","action":"github.issues.comment"}`,
		`{"payload":{"body":"hi"},"actor":"alice","resource":{"id":"octo/app#1","type":"issue"},"action":"github.issues.comment"}`,
	} {
		h, err := hashCanonical(json.RawMessage(raw))
		if err != nil {
			t.Fatal(err)
		}
		if h != aliceHi {
			t.Errorf("hash of %s = %s, want %s", raw, h, aliceHi)
		}
	}
}

// hashAsIs, the fast path of checkIdentity, agrees with IdempotencyHash on
// canonical payloads, including characters json.Marshal would escape, and
// on a record read back from the store.
func TestHashAsIs(t *testing.T) {
	t.Parallel()
	for _, body := range []string{"hi", "<details>&amp;</details> -> é 😀 \u2028 \"q\" \\ \x01\n"} {
		rec := newRecord(t, "alice", "k-1", body)
		if got := operationIDAsIs(rec); got != "566c82f0f50c5505326f0276d5a9de507000b8529cbd5c565554b6de903ea904" {
			t.Errorf("operationIDAsIs = %s", got)
		}
		// NewRecord hashes with hashAsIs too: compare with the full path.
		want, err := IdempotencyHash(rec.Actor, rec.Action, rec.Resource, json.RawMessage(`{"body":`+mustJSON(body)+`}`))
		if err != nil {
			t.Fatal(err)
		}
		if got := hashAsIs(rec); got != want || rec.IdempotencyHash != want {
			t.Errorf("hashAsIs(%q) = %s and NewRecord's hash %s, want %s", body, got, rec.IdempotencyHash, want)
		}
		if body == "hi" && rec.IdempotencyHash != "4a17cc3d00a561d917d50f9beee02a4d54632795538c8ab4024011c4facb8d09" {
			t.Errorf("idempotencyHash = %s", rec.IdempotencyHash)
		}
		b := newTestStore(t)
		if _, _, err := b.store.Create(context.Background(), rec); err != nil {
			t.Fatal(err)
		}
		got, err := b.store.Get(context.Background(), rec.OperationID)
		if err != nil {
			t.Fatal(err)
		}
		if h := hashAsIs(&got); h != rec.IdempotencyHash {
			t.Errorf("hashAsIs of the stored %q = %s, want %s: the body does not keep the canonical payload", body, h, rec.IdempotencyHash)
		}
	}
	// The fast paths agree with the full ones on Unicode and escapes.
	for _, actor := range []string{"é😀", "zoë", "a\"b\\c"} {
		for _, key := range []string{"k\u0000", "<&>\u2028\x7f", "k\t\x1f"} {
			want, err := OperationID(actor, key)
			if err != nil {
				t.Fatal(err)
			}
			if got := operationIDAsIs(&schema.Record{Actor: actor, IdempotencyKey: key}); got != want {
				t.Errorf("operationIDAsIs(%q, %q) = %s, want %s", actor, key, got, want)
			}
		}
	}
	// A payload that is equal but not canonical misses the fast path, and
	// checkIdentity still accepts it.
	rec := newRecord(t, "alice", "k-1", "hi")
	rec.Payload = json.RawMessage(`{ "body": "\u0068i" }`)
	if hashAsIs(rec) == rec.IdempotencyHash {
		t.Error("hashAsIs matched a payload that is not canonical")
	}
	if err := checkIdentity(rec); err != nil {
		t.Errorf("checkIdentity of an equal payload = %v", err)
	}
}
