package executor

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	"github.com/baton-dev/baton/schema"
)

// OperationID returns the identity of the operation actor asked for with
// idempotencyKey: the hex SHA-256 of the canonical JSON of
// {"actor", "idempotencyKey"}. The same actor and key always name the same
// operation, whatever else the request says.
func OperationID(actor, idempotencyKey string) (string, error) {
	return hashCanonical(struct {
		Actor          string `json:"actor"`
		IdempotencyKey string `json:"idempotencyKey"`
	}{actor, idempotencyKey})
}

// IdempotencyHash returns the hash of what an operation asks for: the hex
// SHA-256 of the canonical JSON of {"actor", "action", "resource",
// "payload"}. Two requests with the same key but different hashes are an
// idempotency conflict.
func IdempotencyHash(actor, action string, resource schema.Resource, payload json.RawMessage) (string, error) {
	if len(payload) == 0 {
		payload = json.RawMessage(`{}`)
	}
	return hashCanonical(struct {
		Actor    string          `json:"actor"`
		Action   string          `json:"action"`
		Resource schema.Resource `json:"resource"`
		Payload  json.RawMessage `json:"payload"`
	}{actor, action, resource, payload})
}

func hashCanonical(v any) (string, error) {
	c, err := schema.CanonicalOf(v)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(c)
	return hex.EncodeToString(sum[:]), nil
}
