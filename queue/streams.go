package queue

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// The streams and their subjects. Every operation has its own subject, so
// that the reconciler can ask whether a message for it is stored.
const (
	// StreamOperations holds one message per operation to run (work-queue
	// retention: a message leaves the stream when it is acknowledged).
	StreamOperations = "OPERATIONS"
	// StreamDeadLetters holds the operations whose consumer failed too many
	// times (limits retention, so they can be listed and replayed).
	StreamDeadLetters = "OPERATIONS_DLQ"

	operationsPrefix  = "baton.operations."
	deadLettersPrefix = "baton.dlq."
)

// OperationSubject is the subject of an operation's messages in
// StreamOperations: baton.operations.<id>.
func OperationSubject(operationID string) string { return operationsPrefix + operationID }

// DeadLetterSubject is the subject of an operation's dead letters in
// StreamDeadLetters: baton.dlq.<id>.
func DeadLetterSubject(operationID string) string { return deadLettersPrefix + operationID }

// ValidateOperationID reports whether id can travel as one subject token:
// 1 to 128 characters of A–Z, a–z, 0–9, '-' and '_'. baton's operation IDs
// (hex SHA-256) always can.
func ValidateOperationID(id string) error {
	if id == "" || len(id) > 128 {
		return fmt.Errorf("%w: length %d", ErrInvalidOperationID, len(id))
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return fmt.Errorf("%w: character %q at %d", ErrInvalidOperationID, c, i)
		}
	}
	return nil
}

// streamConfigs returns the two streams as baton wants them.
func (b *Broker) streamConfigs() (ops, dlq jetstream.StreamConfig) {
	ops = jetstream.StreamConfig{
		Name:        StreamOperations,
		Description: "baton: operations to run; the message is the operation ID",
		Subjects:    []string{operationsPrefix + ">"},
		Retention:   jetstream.WorkQueuePolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    b.cfg.Replicas,
		Duplicates:  b.cfg.DuplicateWindow,
	}
	dlq = jetstream.StreamConfig{
		Name:        StreamDeadLetters,
		Description: "baton: operations whose consumer failed repeatedly, with the reason",
		Subjects:    []string{deadLettersPrefix + ">"},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    b.cfg.Replicas,
		Duplicates:  b.cfg.DuplicateWindow,
		MaxAge:      b.cfg.DeadLetterMaxAge,
	}
	return ops, dlq
}

// ensureStreams creates the streams or brings existing ones to baton's
// configuration. An update keeps every stored message; a change JetStream
// cannot make in place (such as the retention policy of a stream created
// by someone else) fails with JetStream's reason.
func (b *Broker) ensureStreams(ctx context.Context, js jetstream.JetStream) (ops, dlq jetstream.Stream, err error) {
	opsCfg, dlqCfg := b.streamConfigs()
	ctx, cancel := withTimeout(ctx, b.cfg.ConnectTimeout)
	defer cancel()
	if ops, err = js.CreateOrUpdateStream(ctx, opsCfg); err != nil {
		return nil, nil, fmt.Errorf("queue: set up stream %s: %w", StreamOperations, err)
	}
	if dlq, err = js.CreateOrUpdateStream(ctx, dlqCfg); err != nil {
		return nil, nil, fmt.Errorf("queue: set up stream %s: %w", StreamDeadLetters, err)
	}
	return ops, dlq, nil
}

// operationIDFromSubject returns the operation ID of a subject under prefix.
func operationIDFromSubject(subject, prefix string) (string, bool) {
	id, ok := strings.CutPrefix(subject, prefix)
	return id, ok && ValidateOperationID(id) == nil
}

// withTimeout bounds ctx by d unless it already has a deadline.
func withTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, d)
}
