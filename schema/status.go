package schema

// Status is where an operation is in its life.
type Status string

// The statuses of an operation.
const (
	StatusQueued    Status = "queued"
	StatusRunning   Status = "running"
	StatusSucceeded Status = "succeeded"
	StatusFailed    Status = "failed"
	StatusCancelled Status = "cancelled"
)

// Statuses lists every status, in life order.
var Statuses = []Status{StatusQueued, StatusRunning, StatusSucceeded, StatusFailed, StatusCancelled}

// Valid reports whether s is a known status.
func (s Status) Valid() bool {
	switch s {
	case StatusQueued, StatusRunning, StatusSucceeded, StatusFailed, StatusCancelled:
		return true
	}
	return false
}

// Terminal reports whether s is final: succeeded, failed or cancelled.
func (s Status) Terminal() bool {
	return s == StatusSucceeded || s == StatusFailed || s == StatusCancelled
}

// Outcome is how a terminal operation ended. It mirrors the terminal status
// and is set together with CompletedAt.
type Outcome string

// The outcomes of a terminal operation.
const (
	OutcomeNone      Outcome = ""
	OutcomeSucceeded Outcome = "succeeded"
	OutcomeFailed    Outcome = "failed"
	OutcomeCancelled Outcome = "cancelled"
)

// OutcomeFor returns the outcome that matches a terminal status, or
// OutcomeNone for a status that is not terminal.
func OutcomeFor(s Status) Outcome {
	switch s {
	case StatusSucceeded:
		return OutcomeSucceeded
	case StatusFailed:
		return OutcomeFailed
	case StatusCancelled:
		return OutcomeCancelled
	}
	return OutcomeNone
}

// transitions is the one table of allowed status changes. Staying in the
// same non-terminal status is allowed (a save that records an attempt).
var transitions = map[Status][]Status{
	StatusQueued:  {StatusQueued, StatusRunning, StatusCancelled},
	StatusRunning: {StatusRunning, StatusSucceeded, StatusFailed, StatusCancelled},
}

// CanTransition reports whether a record may move from one status to
// another. Nothing leaves a terminal status, and nothing goes back to
// queued: an operation sent back to the queue to wait for GitHub stays
// running, with NextAttemptAt telling when it runs again.
func CanTransition(from, to Status) bool {
	for _, s := range transitions[from] {
		if s == to {
			return true
		}
	}
	return false
}
