package coordinator

import (
	"errors"
	"fmt"
	"time"
)

// The codes of the coordinator's errors, as package schema and the HTTP API
// know them. Errors carry them through an ErrorCode method, so callers need
// not import this package to classify them.
const (
	CodeLeaseHeld      = "lease_held"
	CodeLeaseLost      = "lease_lost"
	CodeInvalidRequest = "invalid_request"
)

// Sentinels to compare against with errors.Is. Every *LeaseHeldError is
// ErrLeaseHeld, every *LeaseLostError is ErrLeaseLost, every input the
// coordinator refuses is ErrInvalidRequest.
var (
	ErrLeaseHeld      error = &codedError{code: CodeLeaseHeld, msg: "coordinator: lease held by another holder"}
	ErrLeaseLost      error = &codedError{code: CodeLeaseLost, msg: "coordinator: lease lost"}
	ErrInvalidRequest error = &codedError{code: CodeInvalidRequest, msg: "coordinator: invalid lease request"}
)

type codedError struct{ code, msg string }

func (e *codedError) Error() string     { return e.msg }
func (e *codedError) ErrorCode() string { return e.code }

// LeaseHeldError is returned by Acquire when the key has a live lease. It
// is returned even when Owner is the caller: a live lease is never handed
// out twice (see the package documentation, "Acquire").
type LeaseHeldError struct {
	Key   string
	Owner string
	// ExpiresIn is how long the holder's lease has left, unless renewed.
	ExpiresIn time.Duration
}

func (e *LeaseHeldError) Error() string {
	return fmt.Sprintf("coordinator: lease %q is held by %q for another %s", e.Key, e.Owner, e.ExpiresIn.Round(time.Millisecond))
}

// Unwrap returns ErrLeaseHeld.
func (e *LeaseHeldError) Unwrap() error { return ErrLeaseHeld }

// ErrorCode returns "lease_held".
func (e *LeaseHeldError) ErrorCode() string { return CodeLeaseHeld }

// ErrorDetails returns the holder and the seconds its lease has left, for
// the API's error body.
func (e *LeaseHeldError) ErrorDetails() map[string]any {
	return map[string]any{"owner": e.Owner, "expiresIn": e.ExpiresIn.Seconds()}
}

// LostReason says why a lease is no longer the caller's.
type LostReason string

// Why a lease is lost.
const (
	// LostExpired: the lease expired in the store (nobody may have taken
	// it yet, but its holder may no longer act on it).
	LostExpired LostReason = "expired"
	// LostNotHeld: the key has no lease: released, force-released by
	// Reconcile, or never acquired.
	LostNotHeld LostReason = "not_held"
	// LostSuperseded: the key is held under another token (taken over after
	// an expiry, or the token given was never this lease's).
	LostSuperseded LostReason = "superseded"
	// LostDeadline: the local deadline (expiry minus the safety margin)
	// passed before a renewal succeeded.
	LostDeadline LostReason = "deadline_passed"
	// LostReleased: the holder released the lease itself.
	LostReleased LostReason = "released"
)

// LeaseLostError is returned when the caller no longer holds the lease it
// names: by Renew, Release, fenced writes and Guard, and by
// Lease.AssertOwned. KeepAlive cancels the holder's context with it as the
// cause.
type LeaseLostError struct {
	Key    string
	Owner  string
	Token  int64
	Reason LostReason
	// Err is what made a keepalive give up (the last renewal's error), if
	// anything; for logs.
	Err error
}

func (e *LeaseLostError) Error() string {
	s := fmt.Sprintf("coordinator: lease %q (owner %q, token %d) lost: %s", e.Key, e.Owner, e.Token, e.Reason)
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns ErrLeaseLost and the underlying error, if any.
func (e *LeaseLostError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrLeaseLost, e.Err}
	}
	return []error{ErrLeaseLost}
}

// ErrorCode returns "lease_lost".
func (e *LeaseLostError) ErrorCode() string { return CodeLeaseLost }

// ErrorDetails returns the reason.
func (e *LeaseLostError) ErrorDetails() map[string]any {
	return map[string]any{"reason": string(e.Reason)}
}

// InvalidRequestError is a lease request the coordinator refuses to
// consider: an empty or oversized key or owner, a TTL out of range, a token
// that cannot be one.
type InvalidRequestError struct {
	Field   string
	Message string
}

func (e *InvalidRequestError) Error() string {
	return "coordinator: invalid " + e.Field + ": " + e.Message
}

// Unwrap returns ErrInvalidRequest.
func (e *InvalidRequestError) Unwrap() error { return ErrInvalidRequest }

// ErrorCode returns "invalid_request".
func (e *InvalidRequestError) ErrorCode() string { return CodeInvalidRequest }

// ErrorDetails names the field.
func (e *InvalidRequestError) ErrorDetails() map[string]any {
	return map[string]any{"field": e.Field}
}

func invalid(field, format string, args ...any) error {
	return &InvalidRequestError{Field: field, Message: fmt.Sprintf(format, args...)}
}

// isDefinitive reports whether err settles that the caller does not hold
// its lease, as opposed to a failure to find out (a busy or closed store).
func isDefinitive(err error) bool {
	return errors.Is(err, ErrLeaseLost)
}
