package schema

import (
	"encoding/json"
	"fmt"
	"time"
)

// View is the public status of an operation: what GET /v1/operations/{id}
// returns and the CLI prints. It leaves out internal bookkeeping (the outbox
// dispatch time) and always carries an object for payload and result.
type View struct {
	OperationID           string          `json:"operationId"`
	IdempotencyKey        string          `json:"idempotencyKey"`
	IdempotencyHash       string          `json:"idempotencyHash"`
	Actor                 string          `json:"actor"`
	Action                string          `json:"action"`
	Resource              Resource        `json:"resource"`
	ResourceKey           string          `json:"resourceKey"`
	Payload               json.RawMessage `json:"payload"`
	CorrelationID         string          `json:"correlationId,omitempty"`
	InstallationID        int64           `json:"installationId,omitempty"`
	Status                Status          `json:"status"`
	Attempts              int             `json:"attempts"`
	MaxAttempts           int             `json:"maxAttempts"`
	CreatedAt             time.Time       `json:"createdAt"`
	UpdatedAt             time.Time       `json:"updatedAt"`
	StartedAt             *time.Time      `json:"startedAt,omitempty"`
	CompletedAt           *time.Time      `json:"completedAt,omitempty"`
	NextAttemptAt         *time.Time      `json:"nextAttemptAt,omitempty"`
	Outcome               Outcome         `json:"outcome,omitempty"`
	LastErrorCategory     string          `json:"lastErrorCategory,omitempty"`
	LastErrorMessage      string          `json:"lastErrorMessage,omitempty"`
	CancellationRequested bool            `json:"cancellationRequested"`
	// DeadLetter is set, on GET /v1/operations/{id} only, while an
	// unfinished operation's message is in the dead-letter stream: it waits
	// for an operator to replay or cancel it (the record alone says
	// queued or running). View leaves it nil; the API fills it in.
	DeadLetter *DeadLetterInfo `json:"deadLetter,omitempty"`
	Result     json.RawMessage `json:"result"`
	AttemptLog []Attempt       `json:"attemptLog"`
}

// DeadLetterInfo is what the status view says of an operation's dead
// letter.
type DeadLetterInfo struct {
	// Sequence is the dead letter's sequence: what `baton dlq replay` and
	// POST /v1/dlq/{seq}/replay take.
	Sequence uint64 `json:"sequence"`
	// Failures is how many times baton failed to handle the operation's
	// message before it moved it there.
	Failures int `json:"failures"`
	// Time is when it was moved there.
	Time time.Time `json:"time"`
	// Reason is the last failure's error text, for admin tokens only (it
	// is baton's, not the caller's, to read).
	Reason string `json:"reason,omitempty"`
}

var emptyObject = json.RawMessage(`{}`)

// View converts the record to its public form, its times in UTC: the
// executor stamps records by the machine's clock, in the machine's zone,
// and one record must not show createdAt in UTC and updatedAt at
// +05:30. A terminal record without completedAt and a matching outcome
// cannot be shown as terminal; that is an error, never a guess.
func (r *Record) View() (View, error) {
	if r.Status.Terminal() {
		if r.CompletedAt == nil || r.Outcome != OutcomeFor(r.Status) {
			return View{}, fmt.Errorf("schema: operation %s is %s without completedAt and outcome", r.OperationID, r.Status)
		}
	}
	v := View{
		OperationID:           r.OperationID,
		IdempotencyKey:        r.IdempotencyKey,
		IdempotencyHash:       r.IdempotencyHash,
		Actor:                 r.Actor,
		Action:                r.Action,
		Resource:              r.Resource,
		ResourceKey:           r.Resource.Key(),
		Payload:               r.Payload,
		CorrelationID:         r.CorrelationID,
		InstallationID:        r.InstallationID,
		Status:                r.Status,
		Attempts:              r.Attempts,
		MaxAttempts:           r.MaxAttempts,
		CreatedAt:             r.CreatedAt.UTC(),
		UpdatedAt:             r.UpdatedAt.UTC(),
		StartedAt:             utc(r.StartedAt),
		CompletedAt:           utc(r.CompletedAt),
		NextAttemptAt:         utc(r.NextAttemptAt),
		Outcome:               r.Outcome,
		LastErrorCategory:     r.LastErrorCategory,
		LastErrorMessage:      r.LastErrorMessage,
		CancellationRequested: r.CancellationRequested,
		Result:                r.Result,
		AttemptLog:            attemptsUTC(r.AttemptLog),
	}
	if len(v.Payload) == 0 {
		v.Payload = emptyObject
	}
	if len(v.Result) == 0 {
		v.Result = emptyObject
	}
	if v.AttemptLog == nil {
		v.AttemptLog = []Attempt{}
	}
	return v, nil
}

func utc(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

func attemptsUTC(log []Attempt) []Attempt {
	if log == nil {
		return nil
	}
	out := make([]Attempt, len(log))
	for i, a := range log {
		a.StartedAt, a.EndedAt = a.StartedAt.UTC(), a.EndedAt.UTC()
		out[i] = a
	}
	return out
}
