package schema

import (
	"encoding/json"
	"time"
)

// Resource names the thing an operation mutates, e.g.
// {Type: "pull_request", ID: "octo/app#42"}.
type Resource struct {
	Type string `json:"type"`
	ID   string `json:"id"`
}

// Key is the resource key leases are taken on: "{type}:{id}", e.g.
// "pull_request:octo/app#42".
func (r Resource) Key() string { return r.Type + ":" + r.ID }

// Record is the durable state of one operation. JSON names follow the
// design contract; DispatchedAt is internal bookkeeping of the outbox and
// is not part of the JSON form.
type Record struct {
	OperationID           string          `json:"operationId"`
	IdempotencyHash       string          `json:"idempotencyHash"`
	IdempotencyKey        string          `json:"idempotencyKey"`
	Actor                 string          `json:"actor"`
	Action                string          `json:"action"`
	Resource              Resource        `json:"resource"`
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
	Result                json.RawMessage `json:"result,omitempty"`
	AttemptLog            []Attempt       `json:"attemptLog,omitempty"`
	// RefBeforeSHA is where the ref pointed before the first attempt of a
	// forced github.git.update_ref without expectedSha, saved before that
	// attempt's update was sent. Later attempts update only if the ref is
	// still there (or already at sha): an earlier attempt that was applied
	// unseen, followed by someone else's push, must not be undone. Kept in
	// the stored record only (not in View).
	RefBeforeSHA string `json:"refBeforeSha,omitempty"`

	// DispatchedAt is when the operation was last handed to the queue and
	// acknowledged by it; nil until then. The queue's reconciler republishes
	// records that stay queued without a recent dispatch.
	DispatchedAt *time.Time `json:"-"`
	// Version counts the writes of the stored record; a save can be made
	// conditional on it (compare-and-swap). Internal, like DispatchedAt.
	Version int64 `json:"-"`
}

// Attempt is one call to GitHub made for an operation.
type Attempt struct {
	Number        int       `json:"number"`
	StartedAt     time.Time `json:"startedAt"`
	EndedAt       time.Time `json:"endedAt"`
	HTTPStatus    int       `json:"httpStatus,omitempty"`
	RequestID     string    `json:"requestId,omitempty"`
	ErrorCategory string    `json:"errorCategory,omitempty"`
	ErrorMessage  string    `json:"errorMessage,omitempty"`
	// WaitMillis is the wait that followed this attempt before the next one
	// (zero for the last attempt).
	WaitMillis int64 `json:"waitMillis,omitempty"`
	// Probe is true when this attempt only checked the post-condition of an
	// earlier ambiguous attempt instead of mutating again.
	Probe bool `json:"probe,omitempty"`
	// NotSent is true when baton knows the call never reached GitHub (the
	// exchange for its installation token answered 5xx or not at all, or
	// the client refused it for a rate limit it knew of): it was not
	// applied, spent no attempt, and is never probed.
	NotSent bool `json:"notSent,omitempty"`
}

// MaxAttemptLog bounds the attempts kept on a record. Attempts that spend
// no budget (provider waits sent back to the queue) could otherwise grow
// the record without limit; the oldest entries are dropped first.
const MaxAttemptLog = 50

// AppendAttempt adds a to the record's attempt log, keeping at most
// MaxAttemptLog entries.
func (r *Record) AppendAttempt(a Attempt) {
	r.AttemptLog = append(r.AttemptLog, a)
	if n := len(r.AttemptLog); n > MaxAttemptLog {
		r.AttemptLog = append(r.AttemptLog[:0:0], r.AttemptLog[n-MaxAttemptLog:]...)
	}
}

// Terminal reports whether the record has reached a final status.
func (r *Record) Terminal() bool { return r.Status.Terminal() }

// Clone returns a deep copy, so a caller can change it without touching a
// record another goroutine holds.
func (r Record) Clone() Record {
	c := r
	c.Payload = cloneBytes(r.Payload)
	c.Result = cloneBytes(r.Result)
	c.StartedAt = cloneTime(r.StartedAt)
	c.CompletedAt = cloneTime(r.CompletedAt)
	c.NextAttemptAt = cloneTime(r.NextAttemptAt)
	c.DispatchedAt = cloneTime(r.DispatchedAt)
	if r.AttemptLog != nil {
		c.AttemptLog = append([]Attempt(nil), r.AttemptLog...)
	}
	return c
}

func cloneBytes(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte(nil), b...)
}

func cloneTime(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	v := *t
	return &v
}
