package schema

import (
	"errors"
	"fmt"
	"net/http"
)

// Code classifies an error a user can act on. Codes are part of the API:
// they appear in HTTP error bodies and CLI output.
type Code string

// The error codes of baton's API.
const (
	CodeInvalidRequest      Code = "invalid_request"
	CodeUnauthorized        Code = "unauthorized"
	CodeForbidden           Code = "forbidden"
	CodeNotFound            Code = "not_found"
	CodeIdempotencyConflict Code = "idempotency_conflict"
	CodeAlreadyTerminal     Code = "already_terminal"
	CodeLeaseHeld           Code = "lease_held"
	CodeLeaseLost           Code = "lease_lost"
	CodePayloadTooLarge     Code = "payload_too_large"
	CodeRateLimited         Code = "rate_limited"
	CodeInternal            Code = "internal"
)

// httpStatus is the one table from error codes to the HTTP statuses
// baton's API answers them with; the API and the merge queue's routes both
// read it.
var httpStatus = map[Code]int{
	CodeInvalidRequest:      http.StatusBadRequest,
	CodeUnauthorized:        http.StatusUnauthorized,
	CodeForbidden:           http.StatusForbidden,
	CodeNotFound:            http.StatusNotFound,
	CodeIdempotencyConflict: http.StatusUnprocessableEntity,
	CodeAlreadyTerminal:     http.StatusConflict,
	CodeLeaseHeld:           http.StatusConflict,
	CodeLeaseLost:           http.StatusConflict,
	CodePayloadTooLarge:     http.StatusRequestEntityTooLarge,
	CodeRateLimited:         http.StatusTooManyRequests,
	CodeInternal:            http.StatusInternalServerError,
}

// HTTPStatus returns the HTTP status an error with code c is answered
// with; ok is false for a code baton does not define, which is answered
// as internal.
func HTTPStatus(c Code) (status int, ok bool) {
	status, ok = httpStatus[c]
	return status, ok
}

// Error is an error with a code, a message fit for a user, and optional
// details (for example the existing operationId of an idempotency
// conflict). Is matches any *Error with the same code, so
// errors.Is(err, ErrNotFound) holds for every not-found error.
type Error struct {
	Code    Code
	Message string
	Details map[string]any
	// Err is an underlying cause, kept for logs; it is not shown to users.
	Err error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return e.Message + ": " + e.Err.Error()
	}
	return e.Message
}

// Unwrap returns the underlying cause.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is an *Error with the same code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// ErrorCode returns the code of e.
func (e *Error) ErrorCode() string { return string(e.Code) }

// Sentinels to compare against with errors.Is.
var (
	ErrInvalid             = &Error{Code: CodeInvalidRequest, Message: "invalid request"}
	ErrNotFound            = &Error{Code: CodeNotFound, Message: "not found"}
	ErrIdempotencyConflict = &Error{Code: CodeIdempotencyConflict, Message: "idempotency key reused with different input"}
	ErrAlreadyTerminal     = &Error{Code: CodeAlreadyTerminal, Message: "operation already terminal"}
	ErrUnauthorized        = &Error{Code: CodeUnauthorized, Message: "unauthorized"}
	ErrForbidden           = &Error{Code: CodeForbidden, Message: "forbidden"}
	ErrPayloadTooLarge     = &Error{Code: CodePayloadTooLarge, Message: "payload too large"}
)

// Errorf returns an *Error with the given code and a formatted message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Invalidf returns an invalid_request error naming what is wrong.
func Invalidf(format string, args ...any) *Error {
	return Errorf(CodeInvalidRequest, format, args...)
}

// ConflictError reports an idempotency key reused with different input,
// naming the operation the key already belongs to.
func ConflictError(operationID string) *Error {
	return &Error{
		Code:    CodeIdempotencyConflict,
		Message: "idempotency key already used for an operation with different input",
		Details: map[string]any{"operationId": operationID},
	}
}

// coded is implemented by errors of any package that carry a code; the
// coordinator's lease errors implement it without importing schema.
type coded interface{ ErrorCode() string }

// ErrorCode returns the code of the first error in err's chain that has
// one, or CodeInternal. A nil error has no code ("").
func ErrorCode(err error) Code {
	if err == nil {
		return ""
	}
	var c coded
	if errors.As(err, &c) {
		return Code(c.ErrorCode())
	}
	return CodeInternal
}

// detailed is implemented by errors that carry details for the API body.
type detailed interface{ ErrorDetails() map[string]any }

// ErrorDetails returns the details of the first error in err's chain that
// carries some, or nil.
func ErrorDetails(err error) map[string]any {
	var e *Error
	if errors.As(err, &e) && e.Details != nil {
		return e.Details
	}
	var d detailed
	if errors.As(err, &d) {
		return d.ErrorDetails()
	}
	return nil
}

// PublicMessage returns the message a user may see for err: its own
// message when it has a code, "internal error" otherwise (the cause is for
// logs only).
func PublicMessage(err error) string {
	if ErrorCode(err) == CodeInternal {
		return "internal error"
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Message
	}
	return err.Error()
}
