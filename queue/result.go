package queue

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Handler runs one operation. It is called with the operation ID carried by
// a message and says what became of it. ctx is cancelled only when the
// consumer's Stop deadline passes; Draining(ctx) is closed as soon as Stop
// is called, so that a handler waiting for something (a backoff, a pace)
// can give its message back at once with RetryAfter instead of holding
// the stop until the deadline. A panic is recovered and counts as a
// failure.
type Handler func(ctx context.Context, operationID string) Result

type drainingKey struct{}

// Draining returns a channel that is closed when the consumer that passed
// ctx to its Handler begins to stop, or nil (never ready) for any other
// context.
func Draining(ctx context.Context) <-chan struct{} {
	ch, _ := ctx.Value(drainingKey{}).(<-chan struct{})
	return ch
}

// Result is what a Handler returns: Done, RetryAfter or Failed. The zero
// Result is invalid and counts as a failure.
type Result struct {
	kind  resultKind
	delay time.Duration
	err   error
}

type resultKind uint8

const (
	resultInvalid resultKind = iota
	resultDone
	resultRetry
	resultFailed
)

// Done reports that the handler completed, whatever the operation's own
// outcome: the message is acknowledged and leaves the stream.
func Done() Result { return Result{kind: resultDone} }

// RetryAfter asks for the operation to be delivered again after delay (at
// once if delay <= 0): its resource is busy, or the provider asked to wait.
// This is not a failure: it never counts toward dead-lettering, however
// many times it happens.
func RetryAfter(delay time.Duration) Result { return Result{kind: resultRetry, delay: max(delay, 0)} }

// Failed reports that the consumer could not process the operation (store
// unavailable, a bug). The operation is delivered again after a backoff;
// after ConsumerConfig.MaxFailures failures it moves to StreamDeadLetters
// with err's text as the reason.
func Failed(err error) Result {
	if err == nil {
		err = errors.New("failed without a reason")
	}
	return Result{kind: resultFailed, err: err}
}

// IsDone, IsRetry and IsFailed tell the kinds apart.
func (r Result) IsDone() bool   { return r.kind == resultDone }
func (r Result) IsRetry() bool  { return r.kind == resultRetry }
func (r Result) IsFailed() bool { return r.kind == resultFailed || r.kind == resultInvalid }

// Delay is the delay asked for by RetryAfter.
func (r Result) Delay() time.Duration { return r.delay }

// Err is the error given to Failed (or the complaint about a zero Result).
func (r Result) Err() error {
	if r.kind == resultInvalid {
		return errInvalidResult
	}
	return r.err
}

var errInvalidResult = errors.New("handler returned the zero Result")

func (r Result) String() string {
	switch r.kind {
	case resultDone:
		return "done"
	case resultRetry:
		return fmt.Sprintf("retry after %s", r.delay)
	case resultFailed:
		return "failed: " + r.err.Error()
	default:
		return "invalid"
	}
}
