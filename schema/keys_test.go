package schema

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
)

func TestDerivedKey(t *testing.T) {
	t.Parallel()
	const trig = "delivery:72d3162e-cc78-11e3-81ab-4c9367dc0958"
	if got := DerivedKey(trig, "mergequeue", "octo/app#42"); got != trig+":mergequeue:octo/app#42" {
		t.Errorf("key %s", got)
	}
	if got := DerivedKey(trig); got != trig {
		t.Errorf("key without parts %s", got)
	}
	if DerivedKey(trig, "a") == DerivedKey("delivery:other", "a") || DerivedKey(trig, "a") == DerivedKey(trig, "b") {
		t.Error("keys collide")
	}
	// The longest key that fits is kept as it is; one byte more is hashed.
	fits := strings.Repeat("x", MaxIdempotencyKeyChars-len(trig)-1)
	if got := DerivedKey(trig, fits); got != trig+":"+fits {
		t.Errorf("key of %d bytes hashed: %s", len(trig)+1+len(fits), got)
	}
	over := fits + "x"
	sum := sha256.Sum256([]byte("mergequeue:" + over))
	long := DerivedKey(trig, "mergequeue", over)
	if long != trig+":sha256:"+hex.EncodeToString(sum[:]) || len(long) > MaxIdempotencyKeyChars ||
		long == DerivedKey(trig, "mergequeue", over+"y") {
		t.Errorf("long key %q", long)
	}
}

func TestWebhookActor(t *testing.T) {
	t.Parallel()
	if got := WebhookActor(42); got != "github:42" {
		t.Error(got)
	}
	if err := ValidateActor(WebhookActor(1<<63 - 1)); err != nil {
		t.Error(err)
	}
}
