package executor

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/go-json-experiment/json/jsontext"

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

// ErrIdentityChanged is returned by a save that would change what
// identifies the operation.
var ErrIdentityChanged = errors.New("executor: save changes the operation's identity")

// checkIdentity returns ErrIdentityChanged unless rec's operationId and
// idempotencyHash are those of its actor, idempotency key, action, resource
// and payload. A save that also requires the two hashes to be the stored
// ones (as SaveFunc's SQL does) thus cannot change any of these fields.
// rec must have been validated: its payload is one JSON object.
func checkIdentity(rec *schema.Record) error {
	if operationIDAsIs(rec) != rec.OperationID {
		id, err := OperationID(rec.Actor, rec.IdempotencyKey)
		if err != nil {
			return err
		}
		if id != rec.OperationID {
			return fmt.Errorf("%w: the actor or idempotency key of %s changed", ErrIdentityChanged, rec.OperationID)
		}
	}
	if hashAsIs(rec) == rec.IdempotencyHash {
		return nil
	}
	hash, err := IdempotencyHash(rec.Actor, rec.Action, rec.Resource, rec.Payload)
	if err != nil {
		return err
	}
	if hash != rec.IdempotencyHash {
		return fmt.Errorf("%w: what %s asks for (action, resource or payload) changed", ErrIdentityChanged, rec.OperationID)
	}
	return nil
}

// operationIDAsIs is OperationID written out: the canonical JSON of two
// strings is the two quoted per RFC 8785 in sorted order, and needs no
// general canonicaliser. checkIdentity still falls back to OperationID when
// the two differ.
func operationIDAsIs(rec *schema.Record) string {
	b := make([]byte, 0, len(rec.Actor)+len(rec.IdempotencyKey)+40)
	var errs [2]error
	b = append(b, `{"actor":`...)
	b, errs[0] = jsontext.AppendQuote(b, rec.Actor)
	b = append(b, `,"idempotencyKey":`...)
	b, errs[1] = jsontext.AppendQuote(b, rec.IdempotencyKey)
	b = append(b, '}')
	if errs[0] != nil || errs[1] != nil {
		return ""
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// hashAsIs is IdempotencyHash for a record whose payload bytes are already
// canonical, as they are in a record NewRecord builds or one read back
// from the store: it hashes the canonical envelope around the payload
// without canonicalising the payload again, which for a large payload costs
// tens of times more than the hash (see BenchmarkCheckIdentity). Any payload whose bytes are not
// canonical hashes differently, and checkIdentity then takes the full
// path. A match cannot be forged: the envelope's strings are single JSON
// string tokens and the payload one JSON object, so bytes equal to the
// canonical form the stored hash was made from hold the same fields.
func hashAsIs(rec *schema.Record) string {
	var errs [4]error
	b := make([]byte, 0, 64+len(rec.Action)+len(rec.Actor))
	b = append(b, `{"action":`...)
	b, errs[0] = jsontext.AppendQuote(b, rec.Action)
	b = append(b, `,"actor":`...)
	b, errs[1] = jsontext.AppendQuote(b, rec.Actor)
	b = append(b, `,"payload":`...)
	tail := make([]byte, 0, 64+len(rec.Resource.ID)+len(rec.Resource.Type))
	tail = append(tail, `,"resource":{"id":`...)
	tail, errs[2] = jsontext.AppendQuote(tail, rec.Resource.ID)
	tail = append(tail, `,"type":`...)
	tail, errs[3] = jsontext.AppendQuote(tail, rec.Resource.Type)
	tail = append(tail, `}}`...)
	if errors.Join(errs[:]...) != nil {
		return "" // invalid UTF-8: leave it to the full path
	}
	h := sha256.New()
	h.Write(b)
	h.Write(rec.Payload)
	h.Write(tail)
	return hex.EncodeToString(h.Sum(nil))
}
