package queue

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// Headers baton sets on its messages, besides JetStream's Nats-Msg-Id.
const (
	// HeaderFailures counts the consumer failures an operation has had
	// (absent: none). It travels with the message: see "Failure counting"
	// in the package documentation.
	HeaderFailures = "Baton-Failures"
	// HeaderRetryAt holds the time (RFC 3339) before which a message that
	// carries a failure must not be handed to the handler: the backoff.
	HeaderRetryAt = "Baton-Retry-At"
	// HeaderReason is the last failure's reason, on retried messages and
	// dead letters.
	HeaderReason = "Baton-Reason"
)

// The executor declares the interface it dispatches through; Broker has
// its method set.
var _ interface {
	Dispatch(ctx context.Context, operationID string) error
} = (*Broker)(nil)

// Dispatch publishes operationID to StreamOperations with Nats-Msg-Id set
// to the operation ID and returns once JetStream has acknowledged it
// (stored, and replicated on a cluster). Dispatching an operation again
// within Config.DuplicateWindow stores nothing new and succeeds.
//
// An error means the message may not be stored (the connection is down,
// the deadline passed): the caller leaves its record undispatched and the
// reconciler publishes it later.
func (b *Broker) Dispatch(ctx context.Context, operationID string) error {
	if err := ValidateOperationID(operationID); err != nil {
		return err
	}
	s, err := b.session()
	if err != nil {
		return err
	}
	m := operationMsg(operationID, operationID)
	ack, err := s.js.PublishMsg(ctx, m)
	b.notePublish(ctx, err)
	if err != nil {
		b.counters.dispatchErrors.Add(1)
		return fmt.Errorf("queue: dispatch %s: %w", operationID, err)
	}
	if !ack.Duplicate {
		b.counters.dispatched.Add(1) // messages stored, not calls
	} else {
		b.log.Debug("operation already in the stream", zap.String(fieldEvent, "queue.dispatch_duplicate"),
			zap.String(fieldOperationID, operationID))
	}
	return nil
}

// operationMsg is the message of an operation in StreamOperations.
func operationMsg(operationID, msgID string) *nats.Msg {
	return &nats.Msg{
		Subject: OperationSubject(operationID),
		Data:    []byte(operationID),
		Header:  nats.Header{jetstream.MsgIDHeader: []string{msgID}},
	}
}

// Message IDs other than the first dispatch's (which is the operation ID
// itself). Each is distinct from the operation ID, so that JetStream's
// dedupe window never swallows a retry, a replay or a republish; and each
// is the same when the same step is repeated after a crash, so that it is
// stored once.
func retryMsgID(operationID string, failures int, fromSeq uint64) string {
	return operationID + "/failure/" + strconv.Itoa(failures) + "/" + strconv.FormatUint(fromSeq, 10)
}

func holdMsgID(operationID string, fromSeq uint64) string {
	return operationID + "/hold/" + strconv.FormatUint(fromSeq, 10)
}

func deadLetterMsgID(operationID string, fromSeq uint64) string {
	return operationID + "/dlq/" + strconv.FormatUint(fromSeq, 10)
}

func replayMsgID(operationID string, dlqSeq uint64) string {
	return operationID + "/replay/" + strconv.FormatUint(dlqSeq, 10)
}

func reconcileMsgID(operationID string, at time.Time) string {
	return operationID + "/reconcile/" + strconv.FormatInt(at.UnixNano(), 10)
}

// publishAll publishes msgs asynchronously and waits for every
// acknowledgement; errs[i] is msgs[i]'s outcome.
func (s *session) publishAll(ctx context.Context, msgs []*nats.Msg) (errs []error) {
	errs = make([]error, len(msgs))
	futures := make([]jetstream.PubAckFuture, len(msgs))
	for i, m := range msgs {
		futures[i], errs[i] = s.js.PublishMsgAsync(m)
	}
	for i, f := range futures {
		if f == nil {
			continue
		}
		select {
		case <-f.Ok():
		case err := <-f.Err():
			errs[i] = err
		case <-ctx.Done():
			errs[i] = ctx.Err()
		}
	}
	return errs
}

// Nudge publishes operationID again under a message ID of its own, so that
// a handler gets it now even if the stream already holds a message for it
// that is waiting out a delay — an operation sent back because its
// resource was busy, whose resource has just been freed. The extra
// delivery is harmless: the handler acknowledges an operation that is
// already terminal and sends back one that still cannot run.
func (b *Broker) Nudge(ctx context.Context, operationID string) error {
	if err := ValidateOperationID(operationID); err != nil {
		return err
	}
	s, err := b.session()
	if err != nil {
		return err
	}
	msgID := operationID + "/nudge/" + strconv.FormatInt(time.Now().UnixNano(), 10)
	_, err = s.js.PublishMsg(ctx, operationMsg(operationID, msgID))
	b.notePublish(ctx, err)
	if err != nil {
		return fmt.Errorf("queue: nudge %s: %w", operationID, err)
	}
	return nil
}
