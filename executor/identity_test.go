package executor

import (
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
	// differently but equal.
	a, _ := IdempotencyHash("zoë", schema.ActionComment, res, json.RawMessage(`{"body":"café 😀 \u0001\n"}`))
	b, _ := IdempotencyHash("zo\u00eb", schema.ActionComment, res, json.RawMessage(`{"body":"caf\u00e9 \ud83d\ude00 \u0001\u000a"}`))
	if a != b {
		t.Errorf("equal Unicode hashed differently: %s %s", a, b)
	}
	// A different actor, key, payload or resource is another identity.
	other, _ := IdempotencyHash("alice", schema.ActionComment, schema.Resource{Type: "issue", ID: "octo/app#2"}, json.RawMessage(same[0]))
	if other == first {
		t.Error("another resource hashed the same")
	}
	id1, _ := OperationID("alice", "k")
	id2, _ := OperationID("alicek", "")
	if id1 == id2 {
		t.Error("actor and key are not separated in the identity")
	}
	// Key order in the identity's own object does not matter either: the
	// hash is of {"actor","idempotencyKey"} sorted.
	if id, _ := OperationID("é😀", "k\u0000"); len(id) != 64 {
		t.Errorf("id = %q", id)
	}
}
