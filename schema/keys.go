package schema

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
)

// DerivedKey derives the idempotency key of a piece of work done for a
// trigger: "<trigger>:<part>:<part>…", or the trigger alone without parts.
// The trigger names what the work is done for (a webhook delivery is
// "delivery:<guid>"), so doing the same work for the same trigger again,
// after a retry or a crash, names the operations created the first time,
// while another trigger gets new ones. Parts name the piece of work
// ("mergequeue", "comment", "octo/app#42"). A key that would be longer
// than MaxIdempotencyKeyChars bytes is "<trigger>:sha256:" and the
// SHA-256 of the joined parts, in hex, instead.
func DerivedKey(trigger string, parts ...string) string {
	tail := strings.Join(parts, ":")
	if tail == "" {
		return trigger
	}
	if len(trigger)+1+len(tail) <= MaxIdempotencyKeyChars {
		return trigger + ":" + tail
	}
	sum := sha256.Sum256([]byte(tail))
	return trigger + ":sha256:" + hex.EncodeToString(sum[:])
}

// WebhookActorPrefix begins the actor of every operation born from a
// webhook. It is reserved: no API token's actor may begin with it, so that
// no client can share those operations' identities or see and cancel them
// as their own.
const WebhookActorPrefix = "github:"

// ReservedActor reports whether actor begins with WebhookActorPrefix, in
// any case: no API token may act under it.
func ReservedActor(actor string) bool {
	return strings.HasPrefix(strings.ToLower(actor), WebhookActorPrefix)
}

// WebhookActor is the actor of operations born from webhooks of an
// installation: "github:<installation>".
func WebhookActor(installationID int64) string {
	return WebhookActorPrefix + strconv.FormatInt(installationID, 10)
}
