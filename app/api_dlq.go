package app

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"go.uber.org/zap"

	"github.com/baton-dev/baton/queue"
	"github.com/baton-dev/baton/schema"
)

// DeadLetterList is the body of GET /v1/dlq.
type DeadLetterList struct {
	DeadLetters []queue.DeadLetter `json:"deadLetters"`
	// NextAfter is the sequence to pass as ?after= for the next page; 0
	// when this page is the last.
	NextAfter uint64 `json:"nextAfter"`
}

// errAdminOnly refuses the dead-letter routes to non-admin tokens: dead
// letters name every actor's operations.
var errAdminOnly = schema.Errorf(schema.CodeForbidden, "dead letters are for admin tokens only")

// errQueueUnavailable answers a dead-letter route while the queue is not
// reachable (an external NATS restarting, baton stopping): 503, not a bare
// 500, so clients know to try again.
var errQueueUnavailable = &apiStatusError{status: http.StatusServiceUnavailable,
	err: schema.Errorf(schema.CodeInternal, "the queue is not reachable at the moment; try again shortly")}

// queueError is err, or errQueueUnavailable when the queue says it is not
// ready.
func (a *API) queueError(err error) error {
	if a.deadLetters.Ready() != nil {
		return errQueueUnavailable
	}
	return err
}

// listDeadLetters is GET /v1/dlq[?after=SEQ&limit=N].
func (a *API) listDeadLetters(w http.ResponseWriter, r *http.Request, p *Principal) error {
	if !p.Admin {
		return errAdminOnly
	}
	q, err := apiQuery(r, "after", "limit")
	if err != nil {
		return err
	}
	var after uint64
	if v, ok := q["after"]; ok {
		if after, err = strconv.ParseUint(v, 10, 64); err != nil {
			return schema.Invalidf("after must be a dead letter's sequence (a non-negative integer)")
		}
	}
	limit := 100
	if v, ok := q["limit"]; ok {
		if limit, err = strconv.Atoi(v); err != nil || limit < 1 || limit > 500 {
			return schema.Invalidf("limit must be an integer between 1 and 500")
		}
	}
	dls, err := a.deadLetters.DeadLetters(r.Context(), after, limit)
	if err != nil {
		return a.queueError(err)
	}
	out := DeadLetterList{DeadLetters: dls}
	if out.DeadLetters == nil {
		out.DeadLetters = []queue.DeadLetter{}
	}
	if len(dls) == limit {
		out.NextAfter = dls[len(dls)-1].Sequence
	}
	a.writeJSON(w, http.StatusOK, out)
	return nil
}

// replayDeadLetter is POST /v1/dlq/{seq}/replay.
func (a *API) replayDeadLetter(w http.ResponseWriter, r *http.Request, p *Principal) error {
	if !p.Admin {
		return errAdminOnly
	}
	if _, err := apiQuery(r); err != nil {
		return err
	}
	seq, err := strconv.ParseUint(r.PathValue("seq"), 10, 64)
	if err != nil || seq == 0 {
		return schema.Invalidf("seq must be a dead letter's sequence (a positive integer)")
	}
	notFound := func(err error) error {
		if errors.Is(err, queue.ErrDeadLetterNotFound) {
			return schema.Errorf(schema.CodeNotFound, "no dead letter at sequence %d", seq)
		}
		return a.queueError(err)
	}
	dl, err := a.deadLetters.DeadLetter(r.Context(), seq)
	if err != nil {
		return notFound(err)
	}
	// A dead letter whose operation has finished since (it was cancelled),
	// or whose record is gone (deleted after the retention), stands for
	// nothing: replaying it would run nothing, and the operator is told so
	// rather than that the operation is queued again. The dead letter goes
	// now instead of at the next sweep.
	rec, err := a.ops.Get(r.Context(), dl.OperationID)
	gone := schema.ErrorCode(err) == schema.CodeNotFound
	if err != nil && !gone {
		return err
	}
	if gone || rec.Terminal() {
		if err := a.deadLetters.RemoveDeadLetter(r.Context(), seq); err != nil && !errors.Is(err, queue.ErrDeadLetterNotFound) {
			a.log.Warn("dead letter of a finished operation not removed", zap.String("event", "api_dead_letter_remove_failed"),
				zap.Uint64("sequence", seq), zap.String("operationId", dl.OperationID), zap.Error(err))
		}
		if gone {
			return &schema.Error{
				Code:    schema.CodeNotFound,
				Message: fmt.Sprintf("operation %s no longer exists (its record was deleted after the retention): nothing to replay (its dead letter is removed)", dl.OperationID),
				Details: map[string]any{"operationId": dl.OperationID},
			}
		}
		return &schema.Error{
			Code:    schema.CodeAlreadyTerminal,
			Message: fmt.Sprintf("operation %s is already %s: nothing to replay (its dead letter is removed)", dl.OperationID, rec.Status),
			Details: map[string]any{"operationId": dl.OperationID, "status": string(rec.Status)},
		}
	}
	dl, err = a.deadLetters.ReplayDeadLetter(r.Context(), seq)
	if err != nil {
		return notFound(err)
	}
	a.writeJSON(w, http.StatusOK, dl)
	return nil
}
