package schema

import (
	"bytes"
	"encoding/json"
	"unicode"
	"unicode/utf8"
)

// Limits on what a client may submit.
const (
	MaxIdempotencyKeyChars = 255
	MaxCorrelationIDChars  = 128
	MaxActorChars          = 128
	MaxPayloadBytes        = 256 << 10
	DefaultMaxAttempts     = 3
	MaxMaxAttempts         = 10
)

// Submission is what a client asks for: the input of an operation, before
// baton has given it an identity.
type Submission struct {
	IdempotencyKey string          `json:"idempotencyKey"`
	Action         string          `json:"action"`
	Resource       Resource        `json:"resource"`
	Payload        json.RawMessage `json:"payload"`
	CorrelationID  string          `json:"correlationId,omitempty"`
	InstallationID int64           `json:"installationId,omitempty"`
	MaxAttempts    int             `json:"maxAttempts,omitempty"`
}

// Validate checks every field of s and returns the first problem as an
// invalid_request (or payload_too_large) *Error.
func (s *Submission) Validate() error {
	_, err := s.validate()
	return err
}

// ValidateCanonical is Validate, and returns the canonical JSON of the
// payload as decoded, not as sent: an optional field given as null, as
// its zero value ("" or false), as GitHub's default for it (a merge's
// "method": "merge") or left out is one request (CanonicalOf), not an
// idempotency conflict. The payload is decoded once for both.
func (s *Submission) ValidateCanonical() ([]byte, error) {
	p, err := s.validate()
	if err != nil {
		return nil, err
	}
	if d, ok := p.(defaulter); ok {
		d.dropDefaults()
	}
	return CanonicalOf(p)
}

// defaulter is implemented by a payload with an optional field whose
// value given explicitly means what leaving it out means (GitHub's own
// default): dropDefaults clears such a field, so that the two spellings
// are one request, not an idempotency conflict, and what is carried out
// (the field left out, GitHub applying its default) is unchanged.
type defaulter interface{ dropDefaults() }

// validate checks s and returns its payload, decoded strictly.
func (s *Submission) validate() (any, error) {
	if err := validText(s.IdempotencyKey, "idempotencyKey", 1, MaxIdempotencyKeyChars); err != nil {
		return nil, err
	}
	if err := validActionResource(s.Action, s.Resource); err != nil {
		return nil, err
	}
	p, err := validPayload(s.Action, s.Payload)
	if err != nil {
		return nil, err
	}
	if err := validText(s.CorrelationID, "correlationId", 0, MaxCorrelationIDChars); err != nil {
		return nil, err
	}
	if s.InstallationID < 0 {
		return nil, Invalidf("installationId must be positive")
	}
	if s.MaxAttempts != 0 && (s.MaxAttempts < 1 || s.MaxAttempts > MaxMaxAttempts) {
		return nil, Invalidf("maxAttempts must be between 1 and %d", MaxMaxAttempts)
	}
	return p, nil
}

// ValidateActor checks an actor name: 1–128 printable characters.
func ValidateActor(actor string) error { return validText(actor, "actor", 1, MaxActorChars) }

// ValidOperationID reports whether id can be an operation ID: 64
// lower-case hex characters (a SHA-256).
func ValidOperationID(id string) bool {
	if len(id) != 64 {
		return false
	}
	for i := range len(id) {
		if c := id[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Validate checks that r is a well-formed record in a consistent state. The
// store calls it before every write. The payload is read as a stored one
// (DecodeStoredPayload), so that a record an earlier baton stored can still
// be saved; a submission's is checked strictly (Submission.Validate).
func (r *Record) Validate() error {
	if !ValidOperationID(r.OperationID) {
		return Invalidf("operationId must be 64 lower-case hex characters")
	}
	if !ValidOperationID(r.IdempotencyHash) { // a SHA-256 in hex, as an operation ID
		return Invalidf("idempotencyHash must be 64 lower-case hex characters")
	}
	if err := validText(r.IdempotencyKey, "idempotencyKey", 1, MaxIdempotencyKeyChars); err != nil {
		return err
	}
	if err := ValidateActor(r.Actor); err != nil {
		return err
	}
	if err := validActionResource(r.Action, r.Resource); err != nil {
		return err
	}
	if err := validStoredPayload(r.Action, r.Payload); err != nil {
		return err
	}
	if err := validText(r.CorrelationID, "correlationId", 0, MaxCorrelationIDChars); err != nil {
		return err
	}
	if r.InstallationID < 0 {
		return Invalidf("installationId must be positive")
	}
	if r.MaxAttempts < 1 || r.MaxAttempts > MaxMaxAttempts {
		return Invalidf("maxAttempts must be between 1 and %d", MaxMaxAttempts)
	}
	if r.Attempts < 0 || r.Attempts > r.MaxAttempts {
		return Invalidf("attempts must be between 0 and maxAttempts")
	}
	if !r.Status.Valid() {
		return Invalidf("status %q is not a known status", truncate(string(r.Status), 40))
	}
	if r.CreatedAt.IsZero() || r.UpdatedAt.IsZero() {
		return Invalidf("createdAt and updatedAt are required")
	}
	if r.Status.Terminal() {
		if r.CompletedAt == nil || r.CompletedAt.IsZero() {
			return Invalidf("a %s operation must have completedAt", r.Status)
		}
		if r.Outcome != OutcomeFor(r.Status) {
			return Invalidf("a %s operation must have outcome %q", r.Status, OutcomeFor(r.Status))
		}
	} else {
		if r.CompletedAt != nil || r.Outcome != OutcomeNone {
			return Invalidf("a %s operation has no completedAt or outcome", r.Status)
		}
	}
	if r.Status == StatusRunning && r.StartedAt == nil {
		return Invalidf("a running operation must have startedAt")
	}
	if len(r.Result) > 0 && !isObject(r.Result) {
		return Invalidf("result must be a JSON object")
	}
	if len(r.AttemptLog) > MaxAttemptLog {
		return Invalidf("attemptLog holds at most %d attempts", MaxAttemptLog)
	}
	return nil
}

func validActionResource(action string, res Resource) error {
	spec, ok := Actions[action]
	if !ok {
		if action == "" {
			return Invalidf("action is required")
		}
		return Invalidf("action %q is not one of the registered actions", truncate(action, 60))
	}
	if res.Type != spec.ResourceType {
		return Invalidf("action %s acts on resource type %s, not %q", action, spec.ResourceType, truncate(res.Type, 40))
	}
	_, err := ParseResource(res)
	return err
}

func validPayload(action string, raw json.RawMessage) (any, error) {
	if len(raw) > MaxPayloadBytes {
		return nil, &Error{Code: CodePayloadTooLarge, Message: "payload is larger than 256 KiB"}
	}
	return DecodePayload(action, raw) // a JSON object, decoded strictly
}

// validStoredPayload is validPayload for the payload of a stored record,
// which an older baton may have accepted by its rules (DecodeStoredPayload).
func validStoredPayload(action string, raw json.RawMessage) error {
	if len(raw) > MaxPayloadBytes {
		return &Error{Code: CodePayloadTooLarge, Message: "payload is larger than 256 KiB"}
	}
	_, err := DecodeStoredPayload(action, raw)
	return err
}

// isObject reports whether raw is one valid JSON object, by the strict
// rules of DecodeStrict (no duplicate names, valid UTF-8).
func isObject(raw []byte) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) >= 2 && raw[0] == '{' && ValidJSON(raw)
}

// validText checks s has between min and max characters, all printable.
func validText(s, field string, min, max int) error {
	if !utf8.ValidString(s) {
		return Invalidf("%s must be valid UTF-8", field)
	}
	n := utf8.RuneCountInString(s)
	if n < min {
		return Invalidf("%s is required", field)
	}
	if n > max {
		return Invalidf("%s is longer than %d characters", field, max)
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return Invalidf("%s must hold printable characters only", field)
		}
	}
	return nil
}
