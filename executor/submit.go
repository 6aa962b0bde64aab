package executor

import (
	"cmp"
	"time"

	"github.com/baton-dev/baton/schema"
)

// NewRecord validates what actor submitted and builds the queued record
// for it, with its identity: operationId from (actor, idempotencyKey),
// idempotencyHash from (actor, action, resource, payload). The resource is
// put in canonical form first (schema.CanonicalResource: owner and
// repository in lower case), so that every spelling of a repository's name
// hashes, stores and leases as one resource.
func NewRecord(actor string, s schema.Submission, now time.Time) (*schema.Record, error) {
	if err := schema.ValidateActor(actor); err != nil {
		return nil, err
	}
	// The payload as decoded, so that a field left out and the same field
	// given empty or null make one request, not an idempotency conflict.
	payload, err := s.ValidateCanonical()
	if err != nil {
		return nil, err
	}
	res, _, err := schema.CanonicalResource(s.Resource)
	if err != nil {
		return nil, err
	}
	s.Resource = res
	id, err := OperationID(actor, s.IdempotencyKey)
	if err != nil {
		return nil, err
	}
	now = now.UTC()
	rec := &schema.Record{
		OperationID:    id,
		IdempotencyKey: s.IdempotencyKey,
		Actor:          actor,
		Action:         s.Action,
		Resource:       s.Resource,
		Payload:        payload,
		CorrelationID:  s.CorrelationID,
		InstallationID: s.InstallationID,
		Status:         schema.StatusQueued,
		MaxAttempts:    cmp.Or(s.MaxAttempts, schema.DefaultMaxAttempts),
		CreatedAt:      now,
		UpdatedAt:      now,
	}
	// The payload is canonical already: hash it as is rather than have
	// IdempotencyHash canonicalise it a second time (the same hash; see
	// hashAsIs).
	if rec.IdempotencyHash = hashAsIs(rec); rec.IdempotencyHash == "" {
		if rec.IdempotencyHash, err = IdempotencyHash(actor, s.Action, s.Resource, payload); err != nil {
			return nil, err
		}
	}
	return rec, nil
}
