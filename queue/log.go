package queue

// Log field keys, in one place. Values are identifiers and counts, never
// payloads.
const (
	fieldEvent       = "event"
	fieldSubsystem   = "subsystem"
	fieldOperationID = "operationId"
	fieldFailures    = "failures"
	fieldSequence    = "streamSequence"
	fieldReason      = "reason"
)
